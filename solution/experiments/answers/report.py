"""What the answers benchmark writes: its record (the public rows, labelled with their corpus), the table it
prints, and the two charts beside the record."""

from __future__ import annotations

import json
from pathlib import Path

from solution.common.fsutil import mark_written, write_record
from solution.experiments.answers.charts import chart, curve_chart, curve_projection
from solution.experiments.answers.first_pass import first_pass_table
from solution.experiments.answers.techniques import FIRST_PASS, FULL, QUICK, REAL_NOTE

SCRIPT = "scripts/benchmark_answers.py"  # whose records (--json, its charts) it may write over


def public(row: dict) -> dict:
    """The row as written: without what only this process needs (per-document counts, model paths)."""
    return {k: v for k, v in row.items() if not k.startswith("_")}


def fixed(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def with_ci(x, ci, signed: bool = False) -> str:
    """A figure to three places with its interval, signed for a difference; "-" where there is none."""
    if x is None:
        return "-"
    return (f"{x:+.3f}" if signed else f"{x:.3f}") + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if signed and ci else
                                                     f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def on_off(r: dict) -> str:
    return "-" if r["enabled"] is None else "on" if r["enabled"] else "off"


def nq_cell(r: dict, kind: str) -> str:
    """The NQ official F1 of the test rows (dev where there is no test gold) with its interval."""
    split = "test" if r.get(f"test_nq_{kind}_f1") is not None else "dev"
    if r.get(f"{split}_nq_{kind}_f1") is None:  # a row of a record written before these figures
        return "-"
    return with_ci(r[f"{split}_nq_{kind}_f1"], r.get(f"{split}_nq_{kind}_f1_ci")) + (" (dev)" if split == "dev" else "")


def delta_cell(r: dict) -> str:
    """The row's paired difference: against its reference row; a baseline's against the best reference."""
    delta = with_ci(r.get("test_f1_delta"), r.get("test_f1_delta_ci"), signed=True)
    if "test_f1_delta" not in r and "dev_f1_delta" in r:  # no test gold (real corpus): the dev-tuned delta
        delta = "dev " + with_ci(r["dev_f1_delta"], r.get("dev_f1_delta_ci"), signed=True)
    if "best_reference_delta" in r and r["technique"] == "baseline":
        delta = f"vs {r.get('best_reference')} " + with_ci(r["best_reference_delta"], r.get("best_reference_delta_ci"),
                                                           signed=True)
        if "best_long_reference_delta" in r:  # the long rows alone, against the best reference on them
            delta += f"; long vs {r.get('best_long_reference')} " + with_ci(
                r["best_long_reference_delta"], r.get("best_long_reference_delta_ci"), signed=True)
    return delta


def table(rows: list, title: str) -> str:
    lines = [f"| technique ({title}) | on | seed | train/dev/test docs | dev F1 untuned | dev F1 tuned [95% CI] "
             "| test F1 (dev-tuned) [95% CI] | test delta [95% CI] | MLE-bench test | long | short | YES | NO "
             "| NQ long F1 [95% CI] | NQ short F1 [95% CI] |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['technique']} | {on_off(r)} | {r['seed']} "
        if "error" in r:
            lines.append(head + f"| failed: {r['error'][:80]} ||||||||||||")
            continue
        docs = "/".join(str(r.get(k, "-")) for k in ("num_train_documents", "num_dev_documents", "num_test_documents"))
        # .get: a record written before a column existed (the real corpus's has no intervals) has none of it
        split = " | ".join(fixed(r.get(k)) for k in ("long_f1", "short_f1", "yes_f1", "no_f1"))
        lines.append(head + f"| {docs} | {fixed(r.get('dev_f1_untuned'))} | {with_ci(r.get('dev_f1_tuned'), r.get('dev_f1_ci'))} "
                     f"| {with_ci(r.get('test_f1'), r.get('test_f1_ci'))} | {delta_cell(r)} | {fixed(r.get('test_mlebench'))} "
                     f"| {split} | {nq_cell(r, 'long')} | {nq_cell(r, 'short')} |")
    return "\n".join(lines)


def corpus_name(args) -> str:
    """The rows' `corpus`: the profile (or `real`), `-testN` where --num-test drew other test pages than the
    plan's (a record of those pages is not merged with one of the plan's), `-quick` for the quick plan."""
    name = args.profile if args.corpus == "nq" else args.corpus
    default = (QUICK if args.quick else FULL)["num_test"]
    if args.corpus == "nq" and args.num_test not in (None, default):
        name += f"-test{args.num_test}"
    return name + ("-quick" if args.quick else "")


def write_rows(rows: list, args, path: Path) -> None:
    """The public rows to `path`, each labelled with the corpus of this run (merged rows keep their own)."""
    if not args.merge:  # merged rows keep the corpus their record says, even none: this run's options are not theirs
        for r in rows:
            r["corpus"] = corpus_name(args)
            if args.corpus == "nq":
                r["corpus_seed"] = args.corpus_seed
            if args.corpus == "real":
                r["note"] = REAL_NOTE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_record(path, json.dumps([public(r) for r in rows], indent=1) + "\n", SCRIPT)


def write_partial(args, rows: list) -> None:
    """The rows so far, beside the final JSON (`NAME.partial.json`): what a run cut short has measured."""
    path = Path(args.json)
    write_rows(rows, args, path.with_name(path.stem + ".partial.json"))


def write_outputs(rows: list, args, label: str) -> Path:
    """The record, its table on stdout, the two charts beside it, and the curve's projection where it rises."""
    path = Path(args.json)
    write_rows(rows, args, path)
    first_pass = [r for r in rows if r["technique"] == FIRST_PASS]
    rows = [r for r in rows if r["technique"] != FIRST_PASS]  # no answers: their own table, no bar
    print("\n" + table(rows, label) + ("\n\n" + first_pass_table(first_pass) if first_pass else ""))
    ok = [r for r in rows if "error" not in r]
    for png, draw, title in ((path.with_suffix(".png"), chart, "answer techniques"),
                             (path.with_name(path.stem + "-curve.png"), curve_chart, "learning curve")):
        draw(ok, png, f"{title}, {label}")
        mark_written(png, SCRIPT)
    fit = curve_projection(ok)
    if fit and "pages_for_target" in fit:
        print(f"projection (a fit, not a measurement): {fit['metric']} +{fit['per_doubling']:.3f} per doubling of the "
              f"pages; {fit['target']:.2f} at ~{fit['pages_for_target']:,} pages, ~{fit['train_seconds_for_target']:,} s "
              f"of training on this machine")
    return path

"""What `scripts/benchmark_answers.py` does once its arguments are parsed: claim its outputs, then merge
records, or prepare the corpus, measure every row and write the record, its table and its charts."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from solution.common import cli
from solution.experiments.answers.benchmark import benchmark
from solution.experiments.answers.corpus import REAL_DEV_FILE, REAL_TRAIN_FILE, prepare_corpus
from solution.experiments.answers.first_pass import first_pass_rows
from solution.experiments.answers.record import corpus_of, corpus_text, merge_records
from solution.experiments.answers.report import SCRIPT, write_outputs, write_partial
from solution.experiments.answers.runs import StepFailed
from solution.experiments.answers.techniques import FULL, QUICK, REAL_NOTE


def claim_outputs(args) -> None:
    """Refuse, before any work, a --json (or a chart beside it) that holds a file this command did not write."""
    json_path = Path(args.json)
    cli.claim_records(SCRIPT, args.overwrite, inputs=[("--merge", m) for m in args.merge or []], json=json_path,
                      partial_json=None if args.merge else json_path.with_name(json_path.stem + ".partial.json"),
                      png=json_path.with_suffix(".png"), curve_png=json_path.with_name(json_path.stem + "-curve.png"))


def merge(args) -> int:
    """--merge: the records as one, its table and charts; 2 (a user error) where they cannot be merged."""
    try:
        rows = merge_records(args.merge)
    except StepFailed as e:  # a record named by the user that cannot be merged: a user error
        print(f"error: {e}", file=sys.stderr)
        return 2
    path = write_outputs(rows, args, f"{corpus_text(corpus_of(rows[0]))}, merged")
    print(f"\n{len(rows)} rows from {len(args.merge)} records -> {path}")
    return 0


def plan_of(args) -> dict:
    """The plan (FULL or QUICK) with the command's sizes, seeds and test pages; --references-only trains nothing."""
    plan = dict(QUICK if args.quick else FULL)
    plan |= {k: getattr(args, k) for k in ("train_sizes", "seeds", "num_test") if getattr(args, k) is not None}
    if args.references_only:  # the corpus's own pages alone: no yes/no supplement, no stage 1
        plan |= {"yes_no": 0, "warm_start": None}
        args.techniques = []
    return plan


def real_lines_missing(args) -> str | None:
    """Why --corpus real, or --first-pass on the real lines, cannot run (no folder of real lines given, or not
    the files it needs there); None when it can."""
    if args.corpus != "real" and not (args.first_pass and args.real_lines):
        return None
    if not args.real_lines:
        return "--corpus real needs the real NQ sample: give --real-lines DIR (or set NQ_REAL_LINES)"
    if not Path(args.real_lines).is_dir():
        return f"{args.real_lines} not found: --real-lines names the folder of the real NQ sample"
    missing = [f for f in (REAL_TRAIN_FILE, REAL_DEV_FILE) if not (Path(args.real_lines) / f).is_file()]
    return f"{Path(args.real_lines) / missing[0]} not found: the real NQ sample's folder holds it" if missing else None


def measure(args) -> int:
    """Prepare the corpus, measure every row, write the record: 1 when a step or a row failed, 2 when the
    real lines are missing."""
    plan = plan_of(args)
    name = f"{args.profile}-seed{args.corpus_seed}" if args.corpus == "nq" else args.corpus
    out = Path(args.out or f"runs/answers/{name}" + ("-quick" if args.quick else ""))
    missing = real_lines_missing(args)
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        corpus = prepare_corpus(args, plan, out)
        first = first_pass_rows(corpus, args.first_pass, args.first_pass_keep_first, args.real_lines)
        rows = first + benchmark(corpus, plan, out, args.techniques, lambda rows: write_partial(args, first + rows),
                                 args.ensembles, args.references_only, args.references)
    except StepFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    label = (f"{args.profile} profile, corpus seed {args.corpus_seed}, {plan['num_test']} test pages"
             if args.corpus == "nq" else REAL_NOTE)
    path = write_outputs(rows, args, label)
    failed = [r for r in rows if "error" in r]
    print(f"\n{len(rows)} rows ({len(failed)} failed) in {time.perf_counter() - t0:.0f}s -> {path}, "
          f"{path.with_suffix('.png')}, {path.with_name(path.stem + '-curve.png')}")
    return 1 if failed else 0


def run_command(args) -> int:
    """The command's work for parsed arguments; its exit status."""
    claim_outputs(args)
    return merge(args) if args.merge else measure(args)

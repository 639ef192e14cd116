"""The reading part's rows (`python -m solution.experiments.gpu.reading_figures`), scored as the answers
benchmark scores its rows (solution/experiments/answers: thresholds tuned on dev, test under them, 95%
bootstrap intervals over documents, paired differences on the same documents).

    python -m solution.experiments.gpu.reading_figures --dir WORK/reading --references lexical,bm25,first_paragraph
    python -m solution.experiments.gpu.reading_figures --dir WORK/reading --references sentences --device cuda
    python -m solution.experiments.gpu.reading_figures --dir WORK/reading --rows

`--references` scores no-training rows on corpus seed 0's dev and test (DIR/corpus) into
DIR/references.json (added to what is there). `--rows` makes a row for each model and first pass whose dev
and test scores DIR/pred holds: on corpus seed 0's pages (the main figures, against every no-training row,
split by the question forms training saw and did not) and on the pages with the yes/no ones added (YES and
NO F1, what the model says on YES and on NO pages); the meaning first pass against the words one, and the
yes/no models against the models trained without the added pages, paired. It writes DIR/rows.json and
prints one JSON line, the figures a reader looks for first.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from solution.common.devices import check_device

PRED = re.compile(r"(?P<model>.+)-(?P<first_pass>words|meaning)-dev-scores\.jsonl$")
REFERENCE_NAMES = ("lexical", "bm25", "first_paragraph", "sentences")
# A model's scores made with `submission.predict --polarity-model` are named MODEL + this (its settings and
# training facts are MODEL's, DIR/stage2-MODEL) and paired against MODEL's own: what the polarity model changes.
POLARITY_SUFFIX = "-polarity"
GOAL = 0.80  # the test micro-F1 the reading work aims at on both seeds
SUMMARY_KEYS = ("num_train_documents", "test_f1", "test_f1_ci", "dev_f1_tuned", "test_long_f1", "best_reference",
                "best_reference_delta", "best_reference_delta_ci", "best_long_reference", "best_long_reference_delta",
                "best_long_reference_delta_ci")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m solution.experiments.gpu.reading_figures",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", required=True, help="the reading part's folder (WORK/reading)")
    p.add_argument("--references", default=None, help=f"no-training rows to score, of {', '.join(REFERENCE_NAMES)}")
    p.add_argument("--rows", action="store_true", help="the models' rows from DIR/pred")
    p.add_argument("--device", default="cpu", help="where the sentence-matching row runs its encoder")
    p.add_argument("--sentence-model", default=None,
                   help="the sentence-matching row's encoder: a directory (default: the backbone's package)")
    args = p.parse_args(argv)
    names = [n.strip() for n in (args.references or "").split(",") if n.strip()]
    if any(n not in REFERENCE_NAMES for n in names):
        p.error(f"--references {args.references}: each of {', '.join(REFERENCE_NAMES)}")
    if not names and not args.rows:
        p.error("give --references NAMES or --rows")
    # Before any row is scored: only the sentence row runs a model, on a device this machine must have.
    if "sentences" not in names and (args.device != "cpu" or args.sentence_model):
        p.error("--device and --sentence-model are the sentence row's: only --references sentences runs a model")
    try:
        check_device(args.device)
    except ValueError as e:
        p.error(str(e))
    args.references = names
    return args


def corpora(root: Path) -> dict:
    """{"main": corpus seed 0's dev and test, "yes_no": the same with the yes/no pages added}."""
    c, d = root / "corpus", root / "data"
    return {"main": {"dev": str(c / "simplified-nq-dev.jsonl"), "test": str(c / "simplified-nq-test.jsonl"),
                     "test_gold": str(c / "simplified-nq-test-gold.jsonl")},
            "yes_no": {"dev": str(d / "dev.jsonl"), "test": str(d / "test.jsonl"), "test_gold": str(d / "test-gold.jsonl")}}


def jsonable(row: dict) -> dict:
    """A row with its per-document counts as lists (JSON keeps no tuples)."""
    return {k: ({split: [list(c) for c in counts] for split, counts in v.items()} if k == "_counts" else v)
            for k, v in row.items()}


def score_references(root: Path, names: list, device: str, model=None) -> dict:
    """The no-training rows `names` on corpus seed 0's pages, added to DIR/references.json; {name: row}."""
    from solution.experiments.answers.references import first_paragraph_row, lexical_row

    corpus = corpora(root)["main"]
    path = root / "references.json"
    rows = json.loads(path.read_text()) if path.is_file() else {}
    for name in names:
        row = first_paragraph_row(corpus) if name == "first_paragraph" else lexical_row(
            corpus, {"lexical": "words"}.get(name, name), device=device, model=model)
        rows[name] = jsonable({"technique": name, **row})
        path.write_text(json.dumps(rows) + "\n")  # each as it is made: a later one may not finish
    return rows


def only(records: list, gold_path: str) -> list:
    """The records of the documents of `gold_path`."""
    from solution.experiments.answers.figures import gold_of

    gold = gold_of(gold_path)
    return [r for r in records if str(r["example_id"]) in gold]


def model_rows(root: Path, name: str, first_pass: str, references: dict) -> dict:
    """One model under one first pass: {"main": its row on corpus seed 0's pages, "yes_no": on the pages with
    the yes/no ones added}."""
    from solution.answers.postprocess import PostprocessConfig
    from solution.experiments.answers.figures import reference_deltas
    from solution.experiments.answers.variant import evaluate_records
    from solution.model.qa_config import read_qa_config
    from solution.scoring.tuning import read_scores

    answerer = name.removesuffix(POLARITY_SUFFIX)
    model = root / f"stage2-{answerer}"  # with a polarity model: the answer model's
    cfg = PostprocessConfig(**read_qa_config(model / "model" / "qa_config.json")["postprocess"])
    dev, test = (read_scores(root / "pred" / f"{name}-{first_pass}-{split}-scores.jsonl") for split in ("dev", "test"))
    both = corpora(root)
    cut = None
    if answerer != name:
        dev, test, cut = at_dev_cut(dev, test, both["yes_no"]["dev"])
    main = evaluate_records(only(dev, both["main"]["dev"]), only(test, both["main"]["test_gold"]), cfg, both["main"])
    head = {"model": name, "first_pass": first_pass, **training_facts(model), **({"polarity_cut": cut} if cut else {})}
    main = head | main | reference_deltas(references, main)
    return {"main": main, "yes_no": head | evaluate_records(dev, test, cfg, both["yes_no"])}


def at_dev_cut(dev: list, test: list, dev_gold: str) -> tuple:
    """(dev, test, cut): a polarity row's records with the polarity model's YES or NO chosen again at the cut
    that reads dev's YES and NO pages best, each kind by its own share (`polarity.polarity_cut`, as `evaluate --tune` sets a
    directory's `polarity_offset` before its thresholds), and that cut's figures; the records as they are and
    None where dev holds no such page. The call predicts at the answer model's cut (0) and keeps each page's
    margin, so the cut is tuned here, on dev alone, as a user of the library would tune it."""
    from solution.answers.polarity import tuned_cut, with_cut
    from solution.experiments.answers.figures import gold_of

    dev, cut = tuned_cut(dev, gold_of(dev_gold))
    return dev, test if cut is None else with_cut(test, cut["polarity_offset"]), cut


def training_facts(model: Path) -> dict:
    """The seed, pages and windows of a stage-2 run, from its metrics.jsonl's start record."""
    start = json.loads((model / "metrics.jsonl").read_text().splitlines()[0])
    return {"seed": start.get("seed"), "num_train_documents": start.get("train_data", {}).get("documents"),
            "train_windows": start.get("train_windows"),
            "train_file": Path(start.get("train_data_source", {}).get("path", "")).name or None}


def paired(rows: dict) -> dict:
    """The comparisons the part exists for, each paired on the same documents: the meaning first pass against
    the words one (same model), each yes/no model against the model of its seed trained on the same pages
    without the added yes/no ones (found by its training file, so a failed model is never replaced by
    another size's), and MODEL-polarity against MODEL."""
    from solution.experiments.answers.figures import deltas

    out = {}
    for (name, first_pass), r in rows.items():
        if first_pass == "meaning" and (name, "words") in rows:
            out[f"{name}: meaning - words"] = deltas(rows[name, "words"]["main"], r["main"])
        answerer = name.removesuffix(POLARITY_SUFFIX)
        if answerer != name and (answerer, first_pass) in rows:
            alone = rows[answerer, first_pass]
            out[f"{name}: polarity model - without ({first_pass})"] = {
                "main": deltas(alone["main"], r["main"]), "yes_no": deltas(alone["yes_no"], r["yes_no"])}
        if not name.startswith("yes-no-"):
            continue
        without = (r["main"].get("train_file") or "").replace("-yes-no", "")
        base = next((key for key, b in rows.items() if key[1] == first_pass and not key[0].startswith("yes-no-")
                     and b["main"].get("seed") == r["main"].get("seed") and b["main"].get("train_file") == without), None)
        if base:
            out[f"{name}: yes/no pages - without ({first_pass})"] = {
                "main": deltas(rows[base]["main"], r["main"]), "yes_no": deltas(rows[base]["yes_no"], r["yes_no"])}
    return out


def curve(rows: dict) -> dict:
    """Seed 0's test micro-F1 by training pages (the words first pass) and the answers benchmark's projection
    of it (`charts.curve_projection`: F1 fitted on log2 pages, the pages that line needs for GOAL): a
    projection, not a measurement."""
    from solution.experiments.answers.charts import curve_projection

    points = sorted(({"technique": "learning_curve", "seed": 0, "num_train_documents": r["main"]["num_train_documents"],
                      "test_f1": r["main"]["test_f1"]} for (name, first_pass), r in rows.items()
                     if re.fullmatch(r"p\d+-s0", name) and first_pass == "words" and r["main"].get("test_f1") is not None),
                    key=lambda point: point["num_train_documents"])
    fit = curve_projection(points, GOAL)
    return {"pages": [p["num_train_documents"] for p in points], "test_f1": [p["test_f1"] for p in points],
            **({"projection": fit} if fit else {})}


def summary(rows: dict, pairs: dict) -> dict:
    """The figures a reader looks for first: each row's test F1 and margins, its YES and NO F1, the pairs."""
    out = {}
    for (name, first_pass), r in rows.items():
        main, yn = r["main"], r["yes_no"]
        out[f"{name} {first_pass}"] = {**{k: main.get(k) for k in SUMMARY_KEYS},
                                       "test_by_question_form": main.get("test_by_question_form"),
                                       **{k: yn.get(k) for k in ("yes_f1", "no_f1", "yes_no_f1")},
                                       "polarity": (yn.get("test") or {}).get("polarity"),
                                       **({"polarity_cut": main["polarity_cut"]} if "polarity_cut" in main else {})}
    return {"rows": out, "paired": pairs, "curve": curve(rows)}


def score_rows_of(root: Path) -> dict:
    """Every model and first pass with dev and test scores in DIR/pred: {(model, first pass): rows}."""
    refs_path = root / "references.json"
    references = json.loads(refs_path.read_text()) if refs_path.is_file() else {}
    rows = {}
    for dev in sorted((root / "pred").glob("*-dev-scores.jsonl")):
        m = PRED.match(dev.name)
        if m and (root / "pred" / dev.name.replace("-dev-", "-test-")).is_file():
            rows[m["model"], m["first_pass"]] = model_rows(root, m["model"], m["first_pass"], references)
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    root = Path(args.dir)
    if args.references:
        score_references(root, args.references, args.device, args.sentence_model)
    if not args.rows:
        return 0
    rows = score_rows_of(root)
    if not rows:
        print(f"error: {root / 'pred'}: no model has both dev and test scores", file=sys.stderr)
        return 2
    pairs = paired(rows)
    record = [jsonable(r[kind]) | {"pages": kind} for r in rows.values() for kind in ("main", "yes_no")]
    (root / "rows.json").write_text(json.dumps({"rows": record, "paired": pairs, "curve": curve(rows)}, indent=1) + "\n")
    print(json.dumps(summary(rows, pairs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

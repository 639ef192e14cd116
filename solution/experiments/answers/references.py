"""The answers benchmark's no-training rows (REFERENCES): word matching, BM25 and the sentence match of
`solution.model.references`, their thresholds tuned on dev, and the NQ paper's first-paragraph answer."""

from __future__ import annotations

from solution.experiments.answers.figures import figures, gold_of, score_rows, split_f1s
from solution.experiments.answers.rows import attempt
from solution.experiments.answers.techniques import REFERENCES
from solution.experiments.answers.variant import with_test


def lexical_row(corpus: dict, method: str = "words", device: str = "cpu", model: str | None = None) -> dict:
    """A no-training answerer of `solution.lexical` (word matching, `bm25` or `sentences`, whose encoder `model`
    runs on `device`): thresholds tuned on dev, applied to test."""
    from solution.answers.postprocess import PostprocessConfig
    from solution.model.references import lexical_records
    from solution.scoring.tuning import predictions_with, tuned_on_dev

    dev_records = lexical_records(corpus["dev"], method=method, device=device, model=model)
    tuned, best = tuned_on_dev(dev_records, gold_of(corpus["dev"]))
    dev = score_rows(predictions_with(dev_records, PostprocessConfig()), corpus["dev"])
    dev_figures, counts = figures("dev", predictions_with(dev_records, tuned), corpus["dev"])
    row = {"dev_f1_untuned": dev["micro_f1"], "dev_f1_tuned": best["result"]["micro_f1"], **dev_figures,
           "dev_untuned": dev, "thresholds": best["thresholds"], "test_f1": None, "_counts": counts}
    if corpus["test"]:
        test_rows = predictions_with(lexical_records(corpus["test"], method=method, device=device, model=model), tuned)
        row = with_test(row, test_rows, test_rows, corpus["test_gold"])
    return row | split_f1s(row, dev)


def first_paragraph_rows(path: str) -> dict:
    """{row id: PredictionString} of the NQ paper's first-paragraph baseline: the first top-level candidate
    that is a paragraph (`<P>`) as the long answer, blank where a page has none; every short row blank."""
    from solution.data.nq import read_examples
    rows = {}
    for ex in read_examples(path):
        first = next((c for c in ex.candidates if c.top_level and ex.tokens[c.start_token] == "<P>"), None)
        rows[f"{ex.example_id}_long"], rows[f"{ex.example_id}_short"] = first.as_prediction() if first else "", ""
    return rows


def first_paragraph_row(corpus: dict) -> dict:
    """The first-paragraph reference scored as every row is: no thresholds, so dev untuned is dev tuned."""
    dev_rows = first_paragraph_rows(corpus["dev"])
    dev = score_rows(dev_rows, corpus["dev"])
    dev_figures, counts = figures("dev", dev_rows, corpus["dev"])
    row = {"dev_f1_untuned": dev["micro_f1"], "dev_f1_tuned": dev["micro_f1"], **dev_figures, "dev_untuned": dev,
           "thresholds": None, "test_f1": None, "_counts": counts}
    if corpus["test"]:
        test_rows = first_paragraph_rows(corpus["test"])
        row = with_test(row, test_rows, test_rows, corpus["test_gold"])
    return row | split_f1s(row, dev)


def reference_rows(corpus: dict, names=REFERENCES) -> dict:
    """{name: row} of the no-training references `names` (of REFERENCES, in its order), each scored as every
    row is."""
    score = {"lexical": lambda: lexical_row(corpus), "bm25": lambda: lexical_row(corpus, "bm25"),
             "sentences": lambda: lexical_row(corpus, "sentences"), "first_paragraph": lambda: first_paragraph_row(corpus)}
    return {name: attempt({"technique": name, "enabled": None, "seed": None, "num_train_documents": 0}, score[name])
            for name in REFERENCES if name in names}

"""One variant of the answers benchmark scored (a model, or several averaged, with post-processing --set
items): predict dev and score it untuned, tune the thresholds on dev, predict test with them and score it."""

from __future__ import annotations

import json
from pathlib import Path

from solution.experiments.answers.figures import figures, form_split, gold_of, score_rows, split_f1s
from solution.experiments.answers.predicting import model_meta, predict


def with_test(row: dict, scored: dict, rows: dict, gold_path: str) -> dict:
    """`row` with the test split's figures: `scored` (the rows as the CLI reads them) scored against the test
    gold, `rows` (the same predictions) for the intervals, MLE-bench's score, the NQ figures and, where the
    gold says each question's form, the score on the forms training saw and on those it did not."""
    test = score_rows(scored, gold_path)
    test_figures, counts = figures("test", rows, gold_path)
    row["_counts"] |= counts
    return row | {"test_f1": test["micro_f1"], **test_figures, **form_split("test", rows, gold_path), "test": test}


def tuned_row(dev: dict, dev_records: list, cfg, corpus: dict) -> tuple:
    """(the row's dev figures: untuned `dev`, tuned on dev's score records, with the per-document counts;
    the post-processing settings with the tuned thresholds, for test; the tuning's result at them)."""
    from dataclasses import replace

    from solution.scoring.tuning import predictions_with, tune

    best = tune(dev_records, gold_of(corpus["dev"]), cfg=cfg)
    tuned = replace(cfg, **best["thresholds"])
    dev_figures, counts = figures("dev", predictions_with(dev_records, tuned), corpus["dev"])
    return {"dev_f1_untuned": dev["micro_f1"], "dev_f1_tuned": best["result"]["micro_f1"], **dev_figures,
            "dev_untuned": dev, "thresholds": best["thresholds"], "test_f1": None, "_counts": counts}, tuned, \
        best["result"]


def evaluate(models: list, sets: list, corpus: dict, d: Path, polarity=None) -> dict:
    """Dev untuned, dev tuned and test with dev's thresholds for one variant; `models` has 1 or more
    directories (the first model's post-processing settings, with `sets` over them, as `submission.predict`
    does). `polarity`: a polarity model's directory, read as `--polarity-model` is, at the cut tuned on dev
    before the thresholds (as `evaluate --tune` sets `polarity_offset`; the row's `polarity_cut`)."""
    from dataclasses import replace

    from solution.answers.inference import split_overrides, with_overrides
    from solution.answers.polarity import tuned_cut
    from solution.answers.postprocess import PostprocessConfig, score_record
    from solution.scoring.metric import read_submission
    from solution.windows.featurizer import WindowConfig

    d.mkdir(parents=True, exist_ok=True)
    meta = model_meta(models[0])
    _, cfg = with_overrides(WindowConfig(**meta["window"]), PostprocessConfig(**meta["postprocess"]), sets)
    window_sets, _ = split_overrides(sets)
    dev_preds, _, dev_windows = predict(models, cfg, corpus["dev"], d / "dev.csv", window_sets, polarity)
    dev = score_rows(read_submission(d / "dev.csv"), corpus["dev"])  # the CSV as the CLI would read it
    records, cut = [score_record(p) for p in dev_preds], None
    if polarity:
        records, cut = tuned_cut(records, gold_of(corpus["dev"]))
    cfg = replace(cfg, polarity_offset=cut["polarity_offset"]) if cut else cfg
    row, tuned, after = tuned_row(dev, records, cfg, corpus)
    (d / "tune.json").write_text(json.dumps({"thresholds": row["thresholds"], "after": after, "polarity_cut": cut}) + "\n")
    row["num_dev_windows"] = dev_windows
    row |= {"polarity_cut": cut} if cut else {}
    if corpus["test"]:
        _, test_rows, test_windows = predict(models, tuned, corpus["test"], d / "test.csv", window_sets, polarity)
        row = with_test(row, read_submission(d / "test.csv"), test_rows, corpus["test_gold"])
        row["num_test_windows"] = test_windows
    return row | split_f1s(row, dev)


def evaluate_records(dev_records: list, test_records: list, cfg, corpus: dict) -> dict:
    """`evaluate`'s row made from scores already written (`submission.predict --scores-out` on dev and on
    test, with the model's own settings `cfg`): dev untuned, the thresholds tuned on dev, test under them.
    For predictions made elsewhere (the GPU check's processes), scored here as every row is."""
    from solution.scoring.tuning import predictions_with

    dev = score_rows(predictions_with(dev_records, cfg), corpus["dev"])
    row, tuned, _ = tuned_row(dev, dev_records, cfg, corpus)
    test_rows = predictions_with(test_records, tuned)
    row = with_test(row, test_rows, test_rows, corpus["test_gold"])
    return row | split_f1s(row, dev)

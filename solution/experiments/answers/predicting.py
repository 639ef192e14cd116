"""Predicting a file for the answers benchmark through the library's one path (`solution.model.loading`,
as `submission.predict` does), each model loaded once with its logits kept: every post-processing variant
and ensemble re-uses the logits a window gave, and only the windows a variant adds are new work."""

from __future__ import annotations

import csv
from pathlib import Path

MODELS: dict = {}


def loaded(model_dir):
    """Each model directory loaded once (cpu, in the precision `submission.predict` picks), logits kept."""
    from solution.model.loading import load_model

    key = str(Path(model_dir).resolve())
    if key not in MODELS:
        MODELS[key] = load_model(model_dir, "cpu", "auto", cache_logits=True)
    return MODELS[key]


def model_meta(model_dir) -> dict:
    """The model directory's qa_config (its window and post-processing settings)."""
    return loaded(model_dir).meta


def predict(models: list, cfg, path: str, out_csv: Path, window_sets: list = (), polarity=None) -> tuple:
    """(document predictions, {row id: PredictionString}, windows run) of one model, or of several
    averaged (equal weights), with `window_sets` (--set items of the window settings) over the first
    model's window settings, and the model directory `polarity` as `--polarity-model` where given; the rows
    are also written as a submission CSV."""
    from solution.answers.inference import submission_rows
    from solution.model.loading import load_ensemble, predict_input

    ensemble, seen = load_ensemble([loaded(m) for m in models]), {"windows": 0}
    reader = load_ensemble([loaded(polarity)]) if polarity else None
    preds = list(predict_input(ensemble, path, cfg, window_sets,
                               progress=lambda docs, windows: seen.update(windows=windows), polarity=reader))
    rows = dict(submission_rows(preds))
    with open(out_csv, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["example_id", "PredictionString"])
        writer.writerows(rows.items())
    return preds, rows, seen["windows"]

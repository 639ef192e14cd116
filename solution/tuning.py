"""Threshold tuning: the long and short thresholds that maximise dev micro-F1. Pure numpy.

`submission.predict --scores-out FILE` writes one JSON line per document with its
answers before the thresholds (`raw_long`, `raw_short`), its answer type and
its two scores. `python -m solution.evaluate --tune --scores FILE --gold DEV
--model DIR` searches both thresholds against the gold and writes the best
into DIR/qa_config.json, where `submission.predict` reads them.

The search applies exactly `postprocess.apply_thresholds` to every document
for every pair of thresholds on a grid of the observed scores (midpoints
between neighbours, thinned to at most `max_grid` per axis), counting TP, FP
and FN as the competition metric does; the winner is re-scored with
`metric.score` itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from solution.fsutil import atomic_write_text
from solution.metric import parse_prediction, score
from solution.postprocess import apply_thresholds

SCORE_FIELDS = ("example_id", "raw_long", "raw_short", "answer_type", "score", "short_score")


def read_scores(path) -> list:
    records = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line_no}: not valid JSON ({e.msg})") from None
            missing = [k for k in SCORE_FIELDS if k not in rec]
            if missing:
                raise ValueError(f"{path}:{line_no}: field '{missing[0]}': missing (write the file with "
                                 "submission.predict --scores-out)")
            records.append(rec)
    if not records:
        raise ValueError(f"{path}: no documents")
    return records


def predictions_at(records: list, long_threshold: float, short_threshold: float) -> dict:
    out = {}
    for r in records:
        long, short = apply_thresholds(r["raw_long"], r["raw_short"], r["answer_type"], r["score"],
                                       r["short_score"], long_threshold, short_threshold)
        out[f"{r['example_id']}_long"], out[f"{r['example_id']}_short"] = long, short
    return out


def _grid(values: np.ndarray, max_grid: int) -> np.ndarray:
    v = np.unique(values[np.isfinite(values)])
    cuts = (v[:-1] + v[1:]) / 2 if len(v) > 1 else v
    if len(cuts) > max_grid:
        cuts = np.quantile(cuts, np.linspace(0, 1, max_grid))
    lo = (v[0] - 1.0) if len(v) else 0.0
    hi = (v[-1] + 1.0) if len(v) else 0.0
    return np.unique(np.concatenate([[lo], cuts, [hi]]))


def tune(records: list, gold: dict, max_grid: int = 300) -> dict:
    """{"long_threshold", "short_threshold", "micro_f1", "result"} maximising dev micro-F1."""
    records = [r for r in records if r["example_id"] in gold]
    if not records:
        raise ValueError("no scored document is in the gold file")
    missing = set(gold) - {r["example_id"] for r in records}
    if missing:
        raise ValueError(f"{len(missing)} gold examples have no scores, e.g. {sorted(missing)[:3]}")
    g = [gold[r["example_id"]] for r in records]
    sc = np.array([r["score"] for r in records], dtype=np.float64)
    ssc = np.array([r["short_score"] for r in records], dtype=np.float64)
    is_short_type = np.array([r["answer_type"] == "SHORT" for r in records])
    raw_l = [parse_prediction(r["raw_long"]) for r in records]
    raw_s = [parse_prediction(r["raw_short"]) for r in records]
    l_nonblank = np.array([bool(x) for x in raw_l])
    s_nonblank = np.array([bool(x) for x in raw_s])
    l_right = np.array([x in gg.long for x, gg in zip(raw_l, g)])
    s_right = np.array([x in gg.short for x, gg in zip(raw_s, g)])
    l_gold = np.array([bool(gg.long) for gg in g])
    s_gold = np.array([bool(gg.short) for gg in g])

    long_grid, short_grid = _grid(sc, max_grid), _grid(ssc, max_grid)
    # short row answered: passes long, non-blank, and (not SHORT type or short_score > st) -> [docs, st]
    short_pass = (~is_short_type[:, None]) | (ssc[:, None] > short_grid[None, :])
    table = np.zeros((len(long_grid), len(short_grid)))
    for i, lt in enumerate(long_grid):
        passes = sc > lt
        lp = passes & l_nonblank
        tp_l, fp_l, fn_l = np.sum(lp & l_right), np.sum(lp & ~l_right), np.sum(~lp & l_gold)
        sp = (passes & s_nonblank)[:, None] & short_pass  # [docs, st]
        tp = tp_l + np.sum(sp & s_right[:, None], axis=0)
        fp = fp_l + np.sum(sp & ~s_right[:, None], axis=0)
        fn = fn_l + np.sum(~sp & s_gold[:, None], axis=0)
        table[i] = np.where(2 * tp + fp + fn > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 0.0)
    # Many pairs often tie for the best dev F1 (a plateau between two documents' scores). Take the
    # middle of the plateau, not its edge: an edge threshold sits right next to a dev score and
    # moves the first test document that scores a little differently.
    rows, cols = np.nonzero(table >= table.max() - 1e-12)
    best_rows = np.unique(rows)
    i = int(best_rows[(len(best_rows) - 1) // 2])  # the middle row (the lower one of an even count)
    cols_i = cols[rows == i]
    j = int(cols_i[len(cols_i) // 2])
    lt, st = float(long_grid[i]), float(short_grid[j])
    result = score(predictions_at(records, lt, st), {r["example_id"]: gold[r["example_id"]] for r in records})
    return {"long_threshold": lt, "short_threshold": st, "micro_f1": result["micro_f1"], "result": result}


def write_thresholds(model_dir, long_threshold: float, short_threshold: float, tuned_on: dict) -> Path:
    """Store tuned thresholds in the model directory's qa_config.json (atomically)."""
    path = Path(model_dir) / "qa_config.json"
    if not path.is_file():
        raise ValueError(f"{model_dir}: not a model directory (no qa_config.json)")
    meta = json.loads(path.read_text())
    meta["postprocess"]["long_threshold"] = long_threshold
    meta["postprocess"]["short_threshold"] = short_threshold
    meta["tuned_thresholds"] = tuned_on
    return atomic_write_text(path, json.dumps(meta, indent=2) + "\n")

"""Threshold tuning: the thresholds that maximise dev micro-F1. Pure numpy.

`submission.predict --scores-out FILE` writes one JSON line per document
(`postprocess.score_record`): its answers before the thresholds (`raw_long`,
`raw_short`), its answer type and its scores. `python -m solution.evaluate
--tune --scores FILE --gold DEV --model DIR` searches the thresholds against
the gold and writes the best into DIR/qa_config.json (`qa_config.write_thresholds`), where
`submission.predict` reads them.

With `separate_thresholds` off (the default), the search applies exactly
`postprocess.apply_thresholds` to every document for every pair of long and
short thresholds on a grid of the observed scores (midpoints between
neighbours, thinned to at most `max_grid` per axis), counting TP, FP and FN as
the competition metric does. With it on, the four thresholds (long, short,
YES, NO) each decide their own rows (`postprocess.threshold_rows`), so every
group's TP/FP/FN is a vector over its own grid, and the best combination of
the four is found exactly by Dinkelbach's method: for a ratio F1 = 2TP /
(2TP + FP + FN), maximising 2TP - f (2TP + FP + FN) is separable into the
groups; start at f = 0, take each group's best threshold, set f to the F1 of
that choice, and repeat until F1 stops rising (a finite number of rounds; the
last choice is the global optimum over the grids). Either way the winner is
re-scored with `metric.score` itself.

`metric="mlebench"` maximises MLE-bench's score instead (`solution.scoring.mlebench`): the share of right
rows, 1 - (FP + FN) / rows, against the first annotation (the caller's gold). That objective is
linear in the counts, so the four separate thresholds are each chosen alone, and the joint pair
by the same table. The result then also holds "mlebench_score".
"""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np

from solution.answers.postprocess import PostprocessConfig, apply_thresholds, threshold_rows
from solution.common.jsonio import iter_json_lines
from solution.scoring import mlebench
from solution.scoring.metric import parse_prediction, score
from solution.windows.featurizer import ANSWER_TYPES

METRICS = ("kaggle", "mlebench")
SCORE_FIELDS = ("example_id", "raw_long", "raw_short", "answer_type", "score", "short_score")
TYPE_SCORE_FIELDS = ("yes_score", "no_score")  # needed by the separate-threshold search only
MAX_SHOWN = 5


def read_scores(path) -> list:
    """The `--scores-out` records of a file, each line checked (`check_record`); a bad one is a ValueError
    naming the file, its line and the field."""
    records, seen = [], {}  # seen: NQ's integer id -> (line, id as written)
    for line_no, rec in iter_json_lines(path):
        where = f"{path} line {line_no}"
        check_record(rec, where)
        eid = rec["example_id"] = str(rec["example_id"]).strip()  # compared as text, as the gold's ids are
        if int(eid) in seen:
            first, written = seen[int(eid)]
            said = "is also on" if written == eid else f"and {written} of line {first} are one NQ id (an integer): " \
                                                     "one document on two lines, or two with one id; see"
            raise ValueError(f"{where}: field 'example_id': example_id {eid} {said} line {first}")
        seen[int(eid)] = (line_no, eid)
        records.append(rec)
    if not records:
        raise ValueError(f"{path}: no documents")
    return records


_ID = re.compile(r"\s*-?[0-9]{1,20}\s*")


def check_record(rec, where: str) -> None:
    """What tuning reads of one `postprocess.score_record`, named by field (it would otherwise fail deep in
    numpy or the metric with a TypeError)."""
    def fail(field: str, message: str):
        raise ValueError(f"{where}: field '{field}': {message}")

    if not isinstance(rec, dict):
        raise ValueError(f"{where}: expected a JSON object (one document's scores, as submission.predict "
                         f"--scores-out writes it), got {json.dumps(rec)[:40]}")
    missing = [k for k in SCORE_FIELDS if k not in rec]
    if missing:
        fail(missing[0], "missing (write the file with submission.predict --scores-out)")
    eid = rec["example_id"]
    if isinstance(eid, bool) or not isinstance(eid, (int, str)) or not _ID.fullmatch(str(eid)):
        fail("example_id", f"expected an integer id (a number or its digits as text), got {eid!r}")
    for key in ("raw_long", "raw_short"):
        if not isinstance(rec[key], str):
            fail(key, f"expected a prediction string, got {rec[key]!r}")
        try:
            parse_prediction(rec[key])
        except ValueError as e:
            fail(key, str(e))
    if rec["answer_type"] not in ANSWER_TYPES:
        fail("answer_type", f"expected one of {', '.join(ANSWER_TYPES)}, got {rec['answer_type']!r}")
    for key in ("score", "short_score", *TYPE_SCORE_FIELDS, "polarity_margin"):
        v = rec.get(key, 0.0)  # yes_score, no_score: only the separate-threshold search needs them; a
        # polarity_margin only where a polarity model read the page
        if isinstance(v, bool) or not isinstance(v, (int, float)):  # jsonio has already refused NaN and inf
            fail(key, f"expected a number, got {v!r}")


def missing_scores(missing: list, num_gold: int) -> str:
    """What to say when tuning finds gold documents without scores: thresholds tuned on part of the gold
    cannot be scored against all of it."""
    shown = ", ".join(map(str, missing[:MAX_SHOWN])) + (f", ... ({len(missing) - MAX_SHOWN} more)"
                                                       if len(missing) > MAX_SHOWN else "")
    return (f"{len(missing)} of the {num_gold} gold documents have no scores ({shown}): write --scores for the "
            "whole gold file (submission.predict --input GOLD --scores-out FILE), or give --gold a file of the "
            "scored documents alone")


def predictions_at(records: list, long_threshold: float, short_threshold: float) -> dict:
    out = {}
    for r in records:
        long, short = apply_thresholds(r["raw_long"], r["raw_short"], r["answer_type"], r["score"],
                                       r["short_score"], long_threshold, short_threshold)
        out[f"{r['example_id']}_long"], out[f"{r['example_id']}_short"] = long, short
    return out


def predictions_with(records: list, cfg: PostprocessConfig) -> dict:
    """Row predictions of scored documents under `cfg`'s thresholds (the rule post-processing applies)."""
    out = {}
    for r in records:
        out[f"{r['example_id']}_long"], out[f"{r['example_id']}_short"] = threshold_rows(r, cfg)
    return out


def threshold_grid(values: np.ndarray, max_grid: int) -> np.ndarray:
    v = np.unique(values[np.isfinite(values)])
    cuts = (v[:-1] + v[1:]) / 2 if len(v) > 1 else v
    if len(cuts) > max_grid:
        cuts = np.quantile(cuts, np.linspace(0, 1, max_grid))
    lo = (v[0] - 1.0) if len(v) else 0.0
    hi = (v[-1] + 1.0) if len(v) else 0.0
    return np.unique(np.concatenate([[lo], cuts, [hi]]))


def _matched(records: list, gold: dict) -> list:
    records = [r for r in records if r["example_id"] in gold]
    if not records:
        raise ValueError("no scored document is in the gold file")
    scored = {r["example_id"] for r in records}
    missing = [eid for eid in gold if eid not in scored]
    if missing:
        raise ValueError(missing_scores(missing, len(gold)))
    return records


def objective(result: dict, metric: str = "kaggle") -> float:
    """The figure `tune` maximises, from a `metric.score` result: micro-F1, or MLE-bench's score."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if metric == "kaggle":
        return result["micro_f1"]
    rows = 2 * result["num_examples"]
    return mlebench.score_of(rows - result["fp"] - result["fn"], rows)


def _with_objective(result: dict, metric: str) -> dict:
    if metric == "mlebench":
        result["mlebench_score"] = objective(result, metric)
    return result


def tune(records: list, gold: dict, max_grid: int = 300, cfg: PostprocessConfig = None,
         metric: str = "kaggle") -> dict:
    """{"long_threshold", "short_threshold", "thresholds", "micro_f1", "objective", "result"} maximising
    dev micro-F1 (metric="kaggle") or MLE-bench's score ("mlebench": pass first-annotation gold).
    `thresholds` holds every tuned PostprocessConfig field: the four of them when `cfg.separate_thresholds`."""
    if metric not in METRICS:  # before any work
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if cfg is not None and cfg.separate_thresholds:
        return tune_separate(records, gold, cfg, max_grid, metric)
    records = _matched(records, gold)
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

    long_grid, short_grid = threshold_grid(sc, max_grid), threshold_grid(ssc, max_grid)
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
        if metric == "mlebench":  # the share of right rows: every row not a FP or a FN
            table[i] = 1.0 - (fp + fn) / (2 * len(records))
        else:
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
    return {"long_threshold": lt, "short_threshold": st, "thresholds": {"long_threshold": lt, "short_threshold": st},
            "micro_f1": result["micro_f1"], "objective": objective(result, metric),
            "result": _with_objective(result, metric)}


# (threshold field, the score it compares, the row it decides, the answer types it applies to)
_GROUPS = (("long_threshold", "score", "raw_long", None), ("short_threshold", "short_score", "raw_short", "SHORT"),
           ("yes_threshold", "yes_score", "raw_short", "YES"), ("no_threshold", "no_score", "raw_short", "NO"))


def tune_separate(records: list, gold: dict, cfg: PostprocessConfig, max_grid: int = 300,
                  metric: str = "kaggle") -> dict:
    """The four thresholds of `separate_thresholds` (see the module docstring)."""
    records = _matched(records, gold)
    for r in records:
        missing = [k for k in TYPE_SCORE_FIELDS if k not in r]
        if missing:
            raise ValueError(f"example_id {r['example_id']}: field '{missing[0]}' missing: the separate-threshold "
                             "search needs scores written by this version of submission.predict --scores-out")
    g = [gold[r["example_id"]] for r in records]
    gold_short = np.array([bool(x.short) for x in g])
    groups, const_fn = [], 0
    for name, key, row, kind in _GROUPS:
        member = np.ones(len(records), bool) if kind is None else np.array([r["answer_type"] == kind for r in records])
        raw = [parse_prediction(r[row]) for r, m in zip(records, member) if m]
        gg = [x for x, m in zip(g, member) if m]
        right = np.array([p in (x.long if row == "raw_long" else x.short) for p, x in zip(raw, gg)], bool)
        has_gold = np.array([bool(x.long if row == "raw_long" else x.short) for x in gg], bool)
        nonblank = np.array([bool(p) for p in raw], bool)
        sc = np.array([r[key] for r, m in zip(records, member) if m], dtype=np.float64)
        grid = threshold_grid(sc, max_grid) if len(sc) else np.array([getattr(cfg, name)])
        ans = nonblank[:, None] & (sc[:, None] > grid[None, :])  # [docs, grid]
        counts = np.stack([np.sum(ans & right[:, None], 0), np.sum(ans & ~right[:, None], 0),
                           np.sum(~ans & has_gold[:, None], 0)], axis=1)  # [grid, (tp, fp, fn)]
        groups.append((name, grid, counts))
    # Short rows no threshold can fill (LONG answers, blank documents) still count their misses.
    in_short = np.array([r["answer_type"] in ("SHORT", "YES", "NO") for r in records])
    const_fn = int(np.sum(gold_short & ~in_short))
    if metric == "mlebench":  # linear in the counts: each group's fewest FP + FN, alone
        choice = [middle_of_best(-(c[:, 1] + c[:, 2]).astype(np.float64)) for _, _, c in groups]
    else:
        choice = dinkelbach([c for _, _, c in groups], const_fn)
    thresholds = {name: float(grid[i]) for (name, grid, _), i in zip(groups, choice)}
    tuned = PostprocessConfig(**{**cfg.__dict__, **thresholds})
    result = score(predictions_with(records, tuned), {r["example_id"]: gold[r["example_id"]] for r in records})
    return {"long_threshold": thresholds["long_threshold"], "short_threshold": thresholds["short_threshold"],
            "thresholds": thresholds, "micro_f1": result["micro_f1"], "objective": objective(result, metric),
            "result": _with_objective(result, metric)}


def dinkelbach(counts: list, const_fn: int) -> list:
    """Per group, the grid index maximising pooled F1 = 2TP / (2TP + FP + FN) over all groups; each
    group's pick is the middle of its plateau of equally good thresholds (as `tune` does)."""
    f, previous = 0.0, None
    while True:
        choice = []
        for c in counts:
            choice.append(middle_of_best(2 * c[:, 0] - f * (2 * c[:, 0] + c[:, 1] + c[:, 2])))
        tp, fp, fn = (sum(int(c[i, k]) for c, i in zip(counts, choice)) for k in range(3))
        denom = 2 * tp + fp + fn + const_fn
        f_new = 2 * tp / denom if denom else 0.0
        if f_new <= f + 1e-12:
            return choice if previous is None or f_new >= f else previous
        f, previous = f_new, choice


def middle_of_best(gain: np.ndarray) -> int:
    """The middle index of the plateau of `gain`'s maximum (the lower one of an even count)."""
    best = np.flatnonzero(gain >= gain.max() - 1e-9)
    return int(best[(len(best) - 1) // 2])


def tuned_on_dev(dev_records: list, dev_gold: dict) -> tuple:
    """A no-training answerer's two thresholds tuned on dev, as a model's are: (the post-processing config to apply to test,
    `tuning.tune`'s result with the dev micro-F1 at them)."""
    best = tune(dev_records, dev_gold, cfg=PostprocessConfig())
    return dataclasses.replace(PostprocessConfig(), **best["thresholds"]), best

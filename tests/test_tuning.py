"""Threshold tuning finds the grid's best pair (checked by brute force with the metric itself)."""

import itertools

import numpy as np
import pytest

from solution.metric import Gold, score
from solution.tuning import _grid, predictions_at, tune


def make(n=60, seed=0):
    rng = np.random.default_rng(seed)
    records, gold = [], {}
    for i in range(n):
        eid = str(i)
        s = float(rng.normal())
        ss = float(rng.normal())
        kind = rng.choice(["SHORT", "LONG", "YES"])
        raw_long, raw_short = "10:20", {"SHORT": "12:14", "LONG": "", "YES": "YES"}[kind]
        # Confident answers tend to be right; some gold is blank, some answers are wrong.
        right_long = s + 0.5 * rng.normal() > 0
        right_short = ss + 0.5 * rng.normal() > 0.3
        gold[eid] = Gold(frozenset({"10:20"} if right_long else ({"30:40"} if rng.random() < 0.5 else set())),
                         frozenset({raw_short} if (right_short and raw_short) else set()))
        records.append({"example_id": eid, "raw_long": raw_long, "raw_short": raw_short, "answer_type": kind,
                        "score": s, "short_score": ss})
    return records, gold


def test_tuned_thresholds_are_the_best_pair_on_the_grid():
    records, gold = make()
    best = tune(records, gold)
    brute = max(score(predictions_at(records, lt, st), gold)["micro_f1"]
                for lt, st in itertools.product(_grid(np.array([r["score"] for r in records]), 300),
                                                _grid(np.array([r["short_score"] for r in records]), 300)))
    assert best["micro_f1"] == pytest.approx(brute)
    untuned = score(predictions_at(records, 0.0, 0.0), gold)["micro_f1"]
    assert best["micro_f1"] >= untuned
    assert best["result"] == score(predictions_at(records, best["long_threshold"], best["short_threshold"]), gold)


def test_tuning_needs_scores_for_every_gold_example():
    records, gold = make(10)
    with pytest.raises(ValueError, match="have no scores"):
        tune(records[:5], gold)

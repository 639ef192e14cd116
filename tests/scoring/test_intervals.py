"""Bootstrap intervals over documents: the point figure is the metric's, the resampling is paired."""

import random

import pytest

from solution.scoring.intervals import f1_interval, paired_difference
from solution.scoring.metric import Gold, document_counts, score


def random_case(n: int, seed: int):
    rng = random.Random(seed)
    gold, pred = {}, {}
    for i in range(n):
        eid = str(i)
        gold[eid] = Gold(long={"1:5"} if rng.random() < 0.5 else set(), short={"2:3"} if rng.random() < 0.3 else set())
        pred[f"{eid}_long"] = rng.choice(["", "1:5", "6:9"])
        pred[f"{eid}_short"] = rng.choice(["", "2:3", "YES"])
    return gold, pred


def test_document_counts_add_up_to_the_metric_and_the_point_figure_is_its_f1():
    gold, pred = random_case(200, 0)
    counts = document_counts(pred, gold)
    whole = score(pred, gold)
    assert len(counts) == 200
    assert [sum(c[i] for c in counts) for i in range(3)] == [whole["tp"], whole["fp"], whole["fn"]]
    got = f1_interval(counts)
    assert got["f1"] == pytest.approx(whole["micro_f1"]) and got["num_documents"] == 200
    lo, hi = got["ci"]
    assert lo < got["f1"] < hi and hi - lo < 0.25


def test_more_documents_give_a_narrower_interval():
    widths = []
    for n in (50, 800):
        gold, pred = random_case(n, 1)
        lo, hi = f1_interval(document_counts(pred, gold))["ci"]
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 2


def test_a_paired_difference_cancels_what_the_documents_share():
    gold, pred = random_case(300, 2)
    a = document_counts(pred, gold)
    same = paired_difference(a, a)
    assert same["delta"] == 0.0 and same["ci"] == [0.0, 0.0]
    better = dict(pred)  # b answers one more document right than a, and is otherwise a
    eid = next(e for e, g in gold.items() if g.long and pred[f"{e}_long"] != "1:5")
    better[f"{eid}_long"] = "1:5"
    d = paired_difference(a, document_counts(better, gold))
    assert d["delta"] > 0 and d["ci"][0] >= 0.0
    unpaired = f1_interval(a)["ci"]
    assert d["ci"][1] - d["ci"][0] < (unpaired[1] - unpaired[0]) / 4


def test_a_difference_needs_the_same_documents():
    with pytest.raises(ValueError, match="same documents: 2 against 1"):
        paired_difference([(1, 0, 0), (0, 1, 0)], [(1, 0, 0)])

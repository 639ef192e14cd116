"""Threshold tuning finds the grid's best pair (checked by brute force with the metric itself)."""

import itertools

import numpy as np
import pytest

from solution.scoring.metric import Gold, score
from solution.scoring.tuning import objective, predictions_at, threshold_grid, tune


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
                for lt, st in itertools.product(threshold_grid(np.array([r["score"] for r in records]), 300),
                                                threshold_grid(np.array([r["short_score"] for r in records]), 300)))
    assert best["micro_f1"] == pytest.approx(brute)
    untuned = score(predictions_at(records, 0.0, 0.0), gold)["micro_f1"]
    assert best["micro_f1"] >= untuned
    assert best["result"] == score(predictions_at(records, best["long_threshold"], best["short_threshold"]), gold)


def test_tuning_needs_scores_for_every_gold_example():
    records, gold = make(10)
    with pytest.raises(ValueError, match="have no scores"):
        tune(records[:5], gold)


# ---------------------------------------------------------------------------
# Tuning for MLE-bench's grader (the share of right rows, right blanks included)


def _mlebench_at(records, gold, lt, st):
    return objective(score(predictions_at(records, lt, st), gold), "mlebench")


@pytest.mark.parametrize("seed", range(3))
def test_mlebench_tuning_is_the_best_pair_for_that_grader(seed):
    records, gold = make(80, seed)
    best = tune(records, gold, metric="mlebench")
    grids = [threshold_grid(np.array([r[k] for r in records]), 300) for k in ("score", "short_score")]
    brute = max(_mlebench_at(records, gold, lt, st) for lt, st in itertools.product(*grids))
    assert best["objective"] == pytest.approx(brute) == best["result"]["mlebench_score"]
    kaggle = tune(records, gold)
    assert best["objective"] >= _mlebench_at(records, gold, kaggle["long_threshold"], kaggle["short_threshold"])


def test_the_two_graders_want_different_thresholds():
    # Most documents unanswerable and the model's answers often wrong: Kaggle's F1 still gains from a
    # risky answer (a blank earns nothing there), MLE-bench's score gains from the right blank.
    records, gold = make(200, 1)
    gold = {k: (Gold(frozenset(), frozenset()) if i % 3 else g) for i, (k, g) in enumerate(gold.items())}
    kaggle, mle = tune(records, gold), tune(records, gold, metric="mlebench")
    at_kaggle = _mlebench_at(records, gold, kaggle["long_threshold"], kaggle["short_threshold"])
    assert mle["objective"] > at_kaggle
    assert mle["long_threshold"] > kaggle["long_threshold"]


def test_separate_thresholds_tuned_for_mlebench_beat_every_other_choice():
    from solution.answers.postprocess import PostprocessConfig
    from solution.scoring.tuning import predictions_with

    records, gold = make(60, 4)
    rng = np.random.default_rng(0)
    for r in records:
        r["yes_score"], r["no_score"] = float(rng.normal()), float(rng.normal())
    cfg = PostprocessConfig(separate_thresholds=True)
    best = tune(records, gold, cfg=cfg, metric="mlebench")
    names = ("long_threshold", "short_threshold", "yes_threshold", "no_threshold")
    keys = ("score", "short_score", "yes_score", "no_score")
    grids = [threshold_grid(np.array([r[k] for r in records]), 300) for k in keys]
    for _ in range(300):
        pick = PostprocessConfig(separate_thresholds=True, **{n: float(rng.choice(g)) for n, g in zip(names, grids)})
        assert objective(score(predictions_with(records, pick), gold), "mlebench") <= best["objective"] + 1e-12
    kaggle = tune(records, gold, cfg=cfg)
    at_kaggle = PostprocessConfig(separate_thresholds=True, **kaggle["thresholds"])
    assert objective(score(predictions_with(records, at_kaggle), gold), "mlebench") <= best["objective"]


def test_unknown_metric_is_refused():
    records, gold = make(5)
    with pytest.raises(ValueError, match="metric must be one of kaggle, mlebench"):
        tune(records, gold, metric="accuracy")


def test_tune_cli_for_mlebench_records_the_metric_and_matches_the_grader(tmp_path):
    """--tune --metric mlebench on a scores file: its score is MLE-bench's grade of the rows it implies,
    at least the grade of Kaggle-tuned rows, and the model directory says which metric it was tuned for."""
    import json
    import subprocess
    import sys

    from conftest import ROOT, nq_line, write_jsonl
    from helpers import settings_dir

    from solution.answers.postprocess import PostprocessConfig
    from solution.scoring import mlebench
    from solution.scoring.tuning import predictions_with

    records, gold = make(120, 2)
    doc = " ".join(f"w{i}" for i in range(60))
    cands = [{"start_token": s, "end_token": s + 10, "top_level": True} for s in range(0, 60, 10)]
    lines = []
    for r in records:  # make()'s gold as train-format lines (a short answer needs its long one, 10:20)
        g = gold[r["example_id"]]
        long = 1 if ("10:20" in g.long or g.short) else (3 if g.long else None)
        lines.append(nq_line(example_id=r["example_id"], document=doc, candidates=cands, long=long,
                             shorts=[(12, 14)] if "12:14" in g.short else [],
                             yes_no="YES" if "YES" in g.short else "NONE"))
    gold_path = write_jsonl(tmp_path / "dev.jsonl", lines)
    scores = tmp_path / "scores.jsonl"
    scores.write_text("".join(json.dumps(r) + "\n" for r in records))
    model = settings_dir(tmp_path / "model")
    answers = mlebench.read_answers(gold_path)
    graded = {}
    for metric in ("kaggle", "mlebench"):
        proc = subprocess.run([sys.executable, "-m", "solution.evaluate", "--tune", "--scores", str(scores),
                               "--gold", str(gold_path), "--model", str(model), "--metric", metric, "--json"],
                              cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        qa = json.loads((model / "qa_config.json").read_text())
        assert qa["tuned_thresholds"]["metric"] == metric == out["metric"]
        rows = predictions_with(records, PostprocessConfig(**qa["postprocess"]))
        graded[metric] = mlebench.score_predictions(rows, answers)["score"]
    assert out["after"]["mlebench_score"] == graded["mlebench"] >= graded["kaggle"]


def test_predict_says_which_metric_its_thresholds_were_tuned_for():
    from submission.predict import thresholds_note

    assert "tuned for mlebench (MLE-bench's grader)" in thresholds_note({"metric": "mlebench", "gold": "d", "documents": 3})
    assert "tuned for kaggle" in thresholds_note({"gold": "d", "documents": 3})  # recorded before the metric was
    assert "never tuned" in thresholds_note(None)
    assert thresholds_note({"metric": "mlebench"}, ["long_threshold=2"]) == "thresholds: from --set"

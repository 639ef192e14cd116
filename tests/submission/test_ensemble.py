"""Ensembles in the submission: averaged logits for models sharing windows, averaged document scores otherwise.

Two tiny random models (different seeds) predict six synthetic documents in-process; the checks are
bit-for-bit comparisons of the CSV and of --scores-out.
"""

import json
import shutil
import subprocess
import sys
from dataclasses import asdict

import numpy as np
import pytest
import torch
from conftest import ROOT, small_test_file

from solution.answers.ensemble import combine_scores, document_scores, parse_weights, weighted_runner
from solution.answers.postprocess import DocumentScores, PostprocessConfig, decide

TINY = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
WINDOW = {"max_seq_length": 128, "doc_stride": 32, "max_question_length": 24}


def make_model_dir(out, seed: int, window: dict = WINDOW):
    from solution.model.qa_model import build_model, load_tokenizer, save_model_dir
    from solution.training.config import TrainConfig

    cfg = TrainConfig(pretrained=False, model_config_overrides=TINY)
    torch.manual_seed(seed)
    model = build_model(cfg.model_name_or_path, False, cfg.backbone_overrides)
    return save_model_dir(out, model.state_dict(), model.config, load_tokenizer(cfg.model_name_or_path),
                          {"window": {**asdict(cfg.window), **window}, "postprocess": asdict(cfg.postprocess)})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return small_test_file(tmp_path_factory.mktemp("synth"), num_test=6)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    a, b = make_model_dir(root / "a", seed=1), make_model_dir(root / "b", seed=2)
    shutil.copytree(a, root / "a-copy")
    wide = make_model_dir(root / "a-wide", seed=1, window={"max_seq_length": 96, "doc_stride": 16})
    return {"a": str(a), "b": str(b), "a-copy": str(root / "a-copy"), "a-wide": str(wide)}


@pytest.fixture(scope="module")
def predict(corpus, tmp_path_factory):
    """predict(*model dirs, weights=None) -> (CSV text, --scores-out text), cached per call."""
    from submission import predict as cli

    out = tmp_path_factory.mktemp("pred")
    cache = {}

    def go(*dirs, weights=None):
        key = (dirs, weights)
        if key not in cache:
            name = f"p{len(cache)}"
            argv = [a for d in dirs for a in ("--model", d)] + ["--input", str(corpus), "--output",
                                                               str(out / f"{name}.csv"), "--scores-out",
                                                               str(out / f"{name}.jsonl"), "--quiet",
                                                               "--precision", "fp32"]
            if weights:
                argv += ["--weights", weights]
            assert cli.main(argv) == 0
            cache[key] = ((out / f"{name}.csv").read_text(), (out / f"{name}.jsonl").read_text(),
                          str(out / f"{name}.csv"))
        return cache[key]

    return go


def test_a_model_with_itself_and_weights_one_zero_are_that_model_exactly(models, predict):
    a, b = predict(models["a"])[:2], predict(models["b"])[:2]
    assert a != b  # different seeds: the exactness checks below can fail
    assert predict(models["a"], models["a"])[:2] == a
    assert predict(models["a"], models["a-copy"], models["a"])[:2] == a  # a copy counts as the same model
    assert predict(models["a"], models["b"], weights="1,0")[:2] == a
    assert predict(models["a"], models["b"], weights="0,1")[:2] == b
    assert predict(models["a-wide"], models["b"], weights="0,3")[:2] == b


def test_an_unweighted_pair_differs_from_both_and_is_a_valid_submission(models, predict, corpus):
    from solution.evaluate import main as evaluate

    csv_ab, scores_ab, path = predict(models["a"], models["b"])
    assert scores_ab != predict(models["a"])[1] and scores_ab != predict(models["b"])[1]
    assert evaluate(["--validate", path, "--test", str(corpus)]) == 0
    weighted = predict(models["a"], models["b"], weights="3,1")[1]
    assert weighted not in (scores_ab, predict(models["a"])[1])


def test_models_with_different_windows_average_their_document_scores(models, predict, corpus):
    from solution.evaluate import main as evaluate

    csv_mixed, scores_mixed, path = predict(models["a"], models["a-wide"])
    assert evaluate(["--validate", path, "--test", str(corpus)]) == 0
    assert scores_mixed not in (predict(models["a"])[1], predict(models["a-wide"])[1])


def test_bad_weights_are_a_clear_error(models, corpus, tmp_path, capsys):
    from submission import predict as cli

    for weights, message in (("1", "1 weights for 2 models"), ("1,x", "comma-separated numbers"),
                             ("0,0", "not all 0"), ("1,-1", ">= 0")):
        code = cli.main(["--model", models["a"], "--model", models["b"], "--weights", weights, "--input",
                         str(corpus), "--output", str(tmp_path / "x.csv"), "--quiet"])
        assert code == 2 and message in capsys.readouterr().err


def test_parse_weights_normalises():
    assert parse_weights(None, 4) == [0.25] * 4
    assert parse_weights("1,0", 2) == [1.0, 0.0]
    assert parse_weights("3,1", 2) == [0.75, 0.25]


def test_weighted_runner_is_the_weighted_mean_of_logits():
    rng = np.random.default_rng(0)
    outs = [tuple(rng.normal(size=(3, 8)).astype(np.float32) for _ in range(3)) for _ in range(2)]
    run = weighted_runner([lambda b, o=o: tuple(x.copy() for x in o) for o in outs], [0.75, 0.25])
    for got, x, y in zip(run(None), *outs):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, 0.75 * x + 0.25 * y, rtol=1e-6)
    same = weighted_runner([lambda b: outs[0], lambda b: outs[0]], [0.5, 0.5])
    for got, x in zip(same(None), outs[0]):
        assert np.array_equal(got, x)  # halves of the same logits add back exactly


def test_the_scores_adapter_answers_exactly_as_postprocessing(models, corpus):
    """decide(document_scores(...)) over one model's windows gives every field postprocess_document gives."""
    from solution.answers.inference import model_runner, predict_documents
    from solution.data.nq import read_examples
    from solution.model.qa_model import load_model_dir
    from solution.windows.featurizer import Featurizer, WindowConfig

    model, tokenizer, meta = load_model_dir(models["a"])
    featurizer, run = Featurizer(tokenizer, WindowConfig(**meta["window"])), model_runner(model)
    for cfg in (PostprocessConfig(), PostprocessConfig(long_threshold=-1e9, short_threshold=-1e9, top_k=5)):
        examples = list(read_examples(str(corpus)))
        plain = list(predict_documents(run, featurizer, examples, cfg))
        via_scores = list(predict_documents(run, featurizer, examples, cfg, answer=lambda ex, ws, lg, c: decide(
            document_scores(ex, ws, lg, c), c)))
        assert via_scores == plain
        assert any(p.raw_long for p in plain)


CANDS = np.array([[0, 10, 1, 1, 9], [2, 5, 0, 2, 4], [10, 20, 1, 11, 19]])


def scores(cand, spans, types=(0, 0, 0, 3, 1)):
    """DocumentScores with NaN for an unscored candidate, spans {(start, end): score} (any order)."""
    ranked = sorted(spans.items(), key=lambda kv: -kv[1])
    return DocumentScores("7", CANDS, np.nan_to_num(np.asarray(cand, dtype=float), nan=-np.inf),
                          np.array([k for k, _ in ranked], dtype=np.int64).reshape(-1, 2),
                          np.array([v for _, v in ranked]), np.asarray(types, dtype=np.float32))


def spans_of(s: DocumentScores) -> dict:
    return {(int(a), int(b)): float(x) for (a, b), x in zip(s.span_bounds, s.span_scores)}


def test_combined_scores_are_weighted_means_with_a_floor_for_what_a_model_did_not_score():
    x = scores([1.0, np.nan, 3.0], {(3, 4): 2.0, (12, 14): 5.0})
    y = scores([2.0, 4.0, np.nan], {(3, 4): 6.0}, types=(0, 0, 0, 1, 3))
    same = combine_scores([x, x], [0.5, 0.5])
    assert same.candidate_scores.tolist() == x.candidate_scores.tolist() and spans_of(same) == spans_of(x)
    assert same.span_bounds.tolist() == x.span_bounds.tolist()  # still best first
    both = combine_scores([x, y], [0.75, 0.25])
    # candidate 1: x scored none of it -> x's lowest candidate score (1.0); candidate 2: y's lowest (2.0)
    assert both.candidate_scores.tolist() == [1.25, 0.75 * 1.0 + 0.25 * 4.0, 0.75 * 3.0 + 0.25 * 2.0]
    assert spans_of(both) == {(3, 4): 3.0, (12, 14): 0.75 * 5.0 + 0.25 * 6.0}
    assert list(both.span_scores) == sorted(both.span_scores, reverse=True)
    assert both.type_scores.tolist() == [0, 0, 0, 2.5, 1.5]
    nothing = DocumentScores("7", CANDS, np.full(3, -np.inf), np.zeros((0, 2), np.int64), np.zeros(0),
                             np.zeros(5), empty=True)
    assert spans_of(combine_scores([x, nothing], [0.5, 0.5])) == spans_of(x)  # a model without windows has no say
    with pytest.raises(ValueError, match="different candidate lists"):
        combine_scores([x, DocumentScores("7", CANDS[:2], np.zeros(2), np.zeros((0, 2), np.int64), np.zeros(0),
                                          np.zeros(5))], [1, 1])


def test_combined_scores_go_through_post_processings_own_decision():
    """The ensemble's answers come from postprocess.decide, so its thresholds apply to averaged scores
    as to one model's (settings that act while scoring, such as top_level_only, act in each group's
    own score_document)."""
    x = scores([1.0, 2.0, 3.0], {(3, 4): 5.0}, types=(0, 0, 0, 1, 3))
    y = scores([1.0, 9.0, 3.0], {(3, 4): 5.0}, types=(0, 0, 0, 1, 3))
    both = combine_scores([x, y], [0.5, 0.5])
    assert decide(both, PostprocessConfig()).long == "2:5"  # the nested candidate 1 wins on average
    assert decide(both, PostprocessConfig(long_threshold=6.0)).long == ""  # 5.5 is below it


@pytest.mark.slow  # the kernel's run.py in a process of its own, twice
def test_kaggle_kernel_runs_an_ensemble_offline(models, predict, corpus, tmp_path):
    """An ensemble kernel, run from another directory with accelerate, deepspeed and datasets
    unimportable: the same rows as submission.predict with the same models and weights, and the
    projection for the whole ensemble."""
    import json
    import os

    kernel = tmp_path / "kernel"
    proc = subprocess.run([sys.executable, "scripts/make_kaggle_kernel.py", "--model", models["a"], "--model",
                           models["b"], "--model", models["a"], "--weights", "1,2,1", "--out", str(kernel)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((kernel / "MANIFEST.json").read_text())
    assert manifest["models"] == ["model-1", "model-2", "model-1"] and not (kernel / "model-3").exists()
    out = tmp_path / "submission.csv"
    code = ("import sys, runpy\n"
            "for name in ('accelerate', 'deepspeed', 'datasets'):\n    sys.modules[name] = None\n"
            "kernel = sys.argv[1]\n"
            "sys.argv = [kernel + '/run.py', '--input', sys.argv[2], '--output', sys.argv[3], '--precision', 'fp32']\n"
            "try:\n    runpy.run_path(kernel + '/run.py', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "assert sys.modules['solution.answers.ensemble'].__file__.startswith(kernel), 'used code outside the kernel'\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code, str(kernel), str(corpus), str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "per 1,000 real-length documents at these windows for the ensemble of 2 models" in proc.stdout
    assert "model-2 (weight 0.500)" in proc.stdout
    assert out.read_text() == predict(models["a"], models["b"])[0]  # 1,2,1 over a, b, a is 1,1 over a, b


def test_kaggle_kernel_refuses_bad_weights(models, tmp_path):
    proc = subprocess.run([sys.executable, "scripts/make_kaggle_kernel.py", "--model", models["a"], "--model",
                           models["b"], "--weights", "1", "--out", str(tmp_path / "k")], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "error: --weights '1': 1 weights for 2 models" in proc.stderr
    assert not (tmp_path / "k").exists()


def test_models_with_different_windows_fuse_the_sentence_match_after_averaging(models, corpus, tmp_path, monkeypatch):
    """The averaged document scores get the sentence match once (the first group's encoder), then `decide`."""
    from solution.model import sentences
    from submission import predict as cli

    built = []

    class Encoder:  # every text along the question: each matched candidate's cosine is 1
        def __init__(self, name, device="cpu"):
            built.append(name)

        def embed(self, texts):
            return np.tile(np.array([[1.0, 0.0]], np.float32), (len(texts), 1))

    monkeypatch.setattr(sentences, "shared_encoder", Encoder)
    scores = {}
    for weight in ("0", "2"):
        out = tmp_path / f"w{weight}"
        argv = ["--model", models["a"], "--model", models["a-wide"], "--input", str(corpus), "--output",
                str(out.with_suffix(".csv")), "--scores-out", str(out.with_suffix(".jsonl")), "--quiet",
                "--precision", "fp32", "--set", f"sentence_weight={weight}"]
        assert cli.main(argv) == 0
        scores[weight] = [json.loads(line) for line in out.with_suffix(".jsonl").read_text().splitlines()]
    assert len(built) == 2  # one encoder a group's featurizer (the shared one in production), none at weight 0
    # Each matched candidate and span scores 2 more; what was not matched (a span outside every candidate) drops.
    raised = [on["score"] - off["score"] for off, on in zip(scores["0"], scores["2"]) if off["raw_long"]]
    assert raised and max(raised) <= 2.0 + 1e-5
    assert sum(abs(r - 2.0) < 1e-5 for r in raised) >= len(raised) // 2

"""solution.model.loading: the one path from model directories to a file's predictions.

submission.predict's CSV and the library's rows are the same bytes; the answers benchmark's way (each
model loaded once, its logits kept, several averaged with equal weights) gives the rows its own former
code gave; the logit cache returns the plain runner's logits.
"""

import csv
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT, small_test_file
from helpers import ANSWER_ALL, write_model_dir

WINDOW_SETS = ["max_windows_per_document=2", "first_pass=stems"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return small_test_file(tmp_path_factory.mktemp("synth"), num_test=5)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return [str(write_model_dir(root / name, seed=seed, postprocess=ANSWER_ALL)) for name, seed in (("a", 1), ("b", 2))]


def csv_text(rows) -> str:
    """A submission CSV's text, as submission.predict writes it."""
    f = io.StringIO(newline="")
    writer = csv.writer(f)
    writer.writerow(["example_id", "PredictionString"])
    writer.writerows(rows)
    return f.getvalue()


@pytest.mark.parametrize("sets", [[], WINDOW_SETS], ids=["plain", "window-sets"])
def test_submission_predict_writes_the_rows_of_the_library_path(models, corpus, tmp_path, sets):
    from solution.answers.inference import split_overrides, submission_rows
    from solution.model.loading import load_ensemble, predict_input
    from submission import predict

    out = tmp_path / "submission.csv"
    argv = ["--input", str(corpus), "--output", str(out), "--quiet", "--precision", "fp32", "--device", "cpu"]
    for m in models:
        argv += ["--model", m]
    for s in sets:
        argv += ["--set", s]
    assert predict.main(argv) == 0
    ensemble = load_ensemble(models, None, "cpu", "fp32")
    window_sets, _ = split_overrides(sets)
    preds = list(predict_input(ensemble, str(corpus), None, window_sets))
    assert any(p.long for p in preds)  # answers, not blanks: the comparison sees the logits
    assert out.read_bytes() == csv_text(submission_rows(preds)).encode()


def test_the_benchmarks_cached_ensemble_gives_the_rows_of_its_former_code(models, corpus):
    """The answers benchmark's former CachedRunner + predict, inlined: models cast as precision auto picks,
    cached runners averaged with equal weights, the first model's windows with the window --set items."""
    from solution.answers.ensemble import weighted_runner
    from solution.answers.inference import LogitCache, model_runner, predict_documents, with_overrides
    from solution.answers.postprocess import PostprocessConfig, score_record
    from solution.common.precision import resolve_precision
    from solution.data.nq import read_examples
    from solution.model.loading import load_ensemble, load_model, predict_input
    from solution.model.qa_model import load_model_dir
    from solution.model.sentences import first_pass_embed
    from solution.windows.featurizer import Featurizer, WindowConfig

    loaded = []
    for m in models:
        model, tokenizer, meta = load_model_dir(m)
        if resolve_precision("auto", "cpu") == "bf16":
            model = model.to(torch.bfloat16)
        loaded.append((LogitCache(model_runner(model, "cpu")), tokenizer, meta))
    averaged, windows_before = weighted_runner([r for r, _, _ in loaded], [1.0 / len(loaded)] * len(loaded)), [0]

    def counted(batch):
        windows_before[0] += len(batch["input_ids"])
        return averaged(batch)

    window, cfg = with_overrides(WindowConfig(**loaded[0][2]["window"]), PostprocessConfig(**loaded[0][2]["postprocess"]),
                                 WINDOW_SETS)
    before = [score_record(p) for p in predict_documents(
        counted, Featurizer(loaded[0][1], window, embed=first_pass_embed(window)), read_examples(str(corpus)), cfg)]

    cached = [load_model(m, "cpu", "auto", cache_logits=True) for m in models]
    for attempt in range(2):  # the second time from the cache alone
        seen = {}
        preds = predict_input(load_ensemble(cached), str(corpus), cfg, WINDOW_SETS,
                              progress=lambda docs, windows: seen.update(windows=windows))
        assert [score_record(p) for p in preds] == before, attempt
        assert seen["windows"] == windows_before[0]  # every window handed to the runner, cached or not


def test_the_logit_cache_returns_the_plain_runners_logits_and_runs_each_window_once(models, corpus):
    from solution.answers.inference import LogitCache, collate, model_runner
    from solution.data.nq import read_examples
    from solution.model.loading import load_model
    from solution.windows.featurizer import Featurizer

    model = load_model(models[0])
    stream = Featurizer(model.tokenizer, model.window).featurize(read_examples(str(corpus)), with_labels=False)
    windows = [w for _, ws in stream for w in ws][:6]
    assert len(windows) == 6
    plain = model_runner(model.model, "cpu")
    ran = []

    def counting(batch):
        ran.append(len(batch["input_ids"]))
        return plain(batch)

    cache = LogitCache(counting)
    first = collate(windows[:4])
    lengths = first["attention_mask"].sum(1).tolist()
    (s, e, t), (ps, pe, pt) = cache(first), plain(first)
    for i, n in enumerate(lengths):  # a first pass runs the batch whole: the very same logits
        assert np.array_equal(s[i, :n], ps[i, :n]) and np.array_equal(e[i, :n], pe[i, :n])
    assert np.array_equal(t, pt)
    mixed = collate([windows[5], windows[1], windows[4], windows[0]])  # two seen, two new
    s, e, t = cache(mixed)
    ps, pe, pt = plain(mixed)
    lengths = mixed["attention_mask"].sum(1).tolist()
    for i, n in enumerate(lengths):
        np.testing.assert_allclose(s[i, :n], ps[i, :n], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(e[i, :n], pe[i, :n], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(t, pt, rtol=1e-4, atol=1e-4)
    assert ran == [4, 2]  # the mixed batch ran its two new windows only
    cache(collate([windows[0], windows[5]]))
    assert ran == [4, 2]  # all seen: nothing runs


def test_the_hard_negative_pass_loads_through_the_library_without_submission(models, corpus, tmp_path):
    """It took resolve_precision from submission.predict, which turns the hub off for the whole process."""
    train = corpus.parent / "simplified-nq-train.jsonl"
    code = ("import json, os, sys\n"
            "from solution import hard_negatives\n"
            "hard_negatives.score_file(sys.argv[1], sys.argv[2], sys.argv[3], precision='auto', quiet=True)\n"
            "print(json.dumps(['submission' in sys.modules, os.environ.get('HF_HUB_OFFLINE')]))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    proc = subprocess.run([sys.executable, "-c", code, models[0], str(train), str(tmp_path / "hard.jsonl")],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == [False, None]
    header = json.loads((tmp_path / "hard.jsonl").read_text().splitlines()[0])
    assert header["model_sha256"] and header["precision"] in ("fp32", "bf16")

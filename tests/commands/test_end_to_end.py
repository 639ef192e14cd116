"""The whole path through the real command lines: synth -> train (tiny BERT) -> predict -> evaluate."""

import csv
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, real_nq

from solution.scoring.metric import load_gold

pytestmark = pytest.mark.slow  # full trainings and multi-process launches: make test, not make test-fast


def run(*args, check=True):
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    run("-m", "solution.synth", "--out", str(out), "--num-train", "40", "--num-dev", "8", "--num-test", "8",
        "--min-words", "200", "--max-words", "600", "--seed", "3")
    return out


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    run("-m", "solution.train", "--config", "configs/train/tiny.yaml", "--train_file",
        str(corpus / "simplified-nq-train.jsonl"), "--dev_file", str(corpus / "simplified-nq-dev.jsonl"),
        "--output_dir", str(out), "--cache_dir", str(out / "cache"), "--max_steps", "6", "--disable_tqdm", "true")
    return out


def test_training_writes_metrics_config_and_model_dir(trained):
    records = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    start = records[0]
    assert start["event"] == "start" and start["engine"] == "QAModel" and start["world_size"] == 1
    assert start["global_batch_size"] == 4 and start["num_optimizer_steps"] == 6
    assert start["train_data"]["documents"] == 40 and start["train_data"]["skipped"] == 0
    steps = [r for r in records if "loss" in r and "event" not in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5, 6]
    assert all(r["loss"] > 0 and r["grad_norm"] > 0 and "lr" in r and r["samples_per_s"] > 0 for r in steps)
    evals = [r for r in records if r.get("event") == "eval"]
    assert evals and {"micro_f1", "tp", "fp", "fn", "long", "short"} <= set(evals[0])
    assert records[-1]["event"] == "end"
    model = trained / "model"
    for name in ("model.safetensors", "config.json", "qa_config.json", "tokenizer.json"):
        assert (model / name).is_file(), name
    qa = json.loads((model / "qa_config.json").read_text())
    assert qa["window"]["max_seq_length"] == 128 and "long_threshold" in qa["postprocess"]
    assert (trained / "config.yaml").is_file()


def test_second_run_reuses_the_feature_cache(corpus, trained, tmp_path):
    proc = run("-m", "solution.train", "--config", "configs/train/tiny.yaml", "--train_file",
               str(corpus / "simplified-nq-train.jsonl"), "--dev_file", "null", "--output_dir", str(tmp_path),
               "--cache_dir", str(trained / "cache"), "--max_steps", "1", "--disable_tqdm", "true")
    assert "reusing cache" in proc.stdout


def test_predict_and_evaluate(corpus, trained, tmp_path):
    sub = tmp_path / "submission.csv"
    test_file = corpus / "simplified-nq-test.jsonl"
    run("-m", "submission.predict", "--model", str(trained / "model"), "--input", str(test_file),
        "--output", str(sub), "--quiet")
    rows = list(csv.reader(sub.open()))
    assert rows[0] == ["example_id", "PredictionString"]
    gold = load_gold(corpus / "simplified-nq-test-gold.jsonl")
    assert [r[0] for r in rows[1:]] == [f"{i}_{kind}" for i in gold for kind in ("long", "short")]
    for row_id, pred in rows[1:]:
        assert pred == "" or pred in ("YES", "NO") and row_id.endswith("_short") or ":" in pred
    proc = run("-m", "solution.evaluate", "--submission", str(sub), "--gold",
               str(corpus / "simplified-nq-test-gold.jsonl"), "--json")
    result = json.loads(proc.stdout)
    assert {"micro_f1", "precision", "recall", "tp", "fp", "fn", "long", "short"} <= set(result)


def test_predict_runs_without_accelerate_deepspeed_datasets_or_network(trained, corpus, tmp_path):
    """Kaggle kernels have no custom packages and no internet: predict must work where these cannot
    be imported and every socket connection fails.

    A None entry in sys.modules makes both `import x` and importlib's find_spec report x as
    absent, as on a machine without it (transformers then skips its optional integrations).
    """
    code = ("import sys, runpy, socket\n"
            "for name in ('accelerate', 'deepspeed', 'datasets'):\n    sys.modules[name] = None\n"
            # Any attempt to reach the network fails loudly (a Kaggle kernel has internet off).
            "def blocked(*args, **kwargs):\n    raise OSError('network blocked by the test')\n"
            "socket.socket.connect = socket.socket.connect_ex = blocked\n"
            "socket.create_connection = socket.getaddrinfo = blocked\n"
            "sys.argv = ['predict', '--model', sys.argv[1], '--input', sys.argv[2], '--output', sys.argv[3], '--quiet']\n"
            "try:\n    runpy.run_module('submission.predict', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n")
    run("-c", code, str(trained / "model"), str(corpus / "simplified-nq-test.jsonl"), str(tmp_path / "s.csv"))
    assert len((tmp_path / "s.csv").read_text().splitlines()) == 1 + 2 * 8


def test_dummy_source_trains_without_files(tmp_path):
    run("-m", "solution.train", "--config", "configs/train/tiny.yaml", "--data_source", "dummy",
        "--dummy_num_windows", "8", "--max_steps", "2", "--output_dir", str(tmp_path), "--disable_tqdm", "true")
    start = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert start["train_windows"] == 8 and start["train_data"] == {"source": "dummy"}


def test_cli_errors_are_clear(corpus, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("learnin_rate: 1\n")
    proc = run("-m", "solution.train", "--config", str(bad), check=False)
    assert proc.returncode == 2 and "unknown config key 'learnin_rate'" in proc.stderr
    assert "Traceback" not in proc.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text((corpus / "simplified-nq-test.jsonl").read_text().splitlines()[0] + "\n{oops\n")
    proc = run("-m", "submission.predict", "--model", str(tmp_path / "nope"), "--input", str(broken), check=False)
    assert proc.returncode == 2 and "not a model directory" in proc.stderr


def test_prepare_recovers_every_short_answer_on_real_nq():
    """Goal: >= 99.5% of gold short answers come back exactly from window labels (512/128 windows)."""
    proc = run("-m", "solution.prepare", "--input", str(real_nq("simplified-nq-train-sample.jsonl")),
               "--output", str(ROOT / "cache" / "test-prepare"), "--json")
    summary = json.loads(proc.stdout)
    assert summary["documents"] == 49
    assert summary["answerable_short"] == 28
    assert summary["recovered_short"] / summary["answerable_short"] >= 0.995
    # Long answers: those longer than a window cannot be labelled (BERT-joint's limit), and a
    # nested gold candidate loses to its top-level parent; the rest come back.
    assert summary["recovered_long"] >= 30 and summary["answerable_long"] == 37


def test_submission_is_always_whole(corpus, trained, tmp_path, monkeypatch):
    """Bad lines and a document that fails inside featurisation still get their two rows, blank;
    each is reported with its id and the exit code says something failed. Nothing is missing."""
    import submission.predict as predict
    from solution.windows.featurizer import Featurizer

    good = (corpus / "simplified-nq-test.jsonl").read_text().splitlines()
    ids = [json.loads(line)["example_id"] for line in good]
    bad = tmp_path / "test.jsonl"
    with bad.open("wb") as f:
        f.write((good[0] + "\n").encode())
        f.write(b'{"example_id": "-123456789", "question_text": "broken json\n')  # malformed, id readable
        f.write((good[1] + "\n").encode())
        f.write(b'{"example_id": "987654321", "question_text": "caf\xe9", "document_text": "x"}\n')  # not UTF-8
        f.write(b'{"no id here": 1}\n')  # nothing to recover: reported, cannot be written
        for line in good[2:4]:
            f.write((line + "\n").encode())
    original = Featurizer.windows

    def failing(self, example, *args, **kwargs):
        if example.example_id == ids[2]:
            raise RuntimeError("tokenizer exploded")
        return original(self, example, *args, **kwargs)

    monkeypatch.setattr(Featurizer, "windows", failing)
    out = tmp_path / "submission.csv"
    code = predict.main(["--model", str(trained / "model"), "--input", str(bad), "--output", str(out), "--quiet"])
    assert code == 1
    rows = dict(list(csv.reader(out.open()))[1:])
    expected = set(ids[:4]) | {"-123456789", "987654321"}
    assert set(rows) == {f"{i}_{kind}" for i in expected for kind in ("long", "short")}
    for blank in (ids[2], "-123456789", "987654321"):
        assert rows[f"{blank}_long"] == rows[f"{blank}_short"] == ""
    only_good = tmp_path / "good.jsonl"
    only_good.write_text("\n".join(good[:4]) + "\n")
    with pytest.raises(ValueError, match=f"example_id {ids[2]}: RuntimeError: tokenizer exploded"):
        predict.predict_file(str(trained / "model"), str(only_good), str(tmp_path / "r.csv"), on_error="raise",
                             quiet=True)


def test_tune_thresholds_and_predict_with_them(corpus, trained, tmp_path):
    """predict --scores-out on dev, evaluate --tune writes thresholds into a copy of the model
    directory, predict reads them back: its dev F1 is the tuned F1, and never below the untuned one."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(trained / "model", model)
    dev, gold = corpus / "simplified-nq-dev.jsonl", corpus / "simplified-nq-dev.jsonl"
    run("-m", "submission.predict", "--model", str(model), "--input", str(dev), "--output", str(tmp_path / "a.csv"),
        "--scores-out", str(tmp_path / "scores.jsonl"), "--quiet")
    proc = run("-m", "solution.evaluate", "--tune", "--scores", str(tmp_path / "scores.jsonl"), "--gold", str(gold),
               "--model", str(model), "--json")
    tuned = json.loads(proc.stdout)
    assert tuned["after"]["micro_f1"] >= tuned["before"]["micro_f1"]
    qa = json.loads((model / "qa_config.json").read_text())
    assert qa["postprocess"]["long_threshold"] == tuned["long_threshold"] and "tuned_thresholds" in qa
    run("-m", "submission.predict", "--model", str(model), "--input", str(dev), "--output", str(tmp_path / "b.csv"),
        "--quiet")
    rescored = json.loads(run("-m", "solution.evaluate", "--submission", str(tmp_path / "b.csv"), "--gold",
                              str(gold), "--json").stdout)
    assert rescored["micro_f1"] == pytest.approx(tuned["after"]["micro_f1"])


def test_kaggle_kernel_folder_runs_offline_on_its_own_code(trained, corpus, tmp_path):
    """The kernel folder's dry run: from another directory, with accelerate, deepspeed and datasets
    unimportable and the network blocked, run.py writes a submission the validator accepts, using
    the code and model inside the folder."""
    kernel = tmp_path / "kernel"
    run("scripts/make_kaggle_kernel.py", "--model", str(trained / "model"), "--out", str(kernel))
    out = tmp_path / "submission.csv"
    code = ("import sys, runpy, socket\n"
            "for name in ('accelerate', 'deepspeed', 'datasets'):\n    sys.modules[name] = None\n"
            "def blocked(*args, **kwargs):\n    raise OSError('network blocked by the test')\n"
            "socket.socket.connect = socket.socket.connect_ex = blocked\n"
            "socket.create_connection = socket.getaddrinfo = blocked\n"
            "kernel = sys.argv[1]\n"
            "sys.argv = [kernel + '/run.py', '--input', sys.argv[2], '--output', sys.argv[3]]\n"
            "try:\n    runpy.run_path(kernel + '/run.py', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "assert sys.modules['solution.answers.inference'].__file__.startswith(kernel), 'used code outside the kernel'\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code, str(kernel), str(corpus / "simplified-nq-test.jsonl"), str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "windows/s" in proc.stdout and "per 1,000 real-length documents" in proc.stdout
    check = run("-m", "solution.evaluate", "--validate", str(out), "--test", str(corpus / "simplified-nq-test.jsonl"))
    assert "valid submission" in check.stdout

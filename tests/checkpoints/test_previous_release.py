"""What the release before the stage folders wrote still loads: its checkpoint resumes bitwise and its model
directory predicts, with today's code.

The previous release is rebuilt from git (`git archive` of the commit before the move), trains the tiny BERT
for 4 steps with a checkpoint at 2, and today's code resumes from that checkpoint and predicts with that model
directory, and `evaluate --tune` tunes that directory's thresholds (the file keeps its layout, so the previous
release still predicts with it). Nothing a checkpoint or a model directory holds names a module of the package (JSON, safetensors,
torch's tensors and numpy's RNG state only), and this test keeps it so.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from conftest import ROOT, small_test_file
from safetensors.torch import load_file

pytestmark = pytest.mark.slow  # two trainings and a predict: make test, not make test-fast

PREVIOUS_RELEASE = "ae08be9"  # the last commit with the flat solution/ (34 modules in one folder)
RUN = ["-m", "solution.train", "--config", "configs/train/tiny.yaml", "--data_source", "dummy",
       "--dummy_num_windows", "16", "--per_device_train_batch_size", "8", "--optim", "adamw_torch",
       "--learning_rate", "0.01", "--dropout", "0.1", "--logging_steps", "1", "--eval_strategy", "no",
       "--disable_tqdm", "true", "--lr_scheduler_type", "constant", "--max_steps", "4", "--save_steps", "2"]


def previous_release(into: Path) -> Path:
    """The previous release's code (solution/, submission/, configs/) in `into`; skips where git lacks it."""
    proc = subprocess.run(["git", "archive", "--format=tar", PREVIOUS_RELEASE, "solution", "submission", "configs"],
                          cwd=ROOT, capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"git cannot give {PREVIOUS_RELEASE} here: {proc.stderr.decode()[:200]}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(into, filter="data")
    assert (into / "solution" / "checkpoint.py").is_file() and not (into / "solution" / "checkpoints").exists()
    return into


def train(code: Path, out: Path, *extra) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *RUN, "--output_dir", str(out), *extra], cwd=code, env=env,
                          capture_output=True, text=True, timeout=300)


def losses(out: Path) -> dict:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r and "event" not in r}


def run(code: Path, *args) -> subprocess.CompletedProcess:
    """A command of the code in `code` (this checkout's, or the previous release's)."""
    return subprocess.run([sys.executable, "-m", *map(str, args)], cwd=code, env={**os.environ, "PYTHONPATH": str(code)},
                          capture_output=True, text=True, timeout=300)


def tune_then_predict_with_both(old_code: Path, model: Path, corpus: Path) -> None:
    """Today's `evaluate --tune` on the previous release's model directory (it wrote settings where they have since
    moved from: window.max_windows_per_document under postprocess), then both releases predict with the result."""
    dev, scores = corpus / "simplified-nq-dev.jsonl", corpus / "dev-scores.jsonl"
    proc = run(ROOT, "submission.predict", "--model", model, "--input", dev, "--output", corpus / "dev.csv",
               "--scores-out", scores, "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "max_windows_per_document" in json.loads((model / "qa_config.json").read_text())["postprocess"]
    proc = run(ROOT, "solution.evaluate", "--tune", "--scores", scores, "--gold", dev, "--model", model)
    assert proc.returncode == 0, proc.stderr[-3000:]
    qa = json.loads((model / "qa_config.json").read_text())
    assert qa["tuned_thresholds"]["metric"] == "kaggle" and "max_windows_per_document" in qa["postprocess"]
    for code in (ROOT, old_code):
        proc = run(code, "submission.predict", "--model", model, "--input", dev, "--output", corpus / f"{code.name}.csv")
        assert proc.returncode == 0 and "thresholds: tuned for kaggle" in proc.stderr + proc.stdout, proc.stderr[-3000:]


def test_a_checkpoint_and_a_model_directory_of_the_previous_release_resume_and_predict(tmp_path):
    old_code = previous_release(tmp_path / "release")
    old = tmp_path / "old-run"
    proc = train(old_code, old)
    assert proc.returncode == 0, proc.stderr[-3000:]

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    os.symlink(old / "checkpoint-2", resumed / "checkpoint-2", target_is_directory=True)
    proc = train(ROOT, resumed, "--resume", str(old / "checkpoint-2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "older version" not in proc.stderr  # the previous release wrote the current checkpoint format
    assert {s: v for s, v in losses(resumed).items() if s > 2} == {s: v for s, v in losses(old).items() if s > 2}
    mine = load_file(str(resumed / "model" / "model.safetensors"))
    for name, weight in load_file(str(old / "model" / "model.safetensors")).items():
        assert torch.equal(mine[name], weight), name

    test_file = small_test_file(tmp_path / "corpus", 3)
    out = tmp_path / "submission.csv"
    proc = subprocess.run([sys.executable, "-m", "submission.predict", "--model", str(old / "model"), "--input",
                           str(test_file), "--output", str(out), "--quiet"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = out.read_text().splitlines()
    assert rows[0] == "example_id,PredictionString" and len(rows) == 1 + 2 * 3

    tune_then_predict_with_both(old_code, old / "model", test_file.parent)

"""Resuming exactly, and runs that stop cleanly: one process, the tiny BERT on dummy windows.

An epoch here is 2 optimizer steps (16 windows, batch 8), so checkpoint-5 is one step into the third
epoch; dropout 0.1 makes every forward draw from the RNG that a checkpoint must restore.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from helpers import RESUME_RUN, TRAIN_ENV, error_lines, steps, train
from safetensors.torch import load_file

pytestmark = pytest.mark.slow  # full trainings and multi-process launches: make test, not make test-fast

CONSTANT = ("--lr_scheduler_type", "constant")  # its rates do not depend on max_steps, which a resume then may change


def test_resume_in_the_third_epoch_with_dropout_is_bitwise(tmp_path):
    whole = train(tmp_path / "whole", "--max_steps", "8", "--save_steps", "5")
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "resumed"
    out.mkdir()
    shutil.copytree(tmp_path / "whole" / "checkpoint-5", out / "checkpoint-5")
    resumed = train(out, "--max_steps", "8", "--save_steps", "5", "--resume", str(out / "checkpoint-5"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "step 5, epoch 2, 1 batches into it" in resumed.stdout  # one batch into the third epoch
    ref, got = steps(tmp_path / "whole"), steps(out)
    assert sorted(got) == [6, 7, 8]
    for step in (6, 7, 8):
        assert got[step]["loss"] == ref[step]["loss"], (step, got[step]["loss"], ref[step]["loss"])
    weights = load_file(str(out / "model" / "model.safetensors"))
    for name, w in load_file(str(tmp_path / "whole" / "model" / "model.safetensors")).items():
        assert torch.equal(weights[name], w), name


def test_a_checkpoint_without_its_rng_state_is_refused(tmp_path):
    assert train(tmp_path, "--max_steps", "2", "--save_steps", "1", *CONSTANT).returncode == 0
    (tmp_path / "checkpoint-2" / "random_states_0.pkl").unlink()
    (tmp_path / "checkpoint-2" / "manifest.json").unlink()  # as an older version wrote it: the manifest would name it
    # By its path: latest would pass it over (checkpoint-1 has a manifest, so this one lost its own).
    proc = train(tmp_path, "--max_steps", "4", "--save_steps", "1", "--resume", str(tmp_path / "checkpoint-2"),
                 *CONSTANT)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_lines(proc) == [x for x in proc.stderr.splitlines() if "random_states_0.pkl: missing" in x]
    assert len(error_lines(proc)) == 1 and str(tmp_path / "checkpoint-2") in error_lines(proc)[0]


def test_non_finite_settings_are_refused_naming_them(tmp_path, capsys):
    from solution.train import main

    yaml_config = tmp_path / "inf.yaml"
    tiny = (ROOT / "configs/train/tiny.yaml").read_text()
    yaml_config.write_text(tiny.replace("learning_rate: 1.0e-3", "learning_rate: .inf"))
    for key, argv in (("learning_rate", ["--config", str(yaml_config)]),
                      ("learning_rate", ["--config", "configs/train/tiny.yaml", "--learning_rate", "inf"]),
                      ("postprocess.long_threshold", ["--config", "configs/train/tiny.yaml", "--long_threshold", "nan"]),
                      ("adam_epsilon", ["--config", "configs/train/tiny.yaml", "--adam_epsilon", "-inf"])):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and f"{key} must be a finite number" in err, err


def test_a_diverging_run_stops_naming_the_step_and_writes_no_model(tmp_path):
    proc = train(tmp_path, "--learning_rate", "1e12", "--max_grad_norm", "0", "--max_steps", "8",
                 "--save_steps", "1", "--dropout", "0")
    assert proc.returncode == 1, proc.stderr[-3000:]
    [line] = error_lines(proc)
    assert line.startswith("error: training diverged at step "), line
    step = int(line.split("at step ")[1].split(":")[0])
    assert step >= 2 and f"the last good checkpoint is {tmp_path / f'checkpoint-{step - 1}'} (latest)" in line
    assert (tmp_path / "latest").read_text().strip() == f"checkpoint-{step - 1}"
    assert not (tmp_path / f"checkpoint-{step}").exists() and not (tmp_path / "model").exists()


def test_steps_the_fp16_loss_scaler_skips_are_not_divergence(tmp_path):
    """Under fp16 the loss scaler starts high and skips the first steps whose gradients overflow (grad_norm
    inf, weights unchanged): the H100's first fp16 run stopped there as diverged. A scaler that keeps
    skipping is divergence, named as such."""
    proc = train(tmp_path / "a", "--max_steps", "6", "--logging_steps", "1", entry=("tests/faulty_train.py",
                                                                                  "overflow-steps-3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "grad_norm" in r]
    assert [r["grad_norm"] for r in steps[:3]] == [float("inf")] * 3 and math.isfinite(steps[3]["grad_norm"])
    assert [r.get("skipped_steps") for r in steps] == [1, 2, 3, 3, 3, 3]
    assert (tmp_path / "a" / "model").is_dir()

    proc = train(tmp_path / "b", "--max_steps", "30", entry=("tests/faulty_train.py", "overflow-steps-100"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    [line] = error_lines(proc)
    assert line.startswith("error: training diverged at step 20: the fp16 loss scaler skipped 20 steps in a row"), line
    assert not (tmp_path / "b" / "model").exists()


def test_a_real_loss_scaler_skipping_a_fused_adamws_step_is_told_apart_from_divergence(tmp_path):
    """A real GradScaler (tests/faulty_train.py grad-scaler-127: a scale so high that step 9's gradients
    overflow) with a fused AdamW, which takes the overflow flag itself: Accelerate's step_was_skipped says
    False there, and the H100's fp16 run stopped as diverged. The scale the scaler halves tells the skip."""
    proc = train(tmp_path, "--max_steps", "12", "--optim", "adamw_torch_fused", "--weight_decay", "0.01",
                 entry=("tests/faulty_train.py", "grad-scaler-127"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "grad_norm" in r]
    skipped = [r["step"] for r in steps if not math.isfinite(r["grad_norm"])]
    assert skipped and steps[-1]["skipped_steps"] == len(skipped), steps
    assert (tmp_path / "model").is_dir()


def a_train_file(tmp_path_factory) -> Path:
    """A training file that exists (the inputs are checked first) and is never read: the run stops before."""
    path = tmp_path_factory.mktemp("data") / "never-read.jsonl"
    path.write_text("{}\n")
    return path


def test_an_unwritable_output_dir_is_refused_before_featurisation(tmp_path, tmp_path_factory):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = subprocess.run([sys.executable, "-m", "solution.train", "--config", "configs/train/tiny.yaml",
                           "--train_file", str(a_train_file(tmp_path_factory)), "--dev_file", "null",
                           "--output_dir", str(blocker / "run")],
                          cwd=ROOT, env=TRAIN_ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    [line] = error_lines(proc)
    assert f"output_dir {blocker / 'run'}: cannot" in line and "never-read.jsonl" not in line, line


def test_an_output_dir_another_run_holds_is_refused_at_once(tmp_path, tmp_path_factory):
    """Another run (here this test) holds output_dir's lock: the new run stops before featurising, in one
    line naming the folder and the holder, and writes nothing there."""
    import socket

    from solution.common.fsutil import exclusive_lock

    with exclusive_lock(tmp_path, "output_dir"):
        proc = subprocess.run([sys.executable, "-m", "solution.train", "--config", "configs/train/tiny.yaml",
                               "--train_file", str(a_train_file(tmp_path_factory)), "--dev_file", "null",
                               "--output_dir", str(tmp_path)],
                              cwd=ROOT, env=TRAIN_ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    [line] = error_lines(proc)
    assert line.startswith(f"error: output_dir {tmp_path}: in use by another run (pid {os.getpid()} on "
                           f"{socket.gethostname()};"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.lock"]


def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one(tmp_path):
    proc = train(tmp_path, "--max_steps", "6", "--save_steps", "2",
                 entry=("tests/faulty_train.py", "enospc-checkpoint-2"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    [line] = error_lines(proc)
    assert f"{tmp_path / 'checkpoint-4.tmp'}: no space left on device (" in line and "free in" in line, line
    assert line.endswith(f"the last good checkpoint is {tmp_path / 'checkpoint-2'} (latest)"), line
    assert not list(tmp_path.glob("*.tmp")) and not (tmp_path / "checkpoint-4").exists()
    assert (tmp_path / "latest").read_text().strip() == "checkpoint-2" and not (tmp_path / "model").exists()
    resumed = train(tmp_path, "--max_steps", "6", "--save_steps", "2", "--resume", "latest")
    assert resumed.returncode == 0, resumed.stderr[-3000:]


def test_a_full_disk_during_the_model_save_names_it(tmp_path):
    proc = train(tmp_path, "--max_steps", "1", entry=("tests/faulty_train.py", "enospc-model"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    [line] = error_lines(proc)
    assert f"{tmp_path / 'model'}: no space left on device (" in line and "free in" in line, line
    assert not (tmp_path / "model.tmp").exists() and not (tmp_path / "model").exists()


def test_a_really_full_disk_during_a_checkpoint_ends_in_one_line(small_filesystem):
    """A 36 MiB filesystem holds checkpoint-2 (24 MiB: weights and AdamW's moments); checkpoint-4's
    weights fit, its optimizer.bin does not: torch.save raises a RuntimeError, not an OSError."""
    out = small_filesystem(36 << 20)
    proc = train(out, "--optim", "adamw_torch", "--max_steps", "6", "--save_steps", "2")
    assert proc.returncode == 1, proc.stderr[-3000:]
    [line] = error_lines(proc)
    assert line.startswith(f"error: {out / 'checkpoint-4.tmp'}: no space left on device (") and "free in" in line, line
    assert line.endswith(f"the last good checkpoint is {out / 'checkpoint-2'} (latest)"), line
    assert "Traceback" not in proc.stderr and not list(out.glob("*.tmp*"))
    assert (out / "latest").read_text().strip() == "checkpoint-2"


def test_a_really_full_disk_during_the_model_save_ends_in_one_line(small_filesystem):
    out = small_filesystem(4 << 20)  # the model's 8 MiB of weights do not fit: safetensors' own error
    proc = train(out, "--max_steps", "1")
    assert proc.returncode == 1, proc.stderr[-3000:]
    [line] = error_lines(proc)
    assert line.startswith(f"error: {out / 'model'}: no space left on device (") and "free in" in line, line
    assert "Traceback" not in proc.stderr and not (out / "model.tmp").exists() and not (out / "model").exists()


def wait_for_first_step(proc, out: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (out / "metrics.jsonl").is_file() and steps(out):
            return
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    raise AssertionError("no optimizer step logged")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_saves_a_checkpoint_and_resumes(sig, tmp_path):
    cmd = [sys.executable, "-m", "solution.train", *RESUME_RUN, "--max_steps", "100000", *CONSTANT, "--output_dir", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=TRAIN_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_first_step(proc, tmp_path)
    os.kill(proc.pid, sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 3, stderr[-3000:]
    [line] = [x for x in stderr.splitlines() if x.startswith("stopped by")]
    step = int(line.split("at step ")[1].split(":")[0])
    assert line == (f"stopped by {sig.name} at step {step}: saved {tmp_path / f'checkpoint-{step}'}; "
                    "continue with --resume latest"), line
    assert (tmp_path / "latest").read_text().strip() == f"checkpoint-{step}" and not (tmp_path / "model").exists()
    resumed = train(tmp_path, "--max_steps", str(step + 2), "--resume", "latest", *CONSTANT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(steps(tmp_path))[-2:] == [step + 1, step + 2] and (tmp_path / "model").is_dir()


def test_resuming_an_older_checkpoint_keeps_its_new_checkpoint_and_resume_latest_follows_it(tmp_path):
    """checkpoint-2, 4, 6 written; checkpoint-2 resumed with save_total_limit 1 (two kept, the least, so
    checkpoint-2 stays beside its new checkpoint-4). The checkpoint-4 it writes is
    what latest names and what --resume latest continues; checkpoint-6, left behind, is kept but not resumed."""
    assert train(tmp_path, "--max_steps", "6", "--save_steps", "2", *CONSTANT).returncode == 0
    again = train(tmp_path, "--max_steps", "4", "--save_steps", "2", "--save_total_limit", "1",
                  "--resume", str(tmp_path / "checkpoint-2"), *CONSTANT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("checkpoint-[0-9]")) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    assert len(list(tmp_path.glob("checkpoint-4.left-*"))) == 1  # the left run's checkpoint-4, moved aside
    assert (tmp_path / "latest").read_text().strip() == "checkpoint-4"
    latest = train(tmp_path, "--max_steps", "8", "--save_steps", "2", "--resume", "latest", *CONSTANT)
    assert latest.returncode == 0, latest.stderr[-3000:]
    assert f"resumed from {tmp_path / 'checkpoint-4'} (native, single x1): step 4," in latest.stdout, latest.stdout


def test_resume_auto_passes_over_a_corrupted_newest_checkpoint_saying_why(tmp_path):
    """checkpoint-6's weights lose one byte to the storage (same size, another value): `--resume auto`
    says why it skips it, resumes checkpoint-4, and ends bitwise at the uninterrupted run's weights."""
    whole = train(tmp_path, "--max_steps", "6", "--save_steps", "2", *CONSTANT)
    assert whole.returncode == 0, whole.stderr[-3000:]
    reference = load_file(str(tmp_path / "model" / "model.safetensors"))
    weights = tmp_path / "checkpoint-6" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01  # a bit flipped in the middle of a tensor: the file still loads
    weights.write_bytes(bytes(data))
    resumed = train(tmp_path, "--max_steps", "6", "--save_steps", "2", "--resume", "auto", *CONSTANT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (f"resume auto: skipped {tmp_path / 'checkpoint-6'} ({weights}: sha256 differs from manifest.json (its "
            "bytes changed since it was written))") in resumed.stdout, resumed.stdout
    assert f"resume auto: continuing from {tmp_path / 'checkpoint-4'}" in resumed.stdout
    assert sorted(steps(tmp_path))[-2:] == [5, 6]
    for name, w in load_file(str(tmp_path / "model" / "model.safetensors")).items():
        assert torch.equal(w, reference[name]), name


def test_the_first_step_save_finds_a_failing_storage_at_step_one(tmp_path):
    """A storage that fails every write (EIO from the first save on): with save_first_step the run stops
    after step 1 in one line naming the path and the error; without it, nothing is saved before step 100."""
    fault = ("tests/faulty_train.py", "eio-checkpoint-1")
    probed = train(tmp_path / "probed", "--max_steps", "8", "--save_steps", "100", "--save_first_step", "true",
                   entry=fault)
    assert probed.returncode == 1, probed.stderr[-3000:]
    assert error_lines(probed) == [f"error: {tmp_path / 'probed' / 'checkpoint-1.tmp' / 'optimizer.bin'}: cannot write "
                                   "checkpoint-1 (Input/output error); no checkpoint was written"]
    assert sorted(steps(tmp_path / "probed")) == [1] and not (tmp_path / "probed" / "latest").exists()
    unprobed = train(tmp_path / "unprobed", "--max_steps", "8", "--save_steps", "100", entry=fault)
    assert unprobed.returncode == 0 and sorted(steps(tmp_path / "unprobed")) == list(range(1, 9))


def test_the_first_step_save_is_an_ordinary_checkpoint_of_every_start(tmp_path):
    """Fresh: checkpoint-1; resumed from checkpoint-4: checkpoint-5, its first step; both resume."""
    first = train(tmp_path, "--max_steps", "4", "--save_steps", "4", "--save_first_step", "true", *CONSTANT)
    assert first.returncode == 0, first.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-4"]
    again = train(tmp_path, "--max_steps", "6", "--save_steps", "4", "--save_first_step", "true", "--resume", "latest",
                  *CONSTANT)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-4", "checkpoint-5"]


def test_a_resume_with_another_weight_decay_or_epsilon_is_refused_naming_them(tmp_path):
    """The optimizer state a resume loads carries the checkpoint's param_groups: another weight_decay or
    adam_epsilon would be written to config.yaml and silently replaced by the old values."""
    adamw = ("--optim", "adamw_torch", "--weight_decay", "0.01", *CONSTANT)
    assert train(tmp_path, "--max_steps", "1", "--save_steps", "1", *adamw).returncode == 0
    proc = train(tmp_path, "--max_steps", "2", "--save_steps", "1", "--resume", "latest", *adamw,
                 "--weight_decay", "0.1", "--adam_epsilon", "1e-6")
    assert proc.returncode == 2, proc.stderr[-3000:]
    [line] = error_lines(proc)
    assert "field 'optimizer.weight_decay' is 0.01 in the checkpoint but 0.1 in this run" in line, line
    assert "field 'optimizer.adam_epsilon' is 1e-08 in the checkpoint but 1e-06 in this run" in line, line
    proc = train(tmp_path, "--max_steps", "2", "--save_steps", "1", "--resume", "latest", *adamw)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_sgd_with_weight_decay_is_refused():
    from solution.training.config import load_config
    from solution.training.optimizer import OptimizerConfig

    with pytest.raises(ValueError, match=r"^config: optimizer.weight_decay must be 0 with optim sgd \(plain SGD has "
                                         r"no weight decay\), got 0.01$"):
        load_config(None, ["--optim", "sgd", "--weight_decay", "0.01"])
    assert OptimizerConfig(optim="sgd", weight_decay=0).weight_decay == 0


def test_a_resume_on_another_train_file_with_as_many_windows_is_refused(tmp_path):
    """Only the window count used to be compared: a checkpoint records its windows' digest as well."""
    from conftest import nq_line, write_jsonl

    files = [write_jsonl(tmp_path / f"{name}.jsonl", [nq_line(example_id=str(i + first), long=0) for i in range(4)])
             for name, first in (("a", 0), ("b", 100))]
    out = tmp_path / "run"

    def on(path, *extra):
        return train(out, "--data_source", "files", "--train_file", str(path), "--dev_file", "null",
                     "--cache_dir", str(tmp_path / "cache"), "--negative_keep_rate", "1.0",
                     "--per_device_train_batch_size", "2", "--save_steps", "1", *CONSTANT, *extra)

    assert on(files[0], "--max_steps", "1").returncode == 0
    proc = on(files[1], "--max_steps", "2", "--resume", "latest")
    assert proc.returncode == 2, proc.stderr[-3000:]
    [line] = error_lines(proc)
    assert "field 'train_data_digest' is '" in line and "field 'train_windows'" not in line, line
    assert on(files[0], "--max_steps", "2", "--resume", "latest").returncode == 0


def test_resume_auto_falls_back_past_a_truncated_optimizer_whose_manifest_is_gone(tmp_path):
    assert train(tmp_path, "--max_steps", "2", "--save_steps", "1", *CONSTANT).returncode == 0
    newest = tmp_path / "checkpoint-2"
    optimizer = newest / "optimizer.bin"
    optimizer.write_bytes(optimizer.read_bytes()[: optimizer.stat().st_size // 2])
    (newest / "manifest.json").unlink()
    proc = train(tmp_path, "--max_steps", "3", "--save_steps", "1", "--resume", "auto", *CONSTANT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"skipped {newest} (no manifest.json, although checkpoint-1" in proc.stdout + proc.stderr
    assert f"resume auto: continuing from {tmp_path / 'checkpoint-1'}" in proc.stdout + proc.stderr

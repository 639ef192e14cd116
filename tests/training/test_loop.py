"""The training loop's shortcuts change nothing it computes: one process, the tiny BERT on dummy windows."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import error_lines, steps, train
from safetensors.torch import load_file

pytestmark = pytest.mark.slow  # full trainings


def test_without_clipping_the_norm_is_computed_only_where_it_is_logged_or_saved(tmp_path):
    """max_grad_norm 0: the gradient norm (a pass over every gradient) is skipped on steps that neither
    log nor save. Logging every step or every third step gives the same losses, norms and weights."""
    every = train(tmp_path / "every", "--max_steps", "6", "--max_grad_norm", "0", "--logging_steps", "1")
    sparse = train(tmp_path / "sparse", "--max_steps", "6", "--max_grad_norm", "0", "--logging_steps", "3",
                   "--save_steps", "4")
    assert every.returncode == 0 and sparse.returncode == 0, every.stderr[-2000:] + sparse.stderr[-2000:]
    ref, got = steps(tmp_path / "every"), steps(tmp_path / "sparse")
    assert sorted(got) == [3, 6]
    for step in (3, 6):
        assert got[step]["loss"] == ref[step]["loss"] and got[step]["grad_norm"] == ref[step]["grad_norm"], step
        assert math.isfinite(got[step]["grad_norm"]) and got[step]["grad_norm"] > 0
    weights = load_file(str(tmp_path / "sparse" / "model" / "model.safetensors"))
    for name, w in load_file(str(tmp_path / "every" / "model" / "model.safetensors")).items():
        assert torch.equal(weights[name], w), name


def test_a_compiled_run_trains_like_the_eager_one_and_resumes_bitwise(tmp_path):
    """--torch_compile: each layer compiled (TorchInductor on the CPU). Its losses follow the eager run's
    (the same function, fused differently: within 1e-4); a run resumed from its checkpoint-2 continues it
    bitwise; its start record says so."""
    compiled = ("--torch_compile", "true", "--dropout", "0", "--max_steps", "4", "--save_steps", "2")
    eager = train(tmp_path / "eager", "--dropout", "0", "--max_steps", "4")
    whole = train(tmp_path / "whole", *compiled)
    assert eager.returncode == 0 and whole.returncode == 0, eager.stderr[-2000:] + whole.stderr[-3000:]
    resumed = train(tmp_path / "resumed", *compiled, "--resume", str(tmp_path / "whole" / "checkpoint-2"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ref, got, again = steps(tmp_path / "eager"), steps(tmp_path / "whole"), steps(tmp_path / "resumed")
    assert sorted(got) == [1, 2, 3, 4] and sorted(again) == [3, 4]
    for step in (1, 2, 3, 4):
        assert got[step]["loss"] == pytest.approx(ref[step]["loss"], rel=1e-4), step
    for step in (3, 4):
        assert again[step]["loss"] == got[step]["loss"] and again[step]["grad_norm"] == got[step]["grad_norm"], step
    start = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()][0]
    assert start["torch_compile"] is True and start["attention"] == "sdpa"


def test_a_sticky_divergence_names_the_first_bad_step_when_read_later(tmp_path):
    """Between the steps that log or save nothing is read from the device: a run that diverges there stops at
    the next such step, naming the first bad step with its figures, as a run that reads every step does."""
    # Clipping on: the norm is computed every step either way, so both runs check the same figures.
    diverge = ("--learning_rate", "1e12", "--max_grad_norm", "1", "--max_steps", "8", "--dropout", "0")
    every = train(tmp_path / "every", *diverge, "--logging_steps", "1")
    sparse = train(tmp_path / "sparse", *diverge, "--logging_steps", "8")
    assert every.returncode == 1 and sparse.returncode == 1, every.stderr[-2000:] + sparse.stderr[-2000:]
    [line] = error_lines(every)
    [later] = error_lines(sparse)
    assert line.startswith("error: training diverged at step ") and later == line, (line, later)
    assert not (tmp_path / "sparse" / "model").exists()

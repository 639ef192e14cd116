"""The training loop's shortcuts change nothing it computes: one process, the tiny BERT on dummy windows."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import load_file
from test_resume import steps, train

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

"""The proof that a checkpoint resumes at another world size and under another engine, exactly.

Tiny BERT, SGD, fp32, global batch 8 throughout: one process at per-device batch 8, two at 2 x 2
accumulation steps. Each case is a chain of runs, every one resumed from a checkpoint of the one
before (copied into a fresh output dir): the losses after each resume equal the uninterrupted
single-process run's within 1e-4 relative at every step, and its final weights are allclose.
One AdamW case shows the optimizer's state (step count, moments) carried by DeepSpeed's universal
checkpoint.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from helpers import read_run

from solution.distributed.ports import free_port

pytestmark = pytest.mark.slow  # full trainings and multi-process launches: make test, not make test-fast

STEPS = 8
BASE = ["--config", "configs/train/tiny.yaml", "--data_source", "dummy", "--dummy_num_windows", "64",
        "--optim", "sgd", "--weight_decay", "0", "--learning_rate", "0.3", "--max_grad_norm", "0", "--max_steps", str(STEPS),
        "--save_steps", "2", "--logging_steps", "1", "--eval_strategy", "no", "--disable_tqdm", "true"]
BATCH = {1: ["--per_device_train_batch_size", "8"],
         2: ["--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2"]}


def train(out: Path, strategy: str, nproc: int, resume: Path | None = None, extra=()) -> dict:
    """`strategy` on `nproc` processes; with `resume`, from a copy of that checkpoint in `out`.
    One process without a launcher for single and ZeRO (DeepSpeed runs as a world of one); FSDP and
    DDP through torchrun."""
    if resume is not None:
        out.mkdir(parents=True)
        shutil.copytree(resume, out / resume.name)
    args = ["-m", "solution.train", *BASE, *BATCH[nproc], "--strategy", strategy, "--output_dir", str(out), *extra,
            *(["--resume", "latest"] if resume is not None else [])]
    if nproc == 1 and (strategy == "single" or strategy.startswith("zero")):
        cmd = [sys.executable, *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_port", str(free_port()), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{strategy} x{nproc} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    run = read_run(out)
    run["stdout"] = proc.stdout
    assert run["start"]["strategy"] == strategy and run["start"]["world_size"] == nproc, run["start"]
    return run


def same_as(ref: dict, run: dict, first_step: int, rtol: float = 1e-4, atol: float = 1e-6) -> None:
    assert sorted(run["steps"])[0] == first_step and sorted(run["steps"])[-1] == STEPS, sorted(run["steps"])
    for step in range(first_step, STEPS + 1):
        got, want = run["steps"][step]["loss"], ref["steps"][step]["loss"]
        assert got == pytest.approx(want, rel=rtol), f"step {step}: {got} vs {want}"
    for name, w in ref["weights"].items():
        torch.testing.assert_close(run["weights"][name], w, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


@pytest.fixture(scope="module")
def chains(tmp_path_factory):
    """Runs by name, each trained once per module: the uninterrupted one-process run and the resumed ones."""
    root = tmp_path_factory.mktemp("reshape")
    runs = {"ref": train(root / "ref", "single", 1)}
    losses = [runs["ref"]["steps"][s]["loss"] for s in sorted(runs["ref"]["steps"])]
    assert max(losses) - min(losses) > 0.05, losses  # the weights move: equal weights prove something

    def resume(name: str, strategy: str, nproc: int, source: str, step: int) -> dict:
        if name not in runs:
            runs[name] = train(root / name, strategy, nproc, resume=runs[source]["out"] / f"checkpoint-{step}")
            assert runs[name]["start"]["resumed_from"]["step"] == step
        return runs[name]

    return runs, resume


# (name, strategy, processes, resumed from run, at step). A chain's first hop from the one-process run
# is also a change of engine (single -> DDP, ZeRO, FSDP). Left out for time (each DeepSpeed start costs
# ~30 s here; it passed when run during development): FSDP -> ZeRO-2.
CHAINS = {
    "ddp": [("ddp2", "ddp", 2, "ref", 2), ("ddp2-single1", "single", 1, "ddp2", 4)],  # 1 -> 2 -> 1
    "zero2": [("z2", "zero2", 2, "ref", 2), ("z2-z1", "zero2", 1, "z2", 4), ("z2-z1-z2", "zero2", 2, "z2-z1", 6)],
    "zero3": [("z3", "zero3", 2, "ref", 2), ("z3-z1", "zero3", 1, "z3", 4), ("z3-z1-z3", "zero3", 2, "z3-z1", 6)],
    "fsdp": [("f1", "fsdp", 1, "ref", 2), ("f1-f2", "fsdp", 2, "f1", 4), ("f1-f2-f1", "fsdp", 1, "f1-f2", 6)],
    "zero2-to-fsdp": [("z2", "zero2", 2, "ref", 2), ("z2-f2", "fsdp", 2, "z2", 4)],
}


@pytest.mark.parametrize("chain", list(CHAINS))
def test_resumed_in_another_layout_matches_one_process(chain, chains):
    runs, resume = chains
    for name, strategy, nproc, source, step in CHAINS[chain]:
        run = resume(name, strategy, nproc, source, step)
        same_as(runs["ref"], run, first_step=step + 1)


ADAM_CHAIN = [  # (strategy, processes, resumed from, at step)
    ("zero2", 1, "whole", 4),  # DeepSpeed's universal checkpoint, converted once beside the checkpoint
    ("fsdp", 2, "whole", 2),  # ZeRO-2 -> FSDP: universal files in, FSDP2's full optimizer state dict out
    # Left out for time, passed when run during development: FSDP -> single (the optimizer's DCP in,
    # torch's AdamW out), single -> ZeRO-3 (optimizer.bin in, each rank's partition of the moments out),
    # FSDP -> ZeRO-1.
]


def test_adamw_state_is_carried_across_world_sizes_and_engines(tmp_path):
    """ZeRO-2 with AdamW on 2 processes, uninterrupted, against runs resumed from its checkpoints under
    other world sizes and engines: the moments and the step count (bias correction) must arrive, or
    the steps after the resume differ by the order of the rate (1e-2 per step). adam_epsilon 1e-4:
    with the default 1e-8, Adam divides by sqrt(v) + eps and turns the summation-order noise of
    parameters whose gradient is zero in exact arithmetic (attention key biases, the start/end bias:
    the softmax ignores a shift) into updates of the rate's order (measured: 2e-3)."""
    adam = ["--optim", "adamw_torch", "--learning_rate", "0.01", "--adam_epsilon", "1e-4"]
    runs = {"whole": train(tmp_path / "whole", "zero2", 2, extra=adam)}
    for strategy, nproc, source, step in ADAM_CHAIN:
        run = train(tmp_path / strategy, strategy, nproc, resume=runs[source]["out"] / f"checkpoint-{step}", extra=adam)
        runs[strategy] = run
        same_as(runs["whole"], run, first_step=step + 1, atol=1e-5)
    assert (tmp_path / "zero2" / "checkpoint-4" / "universal").is_dir() and "(universal, zero2 x2)" in runs["zero2"]["stdout"]

"""Sample-exact across resumes: every epoch trains on every sample exactly once, however often the run
stops and resumes, and on whatever number of ranks.

A run of 3 epochs (48 dummy windows, global batch 8: 6 optimizer steps an epoch) is killed right after
its checkpoint at step 4 on two ranks (DDP, 2 a rank x 2 accumulation steps), resumed on ONE process
(8 a batch, no accumulation: its position in batches differs from the writer's) and killed after
step 8 (two steps into the second epoch), then resumed on two ranks to its end. tests/faulty_train.py's
`record-samples` puts each sample's index into its window and records the indexes of every micro-batch
the trainer runs, with its epoch and optimizer step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT

from solution.distributed.ports import free_port

pytestmark = pytest.mark.slow  # three trainings, two of them under torchrun

WINDOWS, STEPS_PER_EPOCH, EPOCHS = 48, 6, 3
RUN = ["--config", "configs/train/tiny.yaml", "--data_source", "dummy", "--dummy_num_windows", str(WINDOWS),
       "--optim", "sgd", "--weight_decay", "0", "--max_steps", str(STEPS_PER_EPOCH * EPOCHS), "--eval_strategy", "no",
       "--disable_tqdm", "true", "--logging_steps", "1", "--save_steps", "4", "--lr_scheduler_type", "constant"]
TWO = ["--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2"]
ONE = ["--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "1"]  # another batch per micro-step too


def run(out: Path, log: Path, fault: str, ranks: int, *extra) -> subprocess.CompletedProcess:
    train = ["tests/faulty_train.py", fault, *RUN, *(TWO if ranks == 2 else ONE), "--output_dir", str(out), *extra]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                str(free_port())] if ranks == 2 else [sys.executable]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "SAMPLE_LOG": str(log)}
    return subprocess.run([*launcher, *train], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_each_epoch_consumes_every_sample_exactly_once_across_two_resumes_one_at_another_world_size(tmp_path):
    out, log = tmp_path / "run", tmp_path / "samples"
    log.mkdir()
    first = run(out, log, "record-samples+kill-after-step-4", 2)
    assert first.returncode != 0 and (out / "latest").read_text().strip() == "checkpoint-4", first.stderr[-3000:]
    second = run(out, log, "record-samples+kill-after-step-8", 1, "--resume", "latest")
    assert second.returncode != 0 and (out / "latest").read_text().strip() == "checkpoint-8", second.stderr[-3000:]
    third = run(out, log, "record-samples", 2, "--resume", "latest")
    assert third.returncode == 0, third.stderr[-3000:]

    records = [json.loads(line) for f in sorted(log.iterdir()) for line in f.read_text().splitlines()]
    steps = Counter()
    for r in records:
        steps[r["step"]] += len(r["ids"])
    assert sorted(steps) == list(range(1, STEPS_PER_EPOCH * EPOCHS + 1))  # every step ran, none twice
    assert set(steps.values()) == {8}  # the global batch, whichever layout ran it
    for epoch in range(EPOCHS):
        seen = Counter(i for r in records if r["epoch"] == epoch for i in r["ids"])
        assert seen == Counter(range(WINDOWS)), (epoch, sorted(seen.items()))
    # The three starts each ran: the layouts really changed.
    assert {(len(r["ids"]), r["rank"]) for r in records} == {(2, 0), (2, 1), (8, 0)}
    assert "step 4, epoch 0, 4 batches into it" in second.stdout, second.stdout  # 32 samples, 8 a batch
    assert "step 8, epoch 1, 4 batches into it" in third.stdout, third.stdout  # 16 samples, 2 a rank x 2 ranks

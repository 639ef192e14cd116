"""The loop's small parts: the epoch's order (`EpochShuffle`) and one optimizer step's figures, kept on the
device between the steps that read them (`StepMeter`, `StepFigures`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from solution.training.stop import Health


class EpochShuffle(torch.utils.data.Sampler):
    """A permutation that is a pure function of (seed, epoch).

    Resuming from a checkpoint then reproduces the order exactly, with no generator state to carry,
    and every rank computes the same order before Accelerate deals the batches out."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


@dataclass
class StepMeter:
    """One optimizer step's loss (summed over its micro-batches), gradient norm and divergence check, and the
    clocks of the logging window. All of it stays on the device between the steps that log or save, which
    read it once (`Trainer.read_step`): a read makes the host wait for the device, and without one the host
    queues the next step while the device still runs this one."""

    loss_sum: torch.Tensor
    health: Health
    micro: int = 0
    samples: int = 0  # since the last record, all ranks
    steps: int = 0  # optimizer steps since the last record
    loss: Optional[torch.Tensor] = None  # the last step's, mean over its micro-batches, this rank
    grad_norm: Optional[torch.Tensor] = None  # the last step's (None: not computed, see Trainer.sync_due)
    lr: float = 0.0
    t_log: float = field(default_factory=time.perf_counter)

    def close_step(self, step: int, skipped) -> None:
        """After optimizer step `step` (`skipped`: the loss scaler skipped it): its loss into the divergence
        check. Nothing is read."""
        self.loss = self.loss_sum / self.micro
        self.loss_sum = torch.zeros_like(self.loss_sum)
        self.micro = 0
        self.steps += 1
        self.health.update(step, self.loss, self.grad_norm, skipped)

    def close_window(self) -> float:
        """Seconds since the last record; the next window starts now (windows tile the clock)."""
        now = time.perf_counter()
        elapsed, self.t_log, self.samples, self.steps = now - self.t_log, now, 0, 0
        return elapsed


@dataclass
class StepFigures:
    """What a step that logs or saves reads: the loss of the global batch, the gradient norm, the stop flags
    summed over ranks and the fp16 skips so far (a diverged run stops in the read instead)."""

    loss: float
    grad_norm: Optional[float]
    flags: list
    skipped_steps: int

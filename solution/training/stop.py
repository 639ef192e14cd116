"""How a run stops: exit codes, the exceptions that end training, and the stop request a signal
handler sets so the loop stops at a step boundary with a checkpoint.
"""

from __future__ import annotations

import math
import os
import signal
from typing import Optional

EXIT_FAULT = 1  # diverged, disk full
EXIT_CONFIG = 2  # bad input or config: here, ranks started with different settings
EXIT_STOPPED = 3  # SIGTERM/SIGINT/SIGUSR1: a checkpoint was written at the step reached
# fp16's dynamic loss scaler skips a step whose gradients overflowed and halves its scale: from 2**16,
# 20 skips in a row bring it under 1, where the gradients overflow unscaled. That run has diverged.
MAX_SKIPPED_IN_A_ROW = 20


def divergence(loss: float, grad_norm: Optional[float], skipped: bool, skipped_in_a_row: int) -> Optional[str]:
    """Why a step's figures show a diverged run, or None. An infinite gradient norm on a step the loss
    scaler skipped is how fp16 training finds its scale (the weights did not move); a few of those are
    normal at the start, and only a scaler that keeps skipping means the gradients themselves overflow."""
    if not math.isfinite(loss):
        return f"loss {loss}"
    if skipped:
        if skipped_in_a_row >= MAX_SKIPPED_IN_A_ROW:
            return (f"the fp16 loss scaler skipped {skipped_in_a_row} steps in a row (gradients overflow "
                    f"at every scale; grad_norm {grad_norm})")
        return None
    if grad_norm is not None and not math.isfinite(grad_norm):
        return f"loss {loss}, grad_norm {grad_norm}"
    return None


def on_device(value, dtype, device):
    """A device scalar of `value` (a tensor, a number or a bool) made without a blocking copy: a host value
    becomes a fill (`torch.full`), since copying it would wait for the device (a synchronous copy)."""
    import torch

    if torch.is_tensor(value):
        return value.detach().to(dtype=dtype, device=device).reshape(())
    return torch.full((), float(value), dtype=dtype, device=device)


class Health:
    """The divergence check kept on the device: each step's loss, gradient norm and loss-scaler skip update
    a few device tensors, and the trainer reads `figures()`, once, on the steps that log or save. A read of a
    device value makes the host wait for the device to finish everything queued so far; reading none
    between those steps lets the host queue the next step while the device runs this one.

    Sticky: the first step that went bad is kept with its figures, so the run stops naming that step
    even when it is read several steps later (nothing is saved in between: saving steps read it first)."""

    def __init__(self, device):
        import torch

        self.device = device
        # The first bad step: [step, loss, grad_norm, has_norm, skipped, skipped_in_a_row]; step -1: none yet.
        self.first = torch.tensor([-1.0, 0.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64, device=device)
        self.in_a_row = torch.zeros((), dtype=torch.float64, device=device)
        self.skipped_steps = torch.zeros((), dtype=torch.float64, device=device)  # since this process started

    def update(self, step: int, loss, grad_norm, skipped) -> None:
        """After optimizer step `step`: its loss (a device scalar), gradient norm (a device scalar, a number,
        or None where none was computed) and whether the loss scaler skipped it (a device bool or a bool).
        The same rule as `divergence`, on the device."""
        import torch

        f64 = dict(dtype=torch.float64, device=self.device)
        loss = on_device(loss, **f64)
        skipped = on_device(skipped, **f64)
        self.in_a_row = (self.in_a_row + 1) * skipped
        self.skipped_steps = self.skipped_steps + skipped
        bad = ~torch.isfinite(loss) | ((skipped > 0) & (self.in_a_row >= MAX_SKIPPED_IN_A_ROW))
        norm = torch.zeros((), **f64) if grad_norm is None else on_device(grad_norm, **f64)
        if grad_norm is not None:
            bad = bad | ((skipped == 0) & ~torch.isfinite(norm))
        now = torch.stack([torch.full((), float(step), **f64), loss, norm,
                           torch.full((), float(grad_norm is not None), **f64), skipped, self.in_a_row])
        self.first = torch.where(bad & (self.first[0] < 0), now, self.first)

    def figures(self):
        """[first bad step (-1: none), its loss, grad_norm, has_norm, skipped, skipped_in_a_row, skipped_steps]:
        one device tensor, so that one read (or one collective, then one read) carries them all."""
        import torch

        return torch.cat([self.first, self.skipped_steps.reshape(1)])

    @staticmethod
    def why(figures: list) -> Optional[tuple]:
        """(step, why) from the figures read on the host, or None when no step went bad."""
        step, loss, norm, has_norm, skipped, in_a_row = figures[:6]
        if step < 0:
            return None
        return int(step), divergence(loss, norm if has_norm else None, bool(skipped), int(in_a_row))


class TrainingStopped(Exception):
    """Training ended before its last step for a reason it names in one line; `exit_code` is main()'s."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class StoppedBySignal(BaseException):
    """A signal before the loop is armed: stop at once; `exit_code` is 128 + the signal's number.

    A BaseException, like KeyboardInterrupt, so that library code catching Exception lets it through
    (a featurisation worker reports an Exception as its shard's failure, a tokenizer or loader may
    wrap one in its own error)."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name} before the first optimizer step; "
                         "nothing was saved")
        self.signum, self.exit_code = signum, 128 + signum


class EvaluationStopped(Exception):
    """A stop request every rank agreed on in the middle of an evaluation; its partial result is dropped."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRequest:
    """SIGTERM/SIGINT/SIGUSR1 set a flag; the loop acts on it at the next optimizer step in one process, and
    with several ranks at the next step that logs or saves (agreeing is a collective, and those steps carry
    one already: `Trainer.read_step`), or during a dev evaluation at its next batch, on every rank at once.
    SIGTERM: spot instances and SLURM preemption; SIGUSR1: SLURM's `--signal` before the time limit.

    Before the loop is armed (featurisation, model set-up) there is nothing to save, so a signal stops
    at once. A second signal during the checkpoint save only sets the flag again: the save goes on, and
    the message names the first signal."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
    current: Optional["StopRequest"] = None  # the one whose `with` block is open: what a fork consults

    def __init__(self):
        self.signum, self.armed, self._previous = 0, False, {}

    def __enter__(self):
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
            signal.siginterrupt(sig, False)  # restart interrupted system calls (gloo's sockets, file writes)
        StopRequest.current = self
        return self

    def __exit__(self, *exc) -> None:
        StopRequest.current = None
        for sig in self.SIGNALS:
            signal.signal(sig, self._previous[sig])

    def _handle(self, signum, frame) -> None:
        if self.armed:
            self.signum = self.signum or signum
        elif not self.signum:
            self.signum = signum
            raise StoppedBySignal(signum)
        # else: a second signal while the first one's stop unwinds. A rank often gets two (SLURM signals
        # every process of the step, and the launcher forwards the same signal to its workers); raised
        # again, it would cut short the `stopped` record being written.

    @staticmethod
    def _forked() -> None:
        """In a child forked before the loop is armed (the feature cache's workers):
        the default actions, so a signal ends it at once and silently. With this handler it would raise in
        its own copy and print a traceback of its own beside the main process's one line. A child forked
        later (a data loader worker) keeps the handler, as before."""
        request = StopRequest.current
        if request is not None and not request.armed:
            for sig in StopRequest.SIGNALS:
                signal.signal(sig, signal.SIG_DFL)

    def flags(self) -> list:
        """This rank's signal as one 0/1 flag per handled signal, summed over ranks with the step's loss
        (`Trainer.read_step`): a rank that stopped alone would leave the others waiting forever in
        the next collective, so every rank must learn of any rank's signal at the same step."""
        return [float(self.signum == sig) for sig in self.SIGNALS]

    def agreed(self, summed: list) -> int:
        """The signal some rank received (0: none) from the summed flags; the highest number when ranks
        received different ones, the same on every rank."""
        return max((int(sig) for sig, n in zip(self.SIGNALS, summed) if n > 0), default=0)


os.register_at_fork(after_in_child=StopRequest._forked)  # once: it acts only while a request is open

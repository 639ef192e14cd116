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
    """SIGTERM/SIGINT/SIGUSR1 set a flag; the loop acts on it at the next optimizer step, or during a dev
    evaluation at its next batch, on every rank at once. SIGTERM: spot instances and SLURM preemption;
    SIGUSR1: SLURM's `--signal` before the time limit.

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
        (`StepMeter.close_step`): a rank that stopped alone would leave the others waiting forever in
        the next collective, so every rank must learn of any rank's signal at the same step."""
        return [float(self.signum == sig) for sig in self.SIGNALS]

    def agreed(self, summed: list) -> int:
        """The signal some rank received (0: none) from the summed flags; the highest number when ranks
        received different ones, the same on every rank."""
        return max((int(sig) for sig, n in zip(self.SIGNALS, summed) if n > 0), default=0)


os.register_at_fork(after_in_child=StopRequest._forked)  # once: it acts only while a request is open

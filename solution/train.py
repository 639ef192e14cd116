"""Fine-tune a BERT QA model on simplified-NQ: `python -m solution.train --config FILE [--name value ...]`.

`--help` lists every setting (generated from `solution.training.config`).

The same loop runs on one process and under `accelerate launch`; the
strategy comes from `solution.distributed.strategy`, never from this file. Writes to
`output_dir`:
  config.yaml     the resolved config
  metrics.jsonl   a start record, one record per logging step, dev scores, an end record (or a
                  `stopped` record naming the signal and the checkpoint)
  model/          the consolidated model directory that `submission/` loads

Exit codes: 0 done; 2 bad input or config (`error: ...`; ranks started with different settings too); 1 stopped
by a fault it names (another rank gone, the loss or gradient norm stopped being finite, no space left on device);
3 stopped by SIGTERM, SIGINT or SIGUSR1 after writing a checkpoint at the step reached (continue with
`--resume auto` or `--resume latest`); 4 a hang: a rank made no progress for hang_timeout seconds
(solution.distributed.watchdog; continue with `--resume auto`); 128 + N stopped by signal N before the first
optimizer step, when there was nothing to save.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path

from solution.checkpoints.state import CheckpointFailed
from solution.common.fsutil import check_writable, exclusive_lock
from solution.distributed import lifecycle, strategy
from solution.distributed.plan import launcher_world_size
from solution.distributed.watchdog import Progress, Watchdog
from solution.training.config import TrainConfig, load_config, parse_command_line
from solution.training.inputs import check_inputs, check_model_settings
from solution.training.records import MetricsLog
from solution.training.stop import EXIT_CONFIG, EXIT_FAULT, StoppedBySignal, StopRequest, TrainingStopped
from solution.training.trainer import Trainer


@contextlib.contextmanager
def claim_output_dir(cfg: TrainConfig):
    """output_dir, created and locked by the main process (RANK 0) for the run's life: a second run on it,
    or a rank a killed launcher left behind still training there, makes the newcomer stop at once with one
    line naming the holder (fsutil.exclusive_lock). The other ranks write only where the main one says."""
    if lifecycle.launcher_rank() != 0:
        yield
        return
    with exclusive_lock(check_writable(cfg.output_dir, "output_dir", create_dir=True), "output_dir"):
        check_fresh_start(cfg)
        yield


RUN_FILES = ("config.yaml", "metrics.jsonl", "model")  # with checkpoint-N: what a run leaves in its output_dir


def check_fresh_start(cfg: TrainConfig) -> None:
    """A run that resumes nothing starts in an output_dir no earlier run has written to, or is told it may
    replace what one left (`overwrite_output_dir`): its config.yaml, metrics.jsonl and model/ would be replaced."""
    if cfg.resume_from_checkpoint or cfg.overwrite_output_dir:
        return
    out = Path(cfg.output_dir)
    found = [name for name in RUN_FILES if (out / name).exists()]
    found += sorted(p.name for p in out.glob("checkpoint-*"))[:3]
    if found:
        raise ValueError(f"output_dir {out}: holds an earlier run ({', '.join(found)}); continue it with --resume "
                         "auto, start over in it with --overwrite_output_dir true (its config.yaml, metrics.jsonl "
                         "and model/ are replaced, its checkpoints kept), or choose another output_dir")


def run_training(cfg: TrainConfig, stop_request: StopRequest) -> None:
    """Train in the claimed output_dir, watched for hangs from before the process group starts until every
    rank has shut down (`hang_watchdog`); a stop before the first step leaves its record there."""
    with claim_output_dir(cfg), hang_watchdog(cfg) as watchdog:
        try:
            train_and_shut_down(cfg, stop_request, watchdog.progress)
        except StoppedBySignal as stop:
            record_early_stop(Path(cfg.output_dir), stop)
            raise
        # A rank stopped in its shutdown would leave the launcher waiting forever. A signal ends the wait:
        # this rank's work is done.
        watchdog.wait_for_peers(interrupted=lambda: bool(stop_request.signum))


def hang_watchdog(cfg: TrainConfig) -> Watchdog:
    """The hang watchdog (solution.distributed.watchdog) for the rest of this rank's life, from before any
    process group (rank and world size as the launcher set them) to the last rank's exit. Rank 0 starts it
    once it holds output_dir; a rank stopped before its watchdog started is named by the others. The rank
    that reports a hang appends its record to metrics.jsonl, whichever it is (rank 0 may be the frozen one)."""
    metrics = Path(cfg.output_dir) / "metrics.jsonl"
    return Watchdog(Progress(), Path(cfg.output_dir), lifecycle.launcher_rank(), launcher_world_size(),
                    cfg.distributed.hang_timeout, on_hang=lambda record: MetricsLog(metrics, True, append=True).write(record))


def train_and_shut_down(cfg: TrainConfig, stop_request: StopRequest, progress: Progress) -> None:
    """Set-up (the process group's start-up included), training, shutdown: all under the watchdog."""
    try:
        Trainer(cfg, stop_request, progress).train()
    finally:  # every way out (done, error, signal): process groups and engine torn down in order
        progress.mark("shutdown")
        strategy.shutdown()


def record_early_stop(out: Path, stop: StoppedBySignal) -> None:
    """The `stopped` record of a stop before the first optimizer step (no step, no checkpoint), so that
    scripts/launch_slurm.sh requeues a job whose time ran out before training began, to resume from an
    earlier checkpoint. Written by the main process only; where output_dir cannot be written, left out."""
    if lifecycle.launcher_rank() != 0:
        return
    try:
        MetricsLog(out / "metrics.jsonl", True, append=True).write(
            {"event": "stopped", "signal": signal.Signals(stop.signum).name, "step": None, "checkpoint": None})
    except OSError:
        pass


DESCRIPTION = ("Fine-tune BERT QA on simplified-NQ. The YAML file (--config) is read first; each option below "
               "overrides one of its settings: --name value, --name=value or --name-with-dashes value.")


def main(argv=None) -> int:
    """Train; returns the exit code: 0 done, 2 bad input or config, 1 diverged or disk full (one line
    naming the step or the path), 3 stopped by SIGTERM/SIGINT/SIGUSR1 after saving checkpoint-N at the
    step reached (the line says which; continue with --resume latest, or auto), 128 + N stopped by signal N
    before the first optimizer step (nothing saved)."""
    try:
        path, overrides = parse_command_line(sys.argv[1:] if argv is None else argv, "python -m solution.train",
                                             DESCRIPTION)
        lifecycle.die_with_launcher()
        with StopRequest() as stop_request:
            cfg = load_config(path, overrides)
            check_inputs(cfg)  # every file and folder it will read, before the data is read and featurised
            check_model_settings(cfg, path or "config")
            run_training(cfg, stop_request)
    except (ValueError, FileNotFoundError) as e:  # NQFormatError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        if not lifecycle.lost_peer(e):
            raise
        # Every survivor says it (rank 0 may be the one that is gone); the launcher restarts them all.
        print(f"error: rank {lifecycle.launcher_rank()}: another rank is gone (killed, or its node lost): "
              f"{str(e).splitlines()[0]}; exiting 1 so that the launcher can restart the run "
              "(--resume auto continues from latest)", file=sys.stderr)
        return EXIT_FAULT
    except (TrainingStopped, StoppedBySignal, CheckpointFailed) as e:
        code = getattr(e, "exit_code", EXIT_FAULT)  # a checkpoint that did not fit on the disk: a fault
        if lifecycle.launcher_rank() == 0:  # one line, not one per rank
            print(f"error: {e}" if code in (EXIT_FAULT, EXIT_CONFIG) else str(e), file=sys.stderr)
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())

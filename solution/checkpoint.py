"""Resumable training checkpoints: where they live, when they are written, how they are read back.

output_dir/
  checkpoint-N/        one per save: Accelerate's save_state (DeepSpeed's ZeRO partitions, FSDP's
                       distributed checkpoint, or plain weights), trainer_state.json, model_meta/
  checkpoint-N.tmp/    a save in progress; renamed to checkpoint-N only once complete
  latest               the name of the newest complete checkpoint, written after the rename

The `Checkpointer` is the only code that writes, prunes or loads these (the trainer hands it the
scheduler and the run's fingerprint); `checkpoint_kind` and `verify_checkpoint_files` read a
checkpoint's layout for `solution.consolidate` too. Nothing here imports accelerate or deepspeed at
module level: consolidation runs without them installed for plain checkpoints.
"""

from __future__ import annotations

import errno
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch

from solution.fsutil import atomic_write_text, disk_full_message, publish_dir

CHECKPOINT_FORMAT = "nq-bert-qa-checkpoint/1"
LATEST = "latest"  # output_dir/latest names the newest complete checkpoint; written last
STATE_FILE = "trainer_state.json"
DS_TAG = "pytorch_model"  # the tag Accelerate's save_state gives DeepSpeed's save_checkpoint
FSDP_DIR = "pytorch_model_fsdp_0"


def checkpoint_name(step: int) -> str:
    return f"checkpoint-{step}"


def numbered_checkpoints(output_dir: Path) -> list:
    """output_dir/checkpoint-N directories, oldest first (`.tmp` leftovers of a killed save excluded)."""
    found = [p for p in Path(output_dir).glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))


def find_checkpoint(output_dir: Path, spec: str) -> Optional[Path]:
    """`latest` -> output_dir/latest's checkpoint (else the newest complete checkpoint-N); `auto` -> the
    same, or None when output_dir holds no complete checkpoint (start fresh); else a path."""
    output_dir = Path(output_dir)
    if spec in ("latest", "auto"):
        pointer = output_dir / LATEST
        if pointer.is_file():
            named = output_dir / pointer.read_text().strip()
            if (named / STATE_FILE).is_file():
                return named
        done = [p for p in numbered_checkpoints(output_dir) if (p / STATE_FILE).is_file()]
        if not done and spec == "latest":
            raise ValueError(f"resume_from_checkpoint latest: no complete checkpoint-N in {output_dir}")
        return done[-1] if done else None
    path = Path(spec)
    if not (path / STATE_FILE).is_file():
        raise ValueError(f"{path}: not a checkpoint (no {STATE_FILE}); checkpoints are "
                         "output_dir/checkpoint-N, written every save_steps")
    return path


@dataclass
class TrainerState:
    """trainer_state.json: where the run was, the scheduler's state (JSON, not a pickle), and the
    fingerprint of the run that wrote it (strategy, batch shape, ...), stored flat beside them."""

    step: int
    epoch: int
    batches_into_epoch: int
    scheduler: dict
    fingerprint: dict = field(default_factory=dict)
    format: str = CHECKPOINT_FORMAT

    def to_json(self) -> str:
        record = {"format": self.format, "step": self.step, "epoch": self.epoch,
                  "batches_into_epoch": self.batches_into_epoch, "scheduler": self.scheduler, **self.fingerprint}
        return json.dumps(record, indent=2) + "\n"

    @classmethod
    def read(cls, ckpt: Path) -> "TrainerState":
        path = Path(ckpt) / STATE_FILE
        record = json.loads(path.read_text())
        if record.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{path}: format {record.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
        known = {"format", "step", "epoch", "batches_into_epoch", "scheduler"}
        return cls(record["step"], record["epoch"], record["batches_into_epoch"], record["scheduler"],
                   {k: v for k, v in record.items() if k not in known})


class CheckpointDiskFull(Exception):
    """A save ran out of space: the half-written `.tmp` is gone and `latest` is as it was; one line."""


class Checkpointer:
    """Decides when to save (`save_due(step, epoch_end)`, the config's), writes checkpoint-N atomically,
    moves `latest`, prunes beyond `save_total_limit`, and loads a checkpoint back after checking it fits.

    `write_meta(tmp_dir)` adds what consolidation needs (model_meta/) on the main process."""

    def __init__(self, accelerator, output_dir: Path, scheduler, fingerprint: dict,
                 save_due: Callable[[int, bool], bool], save_total_limit: Optional[int] = None,
                 write_meta: Callable[[Path], None] = lambda tmp: None, log: Callable[[str], None] = print):
        self.accelerator, self.out, self.scheduler = accelerator, Path(output_dir), scheduler
        self.fingerprint, self.save_due, self.save_total_limit = fingerprint, save_due, save_total_limit
        self.write_meta, self.log = write_meta, log
        self.saved_step: Optional[int] = None  # the step of the last checkpoint this run wrote

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    def maybe_save(self, step: int, epoch: int, batches_into_epoch: int, epoch_end: bool = False) -> Optional[Path]:
        if not self.save_due(step, epoch_end):
            return None
        return self.save(step, epoch, batches_into_epoch)

    def save_now(self, step: int, epoch: int, batches_into_epoch: int) -> Path:
        """This step's checkpoint, written unless it was just written (a stop request after a due save)."""
        if self.saved_step == step:
            return self.out / checkpoint_name(step)
        return self.save(step, epoch, batches_into_epoch)

    def save(self, step: int, epoch: int, batches_into_epoch: int) -> Path:
        """Write checkpoint-N; a full disk removes the half-written `.tmp` and leaves `latest` as it was."""
        tmp = self.out / f"{checkpoint_name(step)}.tmp"
        try:
            path = self._write(step, epoch, batches_into_epoch, tmp)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # the pointer's own temporary file is removed by fsutil
            raise CheckpointDiskFull(f"{disk_full_message(tmp)}; {self.last_good()}") from None
        self.saved_step = step
        return path

    def _write(self, step: int, epoch: int, batches_into_epoch: int, tmp: Path) -> Path:
        acc = self.accelerator
        final = self.out / checkpoint_name(step)
        if self.is_main and tmp.exists():
            shutil.rmtree(tmp)
        acc.wait_for_everyone()
        acc.save_state(str(tmp))
        acc.wait_for_everyone()
        if self.is_main:
            self.write_meta(tmp)
            state = TrainerState(step, epoch, batches_into_epoch, self.scheduler.state_dict(), self.fingerprint)
            (tmp / STATE_FILE).write_text(state.to_json())
            if final.exists():
                shutil.rmtree(final)
            publish_dir(tmp, final)  # a checkpoint is complete or absent, never half-written
            atomic_write_text(self.out / LATEST, final.name + "\n")  # then the pointer; then, only now, pruning
            self.prune()
        acc.wait_for_everyone()
        self.log(f"checkpoint: {final}")
        return final

    def prune(self) -> None:
        """Keep the newest `save_total_limit` checkpoints (all when it is unset)."""
        if not self.save_total_limit:
            return
        for old in numbered_checkpoints(self.out)[:-self.save_total_limit]:
            shutil.rmtree(old, ignore_errors=True)

    def last_good(self) -> str:
        pointer = self.out / LATEST
        if pointer.is_file():
            return f"the last good checkpoint is {self.out / pointer.read_text().strip()} (latest)"
        return "no checkpoint was written"

    def load(self, path: Path, resume_key: dict, batches_per_epoch: int) -> tuple[int, int, int]:
        """Restore engine, RNG and scheduler state; returns (step, epoch, batches into it) to go on from."""
        state = TrainerState.read(path)
        for key, mine in resume_key.items():
            if state.fingerprint.get(key) != mine:
                raise ValueError(f"{path}: field '{key}' is {state.fingerprint.get(key)!r} in the checkpoint but "
                                 f"{mine!r} in this run; resume with the same strategy and batch "
                                 "(or consolidate it with python -m solution.consolidate and start anew)")
        verify_checkpoint_files(path)  # the engines' loaders unpickle; nothing but tensors may reach them
        for rank in range(self.accelerator.num_processes):
            # Accelerate only logs "Could not load random states" and goes on: dropout would then differ.
            rng = path / f"random_states_{rank}.pkl"
            if not rng.is_file():
                raise ValueError(f"{rng}: missing; rank {rank}'s RNG state is needed to continue exactly "
                                 "(dropout); resume from another checkpoint")
        self.accelerator.load_state(str(path))
        self.scheduler.load_state_dict(state.scheduler)
        step, epoch, batches = state.step, state.epoch, state.batches_into_epoch
        if batches >= batches_per_epoch:  # the checkpoint closed its epoch
            epoch, batches = epoch + 1, 0
        self.log(f"resumed from {path}: step {step}, epoch {epoch}, {batches} batches into it")
        return step, epoch, batches


# -- layout readers (also used by solution.consolidate) ------------------------------------------
def checkpoint_kind(ckpt: Path) -> str:
    if (ckpt / DS_TAG).is_dir() and any((ckpt / DS_TAG).glob("*model_states.pt")):
        return "deepspeed"
    if (ckpt / FSDP_DIR).is_dir():
        return "fsdp"
    if (ckpt / "model.safetensors").is_file() or (ckpt / "pytorch_model.bin").is_file():
        return "plain"
    raise ValueError(f"{ckpt}: no weights found (expected {DS_TAG}/ from DeepSpeed, {FSDP_DIR}/ from FSDP, "
                     "or model.safetensors)")


def _safe_globals() -> list:
    """The only non-tensor objects a checkpoint may hold: numpy RNG state (as Accelerate allows when
    it reads its own random_states files), DeepSpeed's ZeRO stage enum and its loss scalers (classes
    holding numbers)."""
    safe = []
    try:
        from accelerate.utils.other import TORCH_SAFE_GLOBALS

        safe += list(TORCH_SAFE_GLOBALS)
    except ImportError:
        pass
    try:
        from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
        from deepspeed.runtime.zero.config import ZeroStageEnum
        from deepspeed.utils.tensor_fragment import fragment_address

        # Plain-valued classes DeepSpeed pickles into its checkpoints (an enum, numbers, two ints).
        safe += [ZeroStageEnum, LossScaler, DynamicLossScaler, fragment_address]
    except ImportError:
        pass
    return safe


def verify_checkpoint_files(ckpt: Path, show_progress: bool = False) -> int:
    """Open every pickled file of a checkpoint with torch.load(weights_only=True) before anything reads it.

    DeepSpeed's own loaders (resume, zero_to_fp32) call torch.load(weights_only=False), which would run
    any code a tampered file carries. Checked first with the safe loader, a file that holds anything
    beyond tensors, numbers, containers and the types above is refused, naming it. Safetensors files
    (Accelerate's model.safetensors) are checked to be whole, so a truncated one is named here rather
    than failing inside Accelerate's loader. Returns the number of files checked; `show_progress`: a bar
    over the files (ZeRO checkpoints hold one per rank)."""
    from solution.cli import progress
    from solution.model import check_weights_file

    files = sorted(p for p in Path(ckpt).rglob("*") if p.suffix in (".pt", ".bin", ".pkl", ".pth"))
    with torch.serialization.safe_globals(_safe_globals()):
        for path in progress(files, desc="consolidate: check files", unit=" files", disable=not show_progress):
            try:
                torch.load(path, map_location="cpu", weights_only=True)
            except Exception as e:
                found = re.search(r"GLOBAL (\S+)", str(e))
                if found:
                    raise ValueError(f"{path}: refusing to load a checkpoint file that holds more than tensors "
                                     f"and plain values (it names {found.group(1)})") from None
                first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                raise ValueError(f"{path}: unreadable checkpoint file, truncated or corrupt ({first})") from None
    weights = sorted(Path(ckpt).rglob("*.safetensors"))
    for path in weights:
        check_weights_file(path)
    return len(files) + len(weights)

"""A checkpoint's names and its trainer_state.json, and finding the checkpoint to resume.

output_dir/
  checkpoint-N/        one per save: Accelerate's save_state (DeepSpeed's ZeRO partitions, FSDP's
                       distributed checkpoint, or plain weights), trainer_state.json, model_meta/, and
                       manifest.json (every file's size and sha256), written last
  checkpoint-N.tmp/    a save in progress; renamed to checkpoint-N only once complete
  latest               the name of the newest complete checkpoint, written once the renamed checkpoint
                       has been read back from storage and matches its manifest

The `Checkpointer` (checkpoints.checkpointer) is the only code that writes, prunes or loads these.
Nothing here imports accelerate or deepspeed at module level.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Callable, Optional, get_type_hints

from solution.checkpoints.layout import MANIFEST, verify_manifest
from solution.common.settings import read_settings_file
from solution.common.values import json_type_ok

CHECKPOINT_FORMAT = "nq-bert-qa-checkpoint/1"
LATEST = "latest"  # output_dir/latest names the newest complete checkpoint; written last
STATE_FILE = "trainer_state.json"


def checkpoint_name(step: int) -> str:
    return f"checkpoint-{step}"


def checkpoint_step(path: Path) -> Optional[int]:
    """N of a checkpoint-N folder; None for any other name."""
    tail = Path(path).name.split("-")[-1]
    return int(tail) if Path(path).name.startswith("checkpoint-") and tail.isdigit() else None


def numbered_checkpoints(output_dir: Path) -> list:
    """output_dir/checkpoint-N directories, oldest first (`.tmp` leftovers of a killed save excluded)."""
    found = [p for p in Path(output_dir).glob("checkpoint-*") if checkpoint_step(p) is not None]
    return sorted(found, key=checkpoint_step)


def find_checkpoint(output_dir: Path, spec: str, log: Callable[[str], None] = lambda msg: None) -> Optional[Path]:
    """`latest` -> the checkpoint output_dir/latest names; `auto` -> the same, or None when output_dir holds
    no complete checkpoint (start fresh); else the path given.

    When latest's checkpoint is gone, its trainer_state.json unreadable or its files do not match its
    manifest (or there is no `latest`), the most recently saved checkpoint that reads and verifies is
    taken instead, and only one below latest's step: one past it was left behind when a run resumed an
    older checkpoint, and is no ancestor of latest's. `log` says what was passed over and why; when
    nothing is left, the error does. A checkpoint without a manifest is taken unverified only when no
    checkpoint saved before it has one (all written before manifests); else its manifest was lost, and it
    is passed over like one that fails its manifest."""
    output_dir = Path(output_dir)
    if spec not in ("latest", "auto"):
        path = Path(spec)
        if not (path / STATE_FILE).is_file():
            raise ValueError(f"{path}: not a checkpoint (no {STATE_FILE}); checkpoints are "
                             "output_dir/checkpoint-N, written every save_steps")
        return path
    done = [p for p in numbered_checkpoints(output_dir) if (p / STATE_FILE).is_file()]
    named, skipped = _named_by_latest(output_dir), {}
    if named is not None and _read_or_note(named, skipped) is not None and _verified_or_note(named, skipped):
        return named
    below = checkpoint_step(named) if named is not None else None
    candidates = [p for p in done if p != named and (below is None or checkpoint_step(p) < below)]
    chosen = _most_recently_saved(candidates, skipped)
    while chosen is not None and not _verified_or_note(chosen, skipped):  # hashed newest first, until one holds
        candidates.remove(chosen)
        chosen = _most_recently_saved(candidates, skipped)
    passed_over = _passed_over(skipped, named, chosen)
    for line in passed_over:
        log(f"resume {spec}: {line}")
    if chosen is not None:
        return chosen
    beyond = [p.name for p in done if p not in candidates and p != named]
    if beyond:
        passed_over.append(f"{', '.join(beyond)} past latest's {named.name} were left behind when an older "
                           "checkpoint was resumed (resume one by its path if it is the one wanted)")
    if passed_over:
        raise ValueError(f"resume_from_checkpoint {spec}: no readable checkpoint in {output_dir}; "
                         + "; ".join(passed_over))
    if spec == "latest":
        raise ValueError(f"resume_from_checkpoint latest: no complete checkpoint-N in {output_dir}")
    return None


def _named_by_latest(output_dir: Path) -> Optional[Path]:
    """The checkpoint folder output_dir/latest names (None: no pointer). One that leads outside output_dir,
    by its text (`../other/checkpoint-3`, an absolute path) or through a link, is refused: a resume would
    load another directory's checkpoint, and a run's pruning then count it as its own."""
    pointer = output_dir / LATEST
    if not pointer.is_file():
        return None
    home = output_dir.resolve()
    if pointer.is_symlink() and pointer.resolve().parent != home:
        raise ValueError(f"{pointer}: a link to {pointer.resolve()}, outside output_dir {home}; latest must be "
                         "a file of output_dir naming one of its checkpoint-N folders")
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{pointer}: unreadable ({e}); it should name a checkpoint-N folder of output_dir") from None
    target = (output_dir / name).resolve()
    if target.parent != home:
        raise ValueError(f"{pointer}: names {name!r}, which is {target}, outside output_dir {home}; latest must "
                         "name one of output_dir's checkpoint-N folders (remove it to resume the newest one)")
    return output_dir / name


def _read_or_note(path: Path, skipped: dict) -> Optional["TrainerState"]:
    """The checkpoint's trainer state; None when it cannot be read, the reason kept in `skipped[path]`."""
    if not (path / STATE_FILE).is_file():
        skipped[path] = f"gone, or without {STATE_FILE}"
        return None
    try:
        return TrainerState.read(path)
    except (ValueError, OSError) as e:
        skipped[path] = str(e)
        return None


def _verified_or_note(path: Path, skipped: dict) -> bool:
    """Whether the checkpoint's files match its manifest (or it has none, as every checkpoint before it);
    the reason kept in `skipped`."""
    try:
        if not verify_manifest(path) and (witness := _earlier_with_manifest(path)) is not None:
            skipped[path] = (f"no {MANIFEST}, although {witness.name}, saved before it, has one: its files "
                             "cannot be checked")
            return False
        return True
    except ValueError as e:
        skipped[path] = str(e)
        return False


def _earlier_with_manifest(path: Path) -> Optional[Path]:
    """A checkpoint of the same output_dir at a lower step that has a manifest: the version that wrote
    `path` (after it) wrote manifests too. None: every earlier one predates manifests."""
    step = checkpoint_step(path)
    return next((p for p in numbered_checkpoints(path.parent)
                 if step is not None and checkpoint_step(p) < step and (p / MANIFEST).is_file()), None)


def _passed_over(skipped: dict, named: Optional[Path], chosen: Optional[Path]) -> list:
    """'skipped PATH (why)' for each unreadable checkpoint a resume would have preferred to `chosen`:
    latest's, then those of higher steps, newest first."""
    order = sorted(skipped, key=lambda p: (p != named, -(checkpoint_step(p) or 0)))
    return [f"skipped {p} ({skipped[p]})" for p in order
            if chosen is None or p == named or checkpoint_step(p) > checkpoint_step(chosen)]


def _most_recently_saved(paths: list, skipped: dict) -> Optional[Path]:
    """The readable checkpoint saved last, by the `saved_at` its trainer_state.json records (one written
    before that was recorded counts as older, by step)."""
    best = None
    for path in paths:
        state = _read_or_note(path, skipped)
        if state is not None:
            key = (state.saved_at is not None, state.saved_at or 0.0, state.step)
            if best is None or key > best[0]:
                best = (key, path)
    return best[1] if best else None


@dataclass
class TrainerState:
    """trainer_state.json: where the run was, the scheduler's state (JSON, not a pickle), and the
    fingerprint of the run that wrote it (strategy, batch shape, ...), stored flat beside them.

    The position is `samples_into_epoch`: samples of the epoch's global order already trained (the
    shuffle is a function of seed and epoch), so a run with another world size or per-device batch
    finds the same place. `batches_into_epoch` is the writer's own count (per rank), kept for reading."""

    step: int
    epoch: int
    batches_into_epoch: int
    scheduler: dict
    fingerprint: dict = field(default_factory=dict)
    format: str = CHECKPOINT_FORMAT
    samples_into_epoch: Optional[int] = None
    saved_at: Optional[float] = None  # time.time() of the save: which of two lineages was written last
    # The checkpoint this one continues, {"checkpoint": "checkpoint-N", "saved_at": its saved_at}: the same
    # run's previous save, or the checkpoint of output_dir it resumed (null: neither). Its saved_at tells it
    # from a later checkpoint of the same name.
    parent: Optional[dict] = None

    def to_json(self) -> str:
        record = {"format": self.format, "step": self.step, "epoch": self.epoch,
                  "batches_into_epoch": self.batches_into_epoch, "samples_into_epoch": self.samples_into_epoch,
                  "saved_at": self.saved_at, "parent": self.parent, "scheduler": self.scheduler, **self.fingerprint}
        return json.dumps(record, indent=2) + "\n"

    def samples(self) -> int:
        """Samples of the global order into the epoch; a checkpoint from before `samples_into_epoch`
        counted batches per rank, each of per-device batch x world size samples."""
        if self.samples_into_epoch is not None:
            return self.samples_into_epoch
        fp = self.fingerprint
        return self.batches_into_epoch * fp.get("per_device_train_batch_size", 1) * fp.get("world_size", 1)

    @classmethod
    def read(cls, ckpt: Path) -> "TrainerState":
        """trainer_state.json, checked before anything acts on it: unreadable JSON, a missing or mistyped
        field, or a counter no run can have written is one line naming the file and the field."""
        path = Path(ckpt) / STATE_FILE
        record = read_settings_file(str(path), "checkpoint state")
        if not isinstance(record, dict):
            raise ValueError(f"{path}: must hold a JSON object, got {type(record).__name__}")
        if record.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{path}: format {record.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
        hints, own = get_type_hints(cls), {}
        for f in fields(cls):
            if f.name == "fingerprint":
                continue
            if f.name not in record:
                if f.default is MISSING:
                    raise ValueError(f"{path}: field '{f.name}' is missing")
                continue
            own[f.name] = record[f.name]
            if not json_type_ok(own[f.name], hints[f.name]):
                raise ValueError(f"{path}: field '{f.name}' must be {_type_name(hints[f.name])}, "
                                 f"got {short_value(own[f.name])}")
        state = cls(**own, fingerprint={k: v for k, v in record.items() if k not in own})
        state.check(path)
        return state

    def check(self, path: Path) -> None:
        """Counters a run can have written: none negative, the step within the writer's run, the epoch at
        most the step (every epoch is at least one optimizer step), the samples within one epoch."""
        fp = self.fingerprint
        for name in ("per_device_train_batch_size", "world_size", "train_windows", "num_optimizer_steps"):
            if name in fp and not (json_type_ok(fp[name], int) and fp[name] >= 1):
                raise ValueError(f"{path}: field '{name}' must be a positive integer, got {short_value(fp[name])}")
        for name in ("step", "epoch", "batches_into_epoch", "samples_into_epoch"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{path}: field '{name}' is {value}; a counter is never negative")
        if self.step > fp.get("num_optimizer_steps", self.step):
            raise ValueError(f"{path}: field 'step' is {self.step}, beyond the {fp['num_optimizer_steps']} "
                             "optimizer steps of the run that wrote it (field 'num_optimizer_steps')")
        if self.epoch > self.step:
            raise ValueError(f"{path}: field 'epoch' is {self.epoch} at step {self.step}; every epoch is at "
                             "least one optimizer step")
        if self.parent is not None and not _is_link(self.parent):
            raise ValueError(f"{path}: field 'parent' must be {{\"checkpoint\": \"checkpoint-N\", \"saved_at\": "
                             f"a number or null}}, got {short_value(self.parent)}")
        per_batch = fp.get("per_device_train_batch_size", 1) * fp.get("world_size", 1)
        if "train_windows" in fp and self.samples() > -(-fp["train_windows"] // per_batch) * per_batch:
            raise ValueError(f"{path}: field 'samples_into_epoch' is {self.samples()}, beyond an epoch of "
                             f"{fp['train_windows']} windows (field 'train_windows')")


def _is_link(parent: dict) -> bool:
    """A parent as `Checkpointer` records it: a checkpoint-N name in the same output_dir, and its saved_at."""
    name = parent.get("checkpoint")
    return (isinstance(name, str) and Path(name).name == name and checkpoint_step(name) is not None
            and json_type_ok(parent.get("saved_at"), Optional[float]))


def _type_name(typ) -> str:
    names = {int: "an integer", dict: "an object", Optional[int]: "an integer or null",
             Optional[float]: "a number or null", Optional[dict]: "an object or null"}
    return names.get(typ, str(typ))


def short_value(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class CheckpointFailed(Exception):
    """A save that did not produce a good checkpoint; `latest` is as it was; its text is one line."""


class CheckpointDiskFull(CheckpointFailed):
    """A save ran out of space: the half-written `.tmp` is gone and `latest` is as it was; one line."""


class CheckpointCorrupt(CheckpointFailed):
    """A checkpoint read back from storage right after the save does not match its manifest."""


class CheckpointUnwritable(CheckpointFailed):
    """The storage refused the save (permissions, a read-only filesystem, a quota, an I/O error)."""

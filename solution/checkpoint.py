"""Resumable training checkpoints: where they live, when they are written, how they are read back.

output_dir/
  checkpoint-N/        one per save: Accelerate's save_state (DeepSpeed's ZeRO partitions, FSDP's
                       distributed checkpoint, or plain weights), trainer_state.json, model_meta/, and
                       manifest.json (every file's size and sha256), written last
  checkpoint-N.tmp/    a save in progress; renamed to checkpoint-N only once complete
  latest               the name of the newest complete checkpoint, written once the renamed checkpoint
                       has been read back from storage and matches its manifest

The `Checkpointer` is the only code that writes, prunes or loads these (the trainer hands it the
scheduler and the run's fingerprint). What the engines' files inside are called, which engine wrote
them, and the check that they hold only data is solution.checkpoint_layout's, which
solution.consolidate reads too. Nothing here imports accelerate or deepspeed at module level.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import threading
import time
from dataclasses import MISSING, dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Callable, Optional, get_type_hints

import torch

from solution.checkpoint_layout import (
    DS_TAG,
    MANIFEST,
    checkpoint_kind,
    full_state_dict,
    loadable_globals,
    verify_checkpoint_files,
    verify_manifest,
    write_manifest,
)
from solution.config import optimizer_family, read_settings_file
from solution.fsutil import atomic_write_text, disk_full_message, out_of_space, publish_dir, removed_if_disk_full
from solution.model import json_type_ok

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
    nothing is left, the error does. A checkpoint without a manifest (written before manifests) is
    taken unverified."""
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
    """Whether the checkpoint's files match its manifest (or it has none); the reason kept in `skipped`."""
    try:
        verify_manifest(path)
        return True
    except ValueError as e:
        skipped[path] = str(e)
        return False


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
                                 f"got {_short(own[f.name])}")
        state = cls(**own, fingerprint={k: v for k, v in record.items() if k not in own})
        state.check(path)
        return state

    def check(self, path: Path) -> None:
        """Counters a run can have written: none negative, the step within the writer's run, the epoch at
        most the step (every epoch is at least one optimizer step), the samples within one epoch."""
        fp = self.fingerprint
        for name in ("per_device_train_batch_size", "world_size", "train_windows", "num_optimizer_steps"):
            if name in fp and not (json_type_ok(fp[name], int) and fp[name] >= 1):
                raise ValueError(f"{path}: field '{name}' must be a positive integer, got {_short(fp[name])}")
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
                             f"a number or null}}, got {_short(self.parent)}")
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


def _short(value) -> str:
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


# -- asynchronous saves: copies taken at the step, bytes written by a thread -------------------------------
WRITTEN_MARK = ".written-rank-{}"  # in checkpoint-N.tmp: rank R's files are complete (removed before the manifest)
FAILED_MARK = ".failed-rank-{}"  # ... or its write failed; the file holds the error's line
MARK_POLL_S = 0.05


def cpu_copy(obj, storages: dict):
    """`obj` with every tensor copied into CPU memory of its own, its structure (dicts, lists, tuples) rebuilt
    around them and anything else deep-copied. Tensors that share a storage share the copy of it (`storages`,
    by address and size), so torch.save writes the bytes it writes for `obj`; a parameter stays a parameter.
    Not copy.deepcopy: it refuses tensors that are not graph leaves (DeepSpeed's flat partitions are views)."""
    if isinstance(obj, torch.Tensor) and type(obj) in (torch.Tensor, torch.nn.Parameter):
        source = obj.untyped_storage()
        key = (source.data_ptr(), source.nbytes())
        storage = storages.get(key) if source.nbytes() else None
        if storage is None:
            storage = storages[key] = source.cpu().clone() if source.device.type == "cpu" else source.cpu()
        copied = torch.empty(0, dtype=obj.dtype).set_(storage, obj.storage_offset(), obj.size(), obj.stride())
        if isinstance(obj, torch.nn.Parameter):
            return torch.nn.Parameter(copied, requires_grad=obj.requires_grad)
        return copied.requires_grad_(obj.requires_grad)
    if isinstance(obj, dict):
        copied = copy.copy(obj)  # its own type (OrderedDict), its attributes (a state dict's _metadata)
        for key, value in obj.items():
            copied[key] = cpu_copy(value, storages)
        return copied
    if isinstance(obj, list):
        return [cpu_copy(value, storages) for value in obj]
    if isinstance(obj, tuple):
        values = [cpu_copy(value, storages) for value in obj]
        return type(obj)(*values) if hasattr(obj, "_fields") else type(obj)(values)
    return copy.deepcopy(obj)


class DeferredWrites:
    """While open, what Accelerate's save_state writes into `tmp` from this thread is copied at once and
    written later (`jobs`, `futures`), whatever the engine: torch.save and safetensors' save_file (plain
    weights, optimizer.bin, DeepSpeed's model and ZeRO files, RNG states) get a deep copy of their object
    (tensors copied; views of one storage stay views of one copy, so the bytes are those a direct save
    writes); FSDP2's torch.distributed.checkpoint.save becomes its async_save, which stages a CPU copy
    itself, on a gloo group of its own (`group(index)`). Writes elsewhere, or from another thread (DCP's
    own writer calls torch.save on streams), pass through unchanged."""

    def __init__(self, tmp: Path, group: Callable[[int], object]):
        self.tmp, self.group = os.path.abspath(tmp), group
        self.jobs: list = []  # callables, run in order by the writer thread
        self.futures: list = []  # DCP's async_save results
        self._owner = threading.get_ident()
        self._patched: list = []

    def __enter__(self) -> "DeferredWrites":
        import accelerate.utils.other as accelerate_io
        import torch.distributed.checkpoint as dcp

        for module, name, wrap in ((torch, "save", self._deferred), (accelerate_io, "safe_save_file", self._deferred),
                                   (dcp, "save", self._dcp_async)):
            original = getattr(module, name)
            self._patched.append((module, name, original))
            setattr(module, name, wrap(original))
        return self

    def __exit__(self, *exc) -> None:
        for module, name, original in reversed(self._patched):
            setattr(module, name, original)

    def _mine(self, path) -> bool:
        return (threading.get_ident() == self._owner and isinstance(path, (str, os.PathLike))
                and os.path.abspath(path).startswith(self.tmp + os.sep))

    def _deferred(self, write: Callable) -> Callable:
        def deferred(obj, f, *args, **kwargs):
            if not self._mine(f):
                return write(obj, f, *args, **kwargs)
            copied = cpu_copy(obj, {})  # the live tensors move on with the next optimizer step
            self.jobs.append(lambda: write(copied, f, *args, **kwargs))
        return deferred

    def _dcp_async(self, save: Callable) -> Callable:
        def deferred(state_dict, *, storage_writer=None, checkpoint_id=None, **kwargs):
            where = checkpoint_id or getattr(storage_writer, "path", None)
            if where is None or not self._mine(where):
                return save(state_dict, storage_writer=storage_writer, checkpoint_id=checkpoint_id, **kwargs)
            from torch.distributed.checkpoint import async_save

            kwargs["process_group"] = self.group(len(self.futures))
            result = async_save(state_dict, storage_writer=storage_writer, checkpoint_id=checkpoint_id, **kwargs)
            self.futures.append(getattr(result, "upload_completion", result))
        return deferred


class BackgroundSave:
    """One checkpoint written by a thread: this rank's deferred writes, then a mark in `tmp` saying so (or
    why not); on the main process (`publish` given) it then waits for every rank's mark and publishes. No
    collective runs in the thread: the marks are files, on the storage every rank shares."""

    def __init__(self, step: int, writes: DeferredWrites, tmp: Path, rank: int, num_ranks: int,
                 publish: Optional[Callable[[], None]], log: Callable[[str], None]):
        self.step, self.writes, self.tmp, self.rank, self.num_ranks = step, writes, Path(tmp), rank, num_ranks
        self.publish, self.log = publish, log
        self.error: Optional[BaseException] = None
        self.seconds = 0.0  # from the start of the write to the end of the thread's work
        self.written = threading.Event()  # this rank's files are done (or failed)
        self.cancelled = threading.Event()  # another rank failed: the main process stops waiting for it
        self.thread = threading.Thread(target=self._run, name=f"checkpoint-{step}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        started = time.perf_counter()
        try:
            self._write_mine()
            self.written.set()
            if self.publish is not None:
                self._wait_for_every_rank()
                self.publish()
                self.log(f"checkpoint: {self.tmp.with_suffix('')} (written in the background)")
        except BaseException as e:  # kept for Checkpointer.wait(), which raises it on every rank
            self.error = e
        finally:
            self.written.set()
            self.seconds = time.perf_counter() - started

    def _write_mine(self) -> None:
        try:
            for job in self.writes.jobs:
                job()
            for future in self.writes.futures:
                future.result()
        except BaseException as e:
            with contextlib.suppress(OSError):  # a full disk may refuse the mark too: wait() still learns of it
                (self.tmp / FAILED_MARK.format(self.rank)).write_text(f"{type(e).__name__}: {e}"[:2000])
            raise
        (self.tmp / WRITTEN_MARK.format(self.rank)).write_text("")

    def _wait_for_every_rank(self) -> None:
        """Every rank's mark (then removed: the manifest lists the checkpoint's files only); a failed rank's
        error raised here, naming it."""
        while not self.cancelled.is_set():
            for rank in range(self.num_ranks):
                failed = self.tmp / FAILED_MARK.format(rank)
                if failed.is_file():
                    raise RuntimeError(f"rank {rank}: {failed.read_text()}")
            marks = [self.tmp / WRITTEN_MARK.format(rank) for rank in range(self.num_ranks)]
            if all(mark.is_file() for mark in marks):
                for mark in marks:
                    mark.unlink()
                return
            time.sleep(MARK_POLL_S)
        raise CheckpointFailed(f"checkpoint-{self.step}: another rank's write failed")

    def failure(self, last_good: Callable[[], str]) -> Optional[tuple]:
        """(the CheckpointFailed class, its line) when this rank's thread failed; None when it did not."""
        e = self.error
        if e is None:
            return None
        if isinstance(e, CheckpointFailed):
            return type(e), str(e)
        if out_of_space(e, self.tmp):
            return CheckpointDiskFull, f"{disk_full_message(self.tmp)}; {last_good()}"
        what = e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
        where = getattr(e, "filename", None) or self.tmp
        return CheckpointUnwritable, (f"{where}: the background write of checkpoint-{self.step} failed ({what}); "
                                      f"{last_good()}")


MIN_KEPT = 2  # pruning keeps at least this many: a checkpoint that fails its manifest needs one to fall back to


class Checkpointer:
    """Decides when to save (`save_due(step, epoch_end)`, the config's), writes checkpoint-N atomically,
    moves `latest`, prunes beyond `save_total_limit`, and loads a checkpoint back after checking it fits.

    `write_meta(tmp_dir)` adds what consolidation needs (model_meta/) on the main process."""

    def __init__(self, accelerator, output_dir: Path, scheduler, fingerprint: dict,
                 save_due: Callable[[int, bool], bool], save_total_limit: Optional[int] = None,
                 write_meta: Callable[[Path], None] = lambda tmp: None, log: Callable[[str], None] = print,
                 async_save: bool = False, checkpoint_group: Callable[[int], object] = lambda index: None,
                 record: Callable[[dict], None] = lambda entry: None):
        self.accelerator, self.out, self.scheduler = accelerator, Path(output_dir), scheduler
        self.fingerprint, self.save_due, self.save_total_limit = fingerprint, save_due, save_total_limit
        self.write_meta, self.log = write_meta, log
        self.async_save, self.checkpoint_group, self.record = async_save, checkpoint_group, record
        self.saved_step: Optional[int] = None  # the step of the last checkpoint this run wrote
        self.parent: Optional[dict] = None  # the checkpoint the next save continues (TrainerState.parent)
        self.pending: Optional[BackgroundSave] = None  # an asynchronous save still being written

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def samples_per_batch(self) -> int:
        """Samples of the global order one batch of this run covers: per-device batch x world size."""
        return self.fingerprint.get("per_device_train_batch_size", 1) * self.accelerator.num_processes

    def maybe_save(self, step: int, epoch: int, batches_into_epoch: int, epoch_end: bool = False) -> Optional[Path]:
        if not self.save_due(step, epoch_end):
            return None
        return self.save(step, epoch, batches_into_epoch)

    def save_now(self, step: int, epoch: int, batches_into_epoch: int) -> Path:
        """This step's checkpoint, written unless it was just written (a stop request after a due save), and
        complete on return: a stop waits for an asynchronous write before the process exits."""
        path = self.out / checkpoint_name(step) if self.saved_step == step else self.save(step, epoch, batches_into_epoch)
        self.wait()
        return path

    def save(self, step: int, epoch: int, batches_into_epoch: int) -> Path:
        """Write checkpoint-N; a full disk removes the half-written `.tmp` and leaves `latest` as it was, as
        does any other refusal of the storage (one line naming the path and the error). With async_save the
        files are written in the background, and checkpoint-N is complete only after `wait()`."""
        self.wait()  # the previous asynchronous save first: its failure stops the run here
        tmp = self.out / f"{checkpoint_name(step)}.tmp"
        started = time.perf_counter()
        try:
            with removed_if_disk_full(tmp, lambda: CheckpointDiskFull(f"{disk_full_message(tmp)}; {self.last_good()}")):
                path = self._write(step, epoch, batches_into_epoch, tmp)  # `latest`'s temporary file: fsutil removes it
        except OSError as e:
            raise self._unwritable(step, e, tmp) from None
        self.saved_step = step
        self.record({"event": "checkpoint", "step": step, "async": self.async_save,
                     "blocked_s": time.perf_counter() - started})
        return path

    def _unwritable(self, step: int, error: OSError, tmp: Path) -> CheckpointUnwritable:
        where = error.filename or tmp
        return CheckpointUnwritable(f"{where}: cannot write checkpoint-{step} ({error.strerror or error}); "
                                    f"{self.last_good()}")

    def _write(self, step: int, epoch: int, batches_into_epoch: int, tmp: Path) -> Path:
        acc = self.accelerator
        final = self.out / checkpoint_name(step)
        if self.is_main and tmp.exists():
            shutil.rmtree(tmp)
        acc.wait_for_everyone()
        if self.async_save:
            return self._write_in_background(step, epoch, batches_into_epoch, tmp, final)
        acc.save_state(str(tmp))
        acc.wait_for_everyone()
        failure = None
        if self.is_main:
            try:
                self._publish(self._stage(step, epoch, batches_into_epoch, tmp), tmp, final)
            except CheckpointCorrupt as e:
                failure = str(e)
        failure = self._agree(failure)  # every rank stops on it, none waits for the main one in a collective
        if failure:
            raise CheckpointCorrupt(failure)
        self.log(f"checkpoint: {final}")
        return final

    def _write_in_background(self, step: int, epoch: int, batches_into_epoch: int, tmp: Path, final: Path) -> Path:
        """save_state with its writes deferred (copies of the state taken now), trainer state and model_meta/
        written now (they describe this step), the rest in a thread: this rank's files, then on the main
        process the wait for every rank's and `_publish`."""
        with DeferredWrites(tmp, self.checkpoint_group) as writes:
            self.accelerator.save_state(str(tmp))
        publish = None
        if self.is_main:
            state = self._stage(step, epoch, batches_into_epoch, tmp)
            publish = partial(self._publish, state, tmp, final)
        self.pending = BackgroundSave(step, writes, tmp, self.accelerator.process_index,
                                      self.accelerator.num_processes, publish, self.log)
        return final

    def wait(self) -> None:
        """Wait for an asynchronous save in progress (every rank calls it at the same point: a collective).
        When any rank's write or the publication failed, every rank raises CheckpointFailed here; a full disk
        removes the `.tmp`. `latest` names the new checkpoint only when it returns without error."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        started = time.perf_counter()
        pending.written.wait()  # this rank's files; then every rank learns whether any rank's write failed
        failure = self._first_failure(pending.failure(self.last_good))
        if failure is None:
            pending.thread.join()  # the main process publishes (the others' threads are done)
            failure = self._first_failure(pending.failure(self.last_good))
        else:
            pending.cancelled.set()
            pending.thread.join()
        self.record({"event": "checkpoint_written", "step": pending.step, "write_s": pending.seconds,
                     "wait_s": time.perf_counter() - started})
        if failure is None:
            return
        kind, message = failure
        if self.is_main and kind is CheckpointDiskFull:
            shutil.rmtree(pending.tmp, ignore_errors=True)
        raise kind(message)

    def _first_failure(self, mine: Optional[tuple]) -> Optional[tuple]:
        """The first rank's failure (an exception class and its line) among every rank's; on every rank."""
        if self.accelerator.num_processes == 1:
            return mine
        from accelerate.utils import gather_object

        return next((f for f in gather_object([mine]) if f is not None), None)

    def _stage(self, step: int, epoch: int, batches_into_epoch: int, tmp: Path) -> "TrainerState":
        """The main process, at the step saved: model_meta/ and trainer_state.json (the scheduler's state and
        the position now, whenever the engine's files are done)."""
        self.write_meta(tmp)
        samples = batches_into_epoch * self.samples_per_batch
        state = TrainerState(step, epoch, batches_into_epoch, self.scheduler.state_dict(), self.fingerprint,
                             samples_into_epoch=samples, saved_at=time.time(), parent=self.parent)
        (tmp / STATE_FILE).write_text(state.to_json())
        return state

    def _publish(self, state: "TrainerState", tmp: Path, final: Path) -> None:
        """The main process, once every rank's files are in `tmp`: the manifest last, the rename, the manifest
        checked against what the storage gives back, and only then `latest` and pruning."""
        write_manifest(tmp)
        if final.exists():
            self._make_room(final)
        publish_dir(tmp, final)  # a checkpoint is complete or absent, never half-written
        try:
            verify_manifest(final, from_storage=True)
        except ValueError as e:
            raise CheckpointCorrupt(f"{final} does not match its {MANIFEST} when read back right after the save "
                                    f"({e}): the storage did not keep what was written; {self.last_good()}") from None
        atomic_write_text(self.out / LATEST, final.name + "\n")  # then the pointer; then, only now, pruning
        self.parent = {"checkpoint": final.name, "saved_at": state.saved_at}
        self.prune()

    def _agree(self, failure: Optional[str]) -> Optional[str]:
        """The main process's outcome of the save, on every rank (a barrier as well)."""
        if self.accelerator.num_processes == 1:
            return failure
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([failure], from_process=0)[0]

    def _make_room(self, final: Path) -> None:
        """A checkpoint of this step is already there. This run's own (the one it resumed, saved again at
        its step) is replaced; one that a run left behind when this one resumed an older checkpoint is the
        user's, so it is moved to checkpoint-N.left-TIME (which no resume or pruning takes), not removed."""
        if final in self.lineage():
            shutil.rmtree(final)
            return
        aside = final.with_name(f"{final.name}.left-{time.strftime('%Y%m%dT%H%M%S')}")
        final.rename(aside)
        self.log(f"{final}: written by an earlier run, not this run's lineage; moved to {aside.name} to save this step")

    def prune(self) -> None:
        """Keep the newest `save_total_limit` checkpoints of this run's lineage (all when it is unset).

        The lineage is what this run wrote, the checkpoint it resumed and that one's ancestors (`lineage`),
        so a requeued job keeps the limit across restarts. A checkpoint outside it, left behind when this
        run resumed an older one, is not this run's to remove: it stays, however high its step. At least
        MIN_KEPT stay, whatever the limit: `--resume auto` falls back to the older one when the newest no
        longer matches its manifest."""
        if not self.save_total_limit:
            return
        for old in self.lineage()[max(self.save_total_limit, MIN_KEPT):]:
            shutil.rmtree(old, ignore_errors=True)

    def lineage(self) -> list:
        """This run's newest checkpoint and its ancestors in output_dir, newest first, by the parent each
        trainer_state.json names. The walk stops at a parent that is gone or unreadable, or whose name a
        later checkpoint took (its saved_at differs)."""
        found, link, below = [], self.parent, None
        while link is not None:
            path = self.out / link["checkpoint"]
            try:
                state = TrainerState.read(path)
            except (ValueError, OSError):
                break
            if state.saved_at != link["saved_at"] or (below is not None and state.step >= below):
                break
            found.append(path)
            link, below = state.parent, state.step
        return found

    def last_good(self) -> str:
        pointer = self.out / LATEST
        if pointer.is_file():
            return f"the last good checkpoint is {self.out / pointer.read_text().strip()} (latest)"
        return "no checkpoint was written"

    def load(self, path: Path, resume_key: dict, batches_per_epoch: int,
             target: Optional["ResumeTarget"] = None, manifest_checked: bool = False) -> tuple[int, int, int]:
        """Restore engine, RNG and scheduler state; returns (step, epoch, batches into it) to go on from.

        `resume_key`: what must match (global batch, schedule, model, data); the layout (world size,
        strategy, per-device batch against accumulation) may differ and picks the route (`resume_route`).
        `manifest_checked`: find_checkpoint verified the manifest already (`latest`, `auto`)."""
        state = TrainerState.read(path)  # JSON only: what must match is refused before any file is unpickled
        self._check_resume_key(path, state.fingerprint, resume_key)
        self._check_scheduler(path, state.scheduler)
        skip = self._skip_batches(path, state)
        if not (path / MANIFEST).is_file():
            self.log(f"WARNING: {path} has no {MANIFEST} (written by an older version): its files' sizes and "
                     "checksums are not checked")
        elif not manifest_checked:
            verify_manifest(path)  # a ValueError naming the file that differs
        verify_checkpoint_files(path)  # the engines' loaders unpickle; nothing but tensors may reach them
        self._continue_lineage(path, state)
        if self._is_latest(path):
            # A stop before the next step (in the evaluation a resumed run repeats) names this checkpoint
            # instead of writing it again.
            self.saved_step = state.step
        route = resume_route(state.fingerprint, self.fingerprint)
        same_world = state.fingerprint.get("world_size", self.accelerator.num_processes) == self.accelerator.num_processes
        if same_world:
            self._check_rng_files(path)
        if route == "native":
            self.accelerator.load_state(str(path))
        elif route == "universal":
            load_universal(path, target.model, self.accelerator, self.log)
        else:
            target.load_full_state(full_weights(path))
            if self.fingerprint.get("optim", "sgd") != "sgd":  # plain SGD keeps no state
                target.load_full_optimizer_state(full_optimizer_state(path, target.param_names, self.accelerator))
            if same_world:
                restore_rng(path, self.accelerator.process_index)
        if not same_world:
            reseed(target.seed if target else 0, state.step, self.accelerator.process_index, self.log)
        self.scheduler.load_state_dict(state.scheduler)
        if route != "native":  # load_state_dict restores the schedule's position, not the rate in the optimizer
            for group, lr in zip(self.scheduler.optimizer.param_groups, self.scheduler.get_last_lr()):
                group["lr"] = lr
        step, epoch = state.step, state.epoch
        if skip >= batches_per_epoch:  # the checkpoint closed its epoch
            epoch, skip = epoch + 1, 0
        self.log(f"resumed from {path} ({route}, {state.fingerprint.get('strategy')} x"
                 f"{state.fingerprint.get('world_size')}): step {step}, epoch {epoch}, {skip} batches into it")
        return step, epoch, skip

    def _skip_batches(self, path: Path, state: TrainerState) -> int:
        """This run's batches (per rank) to skip: the checkpoint's samples over this run's samples per batch."""
        per_batch = self.samples_per_batch
        samples = state.samples()
        if samples >= state.fingerprint.get("train_windows", samples + 1):
            return samples  # the checkpoint closed its epoch (its last batch may have been partial): none left
        if samples % per_batch:
            raise ValueError(f"{path}: field 'samples_into_epoch' is {samples}, not a multiple of this run's "
                             f"per-device batch x world size ({per_batch}); resume with a layout that divides it")
        return samples // per_batch

    def _check_resume_key(self, path: Path, saved: dict, resume_key: dict) -> None:
        """Every field of `resume_key` that differs from the checkpoint's, named with both values, in one
        error. A field the checkpoint does not record (an older version wrote it) cannot be checked: a
        warning names it, and the resume goes on."""
        changed, unrecorded = [], []
        for key, mine in resume_key.items():
            _compare(key, saved.get(key, MISSING), mine, changed, unrecorded)
        if changed:
            raise ValueError(f"{path}: {'; '.join(changed)}; {'it' if len(changed) == 1 else 'each'} must match to "
                             "resume (world size, strategy, per-device batch and accumulation may change), or "
                             "consolidate it with python -m solution.consolidate and start anew")
        if unrecorded:
            self.log(f"WARNING: {path / STATE_FILE} does not record {', '.join(unrecorded)} (written by an older "
                     "version): not checked; this run continues it only with the values of the run that wrote it")

    def note_earlier_checkpoints(self) -> None:
        """A fresh run into an output_dir that holds another run's checkpoints: not this run's lineage, so
        never pruned by it (`prune`); said once, at the start."""
        found = [p.name for p in numbered_checkpoints(self.out)]
        if found and self.is_main:
            self.log(f"{self.out}: {', '.join(found)} of an earlier run: kept, never pruned by this run; a save "
                     "of this run at the same step moves the old one to checkpoint-N.left-TIME")

    def _is_latest(self, path: Path) -> bool:
        """Whether `path` is the checkpoint output_dir/latest names."""
        pointer = self.out / LATEST
        try:
            return pointer.is_file() and (self.out / pointer.read_text().strip()).resolve() == Path(path).resolve()
        except (OSError, UnicodeDecodeError):
            return False

    def _continue_lineage(self, path: Path, state: TrainerState) -> None:
        """This run's saves continue `path` when it is a checkpoint of output_dir (see `prune`). Its
        checkpoints of higher steps belong to the run that went on from it before: kept, and said so."""
        if Path(path).resolve().parent != self.out.resolve() or checkpoint_step(path) is None:
            return
        self.parent = {"checkpoint": Path(path).name, "saved_at": state.saved_at}
        left = [p.name for p in numbered_checkpoints(self.out) if checkpoint_step(p) > state.step]
        if left:
            self.log(f"{self.out}: {', '.join(left)} went on from an earlier run past {Path(path).name}; kept, never "
                     "pruned by this run nor taken by --resume latest/auto; a save of this run at the same step "
                     "moves the old one to checkpoint-N.left-TIME")

    def _check_scheduler(self, path: Path, saved: dict) -> None:
        """The schedule's saved state holds what this run's scheduler keeps, each value of its type:
        torch's load_state_dict would otherwise fail later with a bare KeyError or TypeError."""
        for key, mine in self.scheduler.state_dict().items():
            where = f"{path / STATE_FILE}: field 'scheduler.{key}'"
            if key not in saved:
                raise ValueError(f"{where} is missing (this run's learning-rate scheduler keeps it)")
            if not json_type_ok(saved[key], type(mine)):
                raise ValueError(f"{where} must be {type(mine).__name__}, got {_short(saved[key])}")

    def _check_rng_files(self, path: Path) -> None:
        for rank in range(self.accelerator.num_processes):
            # Accelerate only logs "Could not load random states" and goes on: dropout would then differ.
            rng = path / f"random_states_{rank}.pkl"
            if not rng.is_file():
                raise ValueError(f"{rng}: missing; rank {rank}'s RNG state is needed to continue exactly "
                                 "(dropout); resume from another checkpoint")


def _compare(key: str, old, mine, changed: list, unrecorded: list) -> None:
    """The checkpoint's value of a field against this run's: a difference goes to `changed` ("field 'K' is
    OLD in the checkpoint but NEW in this run"; an object by each of its fields, as 'K.sub'), a field the
    checkpoint lacks (`old` is MISSING) to `unrecorded`."""
    if old is MISSING:
        unrecorded.append(key)
        return
    if isinstance(old, dict) and isinstance(mine, dict):
        for sub, value in mine.items():
            _compare(f"{key}.{sub}", old.get(sub, MISSING), value, changed, unrecorded)
        return
    if key == "optim" and isinstance(old, str):  # fused or not, AdamW's state is the same
        old, mine = optimizer_family(old), optimizer_family(mine)
    if old != mine:
        changed.append(f"field '{key}' is {old!r} in the checkpoint but {mine!r} in this run")


# -- resuming in another layout: the route, the universal checkpoint, full state, RNG ---------------
@dataclass
class ResumeTarget:
    """What a resume outside Accelerate's own load_state needs from the trainer."""

    model: object  # the prepared model (a DeepSpeed engine for the universal route)
    load_full_state: Callable[[dict], None]  # full fp32 weights by name -> this run's engine
    load_full_optimizer_state: Callable[[dict], None]  # Adam's state by name (`full_optimizer_state`) -> its optimizer
    param_names: list  # the optimizer's parameters by name, in param_groups order (optimizer.bin numbers them so)
    seed: int = 0


def engine_family(strategy: str) -> str:
    """Checkpoints of one family share a layout: plain weights (single, ddp), ZeRO partitions, FSDP2's DCP."""
    return "deepspeed" if strategy.startswith("zero") else "fsdp" if strategy.startswith("fsdp") else "plain"


def resume_route(saved: dict, mine: dict) -> str:
    """How a checkpoint written with `saved`'s layout is loaded by a run with `mine` (both fingerprints).

    native: Accelerate's load_state. Same strategy and world size; or plain weights at any world size
    (one file); or FSDP2 at another world size (the distributed checkpoint reshards on load).
    universal: ZeRO-1/2, same stage, another world size, with Adam's state to carry: DeepSpeed's
    universal checkpoint. full: anything else, through full state by parameter name: fp32 weights
    (`full_weights`) and Adam's moments and step count (`full_optimizer_state`)."""
    s_strategy, m_strategy = saved.get("strategy") or "single", mine.get("strategy") or "single"
    family = engine_family(s_strategy)
    if (s_strategy == m_strategy and saved.get("world_size") == mine.get("world_size")) or \
            (family == engine_family(m_strategy) and family in ("plain", "fsdp")):
        return "native"
    # ZeRO-3's universal loader (DeepSpeed 0.19.8) resumes 2 ranks on 1 off by 7e-4 after one AdamW step
    # (measured; it also gives every param group the first one's weight decay), ZeRO-1/2's matches: ZeRO-3
    # takes the universal checkpoint's files through full state instead, which matches. SGD keeps no
    # state, and ds_to_universal refuses a checkpoint without Adam's moments.
    if s_strategy == m_strategy and mine.get("zero_stage") in (1, 2) and mine.get("optim") != "sgd":
        return "universal"
    return "full"


def full_weights(ckpt: Path) -> dict:
    """Full fp32 weights by name, from any checkpoint layout (files already verified)."""
    return full_state_dict(ckpt, verify=False)


ADAM_KEYS = ("exp_avg", "exp_avg_sq")


def _adam_state(state: dict) -> dict:
    """One parameter's Adam state as the full-state route carries it: full tensors and the step as a number."""
    step = state["step"]
    return {"step": float(step.item() if torch.is_tensor(step) else step), **{k: state[k] for k in ADAM_KEYS}}


def full_optimizer_state(ckpt: Path, names: list, accelerator) -> dict:
    """Adam's state by parameter name, full tensors, from any checkpoint layout (files already verified).

    Plain: Accelerate's optimizer.bin numbers parameters in param_groups order (`names`). FSDP2: the
    distributed checkpoint of the optimizer, keyed by name, gathered whole. DeepSpeed: the universal
    checkpoint's per-parameter files (converted once by the main process)."""
    kind = checkpoint_kind(ckpt)
    if kind == "deepspeed":
        zero = universal_on_every_rank(ckpt, accelerator) / DS_TAG / "zero"
        # Written by ds_to_universal from verified files. ZeRO-1/2 give each parameter its step.pt, ZeRO-3
        # keeps the step in the common optimizer_state.pt only.
        common = torch.load(zero / "optimizer_state.pt", map_location="cpu", weights_only=False)
        step = common.get("optimizer_state_dict", {}).get("state", {0: {}})[0].get("step")
        out = {}
        for name in names:
            keys = ("step", *ADAM_KEYS) if step is None else ADAM_KEYS
            files = {k: torch.load(zero / name / f"{k}.pt", map_location="cpu", weights_only=False) for k in keys}
            out[name] = _adam_state({"step": step, **{k: v["param"] if isinstance(v, dict) else v
                                                      for k, v in files.items()}})
        return out
    if kind == "fsdp":
        import tempfile

        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            dcp_to_torch_save(str(ckpt / "optimizer_0"), f"{tmp}/optimizer.pt")
            loaded = torch.load(f"{tmp}/optimizer.pt", map_location="cpu", weights_only=True)
        return {name: _adam_state(st) for name, st in loaded["optimizer"]["state"].items()}
    loaded = torch.load(ckpt / "optimizer.bin", map_location="cpu", weights_only=True)
    return {names[i]: _adam_state(st) for i, st in loaded["state"].items()}


UNIVERSAL_DIR = "universal"  # checkpoint-N/universal/<DS_TAG>/: DeepSpeed's universal checkpoint, converted once


def convert_to_universal(ckpt: Path) -> Path:
    """checkpoint-N/universal, converted from the ZeRO partitions by DeepSpeed's ds_to_universal on first
    use (written to a temporary name, then renamed: a later resume finds it whole or converts again)."""
    import argparse

    from deepspeed.checkpoint import ds_to_universal

    final = ckpt / UNIVERSAL_DIR
    if (final / DS_TAG).is_dir():
        return final
    tmp = ckpt / f"{UNIVERSAL_DIR}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    args = argparse.Namespace(input_folder=str(ckpt / DS_TAG), output_folder=str(tmp / DS_TAG),
                              num_extract_workers=1, num_merge_workers=1, keep_temp_folder=False, strict=True,
                              # Accelerate's save_state writes no universal-checkpoint info; none is needed
                              # without tensor or pipeline parallelism.
                              inject_missing_state=True)

    def disk_full() -> CheckpointDiskFull:
        return CheckpointDiskFull(f"{disk_full_message(tmp)}; converting {ckpt / DS_TAG} to a universal checkpoint needs "
                                  "about as much free space as that folder holds, more while it works; the checkpoint "
                                  "is unchanged")

    with removed_if_disk_full(tmp, disk_full):
        ds_to_universal.main(args)
    publish_dir(tmp, final)
    return final


def load_universal(ckpt: Path, engine, accelerator, log: Callable[[str], None]) -> None:
    """ZeRO-1/2 at another world size: the universal checkpoint (converted by the main process), loaded by an
    engine built with `"checkpoint": {"load_universal": true}` (solution.strategy)."""
    if accelerator.is_main_process and not (ckpt / UNIVERSAL_DIR / DS_TAG).is_dir():  # a later resume reuses it
        log(f"converting {ckpt / DS_TAG} to a universal checkpoint in {ckpt / UNIVERSAL_DIR}")
    engine.load_checkpoint(str(universal_on_every_rank(ckpt, accelerator)), tag=DS_TAG)


def universal_on_every_rank(ckpt: Path, accelerator) -> Path:
    """checkpoint-N/universal, converted by the main process only (once), seen by every rank after a barrier."""
    if accelerator.is_main_process:
        convert_to_universal(ckpt)
    accelerator.wait_for_everyone()
    return ckpt / UNIVERSAL_DIR


def restore_rng(ckpt: Path, rank: int) -> None:
    """This rank's RNG states as Accelerate saved them (random_states_<rank>.pkl), when resuming outside it."""
    import random

    import numpy as np

    with torch.serialization.safe_globals(loadable_globals()):
        states = torch.load(ckpt / f"random_states_{rank}.pkl", weights_only=True)
    random.setstate(states["random_state"])
    np.random.set_state(states["numpy_random_seed"])
    torch.set_rng_state(states["torch_manual_seed"])
    if "torch_cuda_manual_seed" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda_manual_seed"])


def reseed(seed: int, step: int, rank: int, log: Callable[[str], None]) -> None:
    """Another world size: the old ranks' RNG states have no counterpart here. Each rank is seeded from
    (seed, step, rank), so a resume is repeatable, but dropout draws cannot continue the old run's."""
    from accelerate.utils import set_seed

    set_seed(seed * 1_000_003 + step * 1_009 + rank)
    log("the world size changed: dropout draws cannot continue exactly (they differ between world sizes "
        f"anyway); each rank's RNG is seeded from (seed {seed}, step {step}, rank)")

"""The checkpointer: decides when to save, writes checkpoint-N atomically, moves the `latest` pointer,
prunes, and loads a checkpoint back with its checks. The trainer hands it the scheduler and the
run's fingerprint and never touches checkpoint files itself.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import MISSING, dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Optional

from solution.checkpoints.background import BackgroundSave, DeferredWrites
from solution.checkpoints.layout import MANIFEST, verify_checkpoint_files, verify_manifest, write_manifest
from solution.checkpoints.resume import (
    ResumeTarget,
    compare_setting,
    full_optimizer_state,
    full_weights,
    load_universal,
    reseed,
    restore_rng,
    resume_route,
)
from solution.checkpoints.state import (
    LATEST,
    STATE_FILE,
    CheckpointCorrupt,
    CheckpointDiskFull,
    CheckpointUnwritable,
    TrainerState,
    checkpoint_name,
    checkpoint_step,
    numbered_checkpoints,
    short_value,
)
from solution.common.fsutil import atomic_write_text, disk_full_message, publish_dir, removed_if_disk_full
from solution.common.values import json_type_ok


@dataclass
class SavePolicy:
    """When a checkpoint is written: the one place that decides it. The checkpointer asks it after every
    optimizer step, and the trainer asks the checkpointer (a step before a save needs its gradient norm).

    strategy "steps": every `steps` optimizer steps; "epoch": after the step that closes an epoch; "no": never.
    `first_step`: also after this step (save_first_step: the first step this start runs, a probe that a
    save works before hours of training; the trainer sets it once it knows where the run starts)."""

    strategy: str = "no"
    steps: int = 0
    first_step: Optional[int] = None

    @classmethod
    def from_config(cls, cfg) -> "SavePolicy":
        """From the training config's save_strategy, save_steps and save_first_step (first step 1 until a
        resume says otherwise)."""
        return cls(cfg.save_strategy, cfg.save_steps, 1 if cfg.save_first_step else None)

    def __call__(self, step: int, epoch_end: bool) -> bool:
        """Whether a checkpoint is written after optimizer step `step` (epoch_end: the step closes an epoch)."""
        if self.strategy == "epoch" and epoch_end:
            return True
        if epoch_end:
            return False  # the epoch's question only: the loop asked about this step as a step just before
        return (self.strategy == "steps" and self.steps > 0 and step % self.steps == 0) or step == self.first_step


MODEL_META = "model_meta"  # checkpoint-N/model_meta: config, tokenizer, qa_config.json (`write_meta`)
MIN_KEPT = 2  # pruning keeps at least this many: a checkpoint that fails its manifest needs one to fall back to


def with_meta_architecture(ckpt: Path, saved: dict) -> dict:
    """The checkpoint's fingerprint, its architecture completed from model_meta/config.json (the backbone's
    whole config, in every checkpoint): one written before a setting joined `ARCHITECTURE_KEYS` records it
    there, so it is compared too rather than warned about as unrecorded. What trainer_state.json records wins."""
    from solution.model.qa_model import architecture, read_backbone_config

    recorded, meta = saved.get("architecture"), Path(ckpt) / MODEL_META
    if not isinstance(recorded, dict) or not (meta / "config.json").is_file():
        return saved
    try:
        full = architecture(read_backbone_config(meta))
    except ValueError:  # unreadable here: the settings it lacks are named as not checked
        return saved
    return {**saved, "architecture": {**full, **recorded}}


class Checkpointer:
    """Decides when to save (`save_due(step, epoch_end)`: a `SavePolicy`, or any such function), writes checkpoint-N atomically,
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
        self._check_resume_key(path, with_meta_architecture(path, state.fingerprint), resume_key)
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
                target.load_full_optimizer_state(full_optimizer_state(path, target.param_names, self.accelerator,
                                                                       self.log))
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
            compare_setting(key, saved.get(key, MISSING), mine, changed, unrecorded)
        if any(c.startswith("field 'train_data_digest'") for c in changed):
            changed.append(self._other_data_why(saved))
        if changed:
            raise ValueError(f"{path}: {'; '.join(changed)}; {'it' if len(changed) == 1 else 'each'} must match to "
                             "resume (world size, strategy, per-device batch and accumulation may change), or "
                             "consolidate it with python -m solution.consolidate and start anew")
        if unrecorded:
            self.log(f"WARNING: {path / STATE_FILE} does not record {', '.join(unrecorded)} (written by an older "
                     "version): not checked; this run continues it only with the values of the run that wrote it")

    def _other_data_why(self, saved: dict) -> str:
        """What the checkpoint's windows were made from against this run's (file, tokenizer, settings, code
        version: `windows.dataset.windows_source`): why its digest differs."""
        why: list = []
        compare_setting("train_data_source", saved.get("train_data_source", MISSING),
                        self.fingerprint.get("train_data_source", {}), why, [])
        if not why:
            return ("the windows differ though the checkpoint records the same file and settings (or none: an older "
                    "version wrote it): its run read a cache entry whose files had changed, or the file was "
                    "replaced keeping its size and time")
        return "the windows were made from other inputs: " + "; ".join(why)

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
                raise ValueError(f"{where} must be {type(mine).__name__}, got {short_value(saved[key])}")

    def _check_rng_files(self, path: Path) -> None:
        for rank in range(self.accelerator.num_processes):
            # Accelerate only logs "Could not load random states" and goes on: dropout would then differ.
            rng = path / f"random_states_{rank}.pkl"
            if not rng.is_file():
                raise ValueError(f"{rng}: missing; rank {rank}'s RNG state is needed to continue exactly "
                                 "(dropout); resume from another checkpoint")

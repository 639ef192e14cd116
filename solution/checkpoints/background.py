"""Asynchronous saves: copies taken at the step, bytes written by a thread, every rank's completion
marked in the checkpoint's temporary folder.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from solution.checkpoints.state import CheckpointDiskFull, CheckpointFailed, CheckpointUnwritable
from solution.common.fsutil import disk_full_message, out_of_space

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

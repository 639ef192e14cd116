"""Files from elsewhere are data, never code: weights from safetensors, other state through
torch.load(weights_only=True), configs parsed, never evaluated."""

import os

import pytest
import torch

from solution.config import load_config
from solution.consolidate import main as consolidate_main
from solution.consolidate import verify_checkpoint_files


class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ['EVIL_MARKER']}",))


def test_a_tampered_checkpoint_is_refused_before_any_loader_runs(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    ckpt = tmp_path / "checkpoint-4"
    (ckpt / "pytorch_model").mkdir(parents=True)
    torch.save({"module": {"w": torch.ones(2)}}, ckpt / "pytorch_model" / "mp_rank_00_model_states.pt")
    torch.save({"optimizer_state_dict": Evil()}, ckpt / "pytorch_model" / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    (ckpt / "trainer_state.json").write_text("{}")
    (ckpt / "model_meta").mkdir()
    with pytest.raises(ValueError, match="optim_states.pt: refusing to load"):
        verify_checkpoint_files(ckpt)
    assert consolidate_main([str(ckpt), str(tmp_path / "out")]) == 2
    assert "refusing to load" in capsys.readouterr().err
    assert not marker.exists()  # the payload never ran


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

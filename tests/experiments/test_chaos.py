"""scripts/chaos.py: random faults under torchrun, a restart with `--resume auto` after each, and the
uninterrupted run as a bitwise oracle. Slow: three faults (a rank killed, the agent killed during a save,
a rank told to stop during a save). Fast: the oracle itself tells a weight one ulp off, and a loss that
differs, from identical runs."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from safetensors.torch import save_file


def chaos_module():
    spec = importlib.util.spec_from_file_location("chaos", ROOT / "scripts" / "chaos.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["chaos"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def fake_run(folder, weight: torch.Tensor, losses: list):
    """A run's model directory and metrics.jsonl; `losses`: (step, loss) in the order logged."""
    (folder / "model").mkdir(parents=True)
    save_file({"w": weight}, str(folder / "model" / "model.safetensors"))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": step, "loss": x}) + "\n" for step, x in losses))


def test_the_oracle_tells_one_ulp_and_one_loss_apart(tmp_path):
    compare = chaos_module().compare
    w = torch.linspace(-1, 1, 7)
    fake_run(tmp_path / "ref", w, [(1, 2.0), (2, 1.5)])
    fake_run(tmp_path / "same", w.clone(), [(1, 2.0), (2, 1.5), (2, 1.5)])  # a step logged again after a resume
    fake_run(tmp_path / "ulp", torch.nextafter(w, torch.full_like(w, 2.0)), [(1, 2.0), (2, 1.5)])
    fake_run(tmp_path / "loss", w.clone(), [(1, 2.0), (2, 1.5000001)])
    assert compare(tmp_path / "same", tmp_path / "ref")["final_weights_bit_identical"]
    ulp = compare(tmp_path / "ulp", tmp_path / "ref")
    assert not ulp["final_weights_bit_identical"] and 0 < ulp["max_abs_weight_difference"] < 1e-6
    result = compare(tmp_path / "loss", tmp_path / "ref")
    assert result["final_weights_bit_identical"] and not result["losses_bit_identical"]


@pytest.mark.slow
@pytest.mark.parametrize("argv,said", [(["--nproc", "0"], "--nproc must be >= 1, got 0"),
                                       (["--hang-timeout", "-1"], "--hang-timeout must be > 0 seconds, got -1.0")])
def test_no_ranks_and_a_negative_hang_timeout_are_refused(argv, said, capsys):
    with pytest.raises(SystemExit) as e:
        chaos_module().main(argv)
    assert e.value.code == 2 and said in capsys.readouterr().err


def test_a_work_dir_holding_an_earlier_run_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    chaos = chaos_module()
    monkeypatch.setattr(chaos, "chaos_run", lambda *a: pytest.fail("a run started"))  # nothing may run
    work = tmp_path / "work"
    (work / "chaos").mkdir(parents=True)  # what a first run leaves: its checkpoints would be resumed
    assert chaos.main(["--work-dir", str(work)]) == 2
    assert capsys.readouterr().err == (f"error: --work-dir {work}: not empty (holds chaos); a run needs a new or "
                                       "empty folder: remove it yourself, or choose another\n")
    assert sorted(p.name for p in work.iterdir()) == ["chaos"]


def test_three_faults_end_bit_identical_to_the_uninterrupted_run(tmp_path):
    report_path = tmp_path / "chaos.json"
    proc = subprocess.run([sys.executable, "scripts/chaos.py", "--faults", "3", "--steps", "20", "--seed", "1",
                           "--json", str(report_path),
                           "--kinds", "rank-SIGKILL,agent-SIGKILL-in-save,rank-SIGTERM-in-save",
                           "--work-dir", str(tmp_path / "work")], cwd=ROOT, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["faults_injected"] == 3 and report["restarts"] == 3
    assert sorted(f["kind"] for f in report["faults"]) == ["agent-SIGKILL-in-save", "rank-SIGKILL",
                                                            "rank-SIGTERM-in-save"]
    for fault in report["faults"]:
        assert fault["forced_kill"] == [] and fault["launch_exit"] != 0, fault
        assert 0 <= fault["resumed_from"] <= fault["step_reached"] and fault["wall_time_lost_s"] > 0, fault
    assert report["final_weights_bit_identical"] and report["losses_bit_identical"]
    assert report["max_abs_weight_difference"] == 0.0

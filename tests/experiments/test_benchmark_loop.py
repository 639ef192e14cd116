"""scripts/benchmark_loop.py: the rows and ratios it computes, and a --quick run end to end."""

import json
import os
import subprocess
import sys
from argparse import Namespace

import pytest
from conftest import ROOT
from helpers import load_script

SCRIPT = ROOT / "scripts" / "benchmark_loop.py"


def test_help_answers_without_starting_work(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout and "--quick" in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_rows_use_the_median_window_after_warmup_and_ratios_against_each_runner():
    bench = load_script("benchmark_loop.py")
    args = Namespace(window=2, batch_size=2, steps=8, config="c.yaml", threads=1)
    # Mean step time per window; the first (warm-up) window is slow everywhere and must not count.
    # Medians 0.5 s, 0.5 s, 0.4 s, 1.0 s.
    times = {("bare", 1): [[9.0, 0.5, 0.5, 0.6]], ("ours", 1): [[9.0, 0.5, 0.4, 0.6], [9.0, 0.5, 0.5, 0.5]],
             ("hf_trainer", 1): [[9.0, 0.4, 0.4, 0.4]], ("ours", 2): [[9.0, 1.0, 1.0, 1.0]],
             ("bare", 2): [[9.0, 0.9, 0.9, 0.9]]}
    rows = bench.summarise(times, args)
    assert [(r["runner"], r["world_size"]) for r in rows] == [
        ("bare", 1), ("ours", 1), ("hf_trainer", 1), ("bare", 2), ("ours", 2)]
    by = {(r["runner"], r["world_size"]): r for r in rows}
    assert by[("bare", 1)]["samples_per_s"] == pytest.approx(2 / 0.5)
    assert by[("ours", 1)]["samples_per_s"] == pytest.approx(2 / 0.5)  # median of the six measured windows
    assert by[("ours", 1)]["repeats"] == 2
    assert by[("ours", 2)]["samples_per_s"] == pytest.approx(4 / 1.0)  # global batch: 2 per process x 2
    assert by[("ours", 1)]["vs_bare"] == pytest.approx(1.0)
    assert by[("ours", 1)]["vs_hf_trainer"] == pytest.approx(0.4 / 0.5)
    assert by[("ours", 2)]["vs_bare"] == pytest.approx(0.9)
    assert "vs_hf_trainer" not in by[("ours", 2)]  # no Trainer row at 2 processes: no ratio invented
    unmet = bench.goals_met(rows)
    assert len(unmet) == 2 and "vs_hf_trainer at 1" in unmet[0] and "vs_bare at 2" in unmet[1]


@pytest.mark.slow
def test_quick_run_writes_a_row_per_runner_and_world_size(tmp_path):
    out = tmp_path / "loop.json"
    # --same-allocator: the bare loop and the Trainer keep freed memory as ours does by default on CPU.
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--same-allocator", "--json", str(out),
                           "--out", str(tmp_path / "runs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert sorted((r["runner"], r["world_size"]) for r in rows) == sorted(
        (runner, world) for runner in ("ours", "bare", "hf_trainer") for world in (1, 2))
    for r in rows:
        assert r["samples_per_s"] > 0 and r["global_batch_size"] == 4 * r["world_size"]  # tiny.yaml: 4 per process
        if r["runner"] == "ours":
            assert r["vs_bare"] > 0 and r["vs_hf_trainer"] > 0
        # Two processes really were DDP for every runner, one process a plain model.
        assert r["engine"] == ("DistributedDataParallel" if r["world_size"] == 2 else "QAModel"), r
        # Every runner ran the config's optimizer (tiny.yaml: the default, fused AdamW) and, with
        # --same-allocator, with freed memory kept: ours' from its own log line, the others' from the workers.
        assert r["optim"] == "adamw_torch_fused" and r["allocator"] == "retain", r
    assert "| 2 | hf_trainer |" in proc.stdout

"""A step that neither logs nor saves never reads a device value on the host, under every engine.

On a GPU each read of a CUDA tensor's value (`.item()`, `.tolist()`, `float()`, `bool()`, ...) makes the
host wait until the device has run everything queued so far, so the host cannot queue the next step while
the device runs this one. tests/faulty_train.py's `count-reads` counts those calls on the CPU, by the
optimizer step they belong to (the loader's fetch of host tensors left out), for one process and for DDP,
ZeRO-2, ZeRO-3 and FSDP2 over two ranks: steps 1 (this start's first, timed apart), 4 (a logging step) and
8 (the last) read once; every other step reads nothing. ZeRO-3's first two steps also read while it
records the order its parameters are used in, once per run.

The same runs show what each engine resolved from its config (the start record's `engine_settings`):
ZeRO's buckets, its throughput timer off, FSDP2's resharding.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from solution.distributed.lifecycle import remove_shm_buffers
from solution.distributed.ports import free_port

pytestmark = pytest.mark.slow  # five trainings, four of them two-process launches

STEPS, LOGGING = 8, 4
RUN = ["--config", "configs/train/tiny.yaml", "--data_source", "dummy", "--dummy_num_windows", "128",
       "--per_device_train_batch_size", "2", "--max_steps", str(STEPS), "--logging_steps", str(LOGGING),
       "--eval_strategy", "no", "--disable_tqdm", "true", "--save_final_model", "false"]
SYNCED = {1, LOGGING, STEPS}  # the first step, the logging step, the last
ONCE_PER_RUN = {"zero3": {1, 2}}  # ZeRO-3 traces its parameters' order in its first steps


def counted_run(strategy: str, tmp_path: Path) -> tuple[dict, dict]:
    """({rank: {step: reads}}, the start record) of one run under `strategy`."""
    logs, out = tmp_path / f"reads-{strategy}", tmp_path / f"run-{strategy}"
    entry = ["tests/faulty_train.py", "count-reads", *RUN, "--output_dir", str(out)]
    port = str(free_port())
    if strategy == "single":
        cmd = [sys.executable, *entry]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port, *entry,
               "--strategy", strategy]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "READ_LOG": str(logs)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    remove_shm_buffers(port)
    assert proc.returncode == 0, proc.stderr[-4000:]
    reads = {}
    for path in sorted(logs.glob("rank-*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        reads[path.stem] = {r["step"]: (r["reads"], r["callers"]) for r in rows}
    start = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert start["event"] == "start" and start["strategy"] == strategy
    return reads, start


@pytest.mark.parametrize("strategy", ["single", "ddp", "zero2", "zero3", "fsdp"])
def test_steps_that_do_not_log_read_nothing_from_the_device(strategy, tmp_path):
    reads, start = counted_run(strategy, tmp_path)
    assert len(reads) == (1 if strategy == "single" else 2)
    quiet = set(range(1, STEPS + 1)) - SYNCED - ONCE_PER_RUN.get(strategy, set())
    for rank, steps in reads.items():
        assert {s: steps[s] for s in quiet if s in steps} == {}, (rank, strategy)
        for step in SYNCED:  # one read each: the figures of the step, in one tensor
            count, callers = steps.get(step, (0, []))
            ours = [c for c in callers if "trainer.py" in c]
            assert len(ours) == 1 and (count == 1 or step in ONCE_PER_RUN.get(strategy, ())), (rank, step, callers)
    settings = start["engine_settings"]
    if strategy in ("zero2", "zero3"):
        zero = settings["zero_optimization"]
        assert settings["timers"]["throughput"]["enabled"] is False
        assert zero["reduce_bucket_size"] == 5e7 and zero["overlap_comm"] is False  # off on the CPU
    if strategy == "zero3":
        zero = settings["zero_optimization"]
        assert zero["stage3_prefetch_bucket_size"] == 5e7 and zero["stage3_param_persistence_threshold"] == 1e5
        assert zero["sub_group_size"] == 1e7
    if strategy == "fsdp":
        assert settings["reshard_after_forward"] is True and settings["units"] >= 3  # two ranks: shards to gather
    assert start["attention"] == "sdpa" and start["torch_compile"] is False

"""The proof that a strategy is the engine it claims and optimises exactly like one process.

Every strategy trains a tiny BERT with two CPU ranks (gloo), through the launchers
users run (`accelerate launch`, `deepspeed`, `torchrun`), for 6 optimizer steps at
global batch 8 (2 per rank x 2 ranks x 2 accumulation steps), and is compared with
one process at batch 8: loss and gradient norm at every step within 1e-4 relative,
final consolidated weights allclose. Plain SGD, because Adam's update hardly moves
when every gradient is doubled, so an Adam comparison cannot see summed gradients.

The comparison is shown to fail on injected bugs (gradients summed over ranks,
ranks reading the same data, accumulation double-counted; patched in by
tests/faulty_train.py) and on a wrong engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from helpers import COMMON, PORTS, STEPS, TWO_RANKS, UNINTERRUPTED, launch, new_port, read_run, uninterrupted
from safetensors.torch import load_file

from solution.distributed.lifecycle import SHM_DIR, shm_buffers

pytestmark = pytest.mark.slow  # full trainings and multi-process launches: make test, not make test-fast

ENGINES = {"ddp": "DistributedDataParallel", "zero1": "DeepSpeedEngine", "zero2": "DeepSpeedEngine",
           "zero3": "DeepSpeedEngine", "zero3_offload": "DeepSpeedEngine", "fsdp": "FSDPQAModel",
           "fsdp_grad_op": "FSDPQAModel"}
STAGES = {"zero1": 1, "zero2": 2, "zero3": 3, "zero3_offload": 3}


@pytest.fixture(scope="module", autouse=True)
def no_shared_memory_left_behind():
    """DeepSpeed's CPU all-reduce buffers (66 MB a rank in /dev/shm) of this module's runs: none may remain,
    whether the run finished (the trainer unlinks them) or was killed (launch() removes them)."""
    before = set(SHM_DIR.glob("deepspeed_allreduce_buffer_*"))
    yield
    left = [p for port in sorted(PORTS) for p in shm_buffers(port) if p not in before]
    assert not left, f"DeepSpeed shared memory left behind: {left}"


def compare(ref: dict, run: dict, rtol: float = 1e-4) -> None:
    """Raise AssertionError unless `run` optimised exactly like `ref`."""
    assert sorted(run["steps"]) == sorted(ref["steps"]) == list(range(1, STEPS + 1)), "steps differ"
    for step, r in ref["steps"].items():
        got = run["steps"][step]
        for key in ("loss", "grad_norm"):
            assert got[key] == pytest.approx(r[key], rel=rtol), f"step {step} {key}: {got[key]} vs {r[key]}"
    assert run["weights"].keys() == ref["weights"].keys()
    for name, w in ref["weights"].items():
        torch.testing.assert_close(run["weights"][name], w, rtol=rtol, atol=1e-6, msg=lambda m: f"{name}: {m}")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "solution.train", *COMMON, "--per_device_train_batch_size", "8",
                           "--output_dir", str(out)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = read_run(out)
    assert run["start"]["strategy"] == "single" and run["start"]["global_batch_size"] == 8
    # The run must actually move the weights, or equal weights would prove nothing.
    losses = [run["steps"][s]["loss"] for s in sorted(run["steps"])]
    assert max(losses) - min(losses) > 0.05, losses
    return run


@pytest.fixture(scope="module")
def finished_runs() -> dict:
    """strategy -> its finished run from test_strategy_matches_one_process, for the submission test; a
    module fixture, so that both run on one worker (tests/conftest.py) and the runs are not trained twice."""
    return {}


CASES = [("ddp", "accelerate"), ("zero1", "deepspeed"), ("zero2", "accelerate"), ("zero3", "accelerate"),
         ("zero3_offload", "torchrun"), ("fsdp", "accelerate"), ("fsdp_grad_op", "torchrun")]


def plant_stale_buffers(port: str) -> None:
    """Shared-memory files of an earlier, killed run on `port` (small, dated an hour back), as DeepSpeed's CPU
    all-reduce would have left them."""
    import time

    hour_ago = time.time() - 3600
    for rank in (0, 1):
        stale = SHM_DIR / f"deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_{port}_{rank}"
        stale.write_bytes(b"\xff" * 4096)
        os.utime(stale, (hour_ago, hour_ago))


@pytest.mark.parametrize("strategy,launcher", CASES, ids=[f"{s}-{via}" for s, via in CASES])
def test_strategy_matches_one_process(strategy, launcher, reference, finished_runs, tmp_path_factory):
    """Under the `deepspeed` launcher (the one under which DeepSpeed's CPU all-reduce maps a shared-memory
    file per rank) stale files of a killed run on the same port are planted first: they are removed before
    the backend could map them, and the finished run leaves none of its own."""
    port = new_port()
    if launcher == "deepspeed":
        plant_stale_buffers(port)
    run = launch(strategy, launcher, tmp_path_factory.mktemp(strategy), port=port)
    assert shm_buffers(port) == []
    finished_runs[strategy] = run
    start = run["start"]
    assert start["strategy"] == strategy and start["engine"] == ENGINES[strategy], start
    assert start["zero_stage"] == STAGES.get(strategy) and start["world_size"] == 2, start
    assert start["global_batch_size"] == 8 and start["gradient_accumulation_steps"] == 2, start
    compare(reference, run)


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_one_rank_under_a_launcher_trains_like_one_process(launcher, reference, tmp_path):
    """A one-GPU job: one rank under torchrun or accelerate launch (the DDP launch config). On CPU
    Accelerate wraps that rank in DistributedDataParallel over a world of one; the run keeps strategy
    `single`, names that wrapper as its engine, and optimises exactly like the plain process."""
    strategy = "ddp" if launcher == "accelerate" else "auto"  # the launch config's name / --strategy auto
    run = launch(strategy, launcher, tmp_path / launcher, ranks=1)
    start = run["start"]
    assert start["strategy"] == "single" and start["world_size"] == 1 and start["global_batch_size"] == 8, start
    assert start["engine"] == "DistributedDataParallel", start  # what really wraps the model, not a claim
    compare(reference, run)


@pytest.mark.parametrize("fault", ["sum-gradients", "same-data", "double-accumulation"])
def test_comparison_catches_injected_bugs(fault, reference, tmp_path):
    run = launch("ddp", "torchrun", tmp_path / fault, fault=fault)
    with pytest.raises(AssertionError):
        compare(reference, run)


def test_a_config_contradicting_the_launcher_is_refused(tmp_path):
    """`--strategy fsdp` under a DeepSpeed launch must stop, not quietly pick one of the two."""
    with pytest.raises(AssertionError, match="drop one of them"):
        launch("zero2", "deepspeed", tmp_path / "x", extra=["--strategy", "fsdp"])


@pytest.mark.parametrize("strategy", ["ddp", "zero2", "zero3", "fsdp"])
def test_killed_rank_resumes_to_the_same_weights(strategy, tmp_path, tmp_path_factory):
    """SIGKILL rank 1 alone right after the step-4 checkpoint, one step into the second epoch, with
    dropout: the launcher fails naming the rank; resuming from `latest` reaches bitwise the
    uninterrupted run's losses and weights (same shuffle, same dropout draws), across an epoch's end."""
    whole = uninterrupted(strategy, tmp_path_factory)
    out = tmp_path / "killed"
    with pytest.raises(AssertionError, match="failed") as failure:
        launch(strategy, "torchrun", out, extra=UNINTERRUPTED, fault="kill-rank-1-after-step-4")
    message = str(failure.value)
    assert "rank: 1" in message and ("-9" in message or "SIGKILL" in message), message[-2000:]
    assert (out / "latest").read_text().strip() == "checkpoint-4" and not (out / "model").exists()
    resumed = launch(strategy, "torchrun", out, extra=[*UNINTERRUPTED, "--resume", "latest"])
    assert resumed["start"]["resumed_from"]["step"] == 4
    assert [whole["steps"][s]["epoch"] for s in (4, 5, 6, 7)] == [1, 1, 1, 2]  # counted from 0
    for step in range(5, 9):
        assert resumed["steps"][step]["loss"] == whole["steps"][step]["loss"], step
    for name, w in whole["weights"].items():
        assert torch.equal(resumed["weights"][name], w), name
    # Any checkpoint consolidates offline into the same weights training wrote at that step.
    from solution.consolidate import consolidate

    model_dir = consolidate(whole["out"] / "checkpoint-8", tmp_path / "consolidated")
    for name, w in load_file(str(model_dir / "model.safetensors")).items():
        torch.testing.assert_close(w, whole["weights"][name], rtol=0, atol=1e-6)


def test_save_killed_halfway_leaves_the_previous_checkpoint_resumable(tmp_path):
    extra = ["--save_steps", "2", "--save_total_limit", "1"]
    whole = launch("ddp", "torchrun", tmp_path / "whole", extra=extra)
    assert sorted(p.name for p in (tmp_path / "whole").glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6"]  # 2 kept
    out = tmp_path / "killed"
    with pytest.raises(AssertionError, match="failed"):
        launch("ddp", "torchrun", out, extra=extra, fault="kill-in-save-4")
    assert (out / "checkpoint-4.tmp").is_dir() and not (out / "checkpoint-4").exists()
    assert (out / "latest").read_text().strip() == "checkpoint-2" and (out / "checkpoint-2").is_dir()
    resumed = launch("ddp", "torchrun", out, extra=[*extra, "--resume", "latest"])
    assert resumed["start"]["resumed_from"]["step"] == 2
    for name, w in whole["weights"].items():
        assert torch.equal(resumed["weights"][name], w), name
    assert not (out / "checkpoint-4.tmp").exists()  # the next save at that step replaced it


def test_two_nodes_through_the_slurm_script_train_as_one_world(reference, tmp_path):
    """scripts/launch_slurm.sh as srun runs it on two nodes (SLURM_NODEID 0 and 1), rendezvous on
    127.0.0.1, one rank per node: one world of 2 that optimises like the single process."""
    port = new_port()
    out = tmp_path / "two-nodes"
    procs = []
    for node in (0, 1):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "SLURM_STEP_ID": "0",
               "SLURM_NNODES": "2", "SLURM_NODEID": str(node), "MAIN_PROCESS_IP": "127.0.0.1",
               "MAIN_PROCESS_PORT": port, "GPUS_PER_NODE": "1", "PYTHON": sys.executable}
        procs.append(subprocess.Popen(
            ["bash", "scripts/launch_slurm.sh", "configs/accelerate/multinode.yaml", *COMMON[1:], *TWO_RANKS,
             "--output_dir", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for node, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"node {node} failed:\n{log[-4000:]}"
    assert "node 1/2" in logs[1]
    run = read_run(out)
    assert run["start"]["world_size"] == 2 and run["start"]["strategy"] == "ddp", run["start"]
    compare(reference, run)


def test_consolidated_models_give_the_same_submission(finished_runs, tmp_path):
    """The final model directories of a DDP, a ZeRO-3 and an FSDP run load in submission.predict
    (no accelerate, no deepspeed) and write the same submission.csv."""
    corpus = tmp_path / "synth"
    subprocess.run([sys.executable, "-m", "solution.synth", "--out", str(corpus), "--num-train", "1", "--num-dev", "1",
                    "--num-test", "6", "--min-words", "200", "--max-words", "400", "--seed", "5"],
                   cwd=ROOT, check=True, capture_output=True)
    rows = {}
    for strategy in ("ddp", "zero3", "fsdp"):
        if strategy not in finished_runs:  # this test run alone
            finished_runs[strategy] = launch(strategy, "torchrun", tmp_path / f"run-{strategy}")
        out, model = tmp_path / f"{strategy}.csv", finished_runs[strategy]["out"] / "model"
        proc = subprocess.run([sys.executable, "-m", "submission.predict", "--model", str(model),
                               "--input", str(corpus / "simplified-nq-test.jsonl"), "--output", str(out)],
                              cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows[strategy] = out.read_text()
    assert rows["ddp"].count("\n") == 1 + 12
    answered = [line for line in rows["ddp"].splitlines()[1:] if not line.endswith(",")]
    assert len(answered) >= 6, rows["ddp"]  # the models answer, so equal files compare real spans
    assert rows["zero3"] == rows["ddp"] and rows["fsdp"] == rows["ddp"]


@pytest.mark.parametrize("strategy", ["zero3", "fsdp"])
def test_evaluation_with_sharded_parameters_gathers_every_rank(strategy, tmp_path):
    """Dev evaluation under ZeRO-3/FSDP, where every forward is a collective: 3 dev documents over
    2 ranks, one window per forward, so the ranks run different numbers of forwards. The run must
    finish (no rank left waiting in a collective) and score all 3 documents."""
    corpus = tmp_path / "synth"
    subprocess.run([sys.executable, "-m", "solution.synth", "--out", str(corpus), "--num-train", "12", "--num-dev", "3",
                    "--num-test", "1", "--min-words", "200", "--max-words", "900", "--seed", "9"],
                   cwd=ROOT, check=True, capture_output=True)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", new_port(),
           "-m", "solution.train", "--config", "configs/train/tiny.yaml", "--strategy", strategy,
           "--train_file", str(corpus / "simplified-nq-train.jsonl"), "--dev_file", str(corpus / "simplified-nq-dev.jsonl"),
           "--max_steps", "2", "--per_device_eval_batch_size", "1", "--disable_tqdm", "true",
           "--output_dir", str(out), "--cache_dir", str(tmp_path / "cache")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if r.get("event") == "eval"]
    assert evals and evals[-1]["num_examples"] == 3, evals

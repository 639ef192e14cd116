"""Preemption: a signal stops training at a checkpoint, and `--resume auto` finishes it exactly.

SIGTERM (spot instances, SLURM preemption) is sent to the launcher (torchrun) of a 2-rank training
that has no save_steps, under DDP and ZeRO-3; SIGUSR1 (SLURM's `--signal` before the time limit)
reaches a training started by scripts/launch_slurm.sh, with srun and scontrol faked on PATH, and the
script requeues the job. Each stopped run writes one checkpoint at the step its ranks agreed on,
prints one line, and `--resume auto` continues it to the weights of one uninterrupted process at
the same global batch (tiny BERT, SGD, fp32, dummy data, as tests/distributed/test_strategies.py). Every run
here shares max_steps, so the learning-rate schedule is the same one. A signal during a dev evaluation
stops it at its next batch; the resumed run evaluates that epoch again and matches an uninterrupted run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from conftest import ROOT, synth_corpus, train_one_process
from helpers import COMMON, TWO_RANKS, kill_tree, launch, records, weights

from solution.distributed.ports import free_port

pytestmark = pytest.mark.slow  # multi-process launches and trainings: make test, not make test-fast

STEPS = 16  # long enough that a signal sent after step 1 lands before the end, even on a loaded machine
RUN = [*COMMON, "--max_steps", str(STEPS)]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}

# A test-side entry point: sends this process a second signal, SIGTERM, from inside the checkpoint save
# (before the engine's files are written, and again before the checkpoint is renamed complete).
SIGNAL_IN_SAVE = """
import os, signal, sys
import accelerate
original = accelerate.Accelerator.save_state
def save_state(self, *args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    result = original(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
    return result
accelerate.Accelerator.save_state = save_state
from solution.train import main
sys.exit(main(sys.argv[1:]))
"""


def assert_same_weights(got: dict, ref: dict) -> None:
    assert got.keys() == ref.keys()
    for name, w in ref.items():
        torch.testing.assert_close(got[name], w, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")


def signal_after_first_step(proc: subprocess.Popen, out: Path, send, wait: bool = True) -> tuple:
    """Wait for the first logged optimizer step, call `send()`, and return the run's (stdout, stderr)
    (with `wait` False: return at once)."""
    deadline = time.monotonic() + 240
    while not ((out / "metrics.jsonl").is_file() and '"loss"' in (out / "metrics.jsonl").read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.05)
    send()
    if not wait:
        return None, None
    try:
        return proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:  # leave no training behind: the launcher, its workers, their children
        kill_tree(proc.pid)
        raise


def assert_stopped_at_one_checkpoint(out: Path, stderr: str, sig: str) -> int:
    """One line from rank 0, checkpoint-N at the step reached (named by `latest` and by the last record
    of metrics.jsonl), no model directory; returns N."""
    lines = [line for line in stderr.splitlines() if line.startswith("stopped by")]
    assert len(lines) == 1, stderr[-3000:]
    step = int(lines[0].split("at step ")[1].split(":")[0])
    saved = out / f"checkpoint-{step}"
    assert lines[0] == f"stopped by {sig} at step {step}: saved {saved}; continue with --resume latest", lines
    assert 1 <= step < STEPS, step  # stopped mid-run, so the resumed run has steps left to match
    assert (out / "latest").read_text().strip() == saved.name and not (out / "model").exists()
    assert records(out)[-1] == {"event": "stopped", "signal": sig, "step": step, "checkpoint": str(saved)}
    return step


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """One uninterrupted process at global batch 8, STEPS steps."""
    out = tmp_path_factory.mktemp("single")
    train_one_process(out, RUN, ENV, "--per_device_train_batch_size", "8")
    return weights(out)


@pytest.mark.parametrize("strategy", ["ddp", "zero3"])
def test_sigterm_to_torchrun_checkpoints_and_resume_auto_finishes_the_run(strategy, reference, tmp_path):
    """torchrun forwards SIGTERM to its workers; they agree on one step, write checkpoint-N there and
    exit 3 with one line (torchrun itself exits 1, its own SignalException being its only traceback);
    `--resume auto` continues on two ranks to the uninterrupted run's weights."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "solution.train", *RUN, *TWO_RANKS, "--strategy", strategy, "--output_dir", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = signal_after_first_step(proc, out, lambda: proc.send_signal(signal.SIGTERM))
    assert proc.returncode == 1, stderr[-3000:]
    tracebacks = stderr.split("Traceback (most recent call last):")[1:]
    assert len(tracebacks) == 1 and tracebacks[0].rstrip().splitlines()[-1].startswith(
        "torch.distributed.elastic.multiprocessing.api.SignalException: "), stderr[-3000:]
    step = assert_stopped_at_one_checkpoint(out, stderr, "SIGTERM")
    resumed = launch(strategy, "torchrun", out, extra=["--max_steps", str(STEPS), "--resume", "auto"])
    assert resumed["start"]["resumed_from"] == {"checkpoint": str(out / f"checkpoint-{step}"), "step": step}
    assert sorted(resumed["steps"])[-1] == STEPS
    assert_same_weights(resumed["weights"], reference)


def test_a_second_signal_during_the_save_does_not_corrupt_it(reference, tmp_path):
    """SIGUSR1 stops a one-process run; SIGTERM arrives twice while its checkpoint is being written.
    The save completes, the exit is 3 naming SIGUSR1, and `--resume auto` reaches the reference.
    The run itself starts with `--resume auto` too, and finds nothing to resume."""
    out = tmp_path / "run"
    (out / "checkpoint-3.tmp").mkdir(parents=True)  # a save that never completed is not a checkpoint
    args = [*RUN, "--per_device_train_batch_size", "8", "--output_dir", str(out), "--resume", "auto"]
    proc = subprocess.Popen([sys.executable, "-c", SIGNAL_IN_SAVE, *args], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = signal_after_first_step(proc, out, lambda: proc.send_signal(signal.SIGUSR1))
    assert proc.returncode == 3, stderr[-3000:]
    assert f"resume auto: no complete checkpoint in {out}; starting fresh" in stdout
    assert "Traceback" not in stderr, stderr[-3000:]
    step = assert_stopped_at_one_checkpoint(out, stderr, "SIGUSR1")
    resumed = subprocess.run([sys.executable, "-m", "solution.train", *args], cwd=ROOT, env=ENV,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resume auto: continuing from {out / f'checkpoint-{step}'}" in resumed.stdout
    assert_same_weights(weights(out), reference)


FAKE_SRUN = """#!/usr/bin/env bash
# srun as the batch step calls it: record the call, run the node step (its own session, so the test can
# signal every process of it, as SLURM does), and return its exit code; FAKE_SRUN_CRASH: fail at once.
echo "srun $*" >> "$FAKE_SLURM_LOG"
if [ -n "${FAKE_SRUN_CRASH:-}" ]; then exit 1; fi
while [ "$1" != bash ]; do shift; done
SLURM_STEP_ID=0 SLURM_NODEID=0 setsid "$@" &
echo $! > "$FAKE_SLURM_STEP"
wait $!
"""
FAKE_SCONTROL = """#!/usr/bin/env bash
echo "scontrol $*" >> "$FAKE_SLURM_LOG"
"""


def fake_slurm(tmp_path: Path, ranks: int) -> dict:
    """srun and scontrol faked on PATH: the environment of scripts/launch_slurm.sh's batch step, job 4242 on
    one node of `ranks` ranks; srun's calls and scontrol's go to tmp_path/slurm.log, the node step's pid to
    tmp_path/step.pid."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    env = {**ENV, "PATH": f"{fake}:{os.environ['PATH']}", "FAKE_SLURM_LOG": str(tmp_path / "slurm.log"),
           "FAKE_SLURM_STEP": str(tmp_path / "step.pid"), "SLURM_JOB_ID": "4242", "SLURM_NNODES": "1",
           "MAIN_PROCESS_IP": "127.0.0.1", "MAIN_PROCESS_PORT": str(free_port()), "GPUS_PER_NODE": str(ranks),
           "PYTHON": sys.executable}
    env.pop("SLURM_STEP_ID", None)
    return env


def test_slurm_script_checkpoints_on_sigusr1_requeues_and_resumes(reference, tmp_path):
    """scripts/launch_slurm.sh's batch step with srun and scontrol faked: SIGUSR1 to every process of
    the training step (as `#SBATCH --signal=USR1@120` sends it) stops it at a checkpoint and the job
    requeues itself; a start that crashes is not requeued, though the file still ends with the stop
    record; the next start (the same command) resumes with `--resume auto` and ends with the
    uninterrupted run's weights, and is not requeued again."""
    env = fake_slurm(tmp_path, ranks=2)
    log, step_pid, out = tmp_path / "slurm.log", tmp_path / "step.pid", tmp_path / "run"
    cmd = ["bash", "scripts/launch_slurm.sh", "configs/accelerate/multinode.yaml", *RUN[1:], *TWO_RANKS,
           "--output_dir", str(out)]

    first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = signal_after_first_step(first, out, lambda: kill_tree(int(step_pid.read_text()), signal.SIGUSR1))
    assert first.returncode == 0, stdout[-2000:] + stderr[-3000:]
    step = assert_stopped_at_one_checkpoint(out, stderr, "SIGUSR1")
    assert "requeueing job 4242" in stdout
    assert log.read_text().splitlines()[-1] == "scontrol requeue 4242"

    crashed = subprocess.run(cmd, cwd=ROOT, env={**env, "FAKE_SRUN_CRASH": "1"}, capture_output=True, text=True,
                             timeout=300)
    assert crashed.returncode == 1 and "requeueing" not in crashed.stdout, crashed.stdout + crashed.stderr
    second = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    assert f"resume auto: continuing from {out / f'checkpoint-{step}'}" in second.stdout
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["srun", "scontrol", "srun", "srun"]
    assert_same_weights(weights(out), reference)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A small synthetic train and dev file: a 2-epoch run evaluates after each epoch."""
    return synth_corpus(tmp_path_factory.mktemp("synth"), num_dev=4, max_words=900)


def two_ranks_evaluating(entry: list, corpus: Path, out: Path, extra=()) -> list:
    """torchrun, 2 DDP ranks, 2 epochs of the tiny model on `corpus`, a dev evaluation after each epoch."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
            *entry, "--config", "configs/train/tiny.yaml", "--train_file", str(corpus / "simplified-nq-train.jsonl"),
            "--dev_file", str(corpus / "simplified-nq-dev.jsonl"), "--cache_dir", str(corpus / "cache"),
            "--max_steps", "0", "--num_train_epochs", "2", "--per_device_train_batch_size", "2",
            "--per_device_eval_batch_size", "2", "--dropout", "0.1", "--disable_tqdm", "true",
            "--output_dir", str(out), *extra]


def test_a_signal_during_evaluation_stops_at_its_next_batch_and_the_resumed_run_repeats_it(corpus, tmp_path):
    """SIGTERM to torchrun while the ranks evaluate after epoch 0 (each forward slowed to 2 s by
    tests/faulty_train.py, so the evaluation would run on for many more seconds): the ranks agree at the next
    evaluation batch, checkpoint the epoch's last step and stop with one line, writing no score for the
    evaluation they left; `--resume auto` evaluates epoch 0 again and reaches the uninterrupted run's
    scores at every epoch and its weights."""
    whole = subprocess.run(two_ranks_evaluating(["-m", "solution.train"], corpus, tmp_path / "whole"), cwd=ROOT,
                           env=ENV, capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr[-3000:]
    evals = [r for r in records(tmp_path / "whole") if r.get("event") == "eval"]
    assert [r["epoch"] for r in evals] == [0, 1] and evals[0]["num_examples"] == 4, evals

    out, log = tmp_path / "run", tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        proc = subprocess.Popen(two_ranks_evaluating(["tests/faulty_train.py", "slow-eval-2"], corpus, out), cwd=ROOT,
                                env=ENV, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            for line in proc.stdout:  # until a rank's first evaluation forward
                if line.startswith("faulty_train: evaluating"):
                    break
            assert proc.poll() is None, log.read_text()[-3000:]
            assert not [r for r in records(out) if r.get("event") == "eval"]
            sent = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=240)
        finally:
            kill_tree(proc.pid)
    waited = time.monotonic() - sent
    stop_lines = [line for line in log.read_text().splitlines() if line.startswith("stopped by")]
    step = evals[0]["step"]  # epoch 0's last step
    assert stop_lines == [f"stopped by SIGTERM at step {step} during the evaluation of epoch 0 (a resumed run "
                          f"evaluates it again): saved {out / f'checkpoint-{step}'}; continue with --resume latest"], \
        log.read_text()[-3000:]
    after = records(out)
    assert not [r for r in after if r.get("event") == "eval"], after  # the partial evaluation left no score
    assert after[-1] == {"event": "stopped", "signal": "SIGTERM", "step": step,
                         "checkpoint": str(out / f"checkpoint-{step}")}
    print(f"stopped {waited:.1f} s after the signal")

    resumed = subprocess.run(two_ranks_evaluating(["-m", "solution.train"], corpus, out, ["--resume", "auto"]),
                             cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resume auto: continuing from {out / f'checkpoint-{step}'}" in resumed.stdout
    rerun = records(out)[len(after):]
    assert [r for r in rerun if r.get("event") == "eval"] == evals
    assert rerun[-1]["dev"] == records(tmp_path / "whole")[-1]["dev"]
    assert_same_weights(weights(out), weights(tmp_path / "whole"))


@pytest.mark.parametrize("num_proc", [1, 2])
def test_a_signal_during_featurisation_stops_with_one_line_and_128_plus_its_number(num_proc, corpus, tmp_path):
    """SIGTERM to a run while it featurises its training file (1 s a document, tests/faulty_train.py): exit
    143 and one line, not `datasets`' DatasetGenerationError traceback (one process), nor a hang in its
    worker pool's clean-up (two: the workers, forked before the loop was armed, end by the signal's
    default action); the unfinished feature cache is removed."""
    cache = tmp_path / "cache"
    cmd = [sys.executable, "tests/faulty_train.py", "slow-features-1", "--config", "configs/train/tiny.yaml",
           "--train_file", str(corpus / "simplified-nq-train.jsonl"), "--dev_file", "null", "--cache_dir", str(cache),
           "--num_proc", str(num_proc), "--output_dir", str(tmp_path / "run"), "--disable_tqdm", "true"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("faulty_train: featurising"):
                break
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        kill_tree(proc.pid)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert stderr.splitlines() == ["stopped by SIGTERM before the first optimizer step; nothing was saved"], \
        stderr[-3000:]
    assert list(cache.iterdir()) == []


def test_slurm_script_requeues_a_job_stopped_before_its_first_step_only_with_a_checkpoint(corpus, tmp_path):
    """SIGUSR1 while the rank (one, under scripts/launch_slurm.sh with srun faked) featurises, slowed to 1 s a
    document by tests/hooks: it stops before its first step with one line and a `stopped` record without a
    checkpoint. With no checkpoint in output_dir the job is not requeued (it would only start over); after
    a run that saved checkpoint-1 (and was then killed), it is, to resume from there."""
    env = {**fake_slurm(tmp_path, ranks=1), "PYTHONPATH": f"{ROOT / 'tests' / 'hooks'}:{ROOT}",
           "FAULTY_TRAIN": "slow-features-1"}
    out = tmp_path / "run"
    data = ["configs/train/tiny.yaml", "--train_file", str(corpus / "simplified-nq-train.jsonl"),
            "--eval_strategy", "no", "--max_steps", "4", "--save_steps", "1", "--disable_tqdm", "true",
            "--output_dir", str(out)]

    def start_stopped_in_featurisation(cache: str) -> tuple:
        with (tmp_path / f"{cache}.stderr").open("w+") as stderr:
            proc = subprocess.Popen(["bash", "scripts/launch_slurm.sh", "configs/accelerate/multinode.yaml", *data,
                                     "--cache_dir", str(tmp_path / cache)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                    stderr=stderr, text=True)
            try:
                for line in proc.stdout:
                    if line.startswith("faulty_train: featurising"):
                        break
                assert proc.poll() is None, (tmp_path / f"{cache}.stderr").read_text()[-3000:]
                kill_tree(int((tmp_path / "step.pid").read_text()), signal.SIGUSR1)
                stdout, _ = proc.communicate(timeout=120)
            finally:
                kill_tree(proc.pid)
            stderr.seek(0)
            text = stderr.read()
        assert "stopped by SIGUSR1 before the first optimizer step; nothing was saved" in text.splitlines(), text
        assert records(out)[-1] == {"event": "stopped", "signal": "SIGUSR1", "step": None, "checkpoint": None}
        return proc.returncode, stdout, text

    code, stdout, stderr = start_stopped_in_featurisation("cache-a")
    assert code != 0 and "requeueing" not in stdout, stdout[-2000:] + stderr[-2000:]
    assert f"{out} holds no checkpoint: not requeueing" in stderr
    # A run of its own in the stopped job's output_dir (not resumed: it has nothing to resume), saving checkpoint-1.
    killed = subprocess.run([sys.executable, "tests/faulty_train.py", "kill-after-step-1", "--config", *data, "--cache_dir",
                             str(tmp_path / "cache-b"), "--overwrite_output_dir", "true"], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL and (out / "latest").read_text().strip() == "checkpoint-1"
    code, stdout, stderr = start_stopped_in_featurisation("cache-c")
    assert code == 0 and f"requeueing job 4242; it resumes from {out}/latest" in stdout, stdout[-2000:] + stderr[-2000:]
    assert (tmp_path / "slurm.log").read_text().splitlines()[-1] == "scontrol requeue 4242"


def test_ranks_of_a_killed_launcher_stop_at_a_checkpoint_instead_of_training_on(tmp_path):
    """SIGKILL to `accelerate launch`'s process group, as a job killed by hand: its two ranks, in sessions of
    their own, are not in that group. They receive SIGTERM when their launcher dies, agree on a step,
    checkpoint it and exit (before, they trained on, orphaned, holding output_dir)."""
    out = tmp_path / "run"
    cmd = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file", "configs/accelerate/ddp.yaml",
           "--num_processes", "2", "--main_process_port", str(free_port()), "-m", "solution.train", *COMMON,
           *TWO_RANKS, "--max_steps", "100000", "--output_dir", str(out)]
    launcher = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    ranks = []
    try:
        signal_after_first_step(launcher, out, lambda: None, wait=False)
        ranks = [p for p in psutil.Process(launcher.pid).children(recursive=True) if "solution.train" in p.cmdline()]
        assert len(ranks) == 2, [p.cmdline() for p in ranks]
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
        _, alive = psutil.wait_procs(ranks, timeout=120)
        assert not alive, f"ranks still training after their launcher died: {alive}"
    finally:
        for p in ranks:
            kill_tree(p.pid)
    last = records(out)[-1]
    assert last["event"] == "stopped" and last["signal"] == "SIGTERM", last
    assert (out / "latest").read_text().strip() == f"checkpoint-{last['step']}"

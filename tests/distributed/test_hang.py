"""The hang watchdog: a rank that makes no progress ends the run with one line, stacks and exit 4.

Fast tier: the diagnosis from two reads of the heartbeats, the collective timeouts set from hang_timeout,
and a real watchdog in a process whose main thread never moves. Slow tier: SIGSTOP to one of two DDP
ranks under torchrun (each rank in turn, so the survivor that must name it is rank 0 once and rank 1
once); the run ends non-zero naming the stopped rank, and `--resume auto` then finishes it. At either end
of a rank's life too: stopped while it still imports (before its watchdog's first beat), in the closing
barrier, or in destroying its process group once the model is written.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from conftest import ROOT, synth_corpus

from solution.distributed import strategy
from solution.distributed.watchdog import (
    EXIT_HANG,
    Beat,
    Progress,
    Watchdog,
    collective_timeout,
    diagnose,
    format_ranks,
    kill_sibling,
)

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def beats(**phases) -> dict:
    """rank -> Beat from r0="forward", r1="collective", ...; every beat counter 5."""
    return {int(k[1:]): Beat(int(k[1:]), beat=5, step=3, phase=v) for k, v in phases.items()}


def test_a_rank_whose_heartbeat_stopped_is_the_one_named():
    first = beats(r0="collective", r1="forward", r2="collective")
    second = beats(r0="collective", r1="forward", r2="collective")
    for r in (0, 2):
        second[r].beat = 7
    assert diagnose(first, second) == ([1], [1])
    second[1] = Beat(1)  # no file at all
    assert diagnose(first, second) == ([1], [1])


def test_without_a_silent_rank_the_one_not_waiting_is_named_else_all():
    first = beats(r0="collective", r1="data", r2="collective")
    second = {r: Beat(r, beat=9, step=3, phase=b.phase) for r, b in first.items()}
    assert diagnose(first, second) == ([1], [])  # stuck in its data loader; the others wait for it
    second[1].phase = "collective"
    assert diagnose(first, second) == ([0, 1, 2], [])  # a collective that never completes


def test_rank_lists_are_compact():
    assert format_ranks([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"


SIBLINGS = """
import socket, subprocess, sys
stopped = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)"])
reporter = subprocess.run([sys.executable, "-c", "import socket, sys; "
                           "from solution.distributed.watchdog import Beat, kill_sibling; "
                           f"print(kill_sibling(Beat(1, beat=3, pid={stopped.pid}, host=socket.gethostname())))"],
                          capture_output=True, text=True, timeout=60)
stopped.wait(timeout=30)
print(reporter.stdout.strip(), reporter.stderr.strip(), stopped.returncode)
"""


def test_a_stopped_rank_under_the_same_launcher_is_killed_and_no_other_process_is():
    """Two children of one launcher: the reporter kills its stopped sibling at once (the launcher's SIGTERM
    would never act on it). A process of another parent, or of another host, is left alone."""
    proc = subprocess.run([sys.executable, "-c", SIBLINGS], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=90)
    assert proc.stdout.split() == ["True", str(-signal.SIGKILL)], (proc.stdout, proc.stderr[-2000:])
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # this process's child
    try:
        assert not kill_sibling(Beat(1, beat=3, pid=mine.pid, host=socket.gethostname()))
        assert not kill_sibling(Beat(1, beat=3, pid=mine.pid, host="another-host"))
        assert mine.poll() is None
    finally:
        mine.kill()
        mine.wait()


def test_the_collectives_time_out_after_the_watchdog(monkeypatch):
    """From hang_timeout: past the watchdog's detection, and at start-up never below the library's default
    (ranks wait in a barrier while the main process featurises)."""
    assert collective_timeout(60) == 60 + 3 * 5 + 1 + 60
    monkeypatch.setenv("LOCAL_RANK", "0")
    [handler] = strategy._init_handlers(cuda=False, hang_timeout=60)
    assert handler.backend == "gloo" and handler.timeout.total_seconds() == 1800
    [handler] = strategy._init_handlers(cuda=False, hang_timeout=3600)
    assert handler.timeout.total_seconds() == collective_timeout(3600)
    [handler] = strategy._init_handlers(cuda=True, hang_timeout=600)
    assert handler.to_kwargs() == {"timeout": handler.timeout} and handler.timeout.total_seconds() == 600 + 3 * 10 + 1 + 60


def test_set_collective_timeout_reaches_every_group(tmp_path):
    """The world's group and one made later (new_group gives it the library's default, not the world's)."""
    script = textwrap.dedent(f"""
        import torch, torch.distributed as dist
        from solution.distributed.strategy import set_collective_timeout
        dist.init_process_group("gloo", init_method="file://{tmp_path / 'store'}", rank=0, world_size=1)
        dist.new_group([0])
        print(set_collective_timeout(77))
        for pg in dist.distributed_c10d._world.pg_map:
            print(pg._get_backend(torch.device("cpu")).options._timeout.total_seconds())
        dist.destroy_process_group()
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["2", "77.0", "77.0"]


STUCK = """
import sys, time
from pathlib import Path
from solution.distributed.watchdog import Progress, Watchdog
progress = Progress()
progress.mark("forward", 3)
with Watchdog(progress, Path(sys.argv[1]), 0, 1, 0.5, on_hang=lambda r: print("record", r, flush=True)):
    time.sleep(120)  # the main thread never moves on
"""


def test_a_rank_without_progress_exits_4_with_one_line_and_its_stacks(tmp_path):
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", STUCK, str(tmp_path)], cwd=ROOT, env=ENV, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == EXIT_HANG, proc.stderr[-2000:]
    assert time.monotonic() - started < 30
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("hang: no progress for 1 s at step 3, phase forward (rank 0); stalled: rank 0 "
                           "(last seen at step 3, forward; no progress for"), line
    [stacks] = (tmp_path / "hang-stacks").iterdir()
    assert stacks.name.startswith("rank-0-pid") and stacks.name.endswith(".txt")
    assert 'File "<string>", line 8 in <module>' in stacks.read_text()  # the main thread's sleep, where it was stuck
    assert "'stalled_ranks': [0]" in proc.stdout
    assert json.loads((tmp_path / "heartbeat" / "rank-0.json").read_text())["phase"] == "forward"


PAUSED = """
import sys
from pathlib import Path
from solution.distributed.watchdog import Progress, Watchdog
progress = Progress()
with Watchdog(progress, Path(sys.argv[1]), 0, 1, float(sys.argv[2])):
    for step, _ in enumerate(sys.stdin):  # a step each line the test sends: none while it holds them back
        progress.mark("collective", step)
print("done", flush=True)
"""


def test_a_process_stopped_and_continued_is_not_a_hang(tmp_path):
    """SIGSTOP for three timeouts, then SIGCONT (a whole job suspended, a VM paused), twice: the monotonic
    clock ran on, but nothing could move meanwhile. After each SIGCONT the main thread goes on a second
    later (waiting, as in a collective, for ranks continued after it), while the watchdog's thread wakes
    at once: it must see that it was frozen, not that its rank made no progress for three timeouts."""
    timeout = 2.0
    proc = subprocess.Popen([sys.executable, "-c", PAUSED, str(tmp_path), str(timeout)], cwd=ROOT, env=ENV,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def steps(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and proc.poll() is None:
            try:
                proc.stdin.write("step\n")
                proc.stdin.flush()
            except BrokenPipeError:  # it exited: the assertions below say how
                return
            time.sleep(0.2)

    try:
        steps(2.5)  # the watchdog beats, and watches
        for _ in range(2):
            proc.send_signal(signal.SIGSTOP)
            time.sleep(3 * timeout)
            proc.send_signal(signal.SIGCONT)
            time.sleep(1.0)
            steps(2.5)
        stdout, stderr = proc.communicate(timeout=30)  # closes its stdin: the loop ends
    finally:
        proc.kill()
    assert proc.returncode == 0 and stdout == "done\n", (proc.returncode, stderr[-2000:])
    assert "hang:" not in stderr and not (tmp_path / "hang-stacks").exists()


def test_a_declaration_is_withdrawn_when_this_rank_moves_on_during_its_confirmation(tmp_path, capfd):
    """Idle past the timeout, the watchdog starts its confirmation (three beats and a second); the rank
    moves on before it ends: no hang (it would have said `no progress for 0 s`)."""
    progress, exits = Progress(), []
    progress.mark("forward", 3)
    with Watchdog(progress, tmp_path, 0, 1, 0.5, exit=exits.append):
        time.sleep(2.5)  # idle since the start: the declaration began at the first beat, its confirmation lasts 4 s
        end = time.monotonic() + 4.0
        while time.monotonic() < end:  # the rank moves on, and keeps moving past the confirmation's end
            progress.mark("backward")
            time.sleep(0.1)
    assert exits == [] and "hang:" not in capfd.readouterr().err


def test_before_the_first_step_only_a_silent_rank_is_a_hang(tmp_path, capfd):
    """During set-up a rank's own idle time says nothing (rank 0 featurises while the others wait in a
    barrier): set-up past three timeouts with every rank beating is no hang, though rank 1 starts a second
    after rank 0 over a heartbeat file an earlier run left. Then rank 1's heartbeat stops: rank 0 names it."""
    timeout = 3.0
    (tmp_path / "heartbeat").mkdir()
    (tmp_path / "heartbeat" / "rank-1.json").write_text(json.dumps({"rank": 1, "beat": 57, "step": 40, "pid": 1,
                                                                      "phase": "collective", "host": "old"}))
    exits, records = [], []
    with Watchdog(Progress(), tmp_path, 0, 2, timeout, on_hang=records.append, exit=exits.append):
        time.sleep(1.0)
        with Watchdog(Progress(), tmp_path, 1, 2, timeout, exit=exits.append):
            time.sleep(3 * timeout)
            assert exits == [], capfd.readouterr().err
        started = time.monotonic()  # rank 1 stops beating
        while not exits and time.monotonic() - started < 30:
            time.sleep(0.1)
    took = time.monotonic() - started
    assert exits == [EXIT_HANG] and took < timeout + 1 + 4 + 3, (exits, took)
    [record] = records
    assert record["phase"] == "setup" and record["not_responding"] == [1] and record["rank"] == 0
    [line] = [x for x in capfd.readouterr().err.splitlines() if x.startswith("hang:")]
    assert line.startswith("hang: no heartbeat for ") and "before the first step (rank 0, in setup); stalled: " \
        "rank 1 (last seen at step 0, setup; not responding: stopped, frozen or dead" in line, line


# -- two ranks under torchrun, one stopped ------------------------------------------------------------
STEPS = 100
RUN = ["--config", "configs/train/tiny.yaml", "--data_source", "dummy", "--dummy_num_windows", "256",
       "--optim", "sgd", "--weight_decay", "0",
       "--max_steps", str(STEPS), "--eval_strategy", "no", "--disable_tqdm", "true", "--logging_steps", "1",
       "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2", "--strategy", "ddp",
       "--save_steps", "5"]


def torchrun(out: Path, *extra) -> list:
    from solution.distributed.ports import free_port

    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
            "-m", "solution.train", *RUN, "--output_dir", str(out), *extra]


def rank_process(launcher: psutil.Process, rank: int) -> psutil.Process:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for child in launcher.children():
            try:
                if child.environ().get("RANK") == str(rank):
                    return child
            except psutil.NoSuchProcess:
                pass
        time.sleep(0.1)
    raise AssertionError(f"no rank {rank} under the launcher")


@pytest.mark.slow
@pytest.mark.parametrize("stopped", [1, 0])
def test_sigstop_on_one_of_two_ranks_ends_the_run_naming_it_and_resume_auto_finishes(stopped, tmp_path):
    """hang_timeout 10 s here (the same code path as 60 s, measured in docs/reliability.md)."""
    out = tmp_path / "run"
    proc = subprocess.Popen(torchrun(out, "--hang_timeout", "10"), cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    victim = None
    try:
        deadline = time.monotonic() + 240
        while not (out / "latest").is_file():  # a checkpoint to resume from, then stop a rank mid-run
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.05)
        victim = rank_process(psutil.Process(proc.pid), stopped)
        victim.suspend()  # SIGSTOP
        stopped_at = time.monotonic()
        _, stderr = proc.communicate(timeout=180)
        took = time.monotonic() - stopped_at
    finally:
        if proc.poll() is None:
            for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]:
                p.send_signal(signal.SIGKILL)
        if victim is not None and victim.is_running():
            victim.send_signal(signal.SIGKILL)
    assert proc.returncode != 0 and took < 180, (proc.returncode, took)
    [line] = [x for x in stderr.splitlines() if x.startswith("hang:")]
    survivor = 1 - stopped
    assert f"(rank {survivor}); stalled: rank {stopped} (last seen at step " in line, line
    assert "not responding: stopped, frozen or dead" in line and f"stacks in {out / 'hang-stacks'}" in line
    assert f"exitcode  : {EXIT_HANG}" in stderr  # torchrun's report of the survivor
    names = sorted(p.name.split("-pid")[0] + (".last-seen" if "last-seen" in p.name else "")
                   for p in (out / "hang-stacks").iterdir())
    assert names == sorted([f"rank-{survivor}", f"rank-{stopped}.last-seen"]), names
    record = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["event"] == "hang" and record["stalled_ranks"] == [stopped] and record["rank"] == survivor
    assert record["killed"] == [stopped] and "; killed)" in line  # not left for torchrun's 30 s wait
    assert "train_loop" in (out / "hang-stacks" / next(p.name for p in (out / "hang-stacks").iterdir()
                                                        if p.name.startswith(f"rank-{survivor}-"))).read_text()

    resumed = subprocess.run(torchrun(out, "--resume", "auto"), cwd=ROOT, env=ENV, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resume auto: continuing from {out / 'checkpoint-'}" in resumed.stdout
    assert (out / "model" / "model.safetensors").is_file()
    last = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["event"] == "end" and last["step"] == STEPS


def logged_step(out: Path) -> int:
    """The last optimizer step metrics.jsonl logged (0 before the first)."""
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return 0
    steps = [json.loads(x).get("step") for x in lines if x.startswith('{"step"')]
    return steps[-1] if steps else 0


def signal_if_there(process: psutil.Process, sig: int) -> None:
    """`sig` to `process` unless it has exited (a rank that declared a hang: the assertions say so)."""
    try:
        process.send_signal(sig)
    except psutil.NoSuchProcess:
        pass


@pytest.mark.slow
def test_a_whole_job_suspended_for_three_timeouts_and_continued_finishes(tmp_path):
    """SIGSTOP to the torchrun agent and both ranks (what `scontrol suspend`, a VM pause or Ctrl-Z do) for
    three hang_timeouts, then SIGCONT, twice in one run: it is no hang, and the run finishes, exit 0.
    The ranks are continued half a second apart (one node's before another's), in turn rank 0 and rank 1
    first, so that the first one's main thread waits in a collective while its watchdog wakes."""
    timeout, out = 4, tmp_path / "run"
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        cmd = torchrun(out, "--hang_timeout", str(timeout), "--max_steps", "200", "--save_total_limit", "2")
        proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        try:
            agent = psutil.Process(proc.pid)
            ranks = [rank_process(agent, 0), rank_process(agent, 1)]
            reached = 0
            for attempt in range(2):
                deadline = time.monotonic() + 120
                while logged_step(out) < reached + 3:  # running: a few steps past the last pause
                    assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                    time.sleep(0.05)
                for p in (agent, *ranks):
                    signal_if_there(p, signal.SIGSTOP)
                time.sleep(3 * timeout)
                signal_if_there(agent, signal.SIGCONT)
                first, second = ranks if attempt % 2 == 0 else ranks[::-1]
                signal_if_there(first, signal.SIGCONT)
                time.sleep(0.5)
                signal_if_there(second, signal.SIGCONT)
                reached = logged_step(out)
            proc.wait(timeout=240)
        finally:
            if proc.poll() is None:
                for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]:
                    p.send_signal(signal.SIGKILL)
    stderr = log.read_text()
    assert proc.returncode == 0, stderr[-3000:]
    assert "hang:" not in stderr and not (out / "hang-stacks").exists()
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["event"] == "end" and records[-1]["step"] == 200
    assert not [r for r in records if r.get("event") == "hang"]


# -- before the first step: set-up watched ---------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A small synthetic training file (12 documents); each test featurises it into a cache of its own."""
    return synth_corpus(tmp_path_factory.mktemp("synth"), num_dev=2, max_words=400)


def featurising_run(corpus: Path, work: Path, seconds_a_document: float, hang_timeout: float) -> list:
    """torchrun, 2 DDP ranks, 4 steps of the tiny model on `corpus`; rank 0 featurises it first, slowed down
    (tests/faulty_train.py), while rank 1 waits for it in a barrier."""
    from solution.distributed.ports import free_port

    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
            "tests/faulty_train.py", f"slow-features-{seconds_a_document}", "--config", "configs/train/tiny.yaml",
            "--train_file", str(corpus / "simplified-nq-train.jsonl"), "--dev_file", str(corpus / "simplified-nq-dev.jsonl"),
            "--cache_dir", str(work / "cache"), "--eval_strategy", "no", "--max_steps", "4", "--strategy", "ddp",
            "--disable_tqdm", "true", "--hang_timeout", str(hang_timeout), "--output_dir", str(work / "run")]


def wait_for_line(proc: subprocess.Popen, prefix: str) -> None:
    for line in proc.stdout:
        if line.startswith(prefix):
            return
    raise AssertionError(f"the run ended (exit {proc.wait()}) before printing {prefix!r}")


def wait_for_beat(path: Path, rank: int, deadline: float) -> None:
    """Until `rank`'s heartbeat file holds a beat, or fail after `deadline` seconds."""
    end = time.monotonic() + deadline
    while Beat.read(path, rank).beat < 0:
        assert time.monotonic() < end, f"rank {rank} wrote no heartbeat to {path} in {deadline} s"
        time.sleep(0.05)


def kill_launch(proc: subprocess.Popen) -> None:
    """SIGKILL to torchrun and every process under it that is still there."""
    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in family:
        signal_if_there(p, signal.SIGKILL)


@pytest.mark.slow
def test_a_rank_stopped_before_its_first_step_is_named(corpus, tmp_path):
    """SIGSTOP to rank 1 while rank 0 featurises: within hang_timeout and a minute the run ends, rank 0
    naming rank 1 and killing it (before, the watchdog started with the first step: rank 0 waited in the
    barrier for gloo's 30-minute timeout, without a word)."""
    timeout, out, log = 5, tmp_path / "run", tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        proc = subprocess.Popen(featurising_run(corpus, tmp_path, 0.3, timeout), cwd=ROOT, env=ENV,
                                stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            wait_for_line(proc, "faulty_train: featurising")
            # Rank 1 beats from a thread of its own: wait for its first beat, so the rank stopped is one
            # the watchdog has seen (stopped before it, rank 1 is named with "no heartbeat", also right).
            wait_for_beat(out / "heartbeat" / "rank-1.json", 1, deadline=30)
            rank_process(psutil.Process(proc.pid), 1).suspend()
            stopped_at = time.monotonic()
            try:
                proc.communicate(timeout=timeout + 60)
            except subprocess.TimeoutExpired:
                pass
            took = time.monotonic() - stopped_at
        finally:
            kill_launch(proc)
    stderr = log.read_text()
    assert proc.wait() != 0 and took < timeout + 60, (proc.returncode, took, stderr[-3000:])
    [line] = [x for x in stderr.splitlines() if x.startswith("hang:")]
    assert "before the first step (rank 0, in setup); stalled: rank 1 (last seen at step 0, setup; not " \
           "responding: stopped, frozen or dead" in line and "; killed)" in line, line
    assert f"exitcode  : {EXIT_HANG}" in stderr
    record = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["event"] == "hang" and record["phase"] == "setup" and record["not_responding"] == [1]


@pytest.mark.slow
def test_a_set_up_longer_than_hang_timeout_with_every_rank_alive_finishes(corpus, tmp_path):
    """Rank 0 featurises for three timeouts (12 documents, 1 s each) while rank 1 waits for it: both beat
    from the start (their heartbeat files say `setup`), neither is taken for hung, and the run ends, exit 0."""
    timeout, out, log = 4, tmp_path / "run", tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        proc = subprocess.Popen(featurising_run(corpus, tmp_path, 1, timeout), cwd=ROOT, env=ENV,
                                stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            wait_for_line(proc, "faulty_train: featurising")
            deadline = time.monotonic() + 2 * timeout  # featurising lasts 12 s
            phases = {}
            while len(phases) < 2 and time.monotonic() < deadline:
                beats = [Beat.read(out / "heartbeat" / f"rank-{r}.json", r) for r in (0, 1)]
                phases = {b.rank: b.phase for b in beats if b.beat >= 0}
                time.sleep(0.2)
            proc.communicate(timeout=300)
        finally:
            kill_launch(proc)
    stderr = log.read_text()
    assert phases == {0: "setup", 1: "setup"}, phases
    assert proc.returncode == 0 and "hang:" not in stderr, stderr[-3000:]
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["event"] == "end"


# -- at either end: a rank stopped while it imports, starts its process group or shuts down ----------------
FINISHING = """
import os, signal, sys, time
from pathlib import Path
from solution.distributed.watchdog import Progress, Watchdog
out, rank = Path(sys.argv[1]), int(sys.argv[2])
stop = rank == 1 and sys.argv[3] == "stop"
progress = Progress()
with Watchdog(progress, out, rank, 2, 1.0, on_hang=lambda r: print("record", r, flush=True)) as watchdog:
    for _ in range(25):  # both ranks beat in their shutdown, moving on (hang_timeout is 1 s here)
        progress.mark("shutdown", 4)
        time.sleep(0.1)
    if stop:
        os.kill(os.getpid(), signal.SIGSTOP)  # stopped before it says it is done
    watchdog.wait_for_peers()
print("done", flush=True)
"""


def two_ranks(script: str, out: Path, *args) -> list:
    """Rank 0 and rank 1 of `script`, children of this process (as torchrun's ranks are of its agent)."""
    return [subprocess.Popen([sys.executable, "-c", script, str(out), str(r), *args], cwd=ROOT,
                             env={**ENV, "RANK": str(r)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in (0, 1)]


def finished(procs: list, timeout: float) -> list:
    """(returncode, stdout, stderr) of each process; any still running after `timeout` s is killed."""
    results = []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        results.append((proc.returncode, stdout, stderr))
    return results


def test_a_rank_that_finished_waits_for_the_others_and_names_one_stopped_in_its_shutdown(tmp_path):
    """Past the last collective a rank that finished used to exit 0 at once, leaving the launcher waiting
    forever for a rank stopped in its shutdown. Now it says it is done and waits for every other rank to say
    so too: both alive, both exit 0 within seconds; rank 1 stopped, rank 0 names it, kills it, exits 4."""
    started = time.monotonic()
    (r0, out0, err0), (r1, out1, err1) = finished(two_ranks(FINISHING, tmp_path / "both", "go"), 30)
    assert (r0, r1, out0, out1) == (0, 0, "done\n", "done\n"), (err0[-2000:], err1[-2000:])
    assert time.monotonic() - started < 15
    assert not err0 and not err1
    (r0, _, err0), (r1, _, _) = finished(two_ranks(FINISHING, tmp_path / "stopped", "stop"), 30)
    assert (r0, r1) == (EXIT_HANG, -signal.SIGKILL), (r0, r1, err0[-2000:])
    [line] = err0.strip().splitlines()
    assert line.startswith("hang: no heartbeat for ") and "after this rank finished (rank 0, done)" in line, line
    assert "stalled: rank 1 (last seen at step 4, shutdown; not responding: stopped, frozen or dead" in line, line
    assert "; killed)" in line, line


STARTING = """
import sys, time
from pathlib import Path
from solution.distributed.watchdog import Progress, Watchdog
with Watchdog(Progress(), Path(sys.argv[1]), 0, 2, 1.0):
    time.sleep(60)  # the other rank never beats
"""


def test_a_rank_stopped_before_its_first_heartbeat_is_named_and_killed(tmp_path):
    """Rank 1 stopped as it starts, before its watchdog could beat (it imports torch and checks its inputs
    first): rank 0 names it, and finds it by its RANK among the processes of its own launcher to kill it."""
    stopped = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSTOP)"],
                               env={**ENV, "RANK": "1", "LOCAL_RANK": "1"})
    try:
        watcher = subprocess.Popen([sys.executable, "-c", STARTING, str(tmp_path)], cwd=ROOT,
                                   env={**ENV, "RANK": "0", "LOCAL_RANK": "0"}, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        [(code, _, stderr)] = finished([watcher], 30)
        stopped.wait(timeout=10)
    finally:
        stopped.kill()
    assert code == EXIT_HANG and stopped.returncode == -signal.SIGKILL, (code, stderr[-2000:])
    [line] = stderr.strip().splitlines()
    assert "before the first step (rank 0, in setup); stalled: rank 1 (no heartbeat yet: in its start-up; not " \
           "responding: stopped, frozen or dead; killed)" in line, line


def ended_within(proc: subprocess.Popen, seconds: float) -> float:
    """Seconds until `proc` ends, or `seconds` when it has not by then (the caller then kills it)."""
    started = time.monotonic()
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass
    return time.monotonic() - started


@pytest.mark.slow
def test_a_rank_stopped_while_it_imports_is_named(tmp_path):
    """SIGSTOP to rank 0 2.5 s after it starts, while it still imports torch: within hang_timeout and a minute
    rank 1, waiting for it in the process group's start-up, names it and kills it (before: rank 1 waited there
    for gloo's 30 minutes, without a word; the watchdog started after the process group)."""
    timeout, out, log = 5, tmp_path / "run", tmp_path / "stderr.txt"
    with log.open("w") as stderr:
        proc = subprocess.Popen(torchrun(out, "--hang_timeout", str(timeout), "--max_steps", "4"), cwd=ROOT, env=ENV,
                                stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        try:
            victim = rank_process(psutil.Process(proc.pid), 0)
            time.sleep(2.5)
            victim.suspend()
            took = ended_within(proc, timeout + 60)
        finally:
            kill_launch(proc)
    stderr = log.read_text()
    assert proc.wait() != 0 and took < timeout + 60, (proc.returncode, took, stderr[-3000:])
    [line] = [x for x in stderr.splitlines() if x.startswith("hang:")]
    # Rank 0 is stopped before its watchdog's first beat on a loaded machine (it imports torch and checks its
    # inputs first), in its set-up on a fast one.
    assert re.search(r"\(rank 1, in setup\); stalled: rank 0 \((last seen at step 0, setup|no heartbeat yet: in its "
                     r"start-up); not responding: stopped, frozen or dead[^)]*; killed\)", line), line
    assert f"exitcode  : {EXIT_HANG}" in stderr
    record = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["event"] == "hang" and record["not_responding"] == [0] and record["killed"] == [0]


STOP_IN_SHUTDOWN = """
import os, signal, sys
from solution.distributed import strategy
from solution.train import main

where, victim = sys.argv[1], int(sys.argv[2])
original = getattr(strategy, where)


def stopped_here(*args, **kwargs):
    if int(os.environ["RANK"]) == victim:
        os.kill(os.getpid(), signal.SIGSTOP)  # the model directory is written: this rank stops in its shutdown
    return original(*args, **kwargs)


setattr(strategy, where, stopped_here)
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("where, victim", [("closing_barrier", 1), ("destroy_process_groups", 0)])
def test_a_rank_stopped_in_its_shutdown_is_named(where, victim, tmp_path):
    """A run that wrote its model: one rank stops in the closing barrier (the other waited there for its
    300 s, then exited 0) or after it, in destroying its process group (the other exited 0 at once, and
    torchrun waited for the stopped one forever). Now, within hang_timeout and a minute, the other names it
    and kills it."""
    from solution.distributed.ports import free_port

    timeout, out, log = 5, tmp_path / "run", tmp_path / "stderr.txt"
    script = tmp_path / "stop_in_shutdown.py"
    script.write_text(STOP_IN_SHUTDOWN)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           str(script), where, str(victim), *RUN, "--max_steps", "4", "--save_steps", "100", "--output_dir", str(out),
           "--hang_timeout", str(timeout)]
    with log.open("w") as stderr:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        try:
            rank = rank_process(psutil.Process(proc.pid), victim)
            deadline = time.monotonic() + 240
            while rank.status() != psutil.STATUS_STOPPED:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.05)
            took = ended_within(proc, timeout + 60)
        finally:
            kill_launch(proc)
    stderr = log.read_text()
    assert proc.wait() != 0 and took < timeout + 60, (proc.returncode, took, stderr[-3000:])
    assert (out / "model" / "model.safetensors").is_file()
    [line] = [x for x in stderr.splitlines() if x.startswith("hang:")]
    # "last seen" is its last heartbeat, up to a beat old: the short run may have left set-up since.
    assert re.search(rf"stalled: rank {victim} \(last seen at step \d, [a-z]+; not responding: stopped, frozen "
                     r"or dead[^)]*; killed\)", line), line
    records = [json.loads(x).get("event") for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-2:] == ["end", "hang"], records


# -- SLURM: scripts/launch_slurm.sh requeues a hang, a few times ----------------------------------------
HUNG_SRUN = """#!/usr/bin/env bash
# srun whose training step ended in a hang: the watchdog's record appended, exit 1 (the launcher's code).
echo "srun $*" >> "$FAKE_SLURM_LOG"
echo '{"event": "hang", "step": 7, "phase": "collective", "rank": 0, "stalled_ranks": [1]}' >> "$OUT/metrics.jsonl"
exit 1
"""


def test_the_slurm_script_requeues_a_hang_with_a_checkpoint_at_most_hang_requeues_times(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    fake = tmp_path / "bin"
    fake.mkdir()
    for name, text in (("srun", HUNG_SRUN), ("scontrol", 'echo "scontrol $*" >> "$FAKE_SLURM_LOG"\n')):
        (fake / name).write_text(text if text.startswith("#!") else "#!/usr/bin/env bash\n" + text)
        (fake / name).chmod(0o755)
    log = tmp_path / "slurm.log"
    env = {**ENV, "PATH": f"{fake}:{os.environ['PATH']}", "FAKE_SLURM_LOG": str(log), "OUT": str(out),
           "SLURM_JOB_ID": "4242", "PYTHON": sys.executable, "HANG_REQUEUES": "2"}
    env.pop("SLURM_STEP_ID", None)
    cmd = ["bash", "scripts/launch_slurm.sh", "configs/accelerate/multinode.yaml", "configs/train/tiny.yaml",
           "--output_dir", str(out)]

    def batch_step():
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)

    first = batch_step()  # no checkpoint yet: a new start would begin again, so no requeue
    assert first.returncode == 1 and "scontrol" not in log.read_text(), first.stdout + first.stderr
    (out / "latest").write_text("checkpoint-5\n")
    again = batch_step()  # the second hang of the run, the first with a checkpoint: requeued
    assert again.returncode == 0, again.stderr
    assert f"a hang ended the run (hang 2 of at most 2; stacks in {out / 'hang-stacks'})" in again.stdout
    assert log.read_text().splitlines()[-1] == "scontrol requeue 4242"
    last = batch_step()  # the third: a hang that keeps coming back is not requeued forever
    assert last.returncode == 1 and "(hang 3, more than HANG_REQUEUES=2): not requeueing" in last.stderr
    assert log.read_text().count("scontrol requeue") == 1


@pytest.mark.parametrize("timeout", [5, 60, 600, 3600])
def test_a_hang_is_named_within_a_minute_of_hang_timeout_whatever_it_is(timeout):
    """Past hang_timeout the watchdog notices within a beat and confirms over three beats and a second: with
    30 s beats that was 121 s at the default 600 s."""
    from solution.distributed.watchdog import beat_interval, confirm_wait

    assert beat_interval(timeout) + confirm_wait(timeout) <= 60

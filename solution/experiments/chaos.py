"""The chaos run's machinery: faults (signals to a rank or to the torchrun agent, some during a checkpoint
save) injected into a two-rank training, a restart with `--resume auto` after each, an uninterrupted reference
run, and the oracle that compares their final weights and logged losses bit for bit. `scripts/chaos.py` is
its command.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from solution.distributed.ports import free_port

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the runs start there, on its configs

# target, signal, during a save
KINDS = {
    "rank-SIGKILL": ("rank", signal.SIGKILL, False),
    "rank-SIGTERM": ("rank", signal.SIGTERM, False),
    "rank-SIGSTOP": ("rank", signal.SIGSTOP, False),
    "agent-SIGKILL": ("agent", signal.SIGKILL, False),
    "agent-SIGTERM": ("agent", signal.SIGTERM, False),
    "agent-SIGSTOP": ("agent", signal.SIGSTOP, False),
    "rank-SIGKILL-in-save": ("rank", signal.SIGKILL, True),
    "rank-SIGTERM-in-save": ("rank", signal.SIGTERM, True),
    "agent-SIGKILL-in-save": ("agent", signal.SIGKILL, True),
}
AGENT_STOP_S = 5.0  # how long a stopped agent stays frozen
SAVE_DELAY_S = 0.5

# The entry point torchrun runs: solution.train, each checkpoint save held open a moment longer.
ENTRY = f"""
import sys, time
sys.path.insert(0, {str(ROOT)!r})
import accelerate
original = accelerate.Accelerator.save_state
def save_state(self, *args, **kwargs):
    result = original(self, *args, **kwargs)
    time.sleep({SAVE_DELAY_S})
    return result
accelerate.Accelerator.save_state = save_state
from solution.train import main
sys.exit(main(sys.argv[1:]))
"""


def train_args(out: Path, steps: int, hang_timeout: float) -> list:
    return ["--config", "configs/train/tiny.yaml", "--data_source", "dummy", "--dummy_num_windows", "256",
            "--optim", "sgd", "--weight_decay", "0", "--learning_rate", "0.3", "--max_grad_norm", "0", "--dropout", "0.1",
            "--max_steps", str(steps), "--logging_steps", "1", "--eval_strategy", "no", "--disable_tqdm", "true",
            "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2", "--save_steps", "3",
            "--save_total_limit", "2", "--hang_timeout", str(hang_timeout), "--resume", "auto",
            "--output_dir", str(out)]


@dataclass
class Fault:
    kind: str
    target: str  # "agent" or "rank R"
    step_at_fault: int  # the highest step logged when the fault was sent
    step_reached: "int | None" = None  # the highest step logged when the launch had ended (a stop finishes its step)
    launch_exit: "int | None" = None  # torchrun's exit code (None: it went on, or was killed by this script)
    resumed_from: "int | None" = None  # the step the next launch continued from (0: fresh)
    steps_lost: "int | None" = None
    wall_time_lost_s: "float | None" = None
    forced_kill: list = field(default_factory=list)  # processes this script had to SIGKILL to go on


class Metrics:
    """metrics.jsonl read as it grows, each record with the time it was first seen."""

    def __init__(self, path: Path):
        self.path, self.offset, self.records = path, 0, []

    def poll(self) -> list:
        if not self.path.is_file():
            return self.records
        with self.path.open() as f:
            f.seek(self.offset)
            text = f.read()
        complete = text[:text.rfind("\n") + 1]
        self.offset += len(complete)
        now = time.monotonic()
        self.records += [(now, json.loads(line)) for line in complete.splitlines() if line.strip()]
        return self.records

    def high_step(self) -> int:
        return max((r["step"] for _, r in self.poll() if "loss" in r), default=0)

    def last_start(self) -> "dict | None":
        return next((r for _, r in reversed(self.poll()) if r.get("event") == "start"), None)


class Launch:
    """One torchrun of the training (two ranks); the agent in a session of its own."""

    def __init__(self, entry: Path, args: list, log: Path, nproc: int):
        # The agent's wait for its workers after a signal to it (they save within it). After a worker's
        # failure torch 2.13 waits a fixed 30 s before it SIGKILLs the others; a stopped rank does not wait
        # for that: the watchdog's reporting rank kills it.
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "5"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--max-restarts", "0",
               "--master-port", str(free_port()), str(entry), *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("a"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.family: set = set()

    def workers(self) -> dict:
        """rank -> process, as torchrun set RANK in each worker's environment."""
        ranks = {}
        try:
            for child in psutil.Process(self.proc.pid).children():
                self.family.add(child)
                ranks[int(child.environ().get("RANK", -1))] = child
        except psutil.Error:
            pass
        return ranks

    def end(self, timeout: float, tick=lambda: None) -> tuple:
        """Wait for torchrun and every worker it started to be gone, calling `tick` meanwhile; SIGKILL what
        is left after `timeout`. Returns (torchrun's exit code or None, the pids this had to kill)."""
        self.workers()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (self.proc.poll() is None or any(map(alive, self.family))):
            tick()
            time.sleep(0.05)
        forced = []
        if self.proc.poll() is None:
            forced.append(self.proc.pid)
            self.proc.kill()
        for p in filter(alive, self.family):
            forced.append(p.pid)
            p.kill()
        code = self.proc.wait()
        return (None if forced else code), forced


def alive(p: psutil.Process) -> bool:
    """Running and not a zombie (a worker torchrun has not reaped yet is done)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_for(condition, launch: Launch, timeout: float) -> bool:
    """Poll `condition` until it holds; False when the launch ended first or the time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if launch.proc.poll() is not None:
            return False
        time.sleep(0.01)
    return False


def in_save(out: Path) -> bool:
    return any(out.glob("checkpoint-*.tmp"))


def inject(kind: str, launch: Launch, rng: random.Random, metrics: Metrics) -> "str | None":
    """Send the fault; the target's name, or None when the target was already gone."""
    where, sig, _ = KINDS[kind]
    if where == "agent":
        os.kill(launch.proc.pid, sig)
        if sig == signal.SIGSTOP:
            frozen = time.monotonic() + AGENT_STOP_S
            while time.monotonic() < frozen:  # the workers train on: their records are timed as they come
                metrics.poll()
                time.sleep(0.05)
            os.kill(launch.proc.pid, signal.SIGCONT)
        return "agent"
    ranks = launch.workers()
    if not ranks:
        return None
    rank = rng.choice(sorted(ranks))
    try:
        ranks[rank].send_signal(sig)
    except psutil.Error:
        return None
    return f"rank {rank}"


def chaos_run(out: Path, faults: int, kinds: list, seed: int, hang_timeout: float, nproc: int, steps: int) -> dict:
    rng = random.Random(seed)
    entry = out.parent / "chaos_entry.py"
    entry.write_text(ENTRY)
    args = train_args(out, steps, hang_timeout)
    log, metrics, done = out.parent / "chaos.log", Metrics(out / "metrics.jsonl"), []
    plan = [kinds[i % len(kinds)] for i in range(faults)]
    rng.shuffle(plan)
    t0, restarts = time.monotonic(), 0
    launch = Launch(entry, args, log, nproc)
    for kind in plan:
        target_step = metrics.high_step() + rng.randint(1, 3)
        if target_step >= steps - 1 or not wait_for(lambda: metrics.high_step() >= target_step, launch, 600):
            break  # the run ended (or stalled) before this fault: report what was done
        if KINDS[kind][2] and not wait_for(lambda: in_save(out), launch, 120):
            break
        fault = Fault(kind, "", metrics.high_step())
        launch.workers()  # known before the fault: an agent's death leaves them running on their own
        t_fault = time.monotonic()
        fault.target = inject(kind, launch, rng, metrics) or "gone"
        done.append((fault, t_fault))
        if kind == "agent-SIGSTOP":
            continue  # the launcher was only frozen: the same launch goes on
        fault.launch_exit, fault.forced_kill = launch.end(timeout=180, tick=metrics.poll)
        fault.step_reached = metrics.high_step()
        start_count = sum(r.get("event") == "start" for _, r in metrics.poll())
        launch, restarts = Launch(entry, args, log, nproc), restarts + 1
        # The next launch's start record says where it continued from.
        wait_for(lambda: sum(r.get("event") == "start" for _, r in metrics.poll()) > start_count, launch, 300)
        start = metrics.last_start() or {}
        fault.resumed_from = (start.get("resumed_from") or {}).get("step", 0)
        fault.steps_lost = fault.step_reached - fault.resumed_from
    code, forced = launch.end(timeout=900, tick=metrics.poll)  # records timed as they come
    wall = time.monotonic() - t0
    for fault, t_fault in done:
        fault.wall_time_lost_s = recovery_time(metrics, fault, t_fault)
    return {"faults": [asdict(f) for f, _ in done], "restarts": restarts, "final_launch_exit": code,
            "final_forced_kill": forced, "wall_s": round(wall, 1), "num_steps": steps,
            "planned_faults": faults}


def recovery_time(metrics: Metrics, fault: Fault, t_fault: float) -> "float | None":
    """Seconds from the fault until a step past the highest its launch reached was logged (or the run's end)."""
    reached = fault.step_at_fault if fault.step_reached is None else fault.step_reached
    for seen, record in metrics.poll():
        if seen > t_fault and (record.get("step") or 0) > reached and ("loss" in record or
                                                                                 record.get("event") == "end"):
            return round(seen - t_fault, 1)
    return None


def reference_run(out: Path, steps: int, hang_timeout: float, nproc: int) -> float:
    entry = out.parent / "chaos_entry.py"
    t0 = time.monotonic()
    launch = Launch(entry, train_args(out, steps, hang_timeout), out.parent / "reference.log", nproc)
    code, _ = launch.end(timeout=900)
    if code != 0:
        raise SystemExit(f"error: the uninterrupted reference run failed (exit {code}); see "
                         f"{out.parent / 'reference.log'}")
    return round(time.monotonic() - t0, 1)


def compare(chaos: Path, reference: Path) -> dict:
    """Final weights and every logged loss, bit for bit."""
    import torch
    from safetensors.torch import load_file

    model = chaos / "model" / "model.safetensors"
    if not model.is_file():
        return {"final_weights_bit_identical": False, "note": f"{model} was not written"}
    got, ref = load_file(str(model)), load_file(str(reference / "model" / "model.safetensors"))
    same = got.keys() == ref.keys() and all(torch.equal(got[k], ref[k]) for k in ref)
    worst = max(((got[k] - ref[k]).abs().max().item() for k in ref if k in got), default=float("nan"))
    ref_loss = {r["step"]: r["loss"] for r in map(json.loads, (reference / "metrics.jsonl").open()) if "loss" in r}
    losses = [r for r in map(json.loads, (chaos / "metrics.jsonl").open()) if "loss" in r]
    return {"final_weights_bit_identical": same, "max_abs_weight_difference": worst,
            "losses_logged": len(losses), "losses_bit_identical": all(r["loss"] == ref_loss.get(r["step"]) for r in losses)}


def summarise(report: dict) -> dict:
    faults = report["faults"]
    lost = [f["steps_lost"] for f in faults if f["steps_lost"] is not None]
    wall = [f["wall_time_lost_s"] for f in faults if f["wall_time_lost_s"] is not None]
    return {"faults_injected": len(faults), "restarts": report["restarts"],
            "steps_lost": {"total": sum(lost), "mean": round(sum(lost) / max(len(lost), 1), 2),
                           "max": max(lost, default=0)},
            "wall_time_lost_s": {"total": round(sum(wall), 1), "mean": round(sum(wall) / max(len(wall), 1), 1),
                                 "max": max(wall, default=0)}}

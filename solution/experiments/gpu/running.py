"""Running the GPU check's plan within its budget: each command in its own process group (a timeout ends
torchrun's workers too), its output to OUT/NAME.log, its figures read back, and gpu_check.json rewritten as each
run ends, so what a lost machine had measured is already written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from solution.common.fsutil import atomic_write_text
from solution.experiments.gpu import reading, recipe, speed
from solution.experiments.gpu.commands import Group, shown
from solution.experiments.gpu.figures import run_figures

ROOT = Path(__file__).resolve().parents[3]  # the repository: the commands run there, on its configs
# Peak dense (no sparsity) bf16 tensor-core FLOP/s, from the vendors' data sheets; first match wins.
PEAK_TFLOPS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("GH200", 989.0),
               ("A100", 312.0)]


def peak_tflops(device_name: str, override) -> tuple:
    if override:
        return override, "--peak-tflops"
    for key, tflops in PEAK_TFLOPS:
        if key.lower() in device_name.lower():
            return tflops, f"looked up from the device name ({key})"
    return None, f"unknown device {device_name!r}: pass --peak-tflops for MFU"


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the command's process group, then SIGKILL to what is left of it."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue


LIVE: set = set()  # the commands running now, each in its own session: a stopped check must stop them too


def stop_live(signum=None, frame=None) -> None:
    """Stop every command still running (their process groups), then end the check: as SIGTERM's handler, the
    commands of a check stopped from outside do not run on without it (each has its own session)."""
    for proc in list(LIVE):
        stop_group(proc)
    if signum is not None:
        raise SystemExit(128 + signum)


def execute(name: str, cmd: list, args, timeout: float) -> dict:
    """Run one command in its own process group (a timeout ends torchrun's workers too), its output to NAME.log."""
    log = Path(args.out) / f"{name}.log"
    print(f"[{name}] $ {shown(cmd)}", flush=True)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        LIVE.add(proc)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(proc)
            code = "timeout"
            f.write(f"\ngpu_check: stopped after {timeout:.0f} s (the budget left it)\n")
        finally:
            LIVE.discard(proc)
    wall = time.perf_counter() - t0
    result = {"name": name, "ok": code == 0, "returncode": code, "wall_s": round(wall, 1), "log": str(log)}
    if code != 0:
        result["error_tail"] = log.read_text(errors="replace")[-1500:]
    print(f"    {'ok' if code == 0 else f'FAILED ({code})'} in {wall:.0f} s; log {log}", flush=True)
    return result


def run_chain(name: str, cmds: list, args, deadline: float, results: dict) -> None:
    """One chain of a group: its commands in order, each with the seconds left; the first failure ends it."""
    for k, cmd in enumerate(cmds):
        label = Group.label(name, k, len(cmds))
        if deadline - time.monotonic() < 1.0:  # the group's time is spent: the rest of the chain does not start
            return
        results[label] = execute(label, cmd, args, deadline - time.monotonic())
        if not results[label]["ok"]:
            return


def execute_group(name: str, group: Group, args, timeout: float) -> dict:
    """Every chain of `group` at once, each command's output to its own log; ok when every command was."""
    t0, deadline, results = time.perf_counter(), time.monotonic() + timeout, {}
    threads = [threading.Thread(target=run_chain, args=(chain, cmds, args, deadline, results))
               for chain, cmds in group.chains.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    planned = [label for label, _ in group.commands()]
    failed = [label for label in planned if not results.get(label, {}).get("ok")]
    out = {"name": name, "ok": not failed, "returncode": 0 if not failed else "failed",
           "wall_s": round(time.perf_counter() - t0, 1), "commands": results}
    if failed:
        out["failed"] = failed  # a command not run: an earlier one of its chain failed
    print(f"    group {name}: {'ok' if not failed else 'FAILED: ' + ', '.join(failed)} in {out['wall_s']:.0f} s",
          flush=True)
    return out


def reserved(kind: str, left: float) -> float:
    """The seconds a run of `kind` may use of those `left`: the reading part's groups leave its figures
    their reserve, so the last figures run inside the budget, not after it."""
    return left - reading.FIGURES_RESERVE_S if kind == "reading" else left


def why_skipped(args, result: dict, kind: str, needs: list, left: float):
    """Why a run does not start (a run it needs did not finish, or the budget is spent), or None."""
    failed = [n for n in needs if not result["runs"].get(n, {}).get("ok")]
    if failed:
        return f"needs {', '.join(failed)}, which did not finish"
    left = reserved(kind, left)
    if left < args.min_start_s and kind != "figures":  # the figures: seconds, and the trainings' point
        return f"the budget ({args.budget_s:.0f} s) is spent: {max(left, 0):.0f} s left"
    return None


def run_one(name: str, kind: str, cmd, args, result: dict, tflops, probes: Path, left: float) -> dict:
    """Start one run with what the budget left (its command built now when it is a function), and its figures."""
    if callable(cmd):  # built as it starts: the recipe's stage 2 fits its pages to the budget left
        cmd = cmd(result, left)
    timeout = min(args.timeout, max(reserved(kind, left), args.min_start_s))
    if isinstance(cmd, Group):
        return execute_group(name, cmd, args, timeout)
    r = execute(name, cmd, args, timeout)
    try:
        if r["ok"]:
            r.update(run_figures(name, kind, r, cmd, args, probes, tflops))
    except (OSError, ValueError, KeyError) as e:  # the run finished; its figures could not be read
        r["figures_error"] = f"{type(e).__name__}: {e}"
    return r


def run_all(args, runs: list, result: dict, tflops, probes: Path, json_path: Path) -> None:
    deadline = time.monotonic() + args.budget_s
    for name, kind, cmd, needs in runs:
        left = deadline - time.monotonic()
        why = why_skipped(args, result, kind, needs, left)
        if why:
            result["skipped"].append({"run": name, "why": why})
        else:
            result["runs"][name] = run_one(name, kind, cmd, args, result, tflops, probes, left)
        if name.startswith("recipe-"):
            result["recipe"] = recipe.recipe_summary(args, result)
            recipe.keep_recipe_files(args)
        if name.startswith("reading-"):
            result["reading"] = reading.reading_summary(args, result)
            reading.keep_reading_files(args)
        if name.startswith("speed-"):
            result["speed"] = speed.summary(result)
        result["elapsed_s"] = round(args.budget_s - (deadline - time.monotonic()), 1)
        atomic_write_text(json_path, json.dumps(result, indent=2) + "\n")  # each result as it finishes

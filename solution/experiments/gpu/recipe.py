"""The GPU check's `recipe` part: the nq-profile recipe's commands (docs/answers-method.md, "A recipe that learns
NQ-shaped pages"), stage 2's pages fitted to the budget left, and gpu_check.json's "recipe" record.

The constants are the projection of `scripts/gpu_check.py`'s docstring: measured on one H100, or assumed where
marked.
"""

from __future__ import annotations

import functools
import json
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the repository: the commands run there
GPU_CHECK = ROOT / "scripts" / "gpu_check.py"  # --recipe-figures is its own command, run last

RECIPE_PAGES = 20_000  # 5x the CPU record's 4,000 training pages
RECIPE_BASE = {"num_train": 4000, "num_dev": 400, "num_test": 400}  # corpus seed 0: docs/benchmarks/answers-nq.json's
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
    """What gpu_check's docstring projects for --recipe-pages on --num-proc processes, recorded beside what ran."""
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


def recipe_learning_rate(batch: int) -> float:
    """The recipe's 1e-4 at its batch of 8, scaled by the square root of the batch's growth."""
    return 1.0e-4 * (batch / RECIPE_BATCH) ** 0.5


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


def keep_recipe_files(args) -> None:
    """Copy RECIPE_FILES that exist from WORK/recipe to OUT/recipe: the figures' inputs come back with OUT."""
    src, dst = recipe_dirs(args)["out"], Path(args.out) / "recipe"
    for name in RECIPE_FILES:
        if (src / name).is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / name, dst / name)


def corpus_commands(args) -> list:
    """(name, kind, command) of the recipe's two corpora: the demo's easy pages and the nq profile's seed 0
    with the extra training pages."""
    d, base, py = recipe_dirs(args), recipe_base(args), sys.executable
    tiny = ["--num-train", "20", "--num-dev", "4", "--num-test", "4"] if args.dry_run else []
    return [
        ("recipe-synth", "recipe", [py, "-m", "solution.synth", "--out", str(d["easy"]), *tiny]),
        ("recipe-profile", "recipe", [py, "-m", "solution.synth_more", "--profile", "nq", "--out", str(d["profile"]),
                                      "--seed", "0", "--num-train", str(base["num_train"]), "--num-dev",
                                      str(base["num_dev"]), "--num-test", str(base["num_test"]),
                                      "--extra-train", str(max(args.recipe_pages - base["num_train"], 0)),
                                      "--workers", str(args.num_proc),
                                      *(["--shard-pages", "10"] if args.dry_run else [])]),
    ]


def recipe_commands(args) -> list:
    """(name, kind, command) of the nq-profile recipe, docs/answers-method.md's commands; stage 2's is a function
    of the result so far and the seconds left, called when it starts."""
    d = recipe_dirs(args)
    out, easy, profile, model = d["out"], d["easy"], d["profile"], d["model"]
    tiny = ["--max_steps", "3", "--max_dev_examples", "2"] if args.dry_run else []
    py = sys.executable
    return [
        *corpus_commands(args),
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
        ("recipe-figures", "figures", [py, str(GPU_CHECK), "--recipe-figures", str(out)]),
    ]


def stage_figures(stage: str, records: list) -> dict:
    """A recipe stage's documents, windows, steps and windows/s (the median step), from its metrics.jsonl."""
    start, steps = records[0], [r["step_time_s"] for r in records if "step_time_s" in r]
    out = {f"{stage}_documents": start["train_data"].get("documents"), f"{stage}_windows": start["train_windows"],
           f"{stage}_steps": start["num_optimizer_steps"]}
    if steps:
        out[f"{stage}_step_s"] = statistics.median(steps)
        out[f"{stage}_windows_per_s"] = start["global_batch_size"] / statistics.median(steps)
    return out


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

"""The GPU check's plan: the parts of --parts in their order, each a list of (name, kind, command, the runs it
needs), and what is skipped and why. A command may be a function of the result so far and the seconds left,
built when it starts (the recipe's stage 2, the speed part's runs at the sweep's best batch)."""

from __future__ import annotations

import sys
from pathlib import Path

from solution.common.fsutil import atomic_write_text
from solution.experiments.gpu import speed
from solution.experiments.gpu.commands import predict_command, train_command
from solution.experiments.gpu.reading import reading_commands, reading_needs
from solution.experiments.gpu.recipe import recipe_commands


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


def plan_reading(args, gpus: int, probes: Path) -> tuple:
    """The reading part's groups in order, each with what it needs (`reading.reading_needs`): a training that
    fails does not stop the others' predictions, and the words figures score whatever predictions there are."""
    needs = reading_needs()
    return [(name, kind, cmd, needs.get(name, [])) for name, kind, cmd in reading_commands(args)], []


def plan_speed(args, gpus: int, probes: Path) -> tuple:
    return speed.plan_speed(args, probes, train_command)


PART_PLANS = {"bf16": plan_bf16, "predict": plan_predict, "fp16": plan_fp16, "recipe": plan_recipe,
              "speed": plan_speed, "reading": plan_reading}


def write_pages(args) -> Path:
    """The real NQ pages predict runs on: the dev sample then the train sample (`--pages` of them)."""
    lines = []
    for name in ("simplified-nq-dev-sample.jsonl", "simplified-nq-train-sample.jsonl"):
        lines += [line for line in (Path(args.data) / name).read_text().splitlines() if line.strip()]
    lines = lines[:args.pages] if args.pages else lines
    return atomic_write_text(Path(args.work) / "pages.jsonl", "\n".join(lines) + "\n")

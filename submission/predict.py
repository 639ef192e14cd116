"""Write Kaggle's submission.csv from a model directory, offline.

    python -m submission.predict --model runs/demo/model --input simplified-nq-test.jsonl --output submission.csv

Runs where a Kaggle code-competition notebook runs: internet off, no extra
packages. It imports torch, transformers, numpy and the project's own
reading, windowing, model and post-processing modules; never accelerate or
deepspeed, and never the network (HF_HUB_OFFLINE is set before transformers
loads). Everything it needs (weights, tokenizer, window and post-processing
settings) comes from the model directory.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time

# Before transformers is imported: never reach for a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from solution.inference import model_runner, predict_documents, submission_rows  # noqa: E402
from solution.model import load_model_dir  # noqa: E402
from solution.nq import ReadStats, read_examples  # noqa: E402
from solution.postprocess import PostprocessConfig  # noqa: E402
from solution.windows import Featurizer, WindowConfig  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m submission.predict", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="model directory (output_dir/model of a training run)")
    p.add_argument("--input", required=True, help="simplified-NQ test file (.jsonl or .jsonl.gz)")
    p.add_argument("--output", default="submission.csv", help="CSV to write (default: submission.csv)")
    p.add_argument("--batch-size", type=int, default=32, help="windows per forward pass")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast (faster on recent CPUs and GPUs)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="a bad input line: stop with an error naming it (raise) or count and report it (skip)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    return p


def predict_file(model_dir: str, input_path: str, output_path: str, batch_size: int = 32, device: str = "cpu",
                 bf16: bool = False, on_error: str = "raise", quiet: bool = False) -> dict:
    """Score every example of `input_path` and write the CSV; returns counts and speed."""
    model, tokenizer, meta = load_model_dir(model_dir, device)
    featurizer = Featurizer(tokenizer, WindowConfig(**meta["window"]))
    post = PostprocessConfig(**meta["postprocess"])
    run = model_runner(model, device, torch.bfloat16 if bf16 else None)
    stats = ReadStats()
    t0 = time.perf_counter()
    progress_state = {"docs": 0, "windows": 0}

    def progress(docs, windows):
        progress_state.update(docs=docs, windows=windows)
        if not quiet:
            dt = time.perf_counter() - t0
            print(f"\rpredict: {docs} documents, {windows} windows, {docs / dt:.1f} docs/s",
                  end="", file=sys.stderr, flush=True)

    examples = read_examples(input_path, on_error=on_error, stats=stats)
    tmp = output_path + ".tmp"
    rows = 0
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["example_id", "PredictionString"])
        for row in submission_rows(predict_documents(run, featurizer, examples, post, batch_size,
                                                     progress=progress)):
            writer.writerow(row)
            rows += 1
    os.replace(tmp, output_path)  # never leave half a submission under the real name
    if not quiet:
        print(file=sys.stderr)
    dt = time.perf_counter() - t0
    return {"documents": progress_state["docs"], "windows": progress_state["windows"], "rows": rows,
            "seconds": dt, "skipped": stats.num_skipped, "read_report": stats.report()}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        result = predict_file(args.model, args.input, args.output, args.batch_size, args.device,
                              args.bf16, args.on_error, args.quiet)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}: {result['rows']} rows for {result['documents']} documents "
          f"({result['windows']} windows) in {result['seconds']:.1f}s")
    if result["skipped"]:
        print(f"WARNING: {result['read_report']}", file=sys.stderr)
        return 1  # rows for bad lines are missing: say so in the exit code
    return 0


if __name__ == "__main__":
    sys.exit(main())

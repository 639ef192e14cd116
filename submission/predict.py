"""Write Kaggle's submission.csv from a model directory (or an ensemble of several), offline.

    python -m submission.predict --model runs/demo/model --input simplified-nq-test.jsonl --output submission.csv
    python -m submission.predict --model runs/a/model --model runs/b/model [--weights 2,1] --input ... --output ...
    python -m submission.predict --model runs/demo/model --input dev.jsonl --output dev.csv --nq-predictions dev-nq.json

Runs where a Kaggle code-competition notebook runs: internet off, no extra
packages. It imports torch, transformers, numpy and the project's own
reading, windowing, model and post-processing modules; never accelerate or
deepspeed, and never the network (HF_HUB_OFFLINE is set before transformers
loads). Everything it needs (weights, tokenizer, window and post-processing
settings) comes from the model directory.

The CSV, the scores file and the NQ predictions JSON are written under temporary names and renamed
when whole; an error, SIGTERM or Ctrl-C removes them (exit status 128 + the
signal) and leaves what the real names held. An output that is the input, a
model file or the other output is refused before anything runs.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import signal
import sys
import time
from typing import Optional, Sequence, Union

# Before transformers is imported: never reach for a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from solution.answers.ensemble import parse_weights  # noqa: E402
from solution.answers.inference import NonFiniteLogits, split_overrides, submission_rows, with_overrides  # noqa: E402
from solution.answers.postprocess import PostprocessConfig, blank_prediction, score_record  # noqa: E402
from solution.common import cli  # noqa: E402
from solution.common.fsutil import atomic_output, check_paths_apart, claim_output, starts_with  # noqa: E402
from solution.common.precision import resolve_precision  # noqa: E402
from solution.common.settings import apply_overrides  # noqa: E402
from solution.data.nq import NQFormatError, ReadStats, check_input_file  # noqa: E402
from solution.model.loading import load_ensemble, model_files, predict_input  # noqa: E402
from solution.windows.featurizer import WindowConfig  # noqa: E402

# torch takes any positive count; past a machine's cores threads only contend (and 100,000 crash at exit).
MAX_THREADS = 256


def build_parser() -> argparse.ArgumentParser:
    p = cli.ArgumentParser(prog="python -m submission.predict", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, action="append",
                   help="model directory (output_dir/model of a training run); repeat it for an ensemble, "
                        "which averages the models: per-window logits where they share the tokenizer and "
                        "window settings, else per-candidate and per-span scores. The ensemble uses the "
                        "FIRST model's post-processing settings and thresholds (its qa_config.json; the first "
                        "with a nonzero weight); tune an ensemble's thresholds on its own --scores-out "
                        "(evaluate --tune --model FIRST_DIR writes them there)")
    p.add_argument("--weights", default=None, metavar="W1,W2,...",
                   help="one weight per --model, normalised to sum 1 (default: equal); a model weighted 0 is not run")
    p.add_argument("--polarity-model", default=None, metavar="DIR",
                   help="a model directory that decides YES or NO where the answer is a yes/no (by its YES-minus-NO "
                        "type score on that page, with its own window settings; run on those pages alone): "
                        "every other answer stays --model's (docs/answers-techniques.md, 'A polarity model')")
    p.add_argument("--input", required=True, help="simplified-NQ test file (.jsonl or .jsonl.gz)")
    p.add_argument("--output", default="submission.csv", help="CSV to write (default: submission.csv)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --output, --scores-out or --nq-predictions file that is not this "
                        "command's output (one of its own kind is replaced without it)")
    p.add_argument("--batch-size", type=int, default=32, help="windows per forward pass")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="bf16 runs the model in bfloat16 (logits and post-processing stay float32): 2.4x the "
                        "windows/s of fp32 on a CPU with AVX512-BF16, dev micro-F1 within 0.005 in our benchmark. "
                        "auto (default): bf16 where the CPU or GPU computes it natively, else fp32")
    p.add_argument("--bf16", dest="precision", action="store_const", const="bf16", help="same as --precision bf16")
    p.add_argument("--threads", type=int, default=None,
                   help=f"torch CPU threads, 1 to {MAX_THREADS} (default: torch's choice)")
    p.add_argument("--on-error", choices=("raise", "skip"), default="skip",
                   help="a bad input line or a document that fails: write its two rows blank, report it and "
                        "exit 1 (skip, the default: the submission is always whole), or stop at once (raise)")
    p.add_argument("--scores-out", default=None, metavar="JSONL",
                   help="also write each document's answers before the thresholds and its scores "
                        "(for python -m solution.evaluate --tune)")
    p.add_argument("--nq-predictions", default=None, metavar="JSON",
                   help="also write the same answers in Natural Questions' predictions format (token spans, "
                        "byte offsets -1, each row with the score its threshold compares), for python -m "
                        "solution.evaluate --metric nq or the natural-questions package's nq_eval")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one post-processing setting of the model directory for this run (repeatable), "
                        "e.g. --set top_level_only=true --set n_best_size=3")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


class Stopped(SystemExit):
    """SIGTERM or SIGINT, raised where the process is: a SystemExit, so no per-document `except Exception`
    takes it for a failed document, and every `finally` (atomic_output's, which removes the temporary
    CSV and scores file) runs on the way out. Exit status 128 + the signal, as a shell reports it."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.name = signal.Signals(signum).name


_received: list = []  # the signal stop_on_signals' handler took, kept while its block runs


@contextlib.contextmanager
def stop_on_signals():
    """SIGTERM and SIGINT raise `Stopped` while the block runs (main thread only, as signals are).
    The signal is also kept: a handler that runs inside a finaliser (a `__del__`, a weakref callback)
    has its exception printed and ignored by Python, and the run would go on to replace the old CSV;
    `raise_if_stopped` then stops it at the next document."""
    def stop(signum, frame):
        _received.append(signum)
        raise Stopped(signum)

    _received.clear()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _received.clear()


def raise_if_stopped() -> None:
    """Raise `Stopped` for a signal stop_on_signals' handler took but whose exception was swallowed."""
    if _received:
        raise Stopped(_received[0])


def thresholds_note(tuned, overrides=()) -> str:
    """Which thresholds a run applies, in one line: what they were tuned for (MLE-bench's grader and
    Kaggle's metric want different ones), the defaults, or --set."""
    keys = {str(o).partition("=")[0].strip() for o in overrides}
    if keys & {"long_threshold", "short_threshold", "yes_threshold", "no_threshold"}:
        return "thresholds: from --set"
    if not isinstance(tuned, dict):
        return ("thresholds: the defaults, never tuned (python -m solution.evaluate --tune ... "
                "[--metric mlebench|nq] tunes them)")
    metric = tuned.get("metric", "kaggle")  # tuned before the metric was recorded: only Kaggle's existed
    what = {"mlebench": "MLE-bench's grader", "nq": "NQ's official F1"}.get(metric, "Kaggle's micro-F1")
    return f"thresholds: tuned for {metric} ({what}) on {tuned.get('gold', '?')}, {tuned.get('documents', '?')} documents"


def _progress_to(bar):
    """({"docs", "windows"} counts so far, the callback predict_ensemble reports them to, moving `bar`)."""
    state = {"docs": 0, "windows": 0}

    def progress(docs, windows):
        bar.update(docs - state["docs"])
        bar.set_postfix_str(f"{windows} windows", refresh=False)
        state.update(docs=docs, windows=windows)

    return state, progress


def _blank_rows_for_skipped(stats: ReadStats, written: set, writer, failed: list) -> tuple:
    """Lines that could not be parsed still get their two rows, blank, when their id can be read.
    Returns (rows written, the lines whose id could not be read)."""
    rows, unrecoverable = 0, []
    for line, example_id in stats.skipped_ids:
        if example_id is None:
            unrecoverable.append(line)
        elif example_id not in written:
            written.add(example_id)
            writer.writerow([f"{example_id}_long", ""])
            writer.writerow([f"{example_id}_short", ""])
            rows += 2
            failed.append({"example_id": example_id, "line": line, "error": "input line skipped"})
    return rows, unrecoverable


def claim_outputs(output_path: str, scores_out: Optional[str], nq_predictions: Optional[str], input_path: str,
                  model_dirs: Sequence[str], overwrite: bool) -> None:
    """Refuse an output that is an input or another output, and one that is not this command's own kind
    (without --overwrite): before the models load, not after every document is scored."""
    check_paths_apart([("--output", output_path), ("--scores-out", scores_out), ("--nq-predictions", nq_predictions)],
                      [("--input", input_path), *model_files(model_dirs)])
    for what, path, owned in (("--output", output_path, starts_with(b"example_id,PredictionString")),
                              ("--scores-out", scores_out, starts_with(b'{"example_id"')),
                              ("--nq-predictions", nq_predictions, starts_with(b'{"predictions"'))):
        if path:
            claim_output(path, what, owned=owned, overwrite=overwrite)


def write_predictions(predictions, writer, scores, nq, on_error: str, input_path: str) -> tuple:
    """Each document's two rows (and its scores and NQ record, when those files are open), a repeated
    example_id once. Returns (rows written, example ids written, failed documents, the error that stopped
    the input or None)."""
    rows, written, failed = 0, set(), []
    try:
        for pred in predictions:
            raise_if_stopped()
            if pred.example_id in written:
                continue
            written.add(pred.example_id)
            if scores:
                scores.write(json.dumps(score_record(pred)) + "\n")
            if nq:  # the same answers as the CSV's rows, in NQ's format
                nq.write(pred)
            if pred.error:
                if on_error == "raise":
                    raise ValueError(f"{input_path}: example_id {pred.example_id}: {pred.error}")
                failed.append({"example_id": pred.example_id, "error": pred.error})
            for row in submission_rows([pred]):
                writer.writerow(row)
                rows += 1
    except NQFormatError as e:  # a truncated .gz: nothing after it can be read
        if on_error == "raise":
            raise
        return rows, written, failed, str(e)
    return rows, written, failed, None


def predict_file(model_dir: Union[str, Sequence[str]], input_path: str, output_path: str, batch_size: int = 32,
                 device: str = "cpu", precision: str = "fp32", on_error: str = "skip", quiet: bool = False,
                 scores_out: Optional[str] = None, weights: Optional[str] = None, overrides=(),
                 nq_predictions: Optional[str] = None, overwrite: bool = False,
                 polarity_model: Optional[str] = None) -> dict:
    """Score every example of `input_path` and write the CSV; returns counts and speed.

    `model_dir`: one model directory, or several (an ensemble, `weights` as in --weights); `overrides`:
    post-processing settings for this run (--set KEY=VALUE), over the first weighted model's; `nq_predictions`:
    also the same rows in NQ's predictions JSON (`nq_official.PredictionsWriter`); `polarity_model`: a model
    directory that reads YES or NO where the answer is one (`solution.answers.polarity`)."""
    model_dirs = [model_dir] if isinstance(model_dir, (str, os.PathLike)) else list(model_dir)
    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    check_input_file(input_path)  # a pipe or standard input said so now, not after the models load
    precision = resolve_precision(precision, device)
    inputs = model_dirs + ([polarity_model] if polarity_model else [])
    claim_outputs(output_path, scores_out, nq_predictions, input_path, inputs, overwrite)
    if nq_predictions:  # here, not at the top: the Kaggle kernel copies only the modules a submission needs
        from solution.answers.nq_format import PredictionsWriter
    ensemble = load_ensemble(model_dirs, parse_weights(weights, len(model_dirs)), device, precision)
    polarity = load_ensemble([polarity_model], None, device, precision) if polarity_model else None
    window_sets, post_sets = split_overrides(overrides)
    post = apply_overrides(ensemble.post, post_sets)
    stats = ReadStats()
    bar = cli.progress(desc="predict", unit=" documents", disable=quiet)  # no total: the input is a stream
    progress_state, progress = _progress_to(bar)
    predictions = predict_input(ensemble, input_path, post, window_sets, batch_size, on_error, stats, progress,
                                polarity)
    t0 = time.perf_counter()
    # Both files go to temporary names and are renamed only when whole: never half a submission
    # under the real name, and a full disk or an error removes the temporary files.
    with bar, atomic_output(output_path, "w", newline="") as f, \
            (atomic_output(scores_out, "w") if scores_out else contextlib.nullcontext()) as scores, \
            (PredictionsWriter(nq_predictions, post) if nq_predictions else contextlib.nullcontext()) as nq:
        writer = csv.writer(f)
        writer.writerow(["example_id", "PredictionString"])
        rows, written, failed, fatal = write_predictions(predictions, writer, scores, nq, on_error, input_path)
        blank, unrecoverable = _blank_rows_for_skipped(stats, written, writer, failed)
        rows += blank
        for item in failed:
            if nq and "line" in item:  # a skipped line's blank rows: blank in NQ's format too
                nq.write(blank_prediction(item["example_id"]))
        raise_if_stopped()  # before atomic_output puts the new files in place of the old
        f.flush()  # a full disk shows here, before the scores file is renamed
    dt = time.perf_counter() - t0
    return {"documents": progress_state["docs"], "windows": progress_state["windows"], "rows": rows,
            "precision": precision, "models": ensemble.timings + (polarity.timings if polarity else []),
            "window_groups": len(ensemble.groups),
            "seconds": dt, "skipped": stats.num_skipped, "read_report": stats.report(), "failed": failed,
            "lines_without_id": unrecoverable, "fatal": fatal, "thresholds": thresholds_note(ensemble.tuned, overrides)}


def overflow_report(items: list) -> str:
    """One line for the documents whose logits were not finite: how many, a few ids, what to do."""
    ids = ", ".join(str(item["example_id"]) for item in items[:5]) + (", ..." if len(items) > 5 else "")
    return (f"ERROR: {len(items)} documents: the model's logits are not finite (NaN or infinite), so their rows "
            f"are written blank ({ids}); the model overflows: was its training diverging? (--precision fp32 "
            "rules out bfloat16's range)")


def _through(models: list) -> str:
    return f" through {len(models)} models" if len(models) > 1 else ""


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        print(f"error: --threads {args.threads}: must be in [1, {MAX_THREADS}]", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        with_overrides(WindowConfig(), PostprocessConfig(), args.overrides)  # a bad --set fails before the models load
        with stop_on_signals():
            result = predict_file(args.model, args.input, args.output, args.batch_size, args.device,
                                  args.precision, args.on_error, args.quiet, args.scores_out, args.weights,
                                  args.overrides, args.nq_predictions, args.overwrite, args.polarity_model)
    except (ValueError, OSError) as e:  # OSError: a full disk (DiskFullError names the path and free space)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Stopped as e:
        print(f"error: stopped by {e.name}; {args.output} not written (what it held before is kept)", file=sys.stderr)
        return e.code
    print(f"wrote {args.output}: {result['rows']} rows for {result['rows'] // 2} "
          f"documents ({result['windows']} windows run{_through(result['models'])}, {result['precision']}) "
          f"in {result['seconds']:.1f}s")
    if args.nq_predictions:
        print(f"wrote {args.nq_predictions}: the same answers in NQ's predictions format")
    print(result["thresholds"])
    problems = 0
    if result["skipped"]:
        print(f"WARNING: {result['read_report']}", file=sys.stderr)
        problems += 1
    overflow = NonFiniteLogits.__name__  # the error of a document whose logits were not finite starts so
    overflowed = [item for item in result["failed"] if item["error"].startswith(overflow)]
    failed = [item for item in result["failed"] if not item["error"].startswith(overflow)]
    if overflowed:
        print(overflow_report(overflowed), file=sys.stderr)
    for item in failed[:20]:
        where = f" (line {item['line']})" if "line" in item else ""
        print(f"FAILED {item['example_id']}{where}: {item['error']} -> written blank", file=sys.stderr)
    if len(failed) > 20:
        print(f"... and {len(failed) - 20} more documents written blank", file=sys.stderr)
    problems += len(result["failed"])
    if result["lines_without_id"]:
        print(f"ERROR: lines {result['lines_without_id'][:20]} have no readable example_id: "
              "their rows cannot be written", file=sys.stderr)
        problems += 1
    if result["fatal"]:
        print(f"ERROR: {result['fatal']}; rows were written for the documents before it", file=sys.stderr)
        problems += 1
    return 1 if problems else 0  # something was written blank or is missing: say so in the exit code


if __name__ == "__main__":
    sys.exit(main())

"""The hard-negative pass: score the training windows with a trained model, then resample negatives by score.

    python -m solution.hard_negatives --model runs/demo/model --train_file data/synth/simplified-nq-train.jsonl \\
        --out runs/demo/hard-negatives.jsonl
    python -m solution.train --config configs/train/demo.yaml --hard_negatives_file runs/demo/hard-negatives.jsonl

Most training windows hold no answer, so training keeps only a share of
them (`negative_keep_rate`, `unanswerable_keep_rate`). Drawn uniformly, that
share is mostly windows any model already rejects. The first- and
seventh-place solutions of the competition instead drew negatives where a
first model was wrong: this module writes, for every window without an
answer, the first model's belief that it holds one, `1 - P(UNKNOWN)` from
the answer-type head. Training with `hard_negatives_file` then keeps a
negative window of group g (answerable or unanswerable documents) with
probability

    rate_g * ((1 - f) + f * score / mean_g(score)),   f = hard_negative_fraction,

so the expected number of kept windows is the same as without the pass and
only which ones changes; `f` < 1 keeps some easy negatives, so the new model
does not forget them.

The scores file is JSON lines: a header record (format, window settings,
model, training file, and what else changes the scores' bits: precision,
device type, batch and chunk sizes), then one record per document:
example_id, answerable, and one score per window (null for a window with an
answer). Records are appended chunk by chunk as they are scored, so the
full training file (millions of windows) is never held, and a killed pass
run again with the same arguments continues the file (`resume_point`).
No accelerate or deepspeed here: scoring runs in one process.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from dataclasses import asdict
from typing import Iterator, Optional

import numpy as np

from solution.common.cli import progress
from solution.common.fsutil import DiskFullError, check_writable
from solution.common.jsonio import JsonError, loads
from solution.data.nq import check_input_file
from solution.windows.sampling import FORMAT, VERSION  # the scores file's header, read back by sampling


def answer_probability(type_logits: np.ndarray) -> np.ndarray:
    """1 - P(UNKNOWN) of the answer-type head, for a [n, 5] logit array (UNKNOWN is class 0)."""
    z = type_logits - type_logits.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return 1.0 - p[:, 0] / p.sum(axis=-1)


def make_header(model, train_file: str, device: str, batch_size: int, docs_per_chunk: int) -> dict:
    """The scores file's first record, for a `loading.LoadedModel`. A restart appends only to a file with
    this same header: every field here changes the scores (batch composition and device change their last
    bits, and the resumed file must equal an uninterrupted run's byte for byte)."""
    return {"format": FORMAT, "version": VERSION, "model": os.path.abspath(model.path),
            "model_sha256": model.digest,
            "train_file": os.path.abspath(train_file), "train_file_bytes": os.path.getsize(train_file),
            "window": asdict(model.window), "precision": model.precision, "device": device,
            "batch_size": batch_size, "docs_per_chunk": docs_per_chunk, "score": "1 - P(UNKNOWN), answer-type head"}


def _encode(record: dict) -> bytes:
    return (json.dumps(record) + "\n").encode("utf-8")


def resume_point(out: str, header: dict, overwrite: bool = False) -> tuple:
    """(example ids already scored, byte length of the file that holds them) for a restart on `out`.

    Only whole chunks count: scores depend slightly on which windows share a batch, so the
    documents of a partly written chunk are scored again, in the same chunk as an uninterrupted
    run would. A last line cut by a kill is dropped. ([], 0): start afresh.
    """
    if overwrite or not os.path.exists(out) or os.path.getsize(out) == 0:
        return [], 0
    ids, ends = [], []
    with open(out, "rb") as f:
        first = f.readline()
        if not first.endswith(b"\n"):
            if _encode(header).startswith(first):  # killed while writing its own header
                return [], 0
            raise ValueError(f"--out {out}: exists and is not a hard-negative scores file; "
                             "choose another path or pass --overwrite")
        try:
            old = loads(first, f"{out} line 1")
        except JsonError:
            old = None
        if not isinstance(old, dict) or old.get("format") != FORMAT:
            raise ValueError(f"--out {out}: exists and is not a hard-negative scores file; "
                             "choose another path or pass --overwrite")
        diff = [f"{k}: file {old.get(k)!r}, this run {header[k]!r}" for k in header if old.get(k) != header[k]]
        if diff:
            raise ValueError(f"--out {out}: scored with other settings, so this run cannot continue it ("
                             + "; ".join(diff) + "); run with the same settings to resume, or pass --overwrite "
                             "to score again from the start")
        pos = len(first)
        for line_no, raw in enumerate(iter(f.readline, b""), 2):
            if not raw.endswith(b"\n"):
                break  # cut by a kill: scored again
            try:
                ids.append(str(loads(raw, f"{out} line {line_no}")["example_id"]))
            except JsonError as e:
                raise ValueError(f"{e} (a scores file damaged other than at its end; pass --overwrite to score "
                                 "again from the start)") from None
            except (KeyError, TypeError) as e:
                raise ValueError(f"{out}:{line_no}: {type(e).__name__}: {e} (a scores file damaged other "
                                 "than at its end; pass --overwrite to score again from the start)") from None
            pos += len(raw)
            ends.append(pos)
    whole = len(ids) // header["docs_per_chunk"] * header["docs_per_chunk"]
    return ids[:whole], (ends[whole - 1] if whole else len(first))


def _skip_scored(examples: Iterator, done: list, out: str, train_file: str) -> Iterator:
    """The examples after the `done` ones, checking that the input starts with exactly those."""
    for i, example_id in enumerate(done):
        ex = next(examples, None)
        if ex is None or ex.example_id != example_id:
            found = "ends there" if ex is None else f"has {ex.example_id} (line {ex.line})"
            raise ValueError(f"--out {out}: its document {i + 1} is {example_id}, but {train_file} {found}; "
                             "pass --overwrite to score again from the start")
    return examples


def score_file(model_dir: str, train_file: str, out: str, batch_size: int = 64, precision: str = "fp32",
               on_error: str = "raise", max_examples: Optional[int] = None, docs_per_chunk: int = 64,
               quiet: bool = False, device: str = "cpu", overwrite: bool = False) -> dict:
    """Score every window without an answer, appending one line per document to `out` chunk by chunk.

    precision: fp32, bf16 (autocast, the measured path) or auto (bf16 where the device computes it
    natively). A run killed part-way continues where it stopped (see `resume_point`).
    """
    import torch

    from solution.data.nq import ReadStats, read_examples
    from solution.model.loading import load_model
    from solution.windows.featurizer import Featurizer

    check_writable(out, "--out")  # before the model loads and the scoring runs
    try:
        check_input_file(train_file)  # a FIFO is called a pipe, not a missing file
    except (ValueError, FileNotFoundError) as e:
        raise ValueError(f"--train_file {e}") from None
    model = load_model(model_dir, device, precision, autocast=True)  # its tokenizer: it may carry added tokens
    header = make_header(model, train_file, torch.device(device).type, batch_size, docs_per_chunk)
    done, keep_bytes = resume_point(out, header, overwrite)
    if keep_bytes:  # said even with --quiet: the run does less than the command asks
        print(f"resuming: {len(done)} documents already scored in {out}", file=sys.stderr, flush=True)
    stats = ReadStats()
    examples = read_examples(train_file, on_error=on_error, stats=stats, require_annotations=True,
                             max_lines=max_examples)
    examples = _skip_scored(examples, done, out, train_file)
    counts = {"documents": len(done), "resumed": len(done), "windows": 0, "negatives": 0}
    bar = progress(total=max_examples, initial=len(done), desc="hard negatives", unit="doc", disable=quiet)
    featurized = Featurizer(model.tokenizer, model.window).featurize(examples, with_labels=True)
    scored = (_score_chunk(model.run, chunk, model.tokenizer.pad_token_id or 0, batch_size)
              for chunk in _chunks(featurized, docs_per_chunk))
    t0 = time.perf_counter()
    with bar:
        _append(out, keep_bytes, header, scored, counts, bar)
    counts.update(seconds=time.perf_counter() - t0, skipped=stats.num_skipped, read_report=stats.report(),
                  precision=model.precision)
    return counts


def _append(out: str, keep_bytes: int, header: dict, scored: Iterator, counts: dict, bar) -> None:
    """Write the header (a fresh file) or keep the first `keep_bytes` (a resumed one), then each chunk's
    lines as it is scored, counting into `counts` and moving `bar`."""
    t0 = time.perf_counter()
    try:
        with open(out, "r+b" if keep_bytes else "wb") as f:
            f.truncate(keep_bytes)  # drops a partial chunk and a cut last line
            f.seek(keep_bytes)
            if not keep_bytes:
                _write(f, _encode(header))
            for lines, n_documents, n_windows, n_negatives in scored:
                _write(f, b"".join(lines))
                counts["documents"] += n_documents
                counts["windows"] += n_windows
                counts["negatives"] += n_negatives
                bar.update(n_documents)
                bar.set_postfix(windows=counts["windows"],
                                windows_per_s=f"{counts['windows'] / (time.perf_counter() - t0):.1f}", refresh=False)
    except OSError as e:
        # Closing the file flushes what the failed write left in its buffer, fails again and would replace the
        # first error with a bare "[Errno 28]": any full disk here is named once, with the free space.
        if e.errno == errno.ENOSPC:
            raise DiskFullError(out) from None
        raise


def _chunks(featurized: Iterator, size: int) -> Iterator[list]:
    chunk: list = []
    for item in featurized:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _score_chunk(run, chunk: list, pad_id: int, batch_size: int) -> tuple:
    """(one encoded line per document, documents, windows, windows scored) for a chunk of (example, windows)."""
    from solution.answers.inference import score_windows
    from solution.windows.featurizer import TYPE_ID, has_answer

    unknown = TYPE_ID["UNKNOWN"]
    negatives = [w for _, ws in chunk for w in ws if w.answer_type == unknown]
    logits = score_windows(run, negatives, pad_id, batch_size)  # longest first, across the chunk's documents
    p = iter(answer_probability(np.stack([t for _, _, t in logits])) if logits else [])
    lines = [_encode({"example_id": ex.example_id, "answerable": has_answer(ex),
                      "scores": [round(float(next(p)), 6) if w.answer_type == unknown else None for w in ws]})
             for ex, ws in chunk]
    return lines, len(chunk), sum(len(ws) for _, ws in chunk), len(negatives)


def _write(f, data: bytes) -> None:
    """Append and push to disk now: a kill loses at most the chunk being scored."""
    f.write(data)
    f.flush()
    os.fsync(f.fileno())


def main(argv=None) -> int:
    from solution.common import cli  # both --a-b and --a_b spellings
    p = cli.ArgumentParser(prog="python -m solution.hard_negatives", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="trained model directory (output_dir/model)")
    p.add_argument("--train_file", required=True, help="the simplified-NQ training file to score")
    p.add_argument("--out", required=True, help="scores file to write (JSON lines)")
    p.add_argument("--batch_size", type=int, default=64, help="windows per forward pass")
    p.add_argument("--device", default=None, help="torch device (default: cuda when there is one, else cpu)")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="bf16: bfloat16 autocast (the path docs/answers-techniques.md's hard-negative figures were measured "
                        "with); auto (default): bf16 where the CPU or GPU computes it natively, else fp32, as "
                        "submission.predict decides")
    p.add_argument("--bf16", dest="precision", action="store_const", const="bf16", help="same as --precision bf16")
    p.add_argument("--docs_per_chunk", type=int, default=64,
                   help="documents whose windows are batched together (longest first) and then written")
    p.add_argument("--overwrite", action="store_true",
                   help="score from the start even if --out holds scores (default: continue a file with the same "
                        "header, refuse one with another)")
    p.add_argument("--on_error", choices=("raise", "skip"), default="raise")
    p.add_argument("--max_examples", type=int, default=None, help="score only the first N lines")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    if args.batch_size < 1 or args.docs_per_chunk < 1:
        p.error("--batch_size and --docs_per_chunk must be at least 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch

        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        c = score_file(args.model, args.train_file, args.out, args.batch_size, args.precision, args.on_error,
                       args.max_examples, args.docs_per_chunk, args.quiet, device, args.overwrite)
    except (ValueError, OSError) as e:  # OSError: a full disk (DiskFullError names the path and free space)
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {c['documents']} documents ({c['resumed']} from an earlier run), "
          f"{c['negatives']} of {c['windows']} windows without an answer scored in {c['seconds']:.1f}s "
          f"on {device} ({c['precision']})")
    if c["skipped"]:
        print(f"WARNING: {c['read_report']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

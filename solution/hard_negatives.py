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
model, training file), then one record per document: example_id,
answerable, and one score per window (null for a window with an answer).
No accelerate or deepspeed here: scoring runs in one process.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from typing import Optional

import numpy as np

from solution.fsutil import atomic_output, check_writable

FORMAT = "nq-hard-negative-scores"
VERSION = 1


class HardNegativeWeights:
    """A scores file, read for sampling: per document, a keep weight for each window."""

    def __init__(self, path: str, fraction: float):
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"hard_negative_fraction must be in [0, 1], got {fraction}")
        self.path, self.fraction = path, fraction
        self.scores: dict = {}  # example_id -> (answerable, float32 scores, nan where the window has an answer)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such hard-negative scores file (write one with "
                                    "python -m solution.hard_negatives)")
        with open(path, encoding="utf-8") as f:
            for line_no, text in enumerate(f, 1):
                try:
                    rec = json.loads(text)
                    if line_no == 1:
                        if rec.get("format") != FORMAT:
                            raise ValueError(f"not a hard-negative scores file (format {rec.get('format')!r})")
                        self.header = rec
                        continue
                    scores = np.array([np.nan if s is None else s for s in rec["scores"]], dtype=np.float32)
                    self.scores[str(rec["example_id"])] = (bool(rec["answerable"]), scores)
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"{path}:{line_no}: {type(e).__name__}: {e}") from None
        if not hasattr(self, "header"):
            raise ValueError(f"{path}: empty hard-negative scores file")
        self.mean = {}
        for group in (True, False):
            vals = [s[~np.isnan(s)] for a, s in self.scores.values() if a == group]
            flat = np.concatenate(vals) if vals else np.zeros(0, np.float32)
            # A floor, so a group the first model rejects everywhere does not divide by ~0.
            self.mean[group] = max(float(flat.mean()) if len(flat) else 1.0, 1e-6)

    def check_window(self, window_config) -> None:
        if self.header.get("window") != asdict(window_config):
            raise ValueError(f"{self.path}: scored with window settings {self.header.get('window')}, but training "
                             f"uses {asdict(window_config)}; score the training file again with these settings")

    def weights(self, example_id: str, answerable: bool, num_windows: int) -> Optional[np.ndarray]:
        """Per-window keep weights, or None when the file has no matching record for this document."""
        rec = self.scores.get(example_id)
        if rec is None or rec[0] != answerable or len(rec[1]) != num_windows:
            return None
        s = np.nan_to_num(rec[1], nan=0.0)
        return (1.0 - self.fraction) + self.fraction * s / self.mean[answerable]

    @staticmethod
    def stat(path: str) -> dict:
        """The file's identity for cache keys."""
        st = os.stat(path)
        return {"path": os.path.abspath(path), "size": st.st_size, "mtime": st.st_mtime_ns}


def answer_probability(type_logits: np.ndarray) -> np.ndarray:
    """1 - P(UNKNOWN) of the answer-type head, for a [n, 5] logit array (UNKNOWN is class 0)."""
    z = type_logits - type_logits.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return 1.0 - p[:, 0] / p.sum(axis=-1)


def score_file(model_dir: str, train_file: str, out: str, batch_size: int = 64, bf16: bool = False,
               on_error: str = "raise", max_examples: Optional[int] = None, docs_per_chunk: int = 64,
               quiet: bool = False) -> dict:
    import torch

    from solution.inference import model_runner, score_windows
    from solution.model import load_model_dir
    from solution.nq import ReadStats, read_examples
    from solution.windows import TYPE_ID, Featurizer, WindowConfig, has_answer

    check_writable(out, "--out")  # before the model loads and the scoring runs
    model, tokenizer, meta = load_model_dir(model_dir, "cpu")
    window = WindowConfig(**meta["window"])
    featurizer = Featurizer(tokenizer, window)
    run = model_runner(model, "cpu", torch.bfloat16 if bf16 else None)
    pad_id = tokenizer.pad_token_id or 0
    stats = ReadStats()
    examples = read_examples(train_file, on_error=on_error, stats=stats, require_annotations=True,
                             max_lines=max_examples)
    counts = {"documents": 0, "windows": 0, "negatives": 0}
    t0 = time.perf_counter()
    with atomic_output(out, "w") as f:
        f.write(json.dumps({"format": FORMAT, "version": VERSION, "model": os.path.abspath(model_dir),
                            "train_file": os.path.abspath(train_file), "window": asdict(window), "bf16": bf16,
                            "score": "1 - P(UNKNOWN), answer-type head"}) + "\n")
        chunk: list = []

        def flush():
            negatives = [w for _, ws in chunk for w in ws if w.answer_type == TYPE_ID["UNKNOWN"]]
            logits = score_windows(run, negatives, pad_id, batch_size)
            p = answer_probability(np.stack([t for _, _, t in logits])) if logits else []
            probs = {(w.example_id, w.window_index): float(x) for w, x in zip(negatives, p)}
            for ex, ws in chunk:
                scores = [None if w.answer_type != TYPE_ID["UNKNOWN"] else round(probs[(w.example_id, w.window_index)], 6)
                          for w in ws]
                f.write(json.dumps({"example_id": ex.example_id, "answerable": has_answer(ex),
                                    "scores": scores}) + "\n")
            counts["documents"] += len(chunk)
            counts["windows"] += sum(len(ws) for _, ws in chunk)
            counts["negatives"] += len(negatives)
            chunk.clear()
            if not quiet:
                dt = time.perf_counter() - t0
                print(f"\rhard negatives: {counts['documents']} documents, {counts['negatives']} negative windows "
                      f"scored, {counts['negatives'] / dt:.1f} windows/s", end="", file=sys.stderr, flush=True)

        for ex, ws in featurizer.featurize(examples, with_labels=True):
            chunk.append((ex, ws))
            if len(chunk) >= docs_per_chunk:
                flush()
        if chunk:
            flush()
    if not quiet:
        print(file=sys.stderr)
    counts.update(seconds=time.perf_counter() - t0, skipped=stats.num_skipped, read_report=stats.report())
    return counts


def main(argv=None) -> int:
    from solution import cli  # both --a-b and --a_b spellings
    p = cli.ArgumentParser(prog="python -m solution.hard_negatives", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="trained model directory (output_dir/model)")
    p.add_argument("--train_file", required=True, help="the simplified-NQ training file to score")
    p.add_argument("--out", required=True, help="scores file to write (JSON lines)")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    p.add_argument("--on_error", choices=("raise", "skip"), default="raise")
    p.add_argument("--max_examples", type=int, default=None, help="score only the first N lines")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        c = score_file(args.model, args.train_file, args.out, args.batch_size, args.bf16, args.on_error,
                       args.max_examples, quiet=args.quiet)
    except (ValueError, OSError) as e:  # OSError: a full disk (DiskFullError names the path and free space)
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {c['documents']} documents, {c['negatives']} of {c['windows']} windows without an "
          f"answer scored in {c['seconds']:.1f}s")
    if c["skipped"]:
        print(f"WARNING: {c['read_report']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Carve a stratified dev set out of a simplified-NQ training file, streaming.

Kaggle gives only a training file (17 GB). Pass 1 reads every line through the
validated reader and keeps only (line number, answer type); scikit-learn's
`train_test_split` stratified on the answer type picks the dev lines; pass 2
streams the file again and copies each raw line unchanged to
`DIR/simplified-nq-train.jsonl` or `DIR/simplified-nq-dev.jsonl`. Lines that
fail validation (with `--on-error skip`) go to neither file and are counted.

    python -m solution.split --input simplified-nq-train.jsonl.gz --out data/split \\
        --dev-fraction 0.05 --seed 0 [--on-error raise|skip] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from solution import cli
from solution.fsutil import atomic_output, check_writable
from solution.nq import ANNOTATION_TYPES, NQFormatError, ReadStats, iter_lines, read_examples

TRAIN_NAME, DEV_NAME = "simplified-nq-train.jsonl", "simplified-nq-dev.jsonl"
_NOWHERE, _TRAIN, _DEV = 0, 1, 2  # per-line destination codes


@dataclass
class SplitResult:
    train: Counter
    dev: Counter
    stratified: bool  # False when the dev set is too small to hold every class
    in_train_only: list  # classes with fewer than 2 examples: all kept in train, not stratified
    read: ReadStats
    outputs: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        def side(c: Counter) -> dict:
            return {**{k: c[k] for k in ANNOTATION_TYPES}, "total": sum(c.values())}
        return {"train": side(self.train), "dev": side(self.dev), "total": side(self.train + self.dev),
                "stratified": self.stratified, "in_train_only": self.in_train_only,
                "lines": self.read.lines, "skipped": self.read.num_skipped,
                "skipped_by_reason": dict(self.read.skipped), "outputs": self.outputs}

    def table(self) -> str:
        rows = [f"{'class':<7}{'train':>10}{'dev':>10}{'total':>10}{'dev %':>8}"]
        for name in ANNOTATION_TYPES + ("total",):
            t, d = ((sum(self.train.values()), sum(self.dev.values())) if name == "total"
                    else (self.train[name], self.dev[name]))
            share = f"{100 * d / (t + d):.1f}" if t + d else "-"
            rows.append(f"{name:<7}{t:>10}{d:>10}{t + d:>10}{share:>8}")
        return "\n".join(rows)


def _choose_dev(labels: list, dev_fraction: float, seed: int):
    """Indices (into `labels`) of the dev examples, stratified where sklearn allows it.

    sklearn refuses to stratify a class with fewer than 2 members, and a dev (or
    train) side smaller than the number of classes; such members go to train,
    and a too-small split falls back to a plain random one (both reported).
    """
    # Imported here: sklearn takes seconds to import (it loads torch), and `--help` should not wait for it.
    from sklearn.model_selection import train_test_split

    counts = Counter(labels)
    in_train_only = sorted((c for c, n in counts.items() if n < 2), key=ANNOTATION_TYPES.index)
    rest = np.array([i for i, c in enumerate(labels) if c not in in_train_only], dtype=np.int64)
    if len(rest) < 2:
        raise ValueError(f"cannot split {len(labels)} example(s): fewer than 2 are left once classes "
                         f"of a single example are kept in train")
    rest_labels = [labels[i] for i in rest]
    num_classes = len(set(rest_labels))
    num_dev = int(np.ceil(dev_fraction * len(rest)))  # sklearn's own rounding of a float test_size
    stratified = num_classes <= num_dev <= len(rest) - num_classes
    try:
        _, dev = train_test_split(rest, test_size=dev_fraction, random_state=seed,
                                  stratify=rest_labels if stratified else None)
    except ValueError as e:  # e.g. a dev fraction that leaves one side empty
        raise ValueError(f"cannot split {len(rest)} examples with dev fraction {dev_fraction}: {e}") from None
    return dev, stratified, in_train_only


def split_file(input_path, out_dir, dev_fraction: float = 0.05, seed: int = 0, on_error: str = "raise",
               quiet: bool = False) -> SplitResult:
    """Two streaming passes over `input_path`; memory holds two small integers per line, never a document.

    A progress bar on stderr counts lines in each pass (`quiet`: none)."""
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"--dev-fraction must be strictly between 0 and 1, got {dev_fraction}")
    input_path, out = Path(input_path), Path(out_dir)
    if not input_path.is_file():
        raise FileNotFoundError(f"{input_path}: no such file")
    outputs = {"train": out / TRAIN_NAME, "dev": out / DEV_NAME}
    if any(p.resolve() == input_path.resolve() for p in outputs.values()):
        raise ValueError(f"--out {out} would overwrite the input {input_path}; choose another directory")

    check_writable(out, "--out", create_dir=True)  # now, not after pass 1 has read 17 GB

    # Pass 1: validate every line, keep (line number, answer type).
    stats = ReadStats()
    line_numbers, labels = [], []
    with cli.progress(desc="split: pass 1/2, validate", unit=" lines", disable=quiet) as bar:
        for ex in read_examples(input_path, on_error=on_error, stats=stats, require_annotations=True):
            line_numbers.append(ex.line)
            labels.append(ex.answer_type)
            bar.update(ex.line - bar.n)
        bar.update(stats.lines - bar.n)
    dev_idx, stratified, in_train_only = _choose_dev(labels, dev_fraction, seed)
    dest = np.full(stats.lines + 1, _NOWHERE, dtype=np.uint8)  # by 1-based line number
    dest[np.array(line_numbers, dtype=np.int64)] = _TRAIN
    dest[np.array(line_numbers, dtype=np.int64)[dev_idx]] = _DEV
    train_counts = Counter(labels)
    dev_counts = Counter(labels[i] for i in dev_idx)
    train_counts.subtract(dev_counts)
    del line_numbers, labels

    # Pass 2: copy raw lines, byte for byte; write to temporary names so a failure leaves no half split.
    with atomic_output(outputs["train"], "w", newline="") as f_train, \
            atomic_output(outputs["dev"], "w", newline="") as f_dev, \
            cli.progress(total=stats.lines, desc="split: pass 2/2, copy", unit=" lines", disable=quiet) as bar:
        files = {_TRAIN: f_train, _DEV: f_dev}
        for line_no, text in iter_lines(input_path):
            bar.update()
            where = dest[line_no] if line_no < len(dest) else _NOWHERE
            if where != _NOWHERE:
                files[where].write(text if text.endswith("\n") else text + "\n")  # a last line may lack its newline
        for f in files.values():  # a full disk shows here, before either file is renamed
            f.flush()
    return SplitResult(+train_counts, dev_counts, stratified, in_train_only, stats,
                       {k: str(p) for k, p in outputs.items()})


def _parse_args(argv=None) -> argparse.Namespace:
    parser = cli.ArgumentParser(prog="python -m solution.split", description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="simplified-NQ training file, .jsonl or .jsonl.gz")
    parser.add_argument("--out", required=True, help=f"directory for {TRAIN_NAME} and {DEV_NAME}")
    parser.add_argument("--dev-fraction", type=float, default=0.05,
                        help="share of examples for dev, in (0, 1) (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="random_state of the split; same seed, same split (default: %(default)s)")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="a bad line: stop with an error naming file and line, or skip and count it (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the counts as one JSON object instead of a table")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = _parse_args(argv)
    try:
        result = split_file(args.input, args.out, args.dev_fraction, args.seed, args.on_error, args.quiet)
    except (FileNotFoundError, NQFormatError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    notes = []
    if result.in_train_only:
        notes.append(f"classes with fewer than 2 examples, all kept in train: {', '.join(result.in_train_only)}")
    if not result.stratified:
        notes.append("the dev set is too small to hold every class: split at random, not stratified")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.as_dict()))
        return
    print(result.read.report())
    print(result.table())
    print(f"wrote {result.outputs['train']} and {result.outputs['dev']}")


if __name__ == "__main__":
    main()

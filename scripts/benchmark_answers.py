"""What each answer technique of the winning Kaggle solutions is worth: dev and test micro-F1 on a corpus shaped like real NQ.

    python scripts/benchmark_answers.py --profile nq --json docs/benchmarks/answers-nq.json  # hours on 2 cores
    python scripts/benchmark_answers.py --corpus real --real-lines ../shared/data/nq-real \
        --json docs/benchmarks/answers-real.json
    python scripts/benchmark_answers.py --quick --json runs/answers-quick/answers.json  # smoke run, ~2 minutes
    python scripts/benchmark_answers.py --corpus-seed 7 --seeds 0 --techniques "" --json runs/seed7/answers.json \
        --out runs/seed7                 # the documented recipe alone, retrained on a corpus of another seed
    python scripts/benchmark_answers.py --seeds 1 --no-ensembles --techniques thresholds --json runs/a1.json
    python scripts/benchmark_answers.py --merge runs/a0.json runs/a1.json --json runs/merged.json
    python scripts/benchmark_answers.py --profile nq-shaped --references-only --references "" \
        --first-pass words,meaning --first-pass-keep-first 2 --real-lines ../shared/data/nq-real \
        --json runs/first-pass.json      # the first pass's recall alone, on test pages and the real lines

The method, the rows and the record are described in solution/experiments/answers/__init__.py, whose
modules do the work; this file parses the arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from solution.common import cli  # noqa: E402
from solution.experiments.answers.command import run_command  # noqa: E402
from solution.experiments.answers.techniques import (  # noqa: E402
    FULL,
    NUM_ENSEMBLE_MEMBERS,
    QUICK,
    REFERENCES,
    TECHNIQUES,
)
from solution.windows.first_pass import METHODS as FIRST_PASS_METHODS  # noqa: E402


def int_list(text: str) -> list:
    """"300,600,900" -> [300, 600, 900]: non-negative integers, at least one."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected comma-separated non-negative integers, got {text!r}")
    return values


def add_corpus_arguments(p) -> None:
    p.add_argument("--corpus", choices=("nq", "real"), default="nq",
                   help="nq: a synthetic corpus of --profile made with --corpus-seed; real: the real NQ sample "
                        "(--real-lines)")
    p.add_argument("--real-lines", metavar="DIR", default=os.environ.get("NQ_REAL_LINES") or None,
                   help="with --corpus real, or --first-pass: the folder of the real NQ sample "
                        "(simplified-nq-train-sample.jsonl, simplified-nq-dev-sample.jsonl), e.g. ../shared/data/nq-real "
                        "beside the project's CI checkout (default: the environment variable NQ_REAL_LINES)")
    p.add_argument("--profile", choices=("nq", "nq-lexical", "nq-shaped"), default="nq",
                   help="the synthetic corpus's profile (nq: questions that need reading; nq-lexical: questions "
                        "in the statements' words; nq-shaped: nq with the gold near the top as real NQ's, a lead, "
                        "questions naming their subject, NO questions whose value may be on the page)")
    p.add_argument("--corpus-seed", type=int, default=0,
                   help="seed of the synthetic corpus (its yes/no pages use the next): the recipe on a corpus it "
                        "was not chosen on")


def add_plan_arguments(p) -> None:
    p.add_argument("--quick", action="store_true", help="tiny random model, a handful of short documents, 1 seed")
    p.add_argument("--out", default=None, help="run directory (default runs/answers/CORPUS, or -quick)")
    p.add_argument("--techniques", default=",".join(TECHNIQUES),
                   help='comma-separated rows of TECHNIQUES to run ("": the baseline, its references and curve alone)')
    p.add_argument("--train-sizes", type=int_list, default=None,
                   help=f"training pages of the learning curve, the largest the baseline's (default "
                        f"{','.join(map(str, FULL['train_sizes']))}; --quick {','.join(map(str, QUICK['train_sizes']))})")
    p.add_argument("--num-test", type=int, default=None, metavar="N",
                   help=f"test pages of the synthetic corpus (default {FULL['num_test']}; --quick "
                        f"{QUICK['num_test']}). The training and dev pages do not depend on it, so a run in the same "
                        "--out reuses the models trained there and scores them on N test pages; the test pages do "
                        "(another N is another draw of pages, the folder's test files and CSVs are replaced)")
    p.add_argument("--merge", nargs="+", metavar="RECORD", default=None,
                   help="train nothing: write the rows of these records of one corpus (a run in pieces) to --json as "
                        "one record, with its table and charts; a later record's row replaces the same row of an earlier; "
                        "each row keeps the corpus its record says")
    p.add_argument("--ensembles", action=argparse.BooleanOptionalAction, default=True,
                   help="with techniques, also the 2- and 3-model ensembles (their extra seeds are trained for them "
                        "alone); --no-ensembles: the techniques of --seeds alone")
    p.add_argument("--seeds", type=int_list, default=None,
                   help=f"the techniques' seeds (default {','.join(map(str, FULL['seeds']))}; --quick "
                        f"{','.join(map(str, QUICK['seeds']))}); ensembles add the next seeds up to "
                        f"{NUM_ENSEMBLE_MEMBERS} members")
    p.add_argument("--references", default=",".join(REFERENCES),
                   help=f"comma-separated no-training rows to score, of {', '.join(REFERENCES)} (default: all; the "
                        f"sentence match embeds every dev and test page, ~40 minutes on 2 cores at 800 pages). "
                        f"\"\": none, for a run in pieces whose record is merged after one that has them (--merge "
                        f"NEW.json RECORD.json: RECORD's rows win), since each baseline is compared with the rows scored")
    p.add_argument("--first-pass", default="", metavar="NAMES",
                   help=f"comma-separated first passes, of {', '.join(FIRST_PASS_METHODS)}, whose recall of the gold "
                        "long answer at 4, 8 and 16 windows (with intervals) is recorded on the corpus's test pages, "
                        "and on the real lines where --real-lines names them (default \"\": none; meaning and fused "
                        "embed every sentence: ~2 CPU seconds a page)")
    p.add_argument("--first-pass-keep-first", type=int, default=0, metavar="N",
                   help="with --first-pass: each page's first N windows are kept whatever their rank "
                        "(window.first_pass_keep_first; default 0)")
    p.add_argument("--references-only", action="store_true",
                   help="train nothing: the no-training rows alone (lexical, bm25, first_paragraph, sentences) on "
                        "the corpus the benchmark makes, without its yes/no pages or stage 1's easy pages")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", required=True, help="write the rows here (a JSON list); the charts go next to it "
                   "(.png, -curve.png)")
    add_corpus_arguments(p)
    add_plan_arguments(p)
    cli.add_overwrite(p)
    args = p.parse_args(argv)
    if args.references_only and args.merge:
        p.error("--references-only scores a corpus and --merge reads records: give one of them")
    args.references = [r.strip() for r in args.references.split(",") if r.strip()]
    if any(r not in REFERENCES for r in args.references):
        p.error(f"--references {','.join(args.references)}: each of {', '.join(REFERENCES)}")
    args.first_pass = [m.strip() for m in args.first_pass.split(",") if m.strip()]
    if any(m not in FIRST_PASS_METHODS for m in args.first_pass):
        p.error(f"--first-pass {','.join(args.first_pass)}: each of {', '.join(FIRST_PASS_METHODS)}")
    if args.first_pass and args.merge:
        p.error("--first-pass measures a corpus and --merge reads records: give one of them")
    if args.first_pass_keep_first < 0:
        p.error(f"--first-pass-keep-first must be >= 0, got {args.first_pass_keep_first}")
    if args.references_only and not args.references and not args.first_pass:
        p.error("--references-only scores the no-training rows: --references and --first-pass name none")
    args.techniques = [t.strip() for t in args.techniques.split(",") if t.strip()]
    unknown = [t for t in args.techniques if t not in TECHNIQUES]
    if unknown:
        p.error(f"unknown technique(s) {unknown}; choose from {sorted(TECHNIQUES)}")
    if args.train_sizes is not None and min(args.train_sizes) < 1:
        p.error(f"--train-sizes: every size must be at least 1 page, got {args.train_sizes}")
    if args.num_test is not None and args.num_test < 1:
        p.error(f"--num-test must be at least 1 page, got {args.num_test}")
    if args.num_test is not None and (args.corpus == "real" or args.merge):
        p.error("--num-test sizes a synthetic corpus's test split: the real lines have none, and --merge makes none")
    if args.corpus_seed < 0:
        p.error(f"--corpus-seed must be >= 0, got {args.corpus_seed}")
    return args


def main(argv=None) -> int:
    return run_command(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())

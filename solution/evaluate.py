"""Score a Kaggle TF2 QA submission CSV against gold simplified-NQ annotations.

    python -m solution.evaluate --submission submission.csv --gold simplified-nq-dev.jsonl
    python -m solution.evaluate --submission submission.csv --gold dev.jsonl.gz --json
    python -m solution.evaluate --submission test.csv --gold simplified-nq-test-gold.jsonl --split-by question_form
    python -m solution.evaluate --submission submission.csv --gold test-gold.jsonl --metric mlebench --json
    python -m solution.evaluate --metric nq --nq-predictions predictions.json --gold simplified-nq-dev.jsonl [--json]
    python -m solution.evaluate --validate submission.csv --test simplified-nq-test.jsonl
    python -m solution.evaluate --tune --scores dev-scores.jsonl --gold dev.jsonl --model runs/x/model \
        [--set separate_thresholds=true] [--metric mlebench|nq]

`--metric kaggle` (the default) is the competition's micro-F1 (`solution.scoring.metric`);
`--metric mlebench` is MLE-bench's grader (`solution.scoring.mlebench`): the share of right rows, right
blanks included, against the first annotation only; `--metric nq` is Natural Questions' official
evaluation (`solution.scoring.nq_official`: Google's `natural-questions` package computes every figure) of a
predictions JSON (`submission.predict --nq-predictions`). `--tune` maximises the one chosen (for nq: the
mean of the package's long and short F1 of the answers as written).

`--split-by FIELD` (the kaggle metric) adds the micro-F1 of each value of a top-level field of the gold
lines, with its 95% bootstrap interval over documents (`solution.scoring.split_by`): `question_form` on an
`nq-shaped` corpus scores questions asked in forms training saw apart from those it never saw. A gold line
without the field is an error naming file, line and field, before anything is scored.

Every file a mode reads is checked first: a missing one, a folder or a pipe is one line naming the option.
An option the mode does not read (`--submission` with `--metric nq`, `--nq-predictions` without it,
`--submission` with `--tune`) is refused rather than silently dropped.

User errors (a bad CSV, missing or extra rows, a bad gold line, a missing
file) print `error: <message>` on stderr and exit with status 2. `--validate`
exits 0 on a valid submission and 1 on an invalid one, naming each offending
row id.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from solution.scoring.metric import format_report, load_gold, read_submission, score, yes_no_polarity

EXIT_USER_ERROR = 2
METRICS = ("kaggle", "mlebench", "nq")


def build_parser() -> argparse.ArgumentParser:
    from solution.common import cli  # both --a-b and --a_b spellings
    parser = cli.ArgumentParser(
        prog="python -m solution.evaluate",
        description="Score a submission with the Kaggle 'TensorFlow 2.0 Question Answering' metric: "
                    "micro-F1 over the <example_id>_long and <example_id>_short rows, against every "
                    "annotation of the gold file (a prediction is right if it equals any annotator's "
                    "long span, any single short span, or YES/NO).",
        epilog="Exit status: 0 scored, 2 user error (message on stderr as 'error: ...').",
    )
    parser.add_argument("--validate", metavar="CSV",
                        help="check a submission against --test instead of scoring it: every id twice "
                             "(_long, _short) and nothing else, long spans are candidates, short spans "
                             "inside the document, YES/NO only in short rows")
    parser.add_argument("--test", metavar="JSONL", help="the simplified-NQ test file --validate checks against")
    parser.add_argument("--tune", action="store_true",
                        help="search the thresholds maximising micro-F1 on --gold, from --scores "
                             "(submission.predict --scores-out): long and short, or long, short, YES and NO when the "
                             "model's separate_thresholds is on; with --model, write them (and any --set settings) "
                             "into its qa_config.json")
    parser.add_argument("--scores", metavar="JSONL", help="per-document scores for --tune")
    parser.add_argument("--model", metavar="DIR", help="model directory whose thresholds --tune replaces")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="--tune: override one post-processing setting of --model (repeatable), as "
                             "submission.predict --set does; with separate_thresholds=true all four thresholds "
                             "(long, short, yes, no) are searched. Use the --set the scores were written with")
    parser.add_argument("--submission", metavar="CSV",
                        help="submission CSV with header example_id,PredictionString and two rows per "
                             "gold example; PredictionString is blank, start:end, YES or NO")
    parser.add_argument("--gold", metavar="JSONL",
                        help="gold simplified-NQ file with annotations (.jsonl or .jsonl.gz)")
    parser.add_argument("--nq-predictions", metavar="JSON",
                        help="--metric nq: predictions in NQ's JSON format (submission.predict --nq-predictions)")
    parser.add_argument("--metric", choices=METRICS, default="kaggle",
                        help="kaggle (default): the competition's micro-F1 over every annotation; mlebench: "
                             "MLE-bench's grade.py, the share of right rows (right blanks count) against the "
                             "first annotation, with its refusals; --json gives it as 'score'; nq: NQ's official "
                             "nq_eval (the natural-questions package) on --nq-predictions, five-way gold: an answer "
                             "where >= 2 of 5 annotators gave one, one-annotation gold: that annotation; --json "
                             "prints the package's own metric names. With --tune: the metric the thresholds "
                             "maximise (nq: the mean of long-answer-f1 and short-answer-f1)")
    parser.add_argument("--split-by", metavar="FIELD",
                        help="--metric kaggle: also score each value of this top-level field of the gold lines "
                             "apart (documents, micro-F1, 95%% bootstrap interval over documents), e.g. "
                             "question_form on an nq-shaped corpus (seen / held_out); every gold line needs it")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (micro_f1, precision, recall, tp, fp, fn, long, short, "
                             "num_examples, polarity where the gold has YES and NO pages, and split_by "
                             "{field, groups: {value: {num_documents, micro_f1, ci}}} with --split-by) instead of "
                             "the table")
    return parser


def run_score(args: argparse.Namespace) -> int:
    """The default mode: read, score, print the report (or one JSON object)."""
    if args.metric == "nq":
        from solution.scoring import nq_official

        result = nq_official.score_files(args.nq_predictions, args.gold)
        print(json.dumps(result) if args.json else nq_official.format_report(result))
        return 0
    if args.metric == "mlebench":
        from solution.scoring import mlebench

        result = mlebench.score_files(args.submission, args.gold)
        print(json.dumps(result) if args.json else mlebench.format_report(result))
        return 0
    predictions = read_submission(args.submission)  # first: its errors need no gold
    if args.split_by:
        from solution.scoring import split_by  # numpy: only where there are intervals to draw

        values = split_by.field_values(args.gold, args.split_by)  # a line without the field: before any scoring
    gold = load_gold(args.gold)
    result = score(predictions, gold, source=args.submission)
    polarity = yes_no_polarity(predictions, gold)
    if polarity:
        from solution.scoring.intervals import polarity_gap  # numpy: only where there is a gap to bound

        result["polarity"] = polarity | polarity_gap(polarity)
    report = format_report(result)
    if args.split_by:
        result["split_by"] = {"field": args.split_by, "groups": split_by.scores_by_value(predictions, gold, values)}
        report += "\n" + split_by.format_split(result["split_by"])
    print(json.dumps(result) if args.json else report)
    return 0


def run_validate(args: argparse.Namespace) -> int:
    from solution.scoring.validate import MAX_LISTED, validate_submission

    problems = validate_submission(args.validate, args.test)
    if not problems:
        print(f"{args.validate}: valid submission for {args.test}")
        return 0
    for message in problems[:MAX_LISTED]:
        print(f"invalid: {message}", file=sys.stderr)
    if len(problems) > MAX_LISTED:
        print(f"... and {len(problems) - MAX_LISTED} more problems", file=sys.stderr)
    print(f"{args.validate}: INVALID, {len(problems)} problem(s)", file=sys.stderr)
    return 1


def tune_config(args: argparse.Namespace):
    """The post-processing settings --tune starts from: --model's, read as prediction reads them (a directory
    of an earlier release too), then --set."""
    from solution.answers.postprocess import PostprocessConfig  # numpy: only --tune needs it
    from solution.common.settings import apply_overrides
    from solution.model.qa_config import read_postprocess

    return apply_overrides(read_postprocess(args.model) if args.model else PostprocessConfig(), args.overrides)


def _thresholds_text(values: dict) -> str:
    return ", ".join(f"{k.replace('_threshold', '')} {v:.4f}" for k, v in values.items())


def _scores_text(result: dict, metric: str) -> str:
    kaggle = (f"micro-F1 {result['micro_f1']:.4f} (long {result['long']['micro_f1']:.4f}, "
              f"short {result['short']['micro_f1']:.4f})")
    return f"MLE-bench score {result['mlebench_score']:.4f}, {kaggle}" if metric == "mlebench" else kaggle


def run_tune(args: argparse.Namespace) -> int:
    from solution.model.qa_config import write_thresholds
    from solution.scoring.tuning import objective, predictions_with, read_scores, tune

    cfg = tune_config(args)  # first: a bad --set needs no files read
    records = read_scores(args.scores)
    if args.metric == "nq":
        return run_tune_nq(args, cfg, records)
    # MLE-bench grades against the first annotation only; Kaggle against every annotation.
    gold = load_gold(args.gold, first_annotation_only=args.metric == "mlebench")
    subset = {r["example_id"]: gold[r["example_id"]] for r in records if r["example_id"] in gold}
    before = score(predictions_with([r for r in records if r["example_id"] in subset], cfg), subset)
    if args.metric == "mlebench":
        before["mlebench_score"] = objective(before, "mlebench")
    say = (lambda m: print(m, file=sys.stderr)) if args.json else print  # --json: stdout is one JSON object
    records, cut = polarity_tuned(records, gold, say)
    best = tune(records, gold, cfg=cfg, metric=args.metric)
    after, tuned = best["result"], best["thresholds"] | cut
    say(f"thresholds before: {_thresholds_text({k: getattr(cfg, k) for k in best['thresholds']})}: "
        f"{_scores_text(before, args.metric)}")
    say(f"tuned for {args.metric}: {_thresholds_text(tuned)}: {_scores_text(after, args.metric)} "
        f"on {after['num_examples']} documents")
    if args.model:
        # The --set settings go with the thresholds: thresholds tuned under them mean nothing without them.
        others = {k: getattr(cfg, k) for k in (o.partition("=")[0].strip() for o in args.overrides)}
        others.update({k: v for k, v in tuned.items() if k not in ("long_threshold", "short_threshold")})
        tuned_on = {"metric": args.metric, "gold": str(args.gold), "documents": after["num_examples"],
                    "micro_f1_before": before["micro_f1"], "micro_f1_after": after["micro_f1"]}
        if args.metric == "mlebench":
            tuned_on.update(mlebench_score_before=before["mlebench_score"], mlebench_score_after=after["mlebench_score"])
        path = write_thresholds(args.model, best["long_threshold"], best["short_threshold"], tuned_on, others)
        say(f"written to {path} (tuned for {args.metric})")
    if args.json:
        print(json.dumps({"metric": args.metric, "before": before, "after": after,
                          "long_threshold": best["long_threshold"], "short_threshold": best["short_threshold"],
                          "thresholds": tuned}))
    return 0


def polarity_tuned(records: list, gold: dict, say) -> tuple:
    """(records, {"polarity_offset": cut}) with a polarity model's YES or NO chosen again at the cut tuned on
    these pages (`polarity.polarity_cut`: the YES and the NO pages weighed alike), before the thresholds are
    tuned on them; (records, {}) where the file holds no polarity margin on a YES or NO page."""
    from solution.answers.polarity import tuned_cut

    records, cut = tuned_cut(records, gold)
    if cut is None:
        return records, {}
    say(f"polarity cut: {cut['polarity_offset']:.4f} reads {cut['right']} of the {cut['pages']} YES or NO pages "
        f"a polarity model read right ({cut['right_at_0']} at 0); the YES and NO pages' mean share right "
        f"{cut['balanced']:.3f} ({cut['balanced_at_0']:.3f} at 0)")
    return records, {"polarity_offset": cut["polarity_offset"]}


def run_tune_nq(args: argparse.Namespace, cfg, records: list) -> int:
    """--tune --metric nq: the thresholds maximising the mean of the package's long and short F1."""
    from solution.model.qa_config import write_thresholds
    from solution.scoring import nq_official

    gold = nq_official.load_gold(args.gold)
    before = nq_official.score_records(nq_official.scored(records, gold), gold, cfg)
    best = nq_official.tune(records, gold, cfg=cfg)
    after, tuned = best["result"], best["thresholds"]
    say = (lambda m: print(m, file=sys.stderr)) if args.json else print

    def text(r: dict) -> str:
        return f"NQ mean F1 {r['mean_f1']:.4f} (long {r['long-answer-f1']:.4f}, short {r['short-answer-f1']:.4f})"

    say(f"thresholds before: {_thresholds_text({k: getattr(cfg, k) for k in tuned})}: {text(before)}")
    say(f"tuned for nq: {_thresholds_text(tuned)}: {text(after)} on {after['num_examples']} documents "
        f"(gold: {gold.rule})")
    if args.model:
        others = {k: getattr(cfg, k) for k in (o.partition("=")[0].strip() for o in args.overrides)}
        others.update({k: v for k, v in tuned.items() if k not in ("long_threshold", "short_threshold")})
        tuned_on = {"metric": "nq", "gold": str(args.gold), "documents": after["num_examples"],
                    "nq_mean_f1_before": before["mean_f1"], "nq_mean_f1_after": after["mean_f1"]}
        path = write_thresholds(args.model, best["long_threshold"], best["short_threshold"], tuned_on, others)
        say(f"written to {path} (tuned for nq)")
    if args.json:
        print(json.dumps({"metric": "nq", "before": before, "after": after, "long_threshold": best["long_threshold"],
                          "short_threshold": best["short_threshold"], "thresholds": tuned}))
    return 0


# The options naming a file (or, for --model, a folder) that a mode may read, in the order they are checked.
FILE_OPTIONS = {"validate": "--validate", "test": "--test", "submission": "--submission",
                "nq_predictions": "--nq-predictions", "scores": "--scores", "gold": "--gold", "model": "--model"}


def chosen_mode(args: argparse.Namespace) -> tuple:
    """(run function, its name, the FILE_OPTIONS it reads, the ones it needs, how to say so)."""
    if args.validate:
        return run_validate, "--validate", ("validate", "test"), ("validate", "test"), \
            "--validate needs --test TEST_JSONL"
    if args.tune:
        return run_tune, "--tune", ("scores", "gold", "model"), ("scores", "gold"), \
            "--tune needs --scores JSONL and --gold JSONL"
    if args.metric == "nq":
        return run_score, "--metric nq", ("nq_predictions", "gold"), ("nq_predictions", "gold"), \
            "--metric nq needs --nq-predictions JSON and --gold JSONL"
    return run_score, f"--metric {args.metric}", ("submission", "gold"), ("submission", "gold"), \
        "scoring needs --submission CSV and --gold JSONL (or use --validate CSV --test JSONL)"


def check_inputs(args: argparse.Namespace, name: str, reads: tuple) -> None:
    """Before anything is read: an option this mode would not read is refused (scoring one file of two and
    saying nothing of the other is a silent wrong answer), and every file it reads is a regular file (a
    FIFO would block the read forever, a folder fail deep inside a reader)."""
    from solution.data.nq import check_input_file

    unread = [(flag, getattr(args, key)) for key, flag in FILE_OPTIONS.items()
              if key not in reads and getattr(args, key)]
    unread += [("--set", args.overrides[0])] if args.overrides and name != "--tune" else []
    unread += [("--split-by", args.split_by)] if args.split_by and name != "--metric kaggle" else []
    if unread:
        flag, value = unread[0]
        wanted = ", ".join(FILE_OPTIONS[k] for k in reads)
        raise ValueError(f"{flag} {value}: not read by {name} (it reads {wanted}); drop it, or run the mode that "
                         "reads it on its own")
    for key in reads:
        path = getattr(args, key)
        if not path:
            continue
        if key == "model":
            if not Path(path).is_dir():
                raise ValueError(f"--model {path}: not a folder (a model directory holds qa_config.json)")
            continue
        try:
            check_input_file(path)
        except (ValueError, OSError) as e:  # the reader's own words, prefixed with the option
            raise ValueError(f"{FILE_OPTIONS[key]} {e}") from None


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    mode, name, reads, needs, need = chosen_mode(args)
    if not all(getattr(args, k) for k in needs):
        parser.error(need)
    try:
        check_inputs(args, name, reads)
        return mode(args)
    except (ValueError, OSError) as e:  # ValueError: SubmissionError, NQFormatError, JsonError; OSError: files
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())

"""MLE-bench's grader and test split for this competition, reproduced without scikit-learn.

MLE-bench (github.com/openai/mle-bench, `mlebench/competitions/tensorflow2-question-answering/`)
grades this competition with its own code, not Kaggle's metric:

* `grade.py` turns each row into a binary pair: y_pred = 1 when the PredictionString is not
  blank; y_true = 1 when it is right (non-blank and one of the valid answers) or when it is blank
  while a valid answer exists. It then calls scikit-learn's `f1_score(average="micro")`, which on
  binary labels is accuracy: the share of rows that are right answers or right blanks. So a
  correct blank counts for it, and a wrong answer and a wrong blank count against, the same.
  Valid answers come from the FIRST annotation only.
* `prepare.py` makes the test set from Kaggle's training file: 1,000 lines at a time, scikit-
  learn's `train_test_split(test_size=0.1, random_state=0)` (`split_chunk`).

`grade` follows grade.py's checks in its order and refuses what it refuses (each a
`SubmissionError` naming the problem); `score_files` reads a CSV as MLE-bench does (pandas
`read_csv`) and grades it. `score_predictions` grades a {row id: PredictionString} mapping
(what `submission.predict` writes), for benchmarks. The grader needs neither numpy nor
scikit-learn: the arithmetic is f1_score's own, 2 * correct / (rows + rows), so the number is the
same to the last bit. `split_chunk` is prepare.py's split of one chunk (`solution.split --like
mlebench` applies it).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from solution.common.jsonio import loads
from solution.scoring.metric import SubmissionError

COLUMNS = ("example_id", "PredictionString")
TEST_SIZE, RANDOM_STATE, CHUNK_LINES = 0.1, 0, 1000  # prepare.py's split
MAX_SHOWN = 5


@dataclass
class SubmissionTable:
    """A submission as grade.py sees it: the CSV's column names and, per row, its two fields as
    strings (pandas' blank and NA spellings already "")."""

    columns: tuple
    example_ids: list = field(default_factory=list)
    predictions: list = field(default_factory=list)
    num_rows: int = 0

    @classmethod
    def from_predictions(cls, predictions: dict) -> "SubmissionTable":
        return cls(COLUMNS, list(predictions), [str(p) for p in predictions.values()], len(predictions))


# ---------------------------------------------------------------------------
# Reading


def read_submission_table(path) -> SubmissionTable:
    """Read a submission CSV as MLE-bench does: `pandas.read_csv`, NaN -> "", every cell a string.

    Every cell is read as text (`dtype=str`): the strings are the ones grade.py sees after its
    `fillna("")` and `astype(str)`, and a column that is blank throughout does not become float
    (pandas 3's `fillna("")` refuses a float column; pandas 2 turned it into blanks, as here).
    Blank lines are skipped, a row with fewer fields gets blanks, and NA spellings ("NA", "nan",
    "null", ...) are blanks: pandas' defaults, which MLE-bench keeps.
    """
    import pandas as pd  # only this reader needs it

    try:
        frame = pd.read_csv(path, dtype=str)
    except pd.errors.EmptyDataError:  # MLE-bench's read_csv: an empty file is an empty table
        return SubmissionTable(())
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise SubmissionError(f"pandas.read_csv, as MLE-bench reads it, cannot read it: {e}", path) from None
    frame = frame.fillna("")
    columns = tuple(str(c) for c in frame.columns)
    table = SubmissionTable(columns, num_rows=len(frame))
    if set(COLUMNS) <= set(columns):
        table.example_ids = [str(x) for x in frame["example_id"].tolist()]
        table.predictions = [str(x) for x in frame["PredictionString"].tolist()]
    return table


def read_answers(path) -> list:
    """The gold of a train-format file as grade.py reads it: [{"example_id": str, "annotation": the
    first annotation}], in file order. An id is the text MLE-bench's prepare.py writes for it (an
    integer's digits). A line grade.py could not use is a ValueError naming file, line and field."""
    from solution.data.nq import NQFormatError, iter_lines  # .jsonl or .jsonl.gz, bad bytes named by line

    answers = []
    for line_no, text in iter_lines(path):
        def fail(fld: str, msg: str):
            raise NQFormatError(str(path), line_no, fld, msg)

        if not text.strip():
            fail("<json>", "blank line (MLE-bench's read_jsonl fails on it)")
        obj = loads(text, f"{path}:{line_no}: field '<json>'")  # a JsonError as NQFormatError words it
        if not isinstance(obj, dict):
            fail("<json>", f"expected a JSON object, got {type(obj).__name__}")
        eid = obj.get("example_id")
        if isinstance(eid, bool) or not isinstance(eid, (int, str)):
            fail("example_id", f"missing, or not an integer or a string: {eid!r}")
        anns = obj.get("annotations")
        if not isinstance(anns, list) or not anns:
            fail("annotations", "missing or empty (grade.py reads annotations[0])")
        answers.append({"example_id": str(eid), "annotation": _first_annotation(anns[0], fail)})
    if not answers:
        raise ValueError(f"{path}: no examples")
    return answers


def _first_annotation(ann, fail) -> dict:
    """The fields of annotations[0] that grade.py reads, checked: {"long": (s, e) or None,
    "short": [(s, e), ...], "yes_no": str}."""
    def integer(d, key, where):
        v = d.get(key) if isinstance(d, dict) else None
        if isinstance(v, bool) or not isinstance(v, int):
            fail(f"{where}.{key}", f"expected an integer, got {v!r}")
        return v

    if not isinstance(ann, dict):
        fail("annotations[0]", "expected an object")
    la = ann.get("long_answer")
    start = integer(la, "start_token", "annotations[0].long_answer")
    long = (start, integer(la, "end_token", "annotations[0].long_answer")) if start != -1 else None
    shorts = ann.get("short_answers")
    if not isinstance(shorts, list):
        fail("annotations[0].short_answers", "missing or not a list")
    short = [(integer(s, "start_token", f"annotations[0].short_answers[{i}]"),
              integer(s, "end_token", f"annotations[0].short_answers[{i}]")) for i, s in enumerate(shorts)]
    yes_no = ann.get("yes_no_answer")
    if not isinstance(yes_no, str):
        fail("annotations[0].yes_no_answer", f"missing or not a string: {yes_no!r}")
    return {"long": long, "short": short, "yes_no": yes_no}


# ---------------------------------------------------------------------------
# Grading


def grade(table: SubmissionTable, answers: list, source: Optional[str] = None) -> dict:
    """grade.py's score of `table` against `answers` (`read_answers`), with its counts.

    Returns {"metric": "mlebench", "score", "score_rounded" (5 decimals, as MLE-bench's report
    shows it), "correct", "rows", "num_examples", "tp", "fp", "fn", "tn", "long", "short"}; tp, fp,
    fn are Kaggle's counts, tn the right blanks, and score = (tp + tn) / rows.
    Raises SubmissionError where grade.py raises, in its order.
    """
    _check_shape(table, answers, source)
    gold = {a["example_id"]: a["annotation"] for a in answers}  # a repeated id: the last one, as grade.py
    counts = {kind: Counter() for kind in ("long", "short")}
    for row_id, text in zip(table.example_ids, table.predictions):
        pred = _parse(row_id, text, source)
        kind, valid = _valid_answers(row_id, gold, source)
        if pred:
            counts[kind]["tp" if pred in valid else "fp"] += 1
        else:
            counts[kind]["fn" if valid else "tn"] += 1
    result = _figures(counts["long"] + counts["short"])
    result.update(metric="mlebench", score_rounded=round(result["score"], 5), num_examples=len(answers),
                  long=_figures(counts["long"]), short=_figures(counts["short"]))
    return result


def _check_shape(table: SubmissionTable, answers: list, source: Optional[str]) -> None:
    """grade.py's first four refusals: row count, columns, the set of ids, repeated ids."""
    if table.num_rows != 2 * len(answers):
        raise SubmissionError(f"{table.num_rows} rows; MLE-bench wants 2 per gold example "
                              f"({len(answers)} examples: {2 * len(answers)} rows)", source)
    if not set(COLUMNS) <= set(table.columns):
        raise SubmissionError(f"MLE-bench needs the columns {', '.join(COLUMNS)}; the file has "
                              f"{', '.join(table.columns) or 'none'}", source)
    expected = {f"{a['example_id']}_{kind}" for a in answers for kind in ("long", "short")}
    ids = set(table.example_ids)
    if ids != expected:
        missing, extra = sorted(expected - ids), sorted(ids - expected)
        raise SubmissionError(f"the row ids are not the gold's <example_id>_long and _short: "
                              f"{len(missing)} missing ({_some(missing)}), {len(extra)} not in the gold "
                              f"({_some(extra)})", source)
    if len(ids) != len(table.example_ids):
        repeated = sorted(k for k, n in Counter(table.example_ids).items() if n > 1)
        repeated_gold = sorted(k for k, n in Counter(a["example_id"] for a in answers).items() if n > 1)
        why = (f"; the gold repeats example_id {_some(repeated_gold)}, so MLE-bench refuses every submission"
               if repeated_gold else "")
        raise SubmissionError(f"repeated row ids: {_some(repeated)}{why}", source)


def _parse(row_id: str, text: str, source: Optional[str]):
    """grade.py's reading of a PredictionString: (start, end) ints, "YES", "NO" or ""; else refused.
    Python's int() reads each side, so " 3 : 4" is (3, 4), as there."""
    pred = text.strip()
    if ":" in pred and len(pred.split(":")) == 2:
        start, end = pred.split(":")
        try:
            return int(start), int(end)
        except ValueError:
            raise SubmissionError(f"row {row_id}: PredictionString {pred!r}: start:end needs two integers",
                                  source) from None
    if pred in ("YES", "NO", ""):
        return pred
    raise SubmissionError(f"row {row_id}: PredictionString {pred!r} is not blank, start:end, YES or NO", source)


def _valid_answers(row_id: str, gold: dict, source: Optional[str]) -> tuple:
    """("long" or "short", the row's valid answers from the first annotation), as grade.py finds them."""
    for kind in ("long", "short"):
        suffix = f"_{kind}"
        if row_id.endswith(suffix):
            key = row_id.split(suffix)[0]  # grade.py's split: the text before the first "_long"
            if key not in gold:
                raise SubmissionError(f"row {row_id}: grade.py looks its gold up as {key!r}, which is not "
                                      "an example_id (an id holding '_long' or '_short')", source)
            ann = gold[key]
            if kind == "long":
                return kind, [ann["long"]] if ann["long"] is not None else []
            return kind, list(ann["short"]) + ([ann["yes_no"]] if ann["yes_no"] != "NONE" else [])
    raise SubmissionError(f"row id {row_id} does not end with '_long' or '_short'", source)


def _figures(c: Counter) -> dict:
    rows = c["tp"] + c["fp"] + c["fn"] + c["tn"]
    correct = c["tp"] + c["tn"]
    return {"score": score_of(correct, rows), "correct": correct, "rows": rows,
            "tp": c["tp"], "fp": c["fp"], "fn": c["fn"], "tn": c["tn"]}


def score_of(correct: int, rows: int) -> float:
    """MLE-bench's score of `correct` right rows out of `rows`: f1_score(average="micro") on binary labels is
    (1 + beta^2) tp_sum / (beta^2 true_sum + pred_sum), both sums over the two labels equal to the rows."""
    return 2.0 * correct / (float(rows) + float(rows)) if rows else 0.0


def _some(items: list) -> str:
    shown = ", ".join(map(str, items[:MAX_SHOWN]))
    return (shown + (f", ... ({len(items) - MAX_SHOWN} more)" if len(items) > MAX_SHOWN else "")) or "none"


def score_files(submission_path, gold_path) -> dict:
    """MLE-bench's score of a submission CSV against a train-format gold file."""
    from pathlib import Path

    if not Path(submission_path).is_file():
        raise FileNotFoundError(f"{submission_path}: no such file")
    table = read_submission_table(submission_path)
    return grade(table, read_answers(gold_path), source=str(submission_path))


def score_predictions(predictions: dict, answers: list) -> dict:
    """MLE-bench's score of {row id: PredictionString} (a submission's rows) against `read_answers`'
    gold: what a benchmark calls beside `metric.score`."""
    return grade(SubmissionTable.from_predictions(predictions), answers)


def format_report(result: dict) -> str:
    lines = [f"MLE-bench score (grade.py: micro-F1 of binary labels = share of right rows): "
             f"{result['score']:.6f} (reported as {result['score_rounded']})",
             f"examples: {result['num_examples']} ({result['rows']} rows)",
             f"{'':8} {'score':>8} {'right':>7} {'TP':>7} {'TN':>7} {'FP':>7} {'FN':>7}"]
    for name, r in (("overall", result), ("long", result["long"]), ("short", result["short"])):
        lines.append(f"{name:8} {r['score']:8.4f} {r['correct']:7d} {r['tp']:7d} {r['tn']:7d} "
                     f"{r['fp']:7d} {r['fn']:7d}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# The split


def num_test(num_samples: int) -> int:
    """How many of `num_samples` lines train_test_split(test_size=0.1) puts in test (scikit-learn's
    `_validate_shuffle_split`: ceil(test_size * n) in floating point, and train must not be empty)."""
    n_test = math.ceil(TEST_SIZE * num_samples)
    if num_samples - n_test == 0:
        raise ValueError(f"a chunk of {num_samples} line(s): train_test_split(test_size={TEST_SIZE}) would "
                         "leave its train part empty and MLE-bench's prepare.py stops there")
    return n_test


def split_chunk(num_samples: int) -> tuple:
    """(test indices, train indices) of one chunk of `num_samples` lines, in the order
    train_test_split(test_size=0.1, random_state=0) returns them: ShuffleSplit draws
    `RandomState(0).permutation(n)` and the first ceil(0.1 n) indices are test, the rest train."""
    import numpy as np

    n_test = num_test(num_samples)
    permutation = np.random.RandomState(RANDOM_STATE).permutation(num_samples)
    return permutation[:n_test].tolist(), permutation[n_test:].tolist()

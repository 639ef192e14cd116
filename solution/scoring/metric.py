"""The Kaggle "TensorFlow 2.0 Question Answering" metric: micro-F1 over long and short rows.

A submission holds, for every gold example, two rows `<example_id>_long` and
`<example_id>_short`. Each row's PredictionString is blank or `start:end` (NQ
whitespace tokens, end exclusive); a short row may also say `YES` or `NO`.

Gold comes from a five-way-annotated simplified-NQ file. The valid answers of
an example are the union over its annotations:
  long:  every annotation's long-answer span;
  short: every single short span of every annotation (a multi-span answer is
         NOT merged into first-start:last-end), plus YES / NO where an
         annotation's yes_no_answer says so.

Counting, per row:
  non-blank and one of the valid answers    -> TP
  non-blank and none of them (or none exist) -> FP
  blank while a valid answer exists          -> FN
  blank and no valid answer                  -> nothing
micro-F1 = 2TP / (2TP + FP + FN), pooled over long and short rows.

Pure Python (no torch, accelerate, deepspeed or pandas): `score` runs inside
the trainer on dev predictions and in the offline Kaggle kernel.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from typing import Optional

from solution.data.nq import ReadStats, check_input_file, read_examples

HEADER = ("example_id", "PredictionString")
ROW_KINDS = ("long", "short")
MAX_IDS_IN_MESSAGE = 10

_ROW_ID = re.compile(r"(-?[0-9]+)_(long|short)")
SPAN_PATTERN = re.compile(r"(-?[0-9]+):(-?[0-9]+)")


class SubmissionError(ValueError):
    """A submission that cannot be scored. `str()` names file and line when known."""

    def __init__(self, message: str, path: Optional[str] = None, line: Optional[int] = None):
        self.path, self.line, self.reason = (str(path) if path is not None else None), line, message
        where = ""
        if self.path is not None:
            where = f"{self.path}:{line}: " if line is not None else f"{self.path}: "
        super().__init__(where + message)


@dataclass(frozen=True)
class Gold:
    """Valid prediction strings of one example, in the canonical form of `parse_prediction`."""

    long: frozenset  # frozenset[str]: "start:end"
    short: frozenset  # frozenset[str]: "start:end", "YES", "NO"


# ---------------------------------------------------------------------------
# Gold


def gold_from_annotations(annotations) -> Gold:
    """The valid answers of one example, from its `nq.Annotation`s (None or [] -> no answer)."""
    long, short = set(), set()
    for ann in annotations or ():
        if ann.long_answer is not None:
            long.add(ann.long_answer.as_prediction())
        # Each span separately: a prediction equal to any one span counts.
        short.update(span.as_prediction() for span in ann.short_answers)
        if ann.yes_no_answer != "NONE":
            short.add(ann.yes_no_answer)
    return Gold(frozenset(long), frozenset(short))


def load_gold(path, on_error: str = "raise", stats: Optional[ReadStats] = None,
              first_annotation_only: bool = False) -> dict:
    """Read a gold simplified-NQ file (`.jsonl` or `.jsonl.gz`) -> {example_id: Gold}, in file order.

    first_annotation_only: the valid answers are the first annotation's alone, as MLE-bench's
    grader reads them (`solution.scoring.mlebench`); Kaggle's metric takes every annotation's.

    Streams through `nq.read_examples(require_annotations=True)`; only the
    answer strings are kept. With on_error="skip", bad lines are counted in
    `stats` (pass a `ReadStats` to see them) and their examples are absent.
    """
    gold = {}
    for ex in read_examples(path, on_error=on_error, stats=stats, require_annotations=True):
        gold[ex.example_id] = gold_from_annotations(ex.annotations[:1] if first_annotation_only else ex.annotations)
    return gold


# ---------------------------------------------------------------------------
# Submission


def parse_prediction(text: str) -> str:
    """Canonical form of a PredictionString: "", "YES", "NO" or "start:end".

    Surrounding whitespace is ignored and integers are normalised ("007:12" ->
    "7:12"). Anything else raises ValueError. Whether a well-formed string can
    match (YES in a long row, a negative or empty span) is for `score`: it is
    simply a false positive.
    """
    text = text.strip()
    if text in ("", "YES", "NO"):
        return text
    m = SPAN_PATTERN.fullmatch(text)
    if m is None:
        raise ValueError(f"malformed PredictionString {text!r}: expected blank, start:end, YES or NO")
    return f"{int(m.group(1))}:{int(m.group(2))}"


def read_submission(path, multi_span_short: bool = False) -> dict:
    """Read a submission CSV -> {row_id: canonical PredictionString}, in file order.

    multi_span_short: accept several space-separated `start:end` spans in a short row, as Kaggle
    does (the validator); each is canonicalised and they are joined by one space. Scoring keeps
    the default, one answer per row.

    Checks, each raising `SubmissionError` (a ValueError) naming file and line:
    the header is `example_id,PredictionString`; every row has 2 fields; row
    ids are `<int>_long` or `<int>_short` and unique; predictions are
    well-formed. Missing and extra rows need the gold, so `score` checks them.
    A missing file raises FileNotFoundError, as `nq.read_examples` does.
    """
    path = str(path)
    check_input_file(path)  # a pipe would block the read; a folder is not "no such file"
    predictions: dict = {}
    first_line: dict = {}  # row id -> CSV line, for duplicate messages
    with open(path, "rb") as f:
        reader = csv.reader(_decoded_lines(f, path), strict=True)
        rows = _csv_rows(reader, path)
        header = next(rows, None)
        if header is None:
            raise SubmissionError(f"empty file; expected the header {','.join(HEADER)}", path)
        line, fields = header
        if tuple(c.strip() for c in fields) != HEADER:
            raise SubmissionError(f"expected the header {','.join(HEADER)}, got {','.join(fields)!r}", path, line)
        for line, fields in rows:
            if len(fields) != 2:
                raise SubmissionError(f"expected 2 fields (example_id,PredictionString), got {len(fields)}: "
                                      f"{','.join(fields)[:80]!r}", path, line)
            row_id = fields[0].strip()
            if not _ROW_ID.fullmatch(row_id):
                raise SubmissionError(f"row id {row_id!r} is not <example_id>_long or <example_id>_short",
                                      path, line)
            if row_id in first_line:
                raise SubmissionError(f"duplicate row id {row_id} (first on line {first_line[row_id]})", path, line)
            try:
                parts = fields[1].split() if multi_span_short and row_id.endswith("_short") else [fields[1]]
                predictions[row_id] = " ".join(parse_prediction(part) for part in parts) if parts else ""
            except ValueError as e:
                raise SubmissionError(f"row {row_id}: {e}", path, line) from None
            first_line[row_id] = line
    return predictions


def _decoded_lines(binary, path: str):
    """Decode line by line, so a byte that is not UTF-8 is reported on its own line.

    Lines keep their endings ("\r\n" or "\n"), as csv wants from a file opened
    with newline=""; a leading UTF-8 BOM (Excel) is dropped.
    """
    for line_no, raw in enumerate(binary, 1):
        if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SubmissionError(f"not UTF-8 ({e.reason} at byte {e.start} of the line)", path, line_no) from None


def _csv_rows(reader, path: str):
    """Yield (first CSV line of the record, fields), skipping blank lines; csv faults -> SubmissionError."""
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise SubmissionError(f"malformed CSV ({e})", path, reader.line_num) from None
        if fields:
            yield start, fields


# ---------------------------------------------------------------------------
# Scoring


def score(predictions: dict, gold: dict, source: Optional[str] = None) -> dict:
    """Score {row_id: PredictionString} against {example_id: Gold}. No I/O.

    Returns {"micro_f1", "precision", "recall", "tp", "fp", "fn",
    "long": {same keys}, "short": {same keys}, "num_examples"}.
    Raises SubmissionError when rows are missing or extra, or a prediction is
    malformed; `source` (a file name) prefixes those messages.
    """
    expected = [f"{eid}_{kind}" for eid in gold for kind in ROW_KINDS]
    expected_set = set(expected)
    missing = [r for r in expected if r not in predictions]
    extra = [r for r in predictions if r not in expected_set]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing row(s): {_some(missing)}")
    if extra:
        problems.append(f"{len(extra)} extra row(s) whose example_id is not in the gold: {_some(extra)}")
    if problems:
        raise SubmissionError("; ".join(problems), source)

    counts = {kind: [0, 0, 0] for kind in ROW_KINDS}  # tp, fp, fn
    for eid, g in gold.items():
        for kind, outcome in _document_outcomes(eid, g, predictions, source):
            if outcome is not None:
                counts[kind][outcome] += 1
    tp, fp, fn = (counts["long"][i] + counts["short"][i] for i in range(3))
    result = f1_figures(tp, fp, fn)
    result["long"] = f1_figures(*counts["long"])
    result["short"] = f1_figures(*counts["short"])
    result["num_examples"] = len(gold)
    return result


def _document_outcomes(eid: str, g: Gold, predictions: dict, source: Optional[str]):
    """(row kind, 0 for TP, 1 for FP, 2 for FN, None for a correct blank) of one document's two rows."""
    for kind, valid in (("long", g.long), ("short", g.short)):
        row_id = f"{eid}_{kind}"
        try:
            pred = parse_prediction(predictions[row_id])
        except ValueError as e:
            raise SubmissionError(f"row {row_id}: {e}", source) from None
        yield kind, (0 if pred in valid else 1) if pred else (2 if valid else None)


def document_counts(predictions: dict, gold: dict, kinds: tuple = ("long", "short")) -> list:
    """[(tp, fp, fn)] of each gold document, in the gold's order: what a bootstrap over documents
    resamples (`solution.scoring.intervals`), counting the rows of `kinds` (("long",): long answers alone).
    Rows are checked as `score` checks them."""
    score(predictions, gold)  # missing, extra or malformed rows: the same error as scoring
    out = []
    for eid, g in gold.items():
        c = [0, 0, 0]
        for kind, outcome in _document_outcomes(eid, g, predictions, None):
            if outcome is not None and kind in kinds:
                c[outcome] += 1
        out.append(tuple(c))
    return out


def yes_no_polarity(predictions: dict, gold: dict) -> Optional[dict]:
    """What the short rows say on the pages answered YES or NO: {"yes_pages", "no_pages", "yes_on_yes",
    "no_on_yes", "yes_on_no", "no_on_no"} (NO_ON_YES: pages whose gold is YES where the row says NO).
    A page whose annotators gave both counts in neither. None unless there are pages of both kinds: a
    model that says NO as often on YES pages as on NO pages answers the type, not the polarity."""
    said = {"YES": [], "NO": []}
    for eid, g in gold.items():
        kinds = [k for k in said if k in g.short]
        if len(kinds) == 1:
            said[kinds[0]].append(parse_prediction(predictions[f"{eid}_short"]))
    if not said["YES"] or not said["NO"]:
        return None
    return {"yes_pages": len(said["YES"]), "no_pages": len(said["NO"]),
            **{f"{w.lower()}_on_{page.lower()}": said[page].count(w) for page in said for w in ("YES", "NO")}}


def format_polarity(p: dict) -> str:
    """One line of `yes_no_polarity` with its gap (`intervals.polarity_gap`)."""
    return (f"polarity: {p['no_pages']} NO pages (said NO on {p['no_on_no']}, YES on {p['yes_on_no']}), "
            f"{p['yes_pages']} YES pages (said NO on {p['no_on_yes']}, YES on {p['yes_on_yes']}): NO-share gap "
            f"{p['gap']:+.3f} (95% bootstrap {p['ci'][0]:+.3f} to {p['ci'][1]:+.3f})")


def f1_figures(tp: int, fp: int, fn: int) -> dict:
    """Micro-F1, precision and recall of these counts, with the counts."""
    def ratio(num: int, den: int) -> float:
        return num / den if den else 0.0

    return {"micro_f1": ratio(2 * tp, 2 * tp + fp + fn), "precision": ratio(tp, tp + fp),
            "recall": ratio(tp, tp + fn), "tp": tp, "fp": fp, "fn": fn}


def _some(ids: list) -> str:
    shown = ", ".join(ids[:MAX_IDS_IN_MESSAGE])
    return shown + (f", ... ({len(ids) - MAX_IDS_IN_MESSAGE} more)" if len(ids) > MAX_IDS_IN_MESSAGE else "")


def format_report(result: dict) -> str:
    """A small table of the `score` result: F1, P, R, TP, FP, FN for overall, long and short rows."""
    lines = [f"examples: {result['num_examples']} ({2 * result['num_examples']} rows)",
             f"{'':8} {'F1':>7} {'P':>7} {'R':>7} {'TP':>7} {'FP':>7} {'FN':>7}"]
    for name, r in (("overall", result), ("long", result["long"]), ("short", result["short"])):
        lines.append(f"{name:8} {r['micro_f1']:7.4f} {r['precision']:7.4f} {r['recall']:7.4f} "
                     f"{r['tp']:7d} {r['fp']:7d} {r['fn']:7d}")
    if result.get("polarity"):
        lines.append(format_polarity(result["polarity"]))
    return "\n".join(lines)

"""Check a submission against the test file before sending it: `python -m solution.evaluate --validate CSV --test JSONL`.

A valid submission has, for every example of the test file, exactly the rows
`<id>_long` and `<id>_short` and nothing else; a long row is blank or the
`start:end` of one of that document's long-answer candidates; a short row is
blank, `YES`, `NO`, or spans `start:end` inside the document (several spans
separated by spaces, as Kaggle allows); YES/NO never in a long row. A row id is written exactly, no
space around it: MLE-bench's grader compares ids as written and refuses ` 123_long`
(`--metric mlebench` does too).
"""

from __future__ import annotations

import csv

from solution.data.nq import read_examples
from solution.scoring.metric import SPAN_PATTERN, read_submission

MAX_LISTED = 50


def validate_submission(csv_path: str, test_path: str) -> list:
    """Problems as messages naming each offending row id; an empty list means valid.

    A file that cannot be read as a submission at all (header, CSV syntax, a duplicate row, a
    malformed prediction string) raises SubmissionError naming its line, as `read_submission` does.
    """
    rows = read_submission(csv_path, multi_span_short=True)
    problems = [f"{row_id.strip()}: written {row_id!r} on line {line}; MLE-bench's grader compares row ids exactly "
                "and refuses it" for line, row_id in _padded_ids(csv_path)]
    expected = set()
    for ex in read_examples(test_path):
        expected.update((f"{ex.example_id}_long", f"{ex.example_id}_short"))
        candidates = {(c.start_token, c.end_token) for c in ex.candidates}
        n = len(ex.tokens)
        long = rows.get(f"{ex.example_id}_long")
        if long:
            if long in ("YES", "NO"):
                problems.append(f"{ex.example_id}_long: {long} belongs in the short row only")
            elif _span(long) not in candidates:
                problems.append(f"{ex.example_id}_long: {long} is not a long-answer candidate of this document")
        short = rows.get(f"{ex.example_id}_short")
        if short and short not in ("YES", "NO"):
            for part in short.split():
                s, e = _span(part) or (-1, -1)
                if not 0 <= s < e <= n:
                    problems.append(f"{ex.example_id}_short: {part} is not a span inside the document "
                                    f"(0..{n} tokens)")
    missing = sorted(expected - set(rows))
    extra = sorted(set(rows) - expected)
    problems += [f"{row_id}: missing" for row_id in missing]
    problems += [f"{row_id}: not an example of {test_path}" for row_id in extra]
    return problems


def _padded_ids(csv_path: str) -> list:
    """(line, row id as written) of every row whose id has spaces around it (read_submission strips them)."""
    with open(csv_path, newline="", encoding="utf-8-sig") as f:
        return [(reader.line_num, fields[0]) for reader in [csv.reader(f)] for i, fields in enumerate(reader)
                if i > 0 and fields and fields[0] != fields[0].strip()]


def _span(text: str):
    """(start, end) of a `start:end` prediction (the metric's own pattern), None if it is not one."""
    m = SPAN_PATTERN.fullmatch(text)
    return (int(m.group(1)), int(m.group(2))) if m else None

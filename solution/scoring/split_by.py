"""A score split by a field of the gold lines: for each value of the field, its documents, micro-F1 and the
95% bootstrap interval over those documents (`python -m solution.evaluate --split-by FIELD`).

Made for the `nq-shaped` synthetic profile, whose lines say whether their question was asked in a form
training showed ("question_form": "seen") or one held out of it ("held_out"): one overall figure would
average a model that reads over one that matched training's phrasings. Any top-level string field serves.
Counting is the metric's (`metric.document_counts`) and the intervals are `intervals.f1_interval`'s, so a
group's figure is what scoring its documents alone would give.
"""

from __future__ import annotations

from solution.common.jsonio import loads
from solution.data.nq import NQFormatError, iter_lines
from solution.scoring.intervals import NUM_RESAMPLES, f1_interval
from solution.scoring.metric import document_counts, load_gold


def field_values(path, field: str) -> list:
    """The value of top-level `field` on each line of a gold file, in file order (blank lines skipped, as
    `nq.read_examples` skips them, so the list lines up with `metric.load_gold`'s documents).

    A line without the field, or whose value is not a non-empty string, is an NQFormatError naming file,
    line and field: a document left out of every group would shrink the figures without a word."""
    values = []
    for line_no, text in iter_lines(path):
        if not text.strip():
            continue
        obj = loads(text, f"{path}:{line_no}: field '<json>'")  # a JsonError worded as NQFormatError words it
        if not isinstance(obj, dict):
            raise NQFormatError(str(path), line_no, "<json>", f"expected a JSON object, got {type(obj).__name__}")
        if field not in obj:
            raise NQFormatError(str(path), line_no, field, "missing: splitting the score by it needs it on every gold line")
        value = obj[field]
        if not isinstance(value, str) or not value:
            raise NQFormatError(str(path), line_no, field, f"expected a non-empty string to group by, got {value!r}")
        values.append(value)
    return values


def scores_by_value(predictions: dict, gold: dict, values: list, num_resamples: int = NUM_RESAMPLES,
                    seed: int = 0) -> dict:
    """{value: {"num_documents", "micro_f1", "ci": [lo, hi]}}, values sorted, of {row_id: PredictionString}
    against {example_id: Gold}; `values[i]` is the group of the gold's i-th document (`field_values`).
    Rows are checked as `metric.score` checks them (missing, extra or malformed: SubmissionError)."""
    if len(values) != len(gold):
        raise ValueError(f"{len(values)} group values for {len(gold)} gold documents: one each is needed")
    counts = document_counts(predictions, gold)  # all documents at once: a subset would make every other row "extra"
    groups: dict = {}
    for value, c in zip(values, counts):
        groups.setdefault(value, []).append(c)
    out = {}
    for value in sorted(groups):
        figure = f1_interval(groups[value], num_resamples=num_resamples, seed=seed)
        out[value] = {"num_documents": figure["num_documents"], "micro_f1": figure["f1"], "ci": figure["ci"]}
    return out


def split_scores(predictions: dict, gold_path, field: str) -> dict:
    """{"field", "groups": `scores_by_value`} of {row_id: PredictionString} against the gold file `gold_path`,
    by its lines' `field`; every line's field is checked before anything is scored."""
    values = field_values(gold_path, field)
    return {"field": field, "groups": scores_by_value(predictions, load_gold(gold_path), values)}


def format_split(split: dict) -> str:
    """The split as a small table: one row per value, documents, micro-F1 and its interval."""
    lines = [f"split by {split['field']}:", f"{'':12} {'docs':>6} {'F1':>7}  95% bootstrap interval"]
    for value, g in split["groups"].items():
        lines.append(f"{value:12} {g['num_documents']:6d} {g['micro_f1']:7.4f}  {g['ci'][0]:.4f} to {g['ci'][1]:.4f}")
    return "\n".join(lines)

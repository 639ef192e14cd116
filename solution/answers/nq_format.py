"""Answers in Natural Questions' own predictions format (what the `natural-questions` package's nq_eval reads):
the same two rows per document the Kaggle CSV holds (`postprocess.threshold_rows`: one post-processing path,
two formats), spans in NQ tokens with byte offsets -1, and the scores the thresholds compare, so nq_eval's
threshold sweep moves along our own thresholds. Standard library only: `submission.predict --nq-predictions`
writes it where the package is absent; `scoring.nq_official` scores it with the package.

Example ids: NQ's are JSON integers, and the package matches predictions to gold by value and type; Kaggle's
simplified test file writes them as strings, so both become the integer here.
"""

from __future__ import annotations

import json
import math

from solution.common.fsutil import atomic_output


def nq_example_id(example_id) -> int:
    """NQ's integer id of a simplified-NQ id (Kaggle's test file writes it as a string)."""
    return int(str(example_id).strip())


def nq_span(start: int, end: int) -> dict:
    return {"start_token": start, "end_token": end, "start_byte": -1, "end_byte": -1}


def _tokens(text: str) -> tuple:
    start, _, end = text.partition(":")
    return int(start), int(end)


def row_scores(record: dict, cfg) -> tuple:
    """(long_answer_score, short_answers_score) of a `postprocess.score_record`: the scores the thresholds
    compare under `cfg`. Long row: the document's best score (long_threshold). Short row: a SHORT answer's
    span score (short_threshold); a YES/NO answer's yes_score/no_score with `separate_thresholds`, else the
    long score (only long_threshold decides it then); any other type, the span score (its row is blank)."""
    kind = record["answer_type"]
    if kind in ("YES", "NO"):
        short = record[f"{kind.lower()}_score"] if cfg.separate_thresholds else record["score"]
    else:
        short = record["short_score"]
    return float(record["score"]), float(short)


def prediction_entry(example_id, long: str, short: str, long_score: float, short_score: float) -> dict:
    """One entry of the predictions JSON from a document's two rows ("start:end" or "", and "start:end",
    "YES", "NO" or "")."""
    for name, value in (("long_answer_score", long_score), ("short_answers_score", short_score)):
        if not math.isfinite(value):
            raise ValueError(f"example_id {example_id}: {name} {value!r} is not a finite number")
    yes_no = short if short in ("YES", "NO") else "NONE"
    return {"example_id": nq_example_id(example_id),
            "long_answer": nq_span(*_tokens(long)) if long else nq_span(-1, -1),
            "long_answer_score": long_score,
            "short_answers": [nq_span(*_tokens(short))] if short and yes_no == "NONE" else [],
            "short_answers_score": short_score,
            "yes_no_answer": yes_no}


def record_entry(record: dict, cfg) -> dict:
    """The entry of a `score_record` under `cfg`'s thresholds: the rows `postprocess.threshold_rows` gives
    (those the CSV holds), with `row_scores`."""
    from solution.answers.postprocess import threshold_rows

    long, short = threshold_rows(record, cfg)
    return prediction_entry(record["example_id"], long, short, *row_scores(record, cfg))


def document_entry(prediction, cfg) -> dict:
    """The entry of a `postprocess.DocumentPrediction`: its rows as written (`.long`, `.short`) and the
    scores its thresholds compared."""
    from solution.answers.postprocess import score_record

    return prediction_entry(prediction.example_id, prediction.long, prediction.short,
                            *row_scores(score_record(prediction), cfg))


class PredictionsWriter:
    """The predictions JSON, written entry by entry through `fsutil.atomic_output` (renamed when whole)."""

    def __init__(self, path, cfg):
        self.path, self.cfg, self._ctx, self._f, self._count = path, cfg, None, None, 0

    def __enter__(self) -> "PredictionsWriter":
        self._ctx = atomic_output(self.path, "w")
        self._f = self._ctx.__enter__()
        self._f.write('{"predictions": [')
        return self

    def write(self, prediction) -> None:
        """A `DocumentPrediction`, as `document_entry` writes it."""
        self.write_entry(document_entry(prediction, self.cfg))

    def write_entry(self, entry: dict) -> None:
        self._f.write(("," if self._count else "") + "\n" + json.dumps(entry))
        self._count += 1

    def __exit__(self, *exc) -> bool:
        if exc[0] is None:
            self._f.write("\n]}\n")
        return bool(self._ctx.__exit__(*exc))

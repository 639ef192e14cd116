"""A score split by a field of the gold lines (solution/scoring/split_by.py): each group's micro-F1 is the
metric's on its documents alone (counted by hand below), with a bootstrap interval around it; a gold line
without the field is an error naming file, line and field."""

from __future__ import annotations

import json

import pytest

from solution.data.nq import NQFormatError
from solution.scoring.metric import load_gold, score
from solution.scoring.split_by import field_values, format_split, scores_by_value, split_scores

DOC = " ".join(f"w{i}" for i in range(50))
CANDIDATES = [{"start_token": s, "end_token": s + 10, "top_level": True} for s in range(0, 50, 10)]


def ann(long=None, shorts=(), yes_no="NONE"):
    la = ({"start_token": -1, "end_token": -1, "candidate_index": -1} if long is None
          else {"start_token": long[0], "end_token": long[1], "candidate_index": long[0] // 10})
    return {"long_answer": la, "yes_no_answer": yes_no,
            "short_answers": [{"start_token": s, "end_token": e} for s, e in shorts]}


def line(example_id, annotations, **extra):
    return json.dumps({"example_id": example_id, "question_text": "q?", "document_text": DOC,
                       "long_answer_candidates": CANDIDATES, "annotations": annotations, **extra})


GOLD_LINES = [
    line(1, [ann((0, 10), [(2, 4)])], question_form="seen"),
    line(2, [ann((10, 20))], question_form="seen"),
    line(3, [ann((20, 30), [(22, 24)])], question_form="held_out"),
    line(4, [ann()] * 5, question_form="held_out"),
]
PREDICTIONS = {
    "1_long": "0:10", "1_short": "2:4",    # TP, TP
    "2_long": "10:20", "2_short": "5:6",   # TP, FP (no short answer exists)
    "3_long": "", "3_short": "22:24",      # FN, TP
    "4_long": "", "4_short": "YES",        # nothing, FP
}
# seen: TP 3, FP 1, FN 0 -> 6 / 7; held_out: TP 1, FP 1, FN 1 -> 2 / 4


@pytest.fixture
def gold_path(tmp_path):
    p = tmp_path / "gold.jsonl"
    p.write_text("\n".join(GOLD_LINES) + "\n")
    return p


def test_each_value_scores_its_own_documents(gold_path):
    groups = scores_by_value(PREDICTIONS, load_gold(gold_path), field_values(gold_path, "question_form"))
    assert list(groups) == ["held_out", "seen"]
    assert groups["seen"]["num_documents"] == 2 and groups["held_out"]["num_documents"] == 2
    assert groups["seen"]["micro_f1"] == pytest.approx(6 / 7)
    assert groups["held_out"]["micro_f1"] == pytest.approx(0.5)
    for g in groups.values():
        lo, hi = g["ci"]
        assert 0.0 <= lo <= g["micro_f1"] <= hi <= 1.0
    # The same as the metric on the group's documents alone.
    gold = load_gold(gold_path)
    seen = {eid: gold[eid] for eid in ("1", "2")}
    alone = score({r: p for r, p in PREDICTIONS.items() if r.split("_")[0] in seen}, seen)
    assert groups["seen"]["micro_f1"] == pytest.approx(alone["micro_f1"])


def test_split_scores_reads_the_gold_file(gold_path):
    split = split_scores(PREDICTIONS, gold_path, "question_form")
    assert split["field"] == "question_form"
    assert {v: g["micro_f1"] for v, g in split["groups"].items()} == pytest.approx({"held_out": 0.5, "seen": 6 / 7})
    text = format_split(split)
    assert "split by question_form" in text and "0.8571" in text and "0.5000" in text


def test_a_line_without_the_field_names_file_line_and_field(tmp_path):
    path = tmp_path / "gold.jsonl"
    path.write_text(GOLD_LINES[0] + "\n" + line(2, [ann((10, 20))]) + "\n")
    with pytest.raises(NQFormatError, match=r"gold\.jsonl:2: field 'question_form': missing"):
        field_values(path, "question_form")
    path.write_text(line(2, [ann((10, 20))], question_form=3) + "\n")
    with pytest.raises(NQFormatError, match=r"gold\.jsonl:1: field 'question_form': expected a non-empty string"):
        field_values(path, "question_form")


def test_blank_lines_are_skipped_as_the_reader_skips_them(tmp_path):
    path = tmp_path / "gold.jsonl"
    path.write_text(GOLD_LINES[0] + "\n\n" + GOLD_LINES[2] + "\n\n")
    assert field_values(path, "question_form") == ["seen", "held_out"]


def test_rows_are_checked_as_scoring_checks_them(gold_path):
    gold = load_gold(gold_path)
    with pytest.raises(ValueError, match="missing row"):
        scores_by_value({"1_long": ""}, gold, field_values(gold_path, "question_form"))
    with pytest.raises(ValueError, match="3 group values for 4 gold documents"):
        scores_by_value(PREDICTIONS, gold, ["seen"] * 3)

"""Every test row of the answers benchmark says its score on the question forms training saw and on those it
did not, where the gold says each question's form (nq-shaped's pages); a corpus whose lines carry no form
gets no split, and a gold file that says it for some lines and not others is refused by line."""

from __future__ import annotations

import pytest

from solution.data.nq import NQFormatError
from solution.experiments.answers.figures import form_split, forms_of
from solution.experiments.answers.variant import with_test
from tests.scoring.test_split_by import GOLD_LINES, PREDICTIONS, ann, line

# One annotation a page (the NQ package's figures, also on every row, take one count of annotators a file).
ONE_ANNOTATION = [*GOLD_LINES[:3], line(4, [ann()], question_form="held_out")]


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_test_row_carries_the_split_by_question_form(tmp_path):
    gold = write(tmp_path, "gold.jsonl", ONE_ANNOTATION)
    row = with_test({"_counts": {}}, PREDICTIONS, PREDICTIONS, gold)
    groups = row["test_by_question_form"]
    assert {form: g["num_documents"] for form, g in groups.items()} == {"held_out": 2, "seen": 2}
    assert groups["seen"]["micro_f1"] == pytest.approx(6 / 7) and groups["held_out"]["micro_f1"] == pytest.approx(0.5)
    assert row["num_test_documents"] == 4  # the whole split's figures stay beside it


def test_a_corpus_without_forms_gets_no_split(tmp_path):
    gold = write(tmp_path, "gold.jsonl", [line(i, [ann((0, 10))]) for i in (1, 2)])
    predictions = {"1_long": "0:10", "1_short": "", "2_long": "", "2_short": ""}
    assert forms_of(gold) is None and form_split("test", predictions, gold) == {}
    assert "test_by_question_form" not in with_test({"_counts": {}}, predictions, predictions, gold)


def test_forms_on_some_lines_only_are_refused_by_line(tmp_path):
    gold = write(tmp_path, "gold.jsonl", [GOLD_LINES[0], line(2, [ann((10, 20))])])
    with pytest.raises(NQFormatError, match=r"gold\.jsonl:2: field 'question_form': missing"):
        forms_of(gold)

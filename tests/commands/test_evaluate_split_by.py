"""`python -m solution.evaluate --split-by FIELD` end to end on a tiny nq-shaped corpus: the score of the test
questions asked in forms training saw, and of those asked in forms it never saw, each with its interval."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT


def run(*args):
    return subprocess.run([sys.executable, "-m", *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("nq-shaped")
    proc = run("solution.synth", "--out", out, "--profile", "nq-shaped", "--seed", "0", "--num-train", "2",
               "--num-dev", "6", "--num-test", "6")
    assert proc.returncode == 0, proc.stderr
    return out


def _rows(obj: dict) -> list:
    """Rows answering the document as its first annotator with an answer did (every row right), else blank."""
    anns = obj["annotations"]
    long = next((a["long_answer"] for a in anns if a["long_answer"]["candidate_index"] >= 0), None)
    short = next((a for a in anns if a["short_answers"] or a["yes_no_answer"] != "NONE"), None)
    short_text = "" if short is None else (short["yes_no_answer"] if short["yes_no_answer"] != "NONE" else
                                           f"{short['short_answers'][0]['start_token']}:{short['short_answers'][0]['end_token']}")
    eid = obj["example_id"]
    return [f"{eid}_long,{long['start_token']}:{long['end_token']}" if long else f"{eid}_long,",
            f"{eid}_short,{short_text}"]


def test_split_by_question_form_scores_seen_and_held_out_apart(corpus, tmp_path):
    gold = corpus / "simplified-nq-test-gold.jsonl"
    lines = [json.loads(x) for x in gold.read_text().splitlines()]
    forms = [o["question_form"] for o in lines]
    assert set(forms) == {"seen", "held_out"}  # seed 0's six test pages have both
    # Right answers on the seen questions, blanks on the held-out ones: F1 1 against 0.
    rows = [r for o in lines for r in (_rows(o) if o["question_form"] == "seen"
                                       else [f"{o['example_id']}_long,", f"{o['example_id']}_short,"])]
    sub = tmp_path / "sub.csv"
    sub.write_text("example_id,PredictionString\n" + "\n".join(rows) + "\n")

    proc = run("solution.evaluate", "--submission", sub, "--gold", gold, "--split-by", "question_form", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["split_by"]["field"] == "question_form"
    groups = result["split_by"]["groups"]
    assert {v: g["num_documents"] for v, g in groups.items()} == {v: forms.count(v) for v in ("held_out", "seen")}
    assert groups["seen"]["micro_f1"] == 1.0 and groups["seen"]["ci"][1] == 1.0
    assert groups["held_out"]["micro_f1"] == 0.0
    assert result["num_examples"] == 6  # the overall figure is still there

    proc = run("solution.evaluate", "--submission", sub, "--gold", gold, "--split-by", "question_form")
    assert proc.returncode == 0, proc.stderr
    assert "overall" in proc.stdout and "split by question_form:" in proc.stdout
    assert any(x.split()[:3] == ["seen", str(forms.count("seen")), "1.0000"] for x in proc.stdout.splitlines())


def test_a_gold_line_without_the_field_is_an_error_naming_file_line_and_field(corpus, tmp_path):
    lines = (corpus / "simplified-nq-test-gold.jsonl").read_text().splitlines()
    broken = [json.loads(x) for x in lines]
    del broken[2]["question_form"]
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps(o) + "\n" for o in broken))
    sub = tmp_path / "sub.csv"
    sub.write_text("example_id,PredictionString\n" + "".join(f"{o['example_id']}_{k},\n" for o in broken
                                                             for k in ("long", "short")))
    proc = run("solution.evaluate", "--submission", sub, "--gold", gold, "--split-by", "question_form")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (f"error: {gold}:3: field 'question_form': missing: splitting the score by it "
                                   "needs it on every gold line")
    # Without --split-by the same file scores: the field is optional (real Kaggle lines have none).
    assert run("solution.evaluate", "--submission", sub, "--gold", gold).returncode == 0


def test_split_by_is_refused_where_it_would_be_ignored(corpus, tmp_path):
    gold = corpus / "simplified-nq-test-gold.jsonl"
    sub = tmp_path / "sub.csv"
    sub.write_text("example_id,PredictionString\n")
    proc = run("solution.evaluate", "--submission", sub, "--gold", gold, "--metric", "mlebench",
               "--split-by", "question_form")
    assert proc.returncode == 2 and "--split-by question_form: not read by --metric mlebench" in proc.stderr

"""The submission validator: valid files pass; hand-broken ones fail naming each offending id."""

import pytest
from conftest import nq_line, write_jsonl

from solution import evaluate


@pytest.fixture
def test_file(tmp_path):
    # Candidates of the default document: <P> 6:18, <Ul> 18:27, <Li> 19:23, <Li> 23:27, <P> 27:32.
    return write_jsonl(tmp_path / "test.jsonl", [nq_line(example_id="11", annotations=False),
                                                 nq_line(example_id="-22", annotations=False)])


def submit(tmp_path, rows):
    path = tmp_path / "submission.csv"
    path.write_text("example_id,PredictionString\n" + "".join(f"{k},{v}\n" for k, v in rows.items()))
    return path


VALID = {"11_long": "6:18", "11_short": "12:14", "-22_long": "", "-22_short": ""}


def run(capsys, csv_path, test_path):
    code = evaluate.main(["--validate", str(csv_path), "--test", str(test_path)])
    return code, capsys.readouterr()


def test_valid_submission_passes(tmp_path, test_file, capsys):
    code, out = run(capsys, submit(tmp_path, VALID), test_file)
    assert code == 0 and "valid submission" in out.out
    code, _ = run(capsys, submit(tmp_path, {**VALID, "11_short": "YES", "-22_short": "12:14 20:21"}), test_file)
    assert code == 0


@pytest.mark.parametrize("change,message", [
    ({"-22_short": None}, "-22_short: missing"),
    ({"11_long": "7:18"}, "11_long: 7:18 is not a long-answer candidate"),
    ({"11_long": "YES"}, "11_long: YES belongs in the short row only"),
    ({"11_short": "30:99"}, "11_short: 30:99 is not a span inside the document"),
    ({"33_long": ""}, "33_long: not an example of"),
])
def test_broken_submissions_name_the_id(change, message, tmp_path, test_file, capsys):
    rows = {**VALID, **change}
    rows = {k: v for k, v in rows.items() if v is not None}
    code, out = run(capsys, submit(tmp_path, rows), test_file)
    assert code == 1 and message in out.err, out.err


def test_every_problem_is_listed(tmp_path, test_file, capsys):
    code, out = run(capsys, submit(tmp_path, {"11_long": "YES", "11_short": "0:999"}), test_file)
    assert code == 1
    for needle in ("11_long: YES", "11_short: 0:999", "-22_long: missing", "-22_short: missing"):
        assert needle in out.err


def test_unreadable_submission_is_a_user_error(tmp_path, test_file, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("id,pred\n11_long,\n")
    code, out = run(capsys, bad, test_file)
    assert code == 2 and "error:" in out.err and "header" in out.err


def test_validator_counts_tokens_as_nq_does(tmp_path, capsys):
    # A double space is an empty NQ token: this document has 7 tokens (split() would count 6).
    doc = "T <P> a  b c </P>"
    cands = [{"start_token": 1, "end_token": 7, "top_level": True}]
    test_path = write_jsonl(tmp_path / "t.jsonl", [nq_line(example_id="5", document=doc, candidates=cands,
                                                           annotations=False)])
    rows = {"5_long": "1:7", "5_short": "5:6"}
    code, _ = run(capsys, submit(tmp_path, rows), test_path)
    assert code == 0
    code, out = run(capsys, submit(tmp_path, {**rows, "5_short": "6:8"}), test_path)
    assert code == 1 and "5_short: 6:8 is not a span inside the document (0..7 tokens)" in out.err


def test_a_row_id_with_a_leading_space_is_refused_as_mle_bench_refuses_it(tmp_path, test_file, capsys):
    from solution.scoring import mlebench

    path = tmp_path / "submission.csv"
    path.write_text("example_id,PredictionString\n 11_long,6:18\n11_short,12:14\n-22_long,\n-22_short,\n")
    code, out = run(capsys, path, test_file)
    assert code != 0, out
    assert "11_long: written ' 11_long' on line 2; MLE-bench's grader compares row ids exactly" in out.out + out.err
    gold = write_jsonl(tmp_path / "gold.jsonl", [nq_line(example_id="11"), nq_line(example_id="-22")])
    with pytest.raises(ValueError, match="row ids are not the gold's"):  # the grader's own refusal, for reference
        mlebench.grade(mlebench.read_submission_table(path), mlebench.read_answers(gold))

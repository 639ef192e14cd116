"""`solution.evaluate`'s inputs, checked before any scoring: a pipe or a folder where a file belongs, a scores
line that is not a record or holds a field of the wrong type, gold the NQ package cannot take (no annotation,
two ids that are one integer), scores that miss gold documents, options that one mode does not read,
byte-offset predictions against token-only gold. Each is one line `error: ...` naming the file, line and
field, exit 2; nothing hangs or ends in a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import signal

import pytest
from conftest import nq_line, write_jsonl

from solution import evaluate


@contextlib.contextmanager
def at_most(seconds: int):
    """Fail instead of hanging: opening a FIFO for reading blocks until a writer comes, and none will."""
    def stop(*_):
        raise TimeoutError(f"still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def record(example_id, **fields) -> dict:
    """A `submission.predict --scores-out` line."""
    return {"example_id": example_id, "raw_long": "6:18", "raw_short": "12:14", "answer_type": "SHORT", "score": 1.0,
            "short_score": 0.5, "yes_score": 0.0, "no_score": 0.0, **fields}


@pytest.fixture
def gold(tmp_path):
    return write_jsonl(tmp_path / "gold.jsonl", [nq_line("1", long=0, shorts=[(12, 14)]), nq_line("2")])


# ---------------------------------------------------------------------------
# A pipe, a device or a folder where a file belongs


@pytest.mark.parametrize("option", ["--scores", "--gold"])
@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_tune_refuses_a_pipe_device_or_folder_before_reading(tmp_path, gold, capsys, option, kind):
    scores = write_jsonl(tmp_path / "scores.jsonl", [record("1"), record("2")])
    bad = {"folder": tmp_path, "device": "/dev/zero"}.get(kind, tmp_path / "pipe")
    if kind == "fifo":
        os.mkfifo(bad)
    paths = {"--scores": str(scores), "--gold": str(gold), option: str(bad)}
    with at_most(5):
        code = evaluate.main(["--tune", "--scores", paths["--scores"], "--gold", paths["--gold"]])
    err = one_error_line(capsys)
    said = {"fifo": "a pipe (FIFO), not a regular file", "folder": "a folder, not a file",
            "device": "a device or a socket, not a regular file"}[kind]
    assert code == 2 and f"{option} {bad}: {said}" in err, err


@pytest.mark.parametrize("argv", [["--submission", "{bad}", "--gold", "{gold}"],
                                  ["--metric", "nq", "--nq-predictions", "{bad}", "--gold", "{gold}"],
                                  ["--validate", "{bad}", "--test", "{gold}"]])
def test_scoring_refuses_a_pipe_before_reading(tmp_path, gold, capsys, argv):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with at_most(5):
        code = evaluate.main([a.format(bad=fifo, gold=gold) for a in argv])
    err = one_error_line(capsys)
    assert code == 2 and f"{argv[-4]} {fifo}" in err, err


def test_a_missing_model_directory_is_named_before_the_scores_are_read(tmp_path, gold, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with at_most(5):
        code = evaluate.main(["--tune", "--scores", str(fifo), "--gold", str(gold), "--model", str(tmp_path / "nope")])
    assert code == 2 and "--scores" in one_error_line(capsys)


# ---------------------------------------------------------------------------
# Scores lines


@pytest.mark.parametrize("line, field", [
    ("5", "expected a JSON object"),
    ("null", "expected a JSON object"),
    ('"x"', "expected a JSON object"),
    ("[1]", "expected a JSON object"),
    (json.dumps(record("2", score=None)), "field 'score'"),
    (json.dumps(record("2", score="1.0")), "field 'score'"),
    (json.dumps(record("2", short_score=True)), "field 'short_score'"),
    (json.dumps(record("2", raw_long=5)), "field 'raw_long'"),
    (json.dumps(record("2", raw_short="12-14")), "field 'raw_short'"),
    (json.dumps(record("2", answer_type=None)), "field 'answer_type'"),
    (json.dumps(record(None)), "field 'example_id'"),
    (json.dumps(record("1")), "example_id 1 is also on line 1"),
    (json.dumps(record("2", yes_score=[])), "field 'yes_score'"),
    (json.dumps(record("2", polarity_margin="2.5")), "field 'polarity_margin'"),
    (json.dumps(record("2")).replace('"score": 1.0', '"score": 1' + "0" * 400), "digits"),
    (json.dumps(record("2")).replace('"score": 1.0', '"score": 1e400'), "beyond a double's range"),
])
def test_a_bad_scores_line_is_one_line_naming_file_line_and_field(tmp_path, gold, capsys, line, field):
    scores = tmp_path / "scores.jsonl"
    scores.write_text(json.dumps(record("1")) + "\n" + line + "\n")
    assert evaluate.main(["--tune", "--scores", str(scores), "--gold", str(gold)]) == 2
    err = one_error_line(capsys)
    assert f"{scores} line 2" in err and field in err, err


def test_kaggle_tuning_says_how_many_gold_documents_lack_scores_and_what_to_do(tmp_path, gold, capsys):
    scores = write_jsonl(tmp_path / "scores.jsonl", [record("1")])
    assert evaluate.main(["--tune", "--scores", str(scores), "--gold", str(gold)]) == 2
    err = one_error_line(capsys)
    assert "1 of the 2 gold documents have no scores (2)" in err and "--scores-out" in err, err


# ---------------------------------------------------------------------------
# Options one mode does not read


@pytest.mark.parametrize("argv, said", [
    (["--metric", "nq", "--nq-predictions", "{p}", "--submission", "{p}", "--gold", "{g}"], "--submission"),
    (["--submission", "{p}", "--nq-predictions", "{p}", "--gold", "{g}"], "--nq-predictions"),
    (["--metric", "mlebench", "--submission", "{p}", "--nq-predictions", "{p}", "--gold", "{g}"], "--nq-predictions"),
    (["--tune", "--scores", "{p}", "--submission", "{p}", "--gold", "{g}"], "--submission"),
    (["--validate", "{p}", "--test", "{g}", "--gold", "{g}"], "--gold"),
    (["--submission", "{p}", "--gold", "{g}", "--model", "{p}"], "--model"),
])
def test_an_option_the_mode_does_not_read_is_refused_not_dropped(tmp_path, gold, capsys, argv, said):
    other = tmp_path / "other"
    other.write_text("")
    assert evaluate.main([a.format(p=other, g=gold) for a in argv]) == 2
    err = one_error_line(capsys)
    assert said in err and "not read" in err, err


# ---------------------------------------------------------------------------
# --metric nq: what the package cannot tell, said before it is asked


@pytest.fixture
def nq_package():
    pytest.importorskip("natural_questions")


def nq_predictions(path, entries):
    path.write_text(json.dumps({"predictions": entries}))
    return path


def test_nq_gold_with_no_annotation_is_one_line_naming_file_line_and_field(tmp_path, nq_package, capsys):
    from solution.answers.nq_format import prediction_entry

    empty = nq_line("2")
    empty["annotations"] = []
    gold = write_jsonl(tmp_path / "gold.jsonl", [nq_line("1", long=0), empty])
    pred = nq_predictions(tmp_path / "pred.json", [prediction_entry("1", "6:18", "", 1, 1),
                                                   prediction_entry("2", "", "", 0, 0)])
    assert evaluate.main(["--metric", "nq", "--nq-predictions", str(pred), "--gold", str(gold)]) == 2
    err = one_error_line(capsys)
    assert f"{gold}:2" in err and "annotations" in err and "no annotation" in err, err


def test_nq_gold_ids_that_are_one_integer_are_refused_naming_both_lines(tmp_path, nq_package, capsys):
    from solution.answers.nq_format import prediction_entry

    gold = write_jsonl(tmp_path / "gold.jsonl", [nq_line("77", long=0), nq_line("5"), nq_line("077")])
    pred = nq_predictions(tmp_path / "pred.json", [prediction_entry("77", "6:18", "", 1, 1),
                                                   prediction_entry("5", "", "", 0, 0)])
    assert evaluate.main(["--metric", "nq", "--nq-predictions", str(pred), "--gold", str(gold)]) == 2
    err = one_error_line(capsys)
    assert f"{gold}:3" in err and "077" in err and "line 1" in err and "77" in err, err
    scores = write_jsonl(tmp_path / "scores.jsonl", [record("77"), record("5"), record("077")])
    assert evaluate.main(["--tune", "--metric", "nq", "--scores", str(scores), "--gold", str(gold)]) == 2
    assert "line 1" in one_error_line(capsys)


def test_nq_scores_ids_that_are_one_integer_are_refused_naming_both_lines(tmp_path, nq_package, capsys):
    gold = write_jsonl(tmp_path / "gold.jsonl", [nq_line("77", long=0), nq_line("5")])
    scores = write_jsonl(tmp_path / "scores.jsonl", [record("77"), record("5"), record("077")])
    assert evaluate.main(["--tune", "--metric", "nq", "--scores", str(scores), "--gold", str(gold)]) == 2
    err = one_error_line(capsys)
    assert f"{scores} line 3" in err and "077" in err and "line 1" in err, err


def test_nq_tuning_says_how_many_gold_documents_lack_scores_and_what_to_do(tmp_path, nq_package, capsys):
    gold = write_jsonl(tmp_path / "gold.jsonl", [nq_line(str(i), long=0) for i in range(10)])
    scores = write_jsonl(tmp_path / "scores.jsonl", [record(str(i)) for i in range(6)])
    assert evaluate.main(["--tune", "--metric", "nq", "--scores", str(scores), "--gold", str(gold)]) == 2
    err = one_error_line(capsys)
    assert "4 of the 10 gold documents have no scores (6, 7, 8, 9)" in err and "--scores-out" in err, err
    assert "not equal" not in err


def test_nq_byte_offset_predictions_are_refused_saying_the_gold_has_tokens_only(tmp_path, nq_package, capsys):
    from solution.answers.nq_format import prediction_entry

    gold = write_jsonl(tmp_path / "gold.jsonl", [nq_line("1", long=0), nq_line("2")])
    by_bytes = prediction_entry("1", "", "", 1, 1)
    by_bytes["long_answer"] = {"start_token": -1, "end_token": -1, "start_byte": 40, "end_byte": 90}
    pred = nq_predictions(tmp_path / "pred.json", [by_bytes, prediction_entry("2", "", "", 0, 0)])
    assert evaluate.main(["--metric", "nq", "--nq-predictions", str(pred), "--gold", str(gold)]) == 2
    err = one_error_line(capsys)
    assert "predictions[0].long_answer" in err and "byte" in err and "token" in err, err

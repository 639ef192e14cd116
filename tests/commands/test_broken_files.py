"""A corpus of broken input files through the three commands users run: training, the submission
and the scorer. Each must end in a named error (file, line, field) or a counted, reported skip;
never a traceback, and a submission never loses a row it could write."""

import csv
import gzip
import json

import pytest
from conftest import nq_line

GOOD = [nq_line(example_id=str(1000 + i), long=0, shorts=[(12, 14)]) for i in range(3)]


def lines(*objs) -> bytes:
    return b"".join((o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n" for o in objs)


def with_(**changes):
    obj = json.loads(json.dumps(GOOD[0]))
    obj["example_id"] = "2000"
    for dotted, value in changes.items():
        target = obj
        *parents, last = dotted.split("__")
        for key in parents:
            target = target[int(key) if key.isdigit() else key]
        target[int(last) if last.isdigit() else last] = value
    return obj


# name -> (file bytes, field the error must name, id a submission can still write blank or None)
BROKEN = {
    "malformed_json": (lines(GOOD[0], b'{"example_id": "2000", "question_text": "x", ', GOOD[1]), "<json>", "2000"),
    "missing_question": (lines(GOOD[0], {k: v for k, v in with_().items() if k != "question_text"}), "question_text", "2000"),
    "document_not_text": (lines(GOOD[0], with_(document_text=42)), "document_text", "2000"),
    "empty_document": (lines(GOOD[0], with_(document_text="   ")), "document_text", "2000"),
    "candidate_outside": (lines(GOOD[0], with_(long_answer_candidates__0__end_token=10**6)), "long_answer_candidates[0]", "2000"),
    "short_start_after_end": (lines(GOOD[0], with_(annotations__0__short_answers__0__start_token=9,
                                                   annotations__0__short_answers__0__end_token=4)),
                              "annotations[0].short_answers[0]", "2000"),
    "candidate_index_mismatch": (lines(GOOD[0], with_(annotations__0__long_answer__candidate_index=2)),
                                 "annotations[0].long_answer.candidate_index", "2000"),
    "duplicate_id": (lines(GOOD[0], GOOD[1], GOOD[0]), "example_id", None),
    "id_not_integer": (lines(GOOD[0], with_(example_id=1.5)), "example_id", None),
    "not_utf8": (lines(GOOD[0], b'{"example_id": "2000", "question_text": "caf\xe9"}', GOOD[1]), "<bytes>", "2000"),
    "empty_file": (b"", "<file>", None),
    "truncated_gz": (gzip.compress(lines(*[nq_line(example_id=str(3000 + i), long=0, shorts=[(12, 14)])
                                           for i in range(90)]))[:-40], "<gzip>", None),
}


def write(tmp_path, name):
    data, field, blank_id = BROKEN[name]
    path = tmp_path / (f"{name}.jsonl.gz" if name.endswith("gz") else f"{name}.jsonl")
    path.write_bytes(data)
    return path, field, blank_id


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_training_names_file_line_and_field(name, tmp_path, capsys):
    from solution import train

    path, field, _ = write(tmp_path, name)
    code = train.main(["--config", "configs/train/tiny.yaml", "--train_file", str(path), "--dev_file", "null",
                       "--output_dir", str(tmp_path / "run"), "--cache_dir", str(tmp_path / "cache"),
                       "--max_train_examples", "null", "--disable_tqdm", "true"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"error: {path}:" in err and f"field '{field}'" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_submission_stays_whole_or_names_the_error(name, model_dir, tmp_path, capsys):
    import submission.predict as predict

    path, field, blank_id = write(tmp_path, name)
    out = tmp_path / "submission.csv"
    code = predict.main(["--model", str(model_dir), "--input", str(path), "--output", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if name == "empty_file":
        assert code != 0 and f"{path}:" in err and "no examples" in err
        return
    assert code == 1, err  # something was skipped or is missing: the exit code says so
    rows = dict(list(csv.reader(out.open()))[1:])
    first_good = "3000" if name == "truncated_gz" else "1000"
    assert f"{first_good}_long" in rows  # the good lines before the bad one are always there
    if blank_id:
        assert rows[f"{blank_id}_long"] == rows[f"{blank_id}_short"] == ""
    assert all(k.endswith(("_long", "_short")) for k in rows) and len(rows) % 2 == 0
    assert f"{path}" in err and (f"'{field}'" in err or "FAILED" in err or "ERROR" in err), err


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_scorer_names_the_broken_gold_file(name, tmp_path, capsys):
    from solution import evaluate

    path, field, _ = write(tmp_path, name)
    sub = tmp_path / "sub.csv"
    sub.write_text("example_id,PredictionString\n1000_long,\n1000_short,\n")
    code = evaluate.main(["--submission", str(sub), "--gold", str(path)])
    err = capsys.readouterr().err
    assert code != 0 and f"{path}:" in err and "Traceback" not in err, err


def test_training_names_a_broken_trainer_state_when_resuming(tmp_path, capsys):
    """A trainer_state.json without its step: one line naming the file and the field, no KeyError traceback."""
    from solution import train

    ckpt = tmp_path / "run" / "checkpoint-2"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({"format": "nq-bert-qa-checkpoint/1", "epoch": 0,
                                                         "batches_into_epoch": 2, "scheduler": {}}))
    code = train.main(["--config", "configs/train/tiny.yaml", "--data_source", "dummy", "--dummy_num_windows", "16",
                       "--output_dir", str(tmp_path / "run"), "--resume", str(ckpt), "--disable_tqdm", "true"])
    err = capsys.readouterr().err
    assert code == 2 and err == f"error: {ckpt / 'trainer_state.json'}: field 'step' is missing\n", err


def test_a_gz_cut_at_60_percent_keeps_the_rows_of_every_document_read_before_the_cut(model_dir, tmp_path, capsys):
    """Predict reads 64 documents a chunk: the documents of the chunk the cut falls in were read whole,
    and are written; the error is still reported and the exit code says so."""
    import random
    import zlib

    import submission.predict as predict

    rng = random.Random(0)
    docs = [nq_line(example_id=str(5000 + i), long=0, document="Book - wikipedia <H1> Book </H1> <P> " + " ".join(
        rng.choice(["alpha", "beta", "gamma", "delta", "epsilon", str(i)]) for _ in range(60)) + " . </P>")
        for i in range(10)]
    whole = gzip.compress(lines(*docs))
    cut = whole[: len(whole) * 6 // 10]
    readable = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut)
    num_read = readable.count(b"\n")
    assert 0 < num_read < len(docs)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(cut)
    out = tmp_path / "submission.csv"
    code = predict.main(["--model", str(model_dir), "--input", str(path), "--output", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1 and "ERROR: " in err and f"{path}" in err, err
    rows = dict(list(csv.reader(out.open()))[1:])
    assert sorted(rows) == sorted(f"{5000 + i}_{kind}" for i in range(num_read) for kind in ("long", "short"))


def test_batches_end_with_the_examples_read_before_a_failed_read():
    from solution.data.nq import batches_until_error

    def stream():
        yield from range(5)
        raise ValueError("cut")

    got = []
    with pytest.raises(ValueError, match="cut"):
        for chunk in batches_until_error(stream(), 64):  # predict's chunks: the partial one comes before the error
            got.append(chunk)
    assert got == [[0, 1, 2, 3, 4]]


def test_standard_input_and_pipes_are_said_to_be_unsupported_and_batch_size_0_refused(tmp_path, capsys):
    import os

    import submission.predict as predict
    from solution import lexical

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out = tmp_path / "submission.csv"
    for source, said in (("-", "-: reading standard input is not supported"),
                         (str(fifo), f"{fifo}: a pipe (FIFO), not a regular file")):
        # The model directory does not exist: the input is checked first, before anything loads.
        assert predict.main(["--model", str(tmp_path / "no-model"), "--input", source, "--output", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {said}") and len(err.splitlines()) == 1 and "no such file" not in err, err
        assert lexical.main(["--input", source, "--scores-out", str(tmp_path / "s.jsonl")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {said}") and len(err.splitlines()) == 1, err
    data = tmp_path / "test.jsonl"
    data.write_bytes(lines(GOOD[0]))
    assert predict.main(["--model", str(tmp_path / "no-model"), "--input", str(data), "--output", str(out),
                         "--batch-size", "0"]) == 2
    assert capsys.readouterr().err == "error: --batch-size must be >= 1, got 0\n"
    assert not out.exists()


@pytest.mark.parametrize("raw", ['1.5', '"12,34"', '"7 8"', '1e3'])
def test_an_id_that_is_not_a_whole_integer_is_not_recovered_as_its_first_digits(raw, model_dir, tmp_path, capsys):
    import submission.predict as predict
    from solution.data.nq import recover_example_id

    line = json.dumps(with_(example_id=0)).replace('"example_id": 0', f'"example_id": {raw}')
    assert recover_example_id(line) is None
    assert recover_example_id('{"example_id": "-12", "x": 1}') == "-12" == recover_example_id('{"example_id": -12}')
    path = tmp_path / "test.jsonl"
    path.write_bytes(lines(GOOD[0], line.encode()))
    out = tmp_path / "submission.csv"
    assert predict.main(["--model", str(model_dir), "--input", str(path), "--output", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "ERROR: lines [2] have no readable example_id" in err, err
    assert sorted(dict(list(csv.reader(out.open()))[1:])) == ["1000_long", "1000_short"]

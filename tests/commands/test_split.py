"""Stratified, streaming train/dev split of a simplified-NQ training file."""

import gzip
import json
import math
from collections import Counter

import pytest

from solution import split
from solution.data.nq import NQFormatError, read_examples
from solution.data.synth import corpus as synth_corpus

N = 400


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    """400 synthetic training lines: NONE/SHORT/LONG plus a few YES (4) and NO (2)."""
    out = tmp_path_factory.mktemp("synth")
    synth_corpus.write_corpus(out, seed=3, num_train=N, num_dev=1, num_test=1, min_words=200, max_words=400)
    return out / "simplified-nq-train.jsonl"


def _lines(path):
    return path.read_bytes().splitlines(keepends=True)


def _types(path):
    return Counter(ex.answer_type for ex in read_examples(path))


def test_counts_add_up_and_dev_fraction_is_respected(train_file, tmp_path):
    result = split.split_file(train_file, tmp_path, dev_fraction=0.1, seed=0)
    d = result.as_dict()
    assert d["train"]["total"] + d["dev"]["total"] == d["total"]["total"] == N
    assert d["dev"]["total"] == math.ceil(0.1 * N)
    assert _types(tmp_path / split.TRAIN_NAME) == result.train
    assert _types(tmp_path / split.DEV_NAME) == result.dev
    assert result.stratified and not result.in_train_only


def test_stratification_keeps_each_class_share(train_file, tmp_path):
    result = split.split_file(train_file, tmp_path, dev_fraction=0.25, seed=0)
    total = result.train + result.dev
    for cls, n in total.items():
        assert abs(result.dev[cls] - 0.25 * n) <= 1, (cls, result.dev[cls], n)


def test_raw_lines_are_copied_byte_for_byte_in_order(train_file, tmp_path):
    split.split_file(train_file, tmp_path, dev_fraction=0.1, seed=0)
    source = _lines(train_file)
    train, dev = _lines(tmp_path / split.TRAIN_NAME), _lines(tmp_path / split.DEV_NAME)
    assert sorted(train + dev) == sorted(source)
    position = {line: i for i, line in enumerate(source)}
    for part in (train, dev):  # each output keeps the input's order
        assert [position[line] for line in part] == sorted(position[line] for line in part)


def test_same_seed_same_split_other_seed_other_split(train_file, tmp_path):
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        split.split_file(train_file, tmp_path / name, dev_fraction=0.1, seed=seed)
    dev = {name: (tmp_path / name / split.DEV_NAME).read_bytes() for name in "abc"}
    assert dev["a"] == dev["b"] != dev["c"]


def test_gzip_input_gives_the_same_split(train_file, tmp_path):
    gz = tmp_path / "simplified-nq-train.jsonl.gz"
    gz.write_bytes(gzip.compress(train_file.read_bytes()))
    split.split_file(train_file, tmp_path / "plain", dev_fraction=0.1, seed=0)
    split.split_file(gz, tmp_path / "gz", dev_fraction=0.1, seed=0)
    for name in (split.TRAIN_NAME, split.DEV_NAME):
        assert (tmp_path / "gz" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes()


def _with_bad_line(train_file, tmp_path, line_no=7):
    lines = _lines(train_file)
    lines.insert(line_no - 1, b'{"example_id": 1, "question_text": \n')
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def test_skip_mode_counts_the_bad_line_and_writes_it_nowhere(train_file, tmp_path, capsys):
    bad = _with_bad_line(train_file, tmp_path)
    split.main(["--input", str(bad), "--out", str(tmp_path / "out"), "--on-error", "skip", "--json"])
    report = json.loads(capsys.readouterr().out)  # --json: exactly one JSON object on stdout
    assert report["skipped"] == 1 and report["lines"] == N + 1
    assert report["total"]["total"] == N
    written = _lines(tmp_path / "out" / split.TRAIN_NAME) + _lines(tmp_path / "out" / split.DEV_NAME)
    assert len(written) == N and b'"question_text": \n' not in written


def test_raise_mode_names_file_and_line(train_file, tmp_path, capsys):
    bad = _with_bad_line(train_file, tmp_path, line_no=7)
    with pytest.raises(NQFormatError) as exc:
        split.split_file(bad, tmp_path / "out", seed=0)
    assert exc.value.line == 7 and exc.value.path == str(bad)
    with pytest.raises(SystemExit) as exit_:
        split.main(["--input", str(bad), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: ") and f"{bad}:7:" in err and "Traceback" not in err
    assert not (tmp_path / "out" / split.TRAIN_NAME).exists()


def test_a_class_of_one_goes_to_train(train_file, tmp_path):
    # Keep one NO line only: sklearn cannot stratify a class of one, so it stays in train.
    lines, kept_no = _lines(train_file), []
    for line in lines:
        if json.loads(line)["annotations"][0]["yes_no_answer"] == "NO":
            kept_no.append(line)
    path = tmp_path / "one-no.jsonl"
    path.write_bytes(b"".join(line for line in lines if line not in kept_no[1:]))
    result = split.split_file(path, tmp_path / "out", dev_fraction=0.2, seed=0)
    assert result.in_train_only == ["NO"] and result.train["NO"] == 1 and result.dev["NO"] == 0
    assert kept_no[0] in _lines(tmp_path / "out" / split.TRAIN_NAME)


def test_table_output(train_file, tmp_path, capsys):
    split.main(["--input", str(train_file), "--out", str(tmp_path), "--dev-fraction", "0.1"])
    out = capsys.readouterr().out
    assert "none skipped" in out and out.count("\n") >= 7
    assert any(line.split()[:4] == ["total", str(N - 40), "40", str(N)] for line in out.splitlines())


@pytest.mark.parametrize("args, message", [
    (["--input", "/no/such/file.jsonl"], "no such file"),
    (["--dev-fraction", "0"], "between 0 and 1"),
    (["--dev-fraction", "1.0"], "between 0 and 1"),
])
def test_clear_errors_exit_2(train_file, tmp_path, capsys, args, message):
    argv = ["--input", str(train_file), "--out", str(tmp_path)] + args
    with pytest.raises(SystemExit) as exc:
        split.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("error: ") and message in err


def test_refuses_to_overwrite_its_input(train_file, tmp_path, capsys):
    with pytest.raises(SystemExit):
        split.main(["--input", str(train_file), "--out", str(train_file.parent)])
    assert "is the same file as --input" in capsys.readouterr().err

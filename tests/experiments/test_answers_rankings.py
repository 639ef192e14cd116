"""The answers benchmark's meaning rankings of the training pages (`corpus.rankings_corpus`) cost seconds a
page: a file of an earlier run is kept only when its header names these very pages (the training file's
digest and page count) and the meaning ranking; any other is ranked again, with stage 2's settings."""

from __future__ import annotations

import json

from solution.common.fsutil import file_digest
from solution.experiments.answers import corpus as corpus_mod


def setup(tmp_path, monkeypatch):
    train = tmp_path / "train.jsonl"
    train.write_text('{"example_id": 1}\n')
    calls = []
    monkeypatch.setattr(corpus_mod, "run", lambda cmd: calls.append(cmd))
    corpus = {"train": str(train), "train_overrides": ["--max_seq_length", "192"], "num_train_documents": 1}
    return corpus, {"config": "configs/train/nq-profile.yaml"}, calls


def write_header(tmp_path, **header):
    path = tmp_path / "out" / "data-rankings" / "meaning-keep2.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": "nq-window-rankings", **header}) + "\n")
    return path


def test_a_file_ranked_for_these_pages_is_kept_and_any_other_ranked_again(tmp_path, monkeypatch):
    corpus, plan, calls = setup(tmp_path, monkeypatch)
    window = {"first_pass": "meaning", "first_pass_keep_first": 2}
    path = write_header(tmp_path, train_file_sha256=file_digest(corpus["train"]), max_train_examples=1, window=window)
    assert corpus_mod.rankings_corpus(corpus, plan, tmp_path / "out") == str(path) and calls == []
    for stale in ({"train_file_sha256": "0" * 64, "max_train_examples": 1, "window": window},
                  {"train_file_sha256": file_digest(corpus["train"]), "max_train_examples": 2, "window": window},
                  {"train_file_sha256": file_digest(corpus["train"]), "max_train_examples": 1,
                   "window": {**window, "first_pass_keep_first": 0}}):
        write_header(tmp_path, **stale)
        corpus_mod.rankings_corpus(corpus, plan, tmp_path / "out")
    assert len(calls) == 3
    cmd = calls[0]
    assert cmd[:2] == ["-m", "solution.rank_windows"] and cmd[cmd.index("--config") + 1] == plan["config"]
    assert cmd[cmd.index("--max_train_examples") + 1] == "1" and "--max_seq_length" in cmd
    assert cmd[-4:] == ["--first_pass", "meaning", "--first_pass_keep_first", "2"]

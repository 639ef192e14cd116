"""The feature cache (numpy column files): parallel equals serial, the cache key, counted skips, an entry
built whole or not at all, the dummy source."""

import json
import pickle

import pytest
from conftest import nq_line
from helpers import cache_window, corpus, rows

from solution.data.nq import NQFormatError
from solution.windows import dataset as features
from solution.windows.columns import WindowDataset
from solution.windows.dataset import DummyWindows, build_train_features, windows_digest
from solution.windows.sampling import NegativeSampling

WINDOW = cache_window()


def test_parallel_build_equals_serial_and_is_cached(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl")
    serial, s1 = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5), str(tmp_path / "c1"), num_proc=1)
    parallel, s2 = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5), str(tmp_path / "c2"), num_proc=2)
    assert rows(serial) == rows(parallel)
    assert s1["recovered_short"] == s2["recovered_short"] == 12
    logged = []
    again, _ = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5), str(tmp_path / "c1"), log=logged.append)
    assert "reusing cache" in logged[0] and rows(again) == rows(serial)
    # Another setting is another cache entry.
    other, _ = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(1.0), str(tmp_path / "c1"), log=logged.append)
    assert "featurising" in logged[-1] and len(other) > len(serial)


def test_duplicates_across_workers_and_skips(tmp_path, tokenizer):
    dup = nq_line(example_id="1001")  # same id as corpus line 2, lands in the other worker
    path = corpus(tmp_path / "dup.jsonl", bad_line=json.dumps(dup))
    with pytest.raises(NQFormatError, match="duplicate example_id 1001"):
        build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(1.0), str(tmp_path / "c"), num_proc=2)
    path = corpus(tmp_path / "bad.jsonl", bad_line="{broken")
    with pytest.raises(NQFormatError, match=r"bad.jsonl:4: field '<json>'"):
        build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(1.0), str(tmp_path / "c"), num_proc=2)
    assert list((tmp_path / "c").iterdir()) == []  # neither failed build left a folder behind
    _, summary = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(1.0), str(tmp_path / "c"), num_proc=2,
                                      on_error="skip")
    assert summary["skipped"] == 1 and summary["documents"] == 12 and "bad.jsonl:4" in summary["first_errors"][0]


# Digests of `corpus()`'s windows under NegativeSampling(0.5), as the Arrow cache (FEATURES_VERSION 4)
# computed them with one process: batch_size -> digest. A checkpoint records this digest and a resume
# compares it, so the same windows must keep the same digest whatever stores them. Two processes give
# it too: the windows are joined in line order (the Arrow cache joined them in worker order).
ARROW_DIGESTS = {8192: "85cf4f6b96beeb21", 5: "440fdb08a32be201", 1: "41064e3ef6d7e358"}


@pytest.mark.parametrize("num_proc", [1, 2])
def test_windows_digest_is_the_arrow_caches_and_survives_reuse_and_pickling(num_proc, tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl")
    ds, summary = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5), str(tmp_path / "c"),
                                       num_proc=num_proc)
    assert len(ds) == 22 and summary["windows_digest"] == ARROW_DIGESTS[8192]
    for batch in (5, 1):  # batches that end inside a document's windows and at its edge
        assert windows_digest(ds, batch_size=batch) == ARROW_DIGESTS[batch]
    again, reused = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5), str(tmp_path / "c"),
                                         num_proc=num_proc, log=lambda m: None)
    assert reused["windows_digest"] == windows_digest(again) == summary["windows_digest"]
    # A data loader worker started by spawn gets the folder, not a copy of the windows.
    blob = pickle.dumps(ds)
    assert len(blob) < 500 and rows(pickle.loads(blob)) == rows(ds)


def test_a_workers_failure_is_raised_and_leaves_no_cache(tmp_path, tokenizer, monkeypatch):
    original = features._featurize_shard

    def second_worker_fails(shard, job):
        if shard == 1:
            raise ValueError("worker 2 broke")
        return original(shard, job)

    monkeypatch.setattr(features, "_featurize_shard", second_worker_fails)  # the workers are forked: they see it
    path = corpus(tmp_path / "train.jsonl")
    with pytest.raises(RuntimeError, match="a worker failed:(.|\n)*ValueError: worker 2 broke"):
        build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5), str(tmp_path / "c"), num_proc=2)
    assert list((tmp_path / "c").iterdir()) == []


def test_window_dataset_refuses_a_folder_that_is_not_a_cache_entry(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a window cache folder"):
        WindowDataset(tmp_path)


def test_dummy_windows_are_deterministic():
    a, b = DummyWindows(4, 32, 1000, seed=1), DummyWindows(4, 32, 1000, seed=1)
    assert (a[2]["input_ids"] == b[2]["input_ids"]).all() and len(a) == 4
    assert a[0]["input_ids"][0] == 101 and a[0]["input_ids"].shape == (32,)

"""`sampling.sampling_seed`: several training seeds from one featurisation. The kept no-answer windows are
drawn from it instead of the run's seed, and the cache key names the seed drawn from, so runs that differ
only in their own seed share one cache entry and the same windows."""

import json

import pytest
from helpers import cache_window, corpus, rows

from solution.windows.dataset import build_train_features, cache_key
from solution.windows.sampling import NegativeSampling

WINDOW = cache_window()


def _build(tokenizer, tmp_path, sampling, seed):
    logged = []
    ds, summary = build_train_features(str(tmp_path / "train.jsonl"), tokenizer, WINDOW, sampling,
                                       str(tmp_path / "c"), log=logged.append, seed=seed)
    return rows(ds), summary, logged


@pytest.fixture
def train_file(tmp_path):
    corpus(tmp_path / "train.jsonl")
    return tmp_path


def test_run_seeds_share_one_featurisation_under_sampling_seed(train_file, tokenizer):
    tmp_path, path = train_file, str(train_file / "train.jsonl")
    fixed = NegativeSampling(0.5, sampling_seed=0)
    assert cache_key(path, tokenizer, WINDOW, fixed, None, "raise", 0) == \
        cache_key(path, tokenizer, WINDOW, fixed, None, "raise", 1)
    first, s0, _ = _build(tokenizer, tmp_path, fixed, 0)
    second, s1, logged = _build(tokenizer, tmp_path, fixed, 1)
    assert "reusing cache" in logged[0] and first == second  # one featurisation, the same windows
    assert s1["dataset_dir"] == s0["dataset_dir"] and s1["source"]["sampling"]["seed"] == 0


def test_without_it_each_run_seed_draws_its_own_windows(train_file, tokenizer):
    tmp_path, path = train_file, str(train_file / "train.jsonl")
    keys = {cache_key(path, tokenizer, WINDOW, NegativeSampling(0.5), None, "raise", s) for s in (0, 1)}
    assert len(keys) == 2
    zero, _, _ = _build(tokenizer, tmp_path, NegativeSampling(0.5), 0)
    one, _, _ = _build(tokenizer, tmp_path, NegativeSampling(0.5), 1)
    assert zero != one
    # The setting has its effect: run seed 0 drawing from 1 keeps run seed 1's windows, in its cache entry.
    drawn, summary, logged = _build(tokenizer, tmp_path, NegativeSampling(0.5, sampling_seed=1), 0)
    assert drawn == one and "reusing cache" in logged[0]
    assert cache_key(path, tokenizer, WINDOW, NegativeSampling(0.5, sampling_seed=1), None, "raise", 0) == \
        cache_key(path, tokenizer, WINDOW, NegativeSampling(0.5), None, "raise", 1)


def test_key_without_the_setting_is_unchanged():
    # The sampling part of the cache key exactly as it was before the setting existed: every cache entry
    # and every checkpoint's record of its windows stay valid.
    old = ('{"hard_negative_fraction": 0.5, "hard_negatives_file": null, "negative_keep_rate": 0.5, '
           '"question_word_keep_rate": null, "question_word_share": 0.5, "seed": 7, "top_window_keep": 0, '
           '"unanswerable_keep_rate": null}')
    assert json.dumps(NegativeSampling(0.5).key(7), sort_keys=True) == old
    assert json.dumps(NegativeSampling(0.5, sampling_seed=7).key(3), sort_keys=True) == old


def test_draw_seed():
    assert NegativeSampling().draw_seed(5) == 5
    assert NegativeSampling(sampling_seed=0).draw_seed(5) == 0


@pytest.mark.parametrize("value", [-1, 1.5, True, "0"])
def test_a_bad_sampling_seed_is_refused_by_name(value):
    with pytest.raises(ValueError, match="sampling_seed must be an integer >= 0 or null"):
        NegativeSampling(sampling_seed=value)

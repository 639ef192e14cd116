"""Training's negatives ranked by the first pass itself (solution/rank_windows.py, `top_window_ranking_file`):
the ranking pass writes each page's ranking with training's own settings, and featurisation then keeps
exactly the no-answer windows a reader limited to N windows is run on with that first pass, sentence vectors
and all, not the stems ranking that stands in for it. A file made for other windows, a page it lacks, the
setting without `top_window_keep`: each refused before the work, by name. (The encoder is a fake: its vectors
say which sentences answer, so the meaning ranking is known.)"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest
from conftest import nq_line, write_jsonl

from solution import rank_windows
from solution.data.nq import NQFormatError, read_examples
from solution.windows.dataset import build_train_features, window_key
from solution.windows.featurizer import TYPE_ID, Featurizer, WindowConfig
from solution.windows.first_pass import top_window_indices
from solution.windows.sampling import NegativeSampling

WINDOW = WindowConfig(max_seq_length=48, doc_stride=8, max_question_length=12, first_pass="meaning")
SETTINGS = ["--config", "configs/train/tiny.yaml", "--max_seq_length", "48", "--doc_stride", "8",
            "--max_question_length", "12", "--first_pass", "meaning", "--max_train_examples", "null"]
NEVER = 1e-9  # a keep rate that keeps nothing here (the config refuses 0)


class Encoder:
    """Stands in for `sentences.shared_encoder`: the question and the sentences about the harbour point one
    way, every other sentence another, so meaning ranks the harbour windows first and stems do not."""

    def __call__(self, name, device="cpu"):
        return self

    def embed(self, texts):
        return np.array([[1.0, 0.0] if ("harbour" in t or t.startswith("where")) else [0.0, 1.0] for t in texts],
                        dtype=np.float32)


@pytest.fixture
def encoder(monkeypatch):
    from solution.model import sentences

    fake = Encoder()
    monkeypatch.setattr(sentences, "shared_encoder", fake)
    return fake


def page(example_id: str) -> str:
    paras = [f"<P> filler words number {j} about farms and rivers . </P>" for j in range(14)]
    paras[3] = "<P> The ships of Vemoria dock at the harbour of Ostel . </P>"  # the answer, in other words
    paras[9] = "<P> The town and the port of Kelandia were built late . </P>"  # the question's words, another subject
    doc = "Vemoria <H1> Vemoria </H1> " + " ".join(paras)
    return nq_line(example_id=example_id, document=doc, question="where is the port town of vemoria")


def kept_negatives(ds):
    return sorted((r["example_id"], r["window_index"]) for r in ds if r["answer_type"] == TYPE_ID["UNKNOWN"])


def ranked(tmp_path, train, *extra) -> str:
    out = tmp_path / "rankings.jsonl"
    assert rank_windows.main(["--out", str(out), "--quiet", *SETTINGS, "--train_file", str(train), *extra]) == 0
    return str(out)


def test_training_keeps_the_windows_the_first_pass_itself_ranks_first(tmp_path, tokenizer, encoder):
    train = write_jsonl(tmp_path / "train.jsonl", [page("7"), page("8")])
    out = ranked(tmp_path, train)
    header = json.loads(open(out).readline())
    assert header["format"] == "nq-window-rankings" and header["window"]["first_pass"] == "meaning"
    expected = []
    for ex, windows in Featurizer(tokenizer, WINDOW).featurize(read_examples(str(train)), with_labels=True):
        expected += [(ex.example_id, windows[i].window_index)
                     for i in top_window_indices(ex, windows, 2, "meaning", encoder.embed)]
    file_sampling = NegativeSampling(NEVER, top_window_keep=2, top_window_ranking_file=out)
    ds, _ = build_train_features(str(train), tokenizer, WINDOW, file_sampling, str(tmp_path / "c"))
    assert kept_negatives(ds) == sorted(expected)
    # Without the file the stems ranking keeps other windows: the setting is what changed them.
    stems, _ = build_train_features(str(train), tokenizer, WINDOW, NegativeSampling(NEVER, top_window_keep=2),
                                    str(tmp_path / "c"))
    assert kept_negatives(stems) != kept_negatives(ds)
    assert window_key(WINDOW, file_sampling)["top_window_ranking"] == "meaning"
    assert file_sampling.key(0)["top_window_ranking_file"]["size"] > 0  # ranked again: a new cache entry
    assert "top_window_ranking_file" not in NegativeSampling(top_window_keep=2).key(0)  # older caches keep their key


def test_a_file_ranked_for_other_windows_or_pages_is_refused_by_name(tmp_path, tokenizer, encoder):
    train = write_jsonl(tmp_path / "train.jsonl", [page("7"), page("8")])
    out = ranked(tmp_path, train, "--max_train_examples", "1")  # the first page alone
    sampling = NegativeSampling(NEVER, top_window_keep=2, top_window_ranking_file=out)
    with pytest.raises(ValueError, match=r"rankings\.jsonl: ranked for other windows than training makes \(window"):
        build_train_features(str(train), tokenizer, replace(WINDOW, doc_stride=16), sampling, str(tmp_path / "c"))
    with pytest.raises(NQFormatError, match=r"train\.jsonl:2: field 'example_id': 8: not in .*rankings\.jsonl"):
        build_train_features(str(train), tokenizer, WINDOW, sampling, str(tmp_path / "c"))
    with pytest.raises(ValueError, match="top_window_ranking_file must be null unless top_window_keep is above 0"):
        NegativeSampling(top_window_ranking_file=out)


def test_the_command_never_replaces_what_it_did_not_write(tmp_path, encoder, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", [page("7")])
    mine = tmp_path / "notes.jsonl"
    mine.write_text("a user's file\n")
    for out in (mine, train):
        with pytest.raises(SystemExit) as e:
            rank_windows.main(["--out", str(out), *SETTINGS, "--train_file", str(train)])
        assert e.value.code == 2
    assert mine.read_text() == "a user's file\n" and "--out" in capsys.readouterr().err
    out = ranked(tmp_path, train)
    assert ranked(tmp_path, train) == out  # its own file: written again


def test_every_input_is_checked_before_the_encoder_loads(tmp_path, capsys):
    """No fake encoder here: a run that got past its checks would load the real one."""
    train = write_jsonl(tmp_path / "train.jsonl", [page("7")])
    cases = [(["--train_file", str(tmp_path / "missing.jsonl")], "train_file .*missing.jsonl: no such file"),
             (["--first_pas", "meaning"], "unknown config key 'first_pas' \\(did you mean 'first_pass'\\?\\)"),
             (["--train_file", str(train), "--device", "cuda:7"], "--device cuda:7")]
    for extra, message in cases:
        with pytest.raises(SystemExit) as e:
            rank_windows.main(["--out", str(tmp_path / "r.jsonl"), *SETTINGS, *extra])
        assert e.value.code == 2
        assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "r.jsonl").exists()

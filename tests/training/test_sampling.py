"""Training for the metric: separate keep rates for answerable and unanswerable documents, hard negatives."""

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace

import pytest
import torch
from conftest import ROOT, nq_line, write_jsonl

from solution.data.nq import NQFormatError, read_examples
from solution.training.config import load_config
from solution.windows.dataset import build_train_features
from solution.windows.featurizer import TYPE_ID, Featurizer, WindowConfig
from solution.windows.sampling import NegativeSampling

WINDOW = WindowConfig(max_seq_length=48, doc_stride=8, max_question_length=12)
NEVER = 1e-9  # a keep rate that keeps nothing here (the config refuses 0)


def corpus(path, n=16):
    """n documents of several windows each; even ones answerable (a short answer), odd ones not."""
    lines = []
    for i in range(n):
        doc = "T <H1> T </H1> " + " ".join(f"<P> para {i} {j} says the capital is Place{j} . </P>" for j in range(6))
        toks = doc.split()
        s = toks.index(f"Place{i % 6}")
        if i % 2 == 0:
            lines.append(nq_line(example_id=str(2000 + i), document=doc, long=i % 6, shorts=[(s, s + 1)],
                                 question=f"capital {i % 6}"))
        else:
            lines.append(nq_line(example_id=str(2000 + i), document=doc, question=f"capital {i % 6}"))
    return write_jsonl(path, lines)


def all_windows(path, tokenizer):
    """{example_id: windows} with every window kept (the ground truth for the counts)."""
    return {ex.example_id: ws for ex, ws in
            Featurizer(tokenizer, WINDOW).featurize(read_examples(str(path)), with_labels=True)}


def kept_negatives(ds):
    return sorted((r["example_id"], r["window_index"]) for r in ds if r["answer_type"] == TYPE_ID["UNKNOWN"])


def test_separate_rates_apply_to_their_own_documents(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl")
    truth = all_windows(path, tokenizer)
    answerable = {k for k in truth if int(k) % 2 == 0}
    neg = {kind: sum(w.answer_type == TYPE_ID["UNKNOWN"] for k, ws in truth.items() if (k in answerable) == kind
                     for w in ws) for kind in (True, False)}
    positives = sum(w.answer_type != TYPE_ID["UNKNOWN"] for ws in truth.values() for w in ws)
    assert neg[True] > 0 and neg[False] > 0 and positives == len(answerable)

    ds, s = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(1.0, NEVER), str(tmp_path / "c"))
    assert s["unanswerable_documents"] == 8
    assert (s["negatives_kept_answerable"], s["negatives_kept_unanswerable"]) == (neg[True], 0)
    assert {k for k, _ in kept_negatives(ds)} <= answerable
    assert len(ds) == positives + neg[True]

    ds, s = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(NEVER, 1.0), str(tmp_path / "c"))
    assert (s["negatives_kept_answerable"], s["negatives_kept_unanswerable"]) == (0, neg[False])
    assert len(ds) == positives + neg[False]  # answers are never dropped

    # None: one rate for all, as before the split existed.
    _, s = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(1.0, None), str(tmp_path / "c"))
    assert s["windows_kept"] == sum(len(ws) for ws in truth.values())


def write_scores(path, truth, score, window=WINDOW):
    """A hand-made scores file: score(example_id, window) for each window without an answer."""
    lines = [{"format": "nq-hard-negative-scores", "version": 1, "window": asdict(window)}]
    for k, ws in truth.items():
        lines.append({"example_id": k, "answerable": int(k) % 2 == 0,
                      "scores": [None if w.answer_type != TYPE_ID["UNKNOWN"] else score(k, w) for w in ws]})
    return write_jsonl(path, lines)


def test_hard_negatives_are_drawn_by_score(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl")
    truth = all_windows(path, tokenizer)
    scores = write_scores(tmp_path / "hard.jsonl", truth, lambda k, w: float(w.window_index % 2))
    # Fraction 1: keep probability rate * score / mean(score). Odd windows score 1 and even ones 0, so
    # (the mean being below 1) rate 1 keeps every odd negative window and no even one.
    ds, s = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(1.0, None, str(scores), 1.0),
                                 str(tmp_path / "c"))
    odd = sorted((k, w.window_index) for k, ws in truth.items() for w in ws
                 if w.answer_type == TYPE_ID["UNKNOWN"] and w.window_index % 2 == 1)
    assert kept_negatives(ds) == odd
    assert s["negatives_kept_answerable"] + s["negatives_kept_unanswerable"] == len(odd)

    # Fraction 0: the scores are ignored, the draw is the uniform one.
    hard0, _ = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5, None, str(scores), 0.0),
                                    str(tmp_path / "c"))
    uniform, _ = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5), str(tmp_path / "c"))
    assert kept_negatives(hard0) == kept_negatives(uniform) != odd


def test_scores_file_that_does_not_match_is_refused(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl")
    truth = all_windows(path, tokenizer)
    missing = dict(list(truth.items())[1:])
    scores = write_scores(tmp_path / "hard.jsonl", missing, lambda k, w: 0.5)
    with pytest.raises(NQFormatError, match=f"{list(truth)[0]}: no matching record"):
        build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5, None, str(scores)), str(tmp_path / "c"))
    other = WindowConfig(max_seq_length=64, doc_stride=8, max_question_length=12)
    scores = write_scores(tmp_path / "hard2.jsonl", truth, lambda k, w: 0.5, window=other)
    with pytest.raises(ValueError, match="window settings"):
        build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5, None, str(scores)), str(tmp_path / "c"))
    (tmp_path / "junk.jsonl").write_text('{"format": "something else"}\n')
    with pytest.raises(ValueError, match="junk.jsonl:1: .*not a hard-negative scores file"):
        build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5, None, str(tmp_path / "junk.jsonl")),
                             str(tmp_path / "c"))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tokenizer):
    """A model directory holding a tiny random model (one layer, hidden size 32)."""
    from solution.model.qa_model import build_model, save_model_dir
    from solution.training.config import TrainConfig

    cfg = TrainConfig(pretrained=False, model_config_overrides={"hidden_size": 32, "num_hidden_layers": 1,
                                                               "num_attention_heads": 2, "intermediate_size": 64})
    torch.manual_seed(0)
    model = build_model(cfg.model_name_or_path, False, cfg.backbone_overrides)
    return save_model_dir(tmp_path_factory.mktemp("tiny") / "model", model.state_dict(), model.config, tokenizer,
                          {"window": asdict(WINDOW), "postprocess": asdict(cfg.postprocess)})


def test_scoring_a_training_file_writes_a_usable_scores_file(tmp_path, tokenizer, tiny_model):
    """`python -m solution.hard_negatives` with a tiny random model: one score per negative window, null for answers."""
    from solution import hard_negatives

    path = corpus(tmp_path / "train.jsonl")
    out = tmp_path / "hard.jsonl"
    assert hard_negatives.main(["--model", str(tiny_model), "--train_file", str(path), "--out", str(out),
                                "--quiet", "--batch_size", "5"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records[0]["format"] == "nq-hard-negative-scores" and records[0]["window"] == asdict(WINDOW)
    truth = all_windows(path, tokenizer)
    assert [r["example_id"] for r in records[1:]] == list(truth)
    for r in records[1:]:
        assert r["answerable"] == (int(r["example_id"]) % 2 == 0)
        ws = truth[r["example_id"]]
        assert [s is None for s in r["scores"]] == [w.answer_type != TYPE_ID["UNKNOWN"] for w in ws]
        assert all(0.0 <= s <= 1.0 for s in r["scores"] if s is not None)
    ds, s = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5, None, str(out)), str(tmp_path / "c"))
    assert s["windows_kept"] == len(ds) > s["windows_per_type"]["UNKNOWN"]


class FullRaw(io.FileIO):
    """A file whose writes past `ROOM` bytes fail as on a full disk, under Python's own buffered layer (which
    keeps what a failed write left and tries it again when the file is closed)."""

    ROOM = 300

    def write(self, data):
        if self.tell() + len(data) > self.ROOM:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def open_on_a_full_disk(path, mode="r", **kwargs):
    raw = FullRaw(path, mode.replace("b", ""))
    return io.BufferedRandom(raw) if "+" in mode else io.BufferedWriter(raw)


def test_a_full_disk_in_the_hard_negative_pass_names_the_file_and_the_free_space(tmp_path, tiny_model, monkeypatch,
                                                                              capsys):
    """One line naming --out and the free space, not the bare "[Errno 28]" that closing the file raised."""
    from solution import hard_negatives

    monkeypatch.setattr(hard_negatives, "open", open_on_a_full_disk, raising=False)  # the module's `open` only
    out = tmp_path / "hard.jsonl"
    code = hard_negatives.main(["--model", str(tiny_model), "--train_file", str(corpus(tmp_path / "train.jsonl")),
                                "--out", str(out), "--quiet", "--docs_per_chunk", "2"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {out}: no space left on device (") and f" free in {tmp_path})" in err[0], err


def test_fp32_scores_are_the_models_float32_answer_probabilities(tmp_path, tokenizer, tiny_model):
    """--precision fp32: each score is 1 - P(UNKNOWN) of the float32 model on that window alone."""
    from solution import hard_negatives
    from solution.answers.inference import collate
    from solution.model.qa_model import load_model_dir

    path = corpus(tmp_path / "train.jsonl", n=6)
    out = tmp_path / "hard.jsonl"
    assert hard_negatives.main(["--model", str(tiny_model), "--train_file", str(path), "--out", str(out), "--quiet",
                                "--precision", "fp32", "--device", "cpu"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert (records[0]["precision"], records[0]["device"]) == ("fp32", "cpu")
    model, _, _ = load_model_dir(tiny_model)
    for r in records[1:]:
        for w, s in zip(all_windows(path, tokenizer)[r["example_id"]], r["scores"]):
            if s is not None:
                with torch.inference_mode():
                    t = model(**{k: v for k, v in collate([w]).items() if k in ("input_ids", "attention_mask",
                                                                               "token_type_ids")})["type_logits"]
                assert s == pytest.approx(float(hard_negatives.answer_probability(t.numpy())[0]), abs=2e-6)


SLOW_MAIN = """
import sys, time
import solution.answers.inference as inference
score = inference.score_windows
def slow(*args, **kwargs):  # slow enough that the test can kill the pass half-way
    time.sleep(0.25)
    return score(*args, **kwargs)
inference.score_windows = slow
from solution.hard_negatives import main
sys.exit(main(sys.argv[1:]))
"""


def hard_negatives_command(model, data, out, *extra):
    return [sys.executable, "-c", SLOW_MAIN, "--model", str(model), "--train_file", str(data), "--out", str(out),
            "--docs_per_chunk", "2", "--batch_size", "3", "--precision", "fp32", "--device", "cpu", *extra]


def run_pass(cmd):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def line_count(path):
    return path.read_bytes().count(b"\n") if path.exists() else 0


@pytest.mark.slow  # a subprocess killed and restarted
def test_a_killed_pass_continues_where_it_stopped(tmp_path, tiny_model):
    """SIGKILL half-way, then the same command: it says what it found and ends with an uninterrupted run's bytes."""
    data = corpus(tmp_path / "train.jsonl", n=30)
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    r = run_pass(hard_negatives_command(tiny_model, data, whole, "--quiet"))
    assert r.returncode == 0, r.stderr
    assert line_count(whole) == 31

    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(hard_negatives_command(tiny_model, data, cut, "--quiet"), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while line_count(cut) < 9 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = line_count(cut)
    assert 9 <= written < 31, f"killed after {written} lines: too late to test a restart"

    r = run_pass(hard_negatives_command(tiny_model, data, cut))
    assert r.returncode == 0, r.stderr
    assert f"resuming: {(written - 1) // 2 * 2} documents already scored" in r.stderr
    assert f"({(written - 1) // 2 * 2} from an earlier run)" in r.stdout
    assert cut.read_bytes() == whole.read_bytes()


def test_a_cut_last_line_and_a_partial_chunk_are_scored_again(tmp_path, tiny_model, capsys):
    from solution import hard_negatives

    data = corpus(tmp_path / "train.jsonl", n=9)
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    args = ["--model", str(tiny_model), "--train_file", str(data), "--docs_per_chunk", "2", "--batch_size", "3",
            "--precision", "fp32", "--device", "cpu", "--quiet"]
    assert hard_negatives.main(args + ["--out", str(whole)]) == 0
    full = whole.read_bytes()
    lines = full.splitlines(keepends=True)
    # Header + 5 documents (two whole chunks and half of the third) + half of the 6th line;
    # then only the header cut in its middle.
    for kept, said in ((b"".join(lines[:6]) + lines[6][:17], "resuming: 4 documents already scored"),
                       (lines[0][:30], None)):
        cut.write_bytes(kept)
        capsys.readouterr()
        assert hard_negatives.main(args + ["--out", str(cut)]) == 0
        err = capsys.readouterr().err
        assert (said in err) if said else ("resuming" not in err), err
        assert cut.read_bytes() == full


def test_a_scores_file_of_another_run_is_refused_or_overwritten(tmp_path, tiny_model, capsys):
    from solution import hard_negatives

    data = corpus(tmp_path / "train.jsonl", n=4)
    out = tmp_path / "hard.jsonl"
    args = ["--model", str(tiny_model), "--train_file", str(data), "--out", str(out), "--device", "cpu", "--quiet"]
    assert hard_negatives.main(args + ["--precision", "fp32"]) == 0
    fp32 = out.read_bytes()
    capsys.readouterr()
    assert hard_negatives.main(args + ["--precision", "bf16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out {out}: scored with other settings") and "precision: file 'fp32', this run " \
        "'bf16'" in err and "--overwrite" in err, err
    assert out.read_bytes() == fp32
    assert hard_negatives.main(args + ["--precision", "bf16", "--overwrite"]) == 0
    assert json.loads(out.read_text().splitlines()[0])["precision"] == "bf16"
    out.write_text("id,answer\n1,2\n")
    assert hard_negatives.main(args) == 2
    assert "exists and is not a hard-negative scores file" in capsys.readouterr().err
    assert out.read_text() == "id,answer\n1,2\n"


def test_training_refuses_an_incomplete_scores_file(tmp_path, tokenizer):
    path = corpus(tmp_path / "train.jsonl")
    truth = all_windows(path, tokenizer)
    prefix = dict(list(truth.items())[:5])  # what a stopped pass leaves
    scores = write_scores(tmp_path / "hard.jsonl", prefix, lambda k, w: 0.5)
    with pytest.raises(NQFormatError, match=f"{list(truth)[5]}: no matching record in .*hard.jsonl, which holds 5 "
                                            "documents: an incomplete scores file"):
        build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(0.5, None, str(scores)), str(tmp_path / "c"))


def test_config_checks_the_new_rates():
    cfg = load_config("configs/train/tiny.yaml", ["--unanswerable_keep_rate", "0.2", "--hard_negative_fraction", "1"])
    assert (cfg.unanswerable_keep_rate, cfg.hard_negative_fraction) == (0.2, 1.0)
    with pytest.raises(ValueError, match="unanswerable_keep_rate"):
        load_config("configs/train/tiny.yaml", ["--unanswerable_keep_rate", "0"])
    with pytest.raises(ValueError, match="hard_negative_fraction"):
        load_config("configs/train/tiny.yaml", ["--hard_negative_fraction", "1.5"])


def test_windows_stating_the_question_s_words_are_kept_by_their_own_rate(tmp_path, tokenizer):
    """The neighbour's copy of a fact shares the question's words: such no-answer windows are kept at
    question_word_keep_rate, the rest at the uniform rate (here: none)."""
    paras = [f"<P> filler words number {j} about farms and rivers . </P>" for j in range(12)]
    for j in (3, 8):
        paras[j] = f"<P> The capital of Vemoria{j} is Ostel . More text {j} here . </P>"
    doc = "T <H1> T </H1> " + " ".join(paras)
    path = write_jsonl(tmp_path / "train.jsonl", [nq_line(example_id="7", document=doc, question="what is the capital")])
    truth = all_windows(path, tokenizer)["7"]
    toks = doc.split(" ")

    def holds_capital(w):
        covered = w.nq_token_index[w.nq_token_index >= 0]
        return "capital" in (t.lower() for t in toks[covered.min():covered.max() + 1])

    expected = sorted(("7", w.window_index) for w in truth if holds_capital(w))
    assert 0 < len(expected) < len(truth)
    sampling = NegativeSampling(NEVER, question_word_keep_rate=1.0, question_word_share=1.0)
    ds, s = build_train_features(str(path), tokenizer, WINDOW, sampling, str(tmp_path / "c"))
    assert kept_negatives(ds) == expected and s["negatives_kept_unanswerable"] == len(expected)
    with pytest.raises(ValueError, match="question_word_keep_rate must be in"):
        NegativeSampling(question_word_keep_rate=0.0)


def test_top_window_keep_keeps_the_windows_inference_runs_on(tmp_path, tokenizer):
    """top_window_keep N keeps exactly the no-answer windows that max_windows_per_document N runs the model on:
    the model learns on the windows it is asked about, the neighbour's copy of the fact among them."""
    from solution.answers.inference import select_windows
    from solution.answers.postprocess import PostprocessConfig
    from solution.data.nq import read_examples

    paras = [f"<P> filler words number {j} about farms and rivers . </P>" for j in range(14)]
    paras[4] = "<P> The capital of Vemoria is Ostel and the river is long . </P>"
    paras[10] = "<P> The capital and the river of Kelandia . </P>"
    doc = "Vemoria <H1> Vemoria </H1> nav text outside every candidate " + " ".join(paras)
    path = write_jsonl(tmp_path / "train.jsonl", [nq_line(example_id="7", document=doc,
                                                          question="what is the capital river of vemoria")])
    truth = all_windows(path, tokenizer)["7"]
    example = next(read_examples(str(path)))
    picked = select_windows(example, truth, PostprocessConfig(), replace(WINDOW, max_windows_per_document=2))
    expected = sorted(("7", w.window_index) for w in picked)
    assert len(expected) == 2 and expected != sorted(("7", w.window_index) for w in truth[:2])
    ds, s = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(NEVER, top_window_keep=2),
                                 str(tmp_path / "c"))
    assert kept_negatives(ds) == expected
    with pytest.raises(ValueError, match="top_window_keep must be an integer >= 0"):
        NegativeSampling(top_window_keep=-1)


def test_yes_no_repeat_trains_each_yes_no_window_that_many_times(tmp_path, tokenizer):
    """Yes/no pages are ~1.5% of NQ: yes_no_repeat N yields each YES or NO window N times (counted in the
    summary as trained), and leaves every other window, and the cache key of N = 1, as they were."""
    doc = "T <H1> T </H1> " + " ".join(f"<P> para {j} says the capital is Place{j} . </P>" for j in range(6))
    path = write_jsonl(tmp_path / "train.jsonl", [
        nq_line(example_id="1", document=doc, long=2, yes_no="YES", question="is the capital place2"),
        nq_line(example_id="2", document=doc, long=3, yes_no="NO", question="is the capital place9"),
        nq_line(example_id="3", document=doc, long=4, question="what does para 4 say")])
    once, s1 = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(NEVER), str(tmp_path / "a"))
    thrice, s3 = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(NEVER, yes_no_repeat=3),
                                      str(tmp_path / "b"))

    def by_type(ds):
        return sorted((r["example_id"], r["window_index"], r["answer_type"]) for r in ds)

    yes_no = [r for r in by_type(once) if r[2] in (TYPE_ID["YES"], TYPE_ID["NO"])]
    others = [r for r in by_type(once) if r not in yes_no]
    assert {r[0] for r in yes_no} == {"1", "2"} and others
    assert by_type(thrice) == sorted(others + yes_no * 3)
    assert s3["windows_kept"] == s1["windows_kept"] + 2 * len(yes_no)
    assert s3["windows_per_type"]["YES"] == 3 * s1["windows_per_type"]["YES"]
    assert "yes_no_repeat" not in NegativeSampling().key(0) and NegativeSampling(yes_no_repeat=3).key(0)["yes_no_repeat"] == 3
    with pytest.raises(ValueError, match="yes_no_repeat must be an integer >= 1"):
        NegativeSampling(yes_no_repeat=0)
    # no_repeat: NO windows that many times more (YES ones as yes_no_repeat says), a cache of their own.
    balanced, s2 = build_train_features(str(path), tokenizer, WINDOW, NegativeSampling(NEVER, yes_no_repeat=3, no_repeat=2),
                                        str(tmp_path / "c"))
    no = [r for r in yes_no if r[2] == TYPE_ID["NO"]]
    assert no and by_type(balanced) == sorted(others + yes_no * 3 + no * 3)
    assert s2["windows_per_type"]["NO"] == 6 * s1["windows_per_type"]["NO"]
    assert s2["windows_per_type"]["YES"] == s3["windows_per_type"]["YES"]
    assert "no_repeat" not in NegativeSampling().key(0) and NegativeSampling(no_repeat=2).key(0)["no_repeat"] == 2
    with pytest.raises(ValueError, match="no_repeat must be an integer >= 1"):
        NegativeSampling(no_repeat=0)

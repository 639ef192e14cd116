"""Model directories: every bad file refused at load naming it (through submission.predict), format-1
directories still loading as before, warm starts that load every weight, Hugging Face's loaders
reading the same weights, and the competition recipes' window arithmetic."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, nq_line, write_jsonl
from helpers import TINY, plain_checkpoint, write_model_dir

from solution.answers.postprocess import PostprocessConfig
from solution.model import qa_config, qa_model
from solution.training.config import load_config
from solution.windows.featurizer import WindowConfig


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory):
    return write_model_dir(tmp_path_factory.mktemp("good") / "model")


@pytest.fixture(scope="module")
def nq_input(tmp_path_factory):
    path = tmp_path_factory.mktemp("input") / "test.jsonl"
    return write_jsonl(path, [nq_line(example_id=str(1000 + i), long=0, shorts=[(12, 14)]) for i in range(3)])


def predict(model_dir, nq_input, out, capsys):
    import submission.predict as predict_cli

    code = predict_cli.main(["--model", str(model_dir), "--input", str(nq_input), "--output", str(out), "--quiet"])
    return code, capsys.readouterr().err


def edit_json(path, change):
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj))


def edit_weights(path, change):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


def truncate(d):
    path = d / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def nan_weight(d):
    def poison(t):
        t["bert.encoder.layer.0.output.dense.weight"][3, 5] = float("nan")
    edit_weights(d / "model.safetensors", poison)


def inf_weight(d):
    def poison(t):
        t["qa_outputs.bias"][0] = float("inf")
    edit_weights(d / "model.safetensors", poison)


def bigger_tokenizer(d):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(d)
    tok.add_tokens(["[Paragraph=1]", "[Table=1]"])
    tok.save_pretrained(d)


def smaller_tokenizer(d):
    """The tokenizer swapped for one of 30,000 words: it would run, silently, on wrong ids."""
    def cut(t):
        t["model"]["vocab"] = {w: i for w, i in t["model"]["vocab"].items() if i < 30000}
    edit_json(d / "tokenizer.json", cut)


def pp(change):
    return lambda d: edit_json(d / "qa_config.json", lambda o: change(o["postprocess"]))


# name -> (how to break a good directory, the file the error must name, words it must hold)
BAD = {
    "truncated_weights": (truncate, "model.safetensors", "truncated"),
    "nan_weights": (nan_weight, "model.safetensors", "bert.encoder.layer.0.output.dense.weight"),
    "inf_weights": (inf_weight, "model.safetensors", "qa_outputs.bias"),
    "qa_field_missing": (pp(lambda p: p.pop("top_k")), "qa_config.json", "postprocess.top_k is missing"),
    "qa_field_added": (pp(lambda p: p.update(top_kk=3)), "qa_config.json", "postprocess.top_kk"),
    "qa_field_wrong_type": (pp(lambda p: p.update(long_threshold="0.5")), "qa_config.json",
                            "postprocess.long_threshold must be float"),
    "qa_bool_as_number": (pp(lambda p: p.update(skip_windows_without_candidates=1)), "qa_config.json",
                          "skip_windows_without_candidates must be bool"),
    "qa_window_wrong_type": (lambda d: edit_json(d / "qa_config.json", lambda o: o["window"].update(doc_stride=3.5)),
                             "qa_config.json", "window.doc_stride must be int"),
    "qa_bad_value": (lambda d: edit_json(d / "qa_config.json", lambda o: o["window"].update(doc_stride=500)),
                     "qa_config.json", "doc_stride"),
    "qa_section_missing": (lambda d: edit_json(d / "qa_config.json", lambda o: o.pop("window")),
                           "qa_config.json", "missing key ['window']"),
    "qa_key_added": (lambda d: edit_json(d / "qa_config.json", lambda o: o.update(windows={})),
                     "qa_config.json", "unknown key ['windows']"),
    "qa_not_json": (lambda d: (d / "qa_config.json").write_text('{"format": '), "qa_config.json", "JSON"),
    "qa_old_format_name": (lambda d: edit_json(d / "qa_config.json", lambda o: o.update(format="nq-bert-qa/0")),
                           "qa_config.json", "format"),
    "qa_windows_past_the_positions": (lambda d: edit_json(d / "qa_config.json",
                                                          lambda o: o["window"].update(max_seq_length=100_000)),
                                      "qa_config.json", "window.max_seq_length 100000 is more than the backbone's 512 "
                                                        "positions (max_position_embeddings 512)"),
    "config_shapes": (lambda d: edit_json(d / "config.json", lambda o: o.update(intermediate_size=48)),
                      "config.json", "bert.encoder.layer.0.intermediate.dense.bias has shape [64]"),
    "config_not_json": (lambda d: (d / "config.json").write_text("{"), "config.json", ""),
    "bigger_tokenizer": (bigger_tokenizer, "model.safetensors", "30524 tokens"),
    "smaller_tokenizer": (smaller_tokenizer, "model.safetensors", "30522 rows"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_model_directory_is_refused_naming_the_file(name, good_dir, nq_input, tmp_path, capsys):
    d = tmp_path / "model"
    shutil.copytree(good_dir, d)
    breaks, filename, words = BAD[name]
    breaks(d)
    code, err = predict(d, nq_input, tmp_path / "s.csv", capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert str(d) in lines[0] and filename in lines[0] and words in lines[0], err
    if name == "config_shapes":
        assert "describes [48]" in lines[0], err  # both shapes named
    if name == "bigger_tokenizer":
        assert "30522 rows" in lines[0], err
    if name == "smaller_tokenizer":
        assert "30000 tokens" in lines[0] and "trained with 30522" in lines[0], err
    assert not (tmp_path / "s.csv").exists()


def test_embedding_matrix_padded_past_the_tokenizer_loads(tmp_path):
    """Some backbones pad the matrix (here 40 rows) past their tokenizer: not an error, the directory
    records the tokenizer size it trained with. A format-1 directory records none: refused there."""
    d = write_model_dir(tmp_path / "model", {**TINY, "vocab_size": 30522 + 40})
    model, tokenizer, meta = qa_model.load_model_dir(d)
    assert len(tokenizer) == meta["tokenizer_size"] == 30522
    assert model.backbone.get_input_embeddings().weight.shape[0] == 30562

    def old(o):
        o["format"] = "nq-bert-qa/1"
        o.pop("tokenizer_size")
    edit_json(d / "qa_config.json", old)
    with pytest.raises(ValueError, match="the tokenizer has 30522 tokens but the embedding matrix .* has 30562 rows"):
        qa_model.load_model_dir(d)


def test_good_directory_predicts(good_dir, nq_input, tmp_path, capsys):
    code, err = predict(good_dir, nq_input, tmp_path / "s.csv", capsys)
    assert code == 0, err
    assert len((tmp_path / "s.csv").read_text().splitlines()) == 1 + 2 * 3


def format_1_copy(good_dir, out):
    """The directory as this project wrote it before format 2: `backbone.*` weights, format 1, and
    sections holding only the fields format 1 had."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(good_dir, out)
    tensors = load_file(str(out / "model.safetensors"))
    save_file(qa_model.from_hf_layout(tensors, "bert"), str(out / "model.safetensors"),
              metadata={"format": "nq-bert-qa/1"})

    def old(o):
        o["format"] = "nq-bert-qa/1"
        o.pop("tokenizer_size")
        o["window"] = {k: o["window"][k] for k in ("max_seq_length", "doc_stride", "max_question_length")}
        o["postprocess"] = {k: o["postprocess"][k] for k in ("top_k", "max_answer_length", "long_threshold",
                                                              "short_threshold", "skip_windows_without_candidates")}
    edit_json(out / "qa_config.json", old)
    config = json.loads((out / "config.json").read_text())
    config.pop("architectures", None)
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_format_1_directory_loads_and_predicts_as_before(good_dir, nq_input, tmp_path, capsys):
    old = format_1_copy(good_dir, tmp_path / "old")
    assert any(k.startswith("backbone.") for k in qa_model.read_weights(old / "model.safetensors"))
    model_new, _, meta_new = qa_model.load_model_dir(good_dir)
    model_old, _, meta_old = qa_model.load_model_dir(old)
    for (k1, v1), (k2, v2) in zip(model_new.state_dict().items(), model_old.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2), k1
    # Every field a format-1 directory lacks gets the value that keeps today's behaviour.
    for section, cls in (("window", WindowConfig), ("postprocess", PostprocessConfig)):
        for name, value in qa_config.FORMAT_1_VALUES[section].items():
            if name in cls.__dataclass_fields__:
                assert meta_old[section][name] == value, name
        cls(**meta_old[section])
    code_new, err = predict(good_dir, nq_input, tmp_path / "new.csv", capsys)
    code_old, err_old = predict(old, nq_input, tmp_path / "old.csv", capsys)
    assert code_new == code_old == 0, err + err_old
    assert (tmp_path / "new.csv").read_text() == (tmp_path / "old.csv").read_text()


def test_qa_config_is_read_and_written_without_torch():
    """evaluate --tune and the threshold tuning read and write qa_config.json with no model loaded."""
    code = "import sys, solution.model.qa_config; sys.exit(sorted({'torch', 'transformers'} & set(sys.modules)) or 0)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_current_format_with_a_field_missing_is_refused_but_format_1_is_completed(good_dir, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(good_dir, d)
    edit_json(d / "qa_config.json", lambda o: o["postprocess"].pop("skip_windows_without_candidates"))
    with pytest.raises(ValueError, match="postprocess.skip_windows_without_candidates is missing"):
        qa_model.load_model_dir(d)
    edit_json(d / "qa_config.json", lambda o: o.update(format="nq-bert-qa/1"))
    _, _, meta = qa_model.load_model_dir(d)
    assert meta["postprocess"]["skip_windows_without_candidates"] is True  # what format 1 defaulted to


def test_hugging_face_loaders_read_the_trained_weights(good_dir):
    from transformers import AutoModel, AutoModelForQuestionAnswering

    ours, tokenizer, _ = qa_model.load_model_dir(good_dir)
    batch = tokenizer(["who wrote the book"], ["The book was written by Ann Smith in 1901 ."], return_tensors="pt")
    with torch.no_grad():
        expected = ours(**batch)
        encoder = ours.backbone(**batch).last_hidden_state
        hf_encoder = AutoModel.from_pretrained(good_dir).eval()(**batch).last_hidden_state
        hf_qa = AutoModelForQuestionAnswering.from_pretrained(good_dir).eval()(**batch)
    assert torch.equal(hf_encoder, encoder)
    assert torch.equal(hf_qa.start_logits, expected["start_logits"])
    assert torch.equal(hf_qa.end_logits, expected["end_logits"])
    assert json.loads((good_dir / "config.json").read_text())["architectures"] == ["BertForQuestionAnswering"]


def test_consolidate_refuses_a_truncated_checkpoint_file(tmp_path, capsys):
    from solution import consolidate

    ckpt = plain_checkpoint(tmp_path / "checkpoint-1")
    truncate(ckpt)
    code = consolidate.main([str(ckpt), str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and f"{ckpt / 'model.safetensors'}" in err and "truncated" in err and "Traceback" not in err


def test_consolidate_names_a_truncated_trainer_state(tmp_path, capsys):
    from solution import consolidate

    ckpt = tmp_path / "checkpoint-1"
    write_model_dir(ckpt / "model_meta")
    shutil.copy(ckpt / "model_meta" / "model.safetensors", ckpt / "model.safetensors")
    (ckpt / "trainer_state.json").write_text('{"format": "nq-bert-qa-checkpoint/1", "step": 1, "epo')
    code = consolidate.main([str(ckpt), str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {ckpt / 'trainer_state.json'}: not valid JSON (line 1"), err


def test_consolidate_on_a_full_disk_removes_its_output_and_ends_in_one_line(tmp_path, small_filesystem, capsys):
    """safetensors' SafetensorError ('No space left on device') once ended consolidation in a traceback,
    leaving the half-written out.tmp/ behind."""
    from solution import consolidate

    ckpt = plain_checkpoint(tmp_path / "checkpoint-1")
    out = small_filesystem(2 << 20) / "model"  # the tiny model's 4 MiB of weights do not fit
    code = consolidate.main([str(ckpt), str(out)])
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and line.startswith(f"error: {out}: no space left on device (") and "free in" in line, line
    assert not list(out.parent.iterdir())  # neither out nor its temporary out.tmp


def train(*args, expect=0):
    proc = subprocess.run([sys.executable, "-m", "solution.train", "--config", "configs/train/tiny.yaml",
                           "--data_source", "dummy", "--dummy_num_windows", "8", "--dev_file", "null",
                           "--disable_tqdm", "true", *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == expect, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow  # a training subprocess
def test_resume_refuses_a_truncated_checkpoint_weights_file(tmp_path):
    out = tmp_path / "run"
    constant = ("--lr_scheduler_type", "constant")  # so that a resume may go on to another max_steps
    train("--max_steps", "2", "--save_steps", "1", "--output_dir", str(out), *constant)
    weights = out / "checkpoint-2" / "model.safetensors"
    size = weights.stat().st_size
    weights.write_bytes(weights.read_bytes()[:1000])
    by_path = train("--max_steps", "3", "--output_dir", str(out), "--resume", str(out / "checkpoint-2"), *constant,
                    expect=2)
    assert f"error: {weights}: 1000 bytes, but manifest.json says {size} (truncated" in by_path.stderr
    (out / "checkpoint-2" / "manifest.json").unlink()  # as an older version wrote it: the weights' own check
    by_path = train("--max_steps", "3", "--output_dir", str(out), "--resume", str(out / "checkpoint-2"), *constant,
                    expect=2)
    assert f"error: {weights}: not a readable safetensors file" in by_path.stderr and "Traceback" not in by_path.stderr


@pytest.mark.slow  # a training subprocess
def test_warm_start_from_a_model_directory_loads_every_weight(tmp_path):
    """Training from a model directory for one step at a learning rate of 1e-30 leaves every weight unchanged."""
    train("--max_steps", "2", "--output_dir", str(tmp_path / "first"))
    train("--model_name_or_path", str(tmp_path / "first" / "model"), "--pretrained", "true",
          "--learning_rate", "1e-30", "--max_steps", "1", "--output_dir", str(tmp_path / "second"))
    first = qa_model.read_weights(tmp_path / "first" / "model" / "model.safetensors")
    second = qa_model.read_weights(tmp_path / "second" / "model" / "model.safetensors")
    assert sorted(first) == sorted(second) and any(k.startswith("answer_type_head.") for k in first)
    changed = [k for k in first if not torch.equal(first[k], second[k])]
    assert not changed, f"{len(changed)} of {len(first)} tensors differ: {changed[:5]}"


@pytest.mark.parametrize("name", ["nq-bert-large", "nq-bert-base"])
def test_competition_recipes_load_with_bert_joint_window_step(name):
    cfg = load_config(str(ROOT / "configs" / "train" / f"{name}.yaml"))
    w = cfg.window
    assert (w.max_seq_length, w.max_question_length) == (512, 64)
    capacity = w.max_seq_length - w.max_question_length - 3
    assert capacity == 445 and w.doc_stride == 317 and capacity - w.doc_stride == 128  # BERT-joint's step
    assert (cfg.negative_keep_rate, cfg.unanswerable_keep_rate) == (0.01, 0.04)
    assert cfg.strategy == "zero2" and cfg.mixed_precision == "bf16" and cfg.pretrained
    assert "uncased" in cfg.model_name_or_path


def test_a_format_2_directory_written_before_the_overrun_settings_loads_with_them_off(good_dir, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(good_dir, d)
    edit_json(d / "qa_config.json", lambda o: (o["window"].pop("long_overrun_labels"),
                                               o["window"].pop("long_overrun_yes_no"),
                                               o["postprocess"].pop("long_overrun")))
    _, _, meta = qa_model.load_model_dir(d)
    assert meta["window"]["long_overrun_labels"] is False and meta["postprocess"]["long_overrun"] is False
    assert meta["window"]["long_overrun_yes_no"] is True  # what such a model was trained with


def test_a_format_2_directory_written_before_the_polarity_offset_loads_with_the_cut_at_zero(good_dir, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(good_dir, d)
    edit_json(d / "qa_config.json", lambda o: o["postprocess"].pop("polarity_offset"))
    _, _, meta = qa_model.load_model_dir(d)
    assert meta["postprocess"]["polarity_offset"] == 0.0  # YES above a margin of 0, as such a model chose


def test_a_directory_with_the_first_pass_under_postprocess_loads_it_as_a_window_setting(good_dir, tmp_path):
    """Before `max_windows_per_document` became a window setting, directories held it under postprocess."""
    d = tmp_path / "model"
    shutil.copytree(good_dir, d)
    edit_json(d / "qa_config.json", lambda o: (o["window"].pop("max_windows_per_document"),
                                               o["postprocess"].__setitem__("max_windows_per_document", 3)))
    _, _, meta = qa_model.load_model_dir(d)
    assert meta["window"]["max_windows_per_document"] == 3 and "max_windows_per_document" not in meta["postprocess"]
    edit_json(d / "qa_config.json", lambda o: o["window"].__setitem__("max_windows_per_document", 3))
    with pytest.raises(ValueError, match="under both postprocess and window"):
        qa_model.load_model_dir(d)
    edit_json(d / "qa_config.json", lambda o: (o["window"].pop("max_windows_per_document"),
                                               o["postprocess"].pop("max_windows_per_document")))
    _, _, meta = qa_model.load_model_dir(d)  # a format-2 directory written before the setting: every window
    assert meta["window"]["max_windows_per_document"] == 0

"""The typed config: YAML sections or flat keys, --name value overrides, named errors."""

import pytest

from solution.config import load_config, parse_overrides

from conftest import ROOT


def test_yaml_sections_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("learning_rate: 1e-4\nwindow:\n  max_seq_length: 256\npostprocess:\n  top_k: 5\n")
    cfg = load_config(str(path), ["--learning_rate", "3e-5", "--max_seq_length=128", "--doc_stride", "16",
                                  "--dev_file", "null", "--gradient_checkpointing", "true"])
    assert cfg.learning_rate == 3e-5 and isinstance(cfg.learning_rate, float)
    assert cfg.window.max_seq_length == 128 and cfg.window.doc_stride == 16
    assert cfg.postprocess.top_k == 5 and cfg.dev_file is None and cfg.gradient_checkpointing is True
    assert "max_seq_length: 128" in cfg.to_yaml()


@pytest.mark.parametrize("text,overrides,message", [
    ("learnin_rate: 0.1\n", [], "unknown config key 'learnin_rate' (did you mean 'learning_rate'?)"),
    ("", ["--per_device_train_batch_size", "two"], "per_device_train_batch_size expects int, got 'two'"),
    ("", ["--per_device_train_batch_size", "0"], "per_device_train_batch_size must be >= 1"),
    ("", ["--optim", "adam"], "optim must be one of"),
    ("", ["--mixed_precision", "fp8"], "mixed_precision must be one of"),
    ("window:\n  stride: 3\n", [], "unknown config key 'window.stride'"),
    ("", ["--doc_stride", "999"], "doc_stride must be in"),
    ("- a\n- b\n", [], "expected a mapping"),
    ("a: [\n", [], "not valid YAML"),
    ("", ["--learning_rate"], "--learning_rate needs a value"),
    ("", ["learning_rate", "1"], "expected --name value"),
])
def test_errors_name_the_key(tmp_path, text, overrides, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_config(str(path), overrides)
    assert message in str(info.value)


def test_shipped_configs_load():
    for path in sorted((ROOT / "configs" / "train").glob("*.yaml")):
        load_config(str(path))


def test_parse_overrides_dash_names():
    assert parse_overrides(["--max-steps", "3"]) == {"max_steps": "3"}

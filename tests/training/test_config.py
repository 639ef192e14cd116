"""The typed config: YAML sections or flat keys, --name value overrides, named errors."""

import dataclasses
import json
import os
import subprocess
import sys
import time

import pytest
from conftest import ROOT

from solution.training.config import (
    SECTIONS,
    TrainConfig,
    _field_owner,
    field_docs,
    load_config,
    parse_command_line,
    parse_overrides,
)


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
    ("seed: 0\n", ["--per_device_train_batch_size", "two"], "per_device_train_batch_size expects int, got 'two'"),
    ("seed: 0\n", ["--per_device_train_batch_size", "0"], "per_device_train_batch_size must be >= 1"),
    ("seed: 0\n", ["--optim", "adam"], "optim must be one of"),
    ("seed: 0\n", ["--mixed_precision", "fp8"], "mixed_precision must be one of"),
    ("window:\n  stride: 3\n", [], "unknown config key 'window.stride'"),
    ("seed: 0\n", ["--doc_stride", "999"], "doc_stride must be in"),
    ("- a\n- b\n", [], "expected a mapping"),
    ("a: [\n", [], "not valid YAML"),
    ("seed: 0\n", ["--learning_rate"], "--learning_rate needs a value"),
    ("seed: 0\n", ["learning_rate", "1"], "expected --name value"),
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


# --- the generated command line ------------------------------------------------------------------

def test_help_lists_every_setting_with_type_default_and_docstring():
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "solution.train", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and time.perf_counter() - t0 < 60
    text = proc.stdout
    names = {f.name for f in dataclasses.fields(TrainConfig) if f.name not in SECTIONS}
    names |= {f.name for cls in SECTIONS.values() for f in dataclasses.fields(cls)}
    for name in names:
        assert f"--{name} " in text, name
    for name in ("learning_rate", "per_device_train_batch_size", "warmup_steps", "report_to", "lr_scheduler_type",
                 "negative_keep_rate", "max_seq_length"):
        assert f"--{name}" in text
    assert text.count("\n  --") >= 30
    # A docstring, a type and a default, under the section's heading.
    assert "Peak learning rate, reached at the end of warmup. (default: 5e-05)" in " ".join(text.split())
    assert "--learning_rate FLOAT" in text and "--unanswerable_keep_rate FLOAT|NULL" in text
    for heading in ("model:", "data:", "window (", "postprocess (", "sampling ("):
        assert f"\n{heading}" in text, heading


def test_every_field_has_a_docstring():
    for cls in (TrainConfig, *SECTIONS.values()):
        docs = field_docs(cls)
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in SECTIONS and not docs[f.name][0]]
        assert not missing, (cls.__name__, missing)


def test_command_line_spellings():
    path, overrides = parse_command_line(
        ["--config", "c.yaml", "--learning_rate", "1e-4", "--per-device-train-batch-size", "2",
         "--max_seq_length=256", "--negative-keep-rate=0.5", "--bf16", "--resume", "latest", "--local_rank=0"],
        "prog", "description")
    assert path == "c.yaml"
    cfg = load_config(None, overrides)
    assert (cfg.learning_rate, cfg.per_device_train_batch_size, cfg.window.max_seq_length) == (1e-4, 2, 256)
    assert cfg.sampling.negative_keep_rate == 0.5 and cfg.mixed_precision == "bf16"
    assert cfg.resume_from_checkpoint == "latest"
    with pytest.raises(ValueError, match="unknown config key 'learnin_rate' \\(did you mean 'learning_rate'"):
        parse_command_line(["--learnin_rate", "1"], "prog", "description")
    with pytest.raises(ValueError, match="learning_rate"):
        parse_command_line(["--learning_rate"], "prog", "description")
    with pytest.raises(ValueError, match="unknown config key 'learning'"):  # no abbreviations
        parse_command_line(["--learning", "1"], "prog", "description")


# --- TrainingArguments names ---------------------------------------------------------------------


def test_warmup_steps_and_its_alias():
    assert load_config(None, ["--warmup_steps", "2"]).optimizer.num_warmup_steps(100) == 2
    assert load_config(None, ["--warmup_steps", "0.25"]).optimizer.num_warmup_steps(100) == 25
    assert load_config(None, ["--warmup_ratio", "0.3"]).optimizer.num_warmup_steps(100) == 30
    assert load_config(None).optimizer.num_warmup_steps(100) == 10  # today's default: 10%
    # The command line's spelling replaces the file's (tiny.yaml sets warmup_ratio)...
    assert load_config("configs/train/tiny.yaml", ["--warmup_steps", "3"]).optimizer.num_warmup_steps(8) == 3
    # ... but one source giving both is a contradiction naming both.
    with pytest.raises(ValueError, match="warmup_steps .* warmup_ratio .* both set"):
        load_config(None, ["--warmup_steps", "3", "--warmup_ratio", "0.1"])
    with pytest.raises(ValueError, match="warmup_steps must be"):
        load_config(None, ["--warmup_steps", "2.5"])


def test_precision_aliases():
    assert load_config(None, ["--bf16", "true"]).mixed_precision == "bf16"
    assert load_config(None, ["--fp16"]).mixed_precision == "fp16"
    assert load_config("configs/train/demo.yaml", ["--fp16"]).mixed_precision == "fp16"  # demo.yaml says bf16
    assert load_config(None, ["--bf16", "false"]).mixed_precision == "no"
    with pytest.raises(ValueError, match="bf16 and fp16 are both true"):
        load_config(None, ["--bf16", "--fp16"])
    with pytest.raises(ValueError, match="fp16 is true but mixed_precision is 'bf16'"):
        load_config(None, ["--fp16", "--mixed_precision", "bf16"])


def test_report_to_save_strategy_and_scheduler_names():
    assert load_config(None, ["--report_to", "tensorboard,wandb"]).report_to == ["tensorboard", "wandb"]
    assert load_config(None, ["--report_to", "none"]).report_to == []
    with pytest.raises(ValueError, match="report_to must be"):
        load_config(None, ["--report_to", "tensorbored"])
    with pytest.raises(ValueError, match="save_strategy must be"):
        load_config(None, ["--save_strategy", "sometimes"])
    from solution.checkpoints.checkpointer import SavePolicy

    epoch = SavePolicy.from_config(load_config(None, ["--save_strategy", "epoch", "--save_steps", "2"]))
    assert not epoch(2, epoch_end=False) and epoch(3, epoch_end=True)
    steps = SavePolicy.from_config(load_config(None, ["--save_steps", "2"]))
    assert steps(2, epoch_end=False) and not steps(3, epoch_end=False) and not steps(4, epoch_end=True)
    assert not SavePolicy.from_config(load_config(None, ["--save_strategy", "no", "--save_steps", "2"]))(2, False)
    probe = SavePolicy.from_config(load_config(None, ["--save_steps", "10", "--save_first_step", "true"]))
    assert probe(1, epoch_end=False) and not probe(1, epoch_end=True) and not probe(2, epoch_end=False)
    probe.first_step = 6  # a resumed start at step 5 probes after step 6
    assert probe(6, epoch_end=False) and not probe(1, epoch_end=False) and probe(10, epoch_end=False)
    from transformers import SchedulerType

    from solution.training.optimizer import LR_SCHEDULERS

    assert set(LR_SCHEDULERS) <= {t.value for t in SchedulerType}
    with pytest.raises(ValueError, match="lr_scheduler_type must be one of"):
        load_config(None, ["--lr_scheduler_type", "cosine_annealing"])


# --- negative sampling as a section --------------------------------------------------------------


def test_sampling_section_and_plain_names(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sampling:\n  negative_keep_rate: 0.2\n  unanswerable_keep_rate: 0.1\n")
    cfg = load_config(str(path), ["--hard-negative-fraction", "0.25"])
    assert (cfg.sampling.negative_keep_rate, cfg.sampling.unanswerable_keep_rate) == (0.2, 0.1)
    assert cfg.sampling.hard_negative_fraction == 0.25 and cfg.negative_keep_rate == 0.2
    assert load_config(str(path), ["--negative_keep_rate", "0.5"]).sampling.negative_keep_rate == 0.5
    assert "sampling:\n  negative_keep_rate: 0.2" in cfg.to_yaml()
    flat = load_config("configs/train/tiny.yaml")  # top-level keys, as the shipped files write them
    assert flat.sampling.negative_keep_rate == 0.1
    from solution.windows.sampling import NegativeSampling

    assert TrainConfig().sampling == NegativeSampling()  # one dataclass, one default
    assert NegativeSampling().negative_keep_rate == 0.05
    path.write_text("negative_keep_rate: 0.2\nsampling:\n  negative_keep_rate: 0.3\n")
    with pytest.raises(ValueError, match="both as a top-level key and in the 'sampling:' section"):
        load_config(str(path))


def test_setting_names_are_unique_across_sections():
    owners = _field_owner()
    assert owners["negative_keep_rate"][0] == "sampling" and owners["max_seq_length"][0] == "window"

    @dataclasses.dataclass
    class Clash:
        seed: int = 0

    with pytest.raises(ValueError, match="setting 'seed' of section 'clash' is also declared by the top level"):
        _field_owner({**SECTIONS, "clash": Clash})

    @dataclasses.dataclass
    class Twin:
        top_k: int = 1

    with pytest.raises(ValueError, match="'top_k' of section 'twin' is also declared by section 'postprocess'"):
        _field_owner({**SECTIONS, "twin": Twin})


def test_tracker_config_is_flat_scalars():
    flat = load_config("configs/train/tiny.yaml").tracker_config()
    assert flat["max_seq_length"] == 128 and flat["negative_keep_rate"] == 0.1
    assert all(isinstance(v, (bool, int, float, str)) for v in flat.values())


# --- tiny trainings: trackers, warmup spellings, schedules ----------------------------------------


def _train(tmp_path, name, *args):
    out = tmp_path / name
    proc = subprocess.run(
        [sys.executable, "-m", "solution.train", "--config", "configs/train/tiny.yaml", "--data_source", "dummy",
         "--dummy_num_windows", "24", "--max_steps", "6", "--logging_steps", "1", "--disable_tqdm",
         "--output_dir", str(out), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return out, [r["lr"] for r in records if "lr" in r]


@pytest.mark.slow  # three tiny trainings in subprocesses (~40 s)
def test_tensorboard_warmup_spellings_and_schedules(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, linear = _train(tmp_path, "linear", "--report_to", "tensorboard", "--warmup_steps", "2")
    events = list(out.glob("nq-bert-qa/**/events.out.tfevents.*"))
    assert events, sorted(p.relative_to(out) for p in out.rglob("*"))
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert "train/loss" in acc.Tags()["scalars"]
    assert [e.step for e in acc.Scalars("train/loss")] == [1, 2, 3, 4, 5, 6]
    assert linear[:3] == pytest.approx([0.0, 5e-4, 1e-3])  # transformers' warmup starts at 0
    assert not list(out.glob("checkpoint-*"))  # save_steps 0: no checkpoint
    cosine_out, cosine = _train(tmp_path, "cosine", "--lr_scheduler_type", "cosine", "--warmup-steps=2",
                                "--save_strategy", "epoch")
    assert cosine[:3] == linear[:3] and cosine[3:] != pytest.approx(linear[3:])
    # 24 windows / 4 a batch: the 6 steps are one epoch, saved at its end.
    assert sorted(p.name for p in cosine_out.glob("checkpoint-*")) == ["checkpoint-6"]
    _, ratio = _train(tmp_path, "ratio", "--warmup_steps", "0.5", "--dataloader_num_workers", "1")
    assert ratio[:4] == pytest.approx([0.0, 1e-3 / 3, 2e-3 / 3, 1e-3])  # half of 6 steps: 3


# A test-side entry point: the named packages are absent (None in sys.modules: an import of one fails and
# importlib finds no spec), then solution.train's main runs with the remaining arguments.
WITHOUT_PACKAGES = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from solution.train import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("tracker,packages", [("wandb", "wandb"), ("tensorboard", "tensorboard,tensorboardX")])
def test_a_tracker_whose_package_is_missing_is_refused_at_start(tracker, packages, tmp_path):
    """Accelerate drops such a tracker with a debug message and the run trains untracked; it must stop
    before anything starts, in one line naming the package."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_PACKAGES, packages, "--config", "configs/train/tiny.yaml", "--data_source",
         "dummy", "--dummy_num_windows", "8", "--max_steps", "1", "--disable_tqdm", "--report_to", tracker,
         "--output_dir", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1].startswith(f"error: config: report_to {tracker}, but the package {tracker}"), \
        proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and not (out / "metrics.jsonl").exists()


def test_warmup_that_lasts_the_whole_run_is_warned_about():
    from solution.training.optimizer import warmup_warning

    def optimizer(*overrides):
        return load_config(None, list(overrides)).optimizer

    assert warmup_warning(optimizer("--warmup_steps", "5"), 6) is None
    assert warmup_warning(optimizer("--warmup_steps", "0.99"), 6) is None  # a ratio never covers the run
    assert warmup_warning(optimizer("--warmup_steps", "6", "--lr_scheduler_type", "constant"), 6) is None
    for steps in ("6", "100"):
        line = warmup_warning(optimizer("--warmup_steps", steps, "--learning_rate", "3e-5"), 6)
        assert line == (f"WARNING: warmup_steps {steps} >= the run's 6 optimizer steps: the learning rate never "
                        "reaches learning_rate 3e-05; lower warmup_steps or give a ratio below 1")


@pytest.mark.slow  # a tiny training in a subprocess
def test_a_run_shorter_than_its_warmup_says_so_once(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "solution.train", "--config", "configs/train/tiny.yaml", "--data_source", "dummy",
         "--dummy_num_windows", "8", "--max_steps", "2", "--warmup_steps", "10", "--disable_tqdm",
         "--output_dir", str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [line for line in proc.stdout.splitlines() if line.startswith("WARNING")] == [
        "WARNING: warmup_steps 10 >= the run's 2 optimizer steps: the learning rate never reaches learning_rate "
        "0.001; lower warmup_steps or give a ratio below 1"], proc.stdout[-3000:]


def test_resolved_config_reloads(tmp_path):
    """config.yaml, written with every run, loads back to the same config (aliases resolved, sampling section)."""
    cfg = load_config("configs/train/demo.yaml", ["--fp16", "--report_to", "tensorboard", "--warmup_steps", "5",
                                                  "--negative_keep_rate", "0.2"])
    path = tmp_path / "config.yaml"
    path.write_text(cfg.to_yaml())
    assert load_config(str(path)) == cfg


def test_global_batch_size_derives_the_accumulation_for_each_world_size():
    """An elastic run keeps its global batch (what a step and a checkpoint mean) at whatever world size a
    restart gives it: the accumulation is recomputed, as DeepSpeed's elasticity config does. The strategy
    derives it (`derive_accumulation`) and writes nothing into the config."""
    from solution.distributed.plan import derive_accumulation

    cfg = load_config(None, ["--per_device_train_batch_size", "2", "--global_batch_size", "8"])
    for world, accumulation in ((1, 4), (2, 2), (4, 1)):
        steps, line = derive_accumulation(cfg.training_facts(), world)
        assert steps == accumulation and cfg.gradient_accumulation_steps == 1
        assert line == f"global_batch_size 8 at world size {world}: 2 per device x {accumulation} accumulation steps"
    with pytest.raises(ValueError, match=r"global_batch_size 8 is not a multiple of per_device_train_batch_size 2 "
                                         r"x world size 3 \(6\)"):
        derive_accumulation(cfg.training_facts(), 3)
    with pytest.raises(ValueError, match="global_batch_size .8. and gradient_accumulation_steps .2. are both set"):
        load_config(None, ["--global_batch_size", "8", "--gradient_accumulation_steps", "2"])
    plain = load_config(None, ["--gradient_accumulation_steps", "2"])
    assert derive_accumulation(plain.training_facts(), 4) == (2, None)


def test_overrun_labels_need_overrun_scoring():
    from solution.answers.postprocess import PostprocessConfig
    from solution.windows.featurizer import WindowConfig

    with pytest.raises(ValueError, match="long_overrun_labels is true but long_overrun is false"):
        TrainConfig(window=WindowConfig(long_overrun_labels=True))
    TrainConfig(window=WindowConfig(long_overrun_labels=True), postprocess=PostprocessConfig(long_overrun=True))


def test_set_key_value_and_key_value_are_one_parser_with_the_same_boolean_words():
    """`--set KEY=VALUE` (as predict and evaluate take post-processing settings) is `--KEY VALUE`, and both
    read true/false with the same words as post-processing's --set does."""
    from solution.answers.postprocess import PostprocessConfig
    from solution.common.settings import apply_overrides
    from solution.training.config import parse_command_line

    for word, value in (("on", True), ("off", False), ("yes", True), ("0", False)):
        _, dashes = parse_command_line(["--disable_tqdm", word], "train", "")
        _, sets = parse_command_line(["--set", f"disable_tqdm={word}"], "train", "")
        assert load_config(None, dashes).disable_tqdm is value
        assert load_config(None, sets).disable_tqdm is value
        assert apply_overrides(PostprocessConfig(), [f"top_level_only={word}"]).top_level_only is value
    _, sets = parse_command_line(["--set", "learning_rate=0.5", "--set", "n_best_size=3"], "train", "")
    cfg = load_config(None, sets)
    assert cfg.learning_rate == 0.5 and cfg.postprocess.n_best_size == 3
    with pytest.raises(ValueError, match="no_such_setting"):
        parse_command_line(["--set", "no_such_setting=1"], "train", "")
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_command_line(["--set", "learning_rate"], "train", "")
    with pytest.raises(ValueError, match="given twice"):
        parse_command_line(["--learning_rate", "1", "--set", "learning_rate=2"], "train", "")


def test_the_first_pass_is_a_window_setting_and_its_old_place_still_loads(tmp_path):
    """`max_windows_per_document` decides which windows the model runs: a window setting, which training's
    dev evaluation and prediction read alike. A config that gives it under postprocess, as configs did
    before, still loads, the value moved to window."""
    old = tmp_path / "old.yaml"
    old.write_text("postprocess:\n  max_windows_per_document: 8\n  long_overrun: true\n")
    cfg = load_config(str(old))
    assert cfg.window.max_windows_per_document == 8 and cfg.postprocess.long_overrun
    assert not hasattr(cfg.postprocess, "max_windows_per_document")
    assert load_config(None, ["--max_windows_per_document", "4"]).window.max_windows_per_document == 4
    both = tmp_path / "both.yaml"
    both.write_text("postprocess:\n  max_windows_per_document: 8\nwindow:\n  max_windows_per_document: 4\n")
    with pytest.raises(ValueError, match="max_windows_per_document"):
        load_config(str(both))
    for name in ("demo", "nq-profile"):
        assert load_config(str(ROOT / f"configs/train/{name}.yaml")).window.max_windows_per_document > 0


# -- every rank runs the same settings ----------------------------------------------------------------
def test_settings_that_differ_between_ranks_are_named_with_each_group_of_ranks():
    from solution.training.agreement import compared_settings, settings_disagreement

    base = compared_settings(load_config("configs/train/tiny.yaml", []))
    assert settings_disagreement([base, dict(base)]) is None
    other = compared_settings(load_config("configs/train/tiny.yaml", ["--learning_rate", "0.05", "--doc_stride", "16"]))
    assert settings_disagreement([base, base, other, other]) == (
        "the ranks do not run the same settings: window.doc_stride is 32 on ranks 0-1 and 16 on ranks 2-3; "
        "optimizer.learning_rate is 0.001 on ranks 0-1 and 0.05 on ranks 2-3; start every node with the same "
        "config and arguments")
    # Sized to each machine, never compared: featurising processes and loader workers.
    sized = compared_settings(load_config("configs/train/tiny.yaml", ["--num_proc", "4", "--dataloader_num_workers", "2"]))
    assert settings_disagreement([base, sized]) is None
    paths = compared_settings(load_config("configs/train/tiny.yaml", ["--cache_dir", "/mnt/b/cache"]))
    assert settings_disagreement([base, paths, base]) == (
        'the ranks do not run the same settings: cache_dir is "cache/features" on ranks 0,2 and "/mnt/b/cache" on '
        "rank 1; start every node with the same config and arguments")


def node(node_rank: int, port: int, out, *extra) -> list:
    """One of two torchrun agents (`--nnodes 2`, static rendezvous on this machine), one rank each: what two
    nodes run, each with its own command line."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node_rank),
            "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
            "-m", "solution.train", "--config", "configs/train/tiny.yaml", "--data_source", "dummy",
            "--dummy_num_windows", "32", "--optim", "sgd", "--weight_decay", "0", "--max_steps", "4",
            "--eval_strategy", "no", "--disable_tqdm", "true", "--per_device_train_batch_size", "2",
            "--output_dir", str(out), *extra]


@pytest.mark.slow  # two launchers, two ranks
def test_nodes_started_with_different_settings_stop_before_training_naming_them(tmp_path):
    """Two nodes, one started with --learning_rate 0.3 and the other with 0.05 (and another num_proc, which
    each machine may size for itself): both ranks exit 2 before training, with one line naming the setting
    and each rank's value; nothing is trained and no config.yaml claims a setting for the run."""
    from solution.distributed.ports import free_port

    port, out = free_port(), tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    logs = [tmp_path / f"node-{n}.txt" for n in (0, 1)]
    extra = [["--learning_rate", "0.3"], ["--learning_rate", "0.05", "--num_proc", "2"]]
    procs = [subprocess.Popen(node(n, port, out, *extra[n]), cwd=ROOT, env=env, stdout=log.open("w"),
                              stderr=subprocess.STDOUT) for n, log in enumerate(logs)]
    try:
        for proc in procs:
            proc.wait(timeout=300)
    finally:
        for proc in procs:
            proc.kill()
    texts = [log.read_text() for log in logs]
    for proc, text in zip(procs, texts):
        assert proc.returncode != 0 and "exitcode  : 2" in text, text[-3000:]
    lines = [x for text in texts for x in text.splitlines() if x.startswith("error:")]
    assert lines == ["error: the ranks do not run the same settings: optimizer.learning_rate is 0.3 on rank 0 and "
                     "0.05 on rank 1; start every node with the same config and arguments"], texts[0][-3000:]
    assert not (out / "config.yaml").exists() and not (out / "metrics.jsonl").exists()


def test_optimizer_and_distributed_settings_load_flat_or_in_their_sections(tmp_path):
    """A config written before the `optimizer:` and `distributed:` sections existed (a run's config.yaml, a
    user's YAML) loads to the same config as one written with them; the old attribute names still read."""
    flat = tmp_path / "flat.yaml"
    flat.write_text("learning_rate: 3.0e-5\noptim: sgd\nweight_decay: 0\nwarmup_ratio: 0.2\nstrategy: single\n"
                    "hang_timeout: 30\n")
    sections = tmp_path / "sections.yaml"
    sections.write_text("optimizer:\n  learning_rate: 3.0e-5\n  optim: sgd\n  weight_decay: 0\n  warmup_ratio: 0.2\n"
                        "distributed:\n  strategy: single\n  hang_timeout: 30\n")
    cfg = load_config(str(flat))
    assert cfg == load_config(str(sections))
    assert (cfg.optimizer.learning_rate, cfg.optimizer.optim, cfg.distributed.strategy,
            cfg.distributed.hang_timeout) == (3e-5, "sgd", "single", 30.0)
    assert (cfg.learning_rate, cfg.strategy) == (3e-5, "single")
    # The command line's spelling of the warm-up replaces the file's other spelling, in its section too.
    assert load_config(str(sections), ["--warmup_steps", "4"]).optimizer.num_warmup_steps(100) == 4
    both = tmp_path / "both.yaml"
    both.write_text("learning_rate: 1.0e-4\noptimizer:\n  learning_rate: 3.0e-5\n")
    with pytest.raises(ValueError, match="'learning_rate' is set both as a top-level key and in the 'optimizer:' "
                                         "section"):
        load_config(str(both))

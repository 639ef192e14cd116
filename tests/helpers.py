"""What several test modules share, in one place: plain functions and constants (the shared fixtures are in
tests/conftest.py). A test module imports from here or from conftest, never from another test module.

The project's modules are imported inside the functions that use them, so that importing this file costs a
test module nothing it does not use."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from conftest import ROOT, nq_line, shared_output, write_jsonl


def load_script(name: str):
    """scripts/`name` imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), ROOT / "scripts" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def polarity_pages() -> tuple:
    """(score records, gold lines) of twenty yes/no pages a polarity model read, leaning to NO: the NO pages'
    margins from -5 to -4, the YES pages' from -2 to +1 (at 0 it reads the 10 NO pages and 3 YES pages right;
    at -3.05, all 20)."""
    margins = [-5 + 0.1 * k for k in range(10)] + [-2 + 0.3 * k for k in range(10)]
    gold = ["NO"] * 10 + ["YES"] * 10
    records = [{"example_id": str(k + 1), "raw_long": "1:11", "raw_short": "YES" if m > 0 else "NO",
                "answer_type": "YES" if m > 0 else "NO", "score": 5.0, "short_score": 0.0, "yes_score": 4.0,
                "no_score": 4.0, "polarity_margin": m} for k, m in enumerate(margins)]
    return records, [nq_line(example_id=str(k + 1), long=0, yes_no=g) for k, g in enumerate(gold)]


# -- tiny model directories ------------------------------------------------------------------------------

TINY = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}


# Thresholds far below any score: a random model then answers every document, so rows differ where logits do.
ANSWER_ALL = {"long_threshold": -1e6, "short_threshold": -1e6}


def write_model_dir(out, overrides=TINY, seed=0, postprocess=None, type_bias=None):
    """A model directory of the tiny BERT with random weights (seeded) and windows of 128 tokens;
    `postprocess` changes settings of the post-processing it saves; `type_bias` ({answer type: value}) is
    added to the answer-type head's bias, so that the model types every window so (a value far above the
    random logits)."""
    import torch

    from solution.model import qa_model
    from solution.training.config import TrainConfig
    from solution.windows.featurizer import ANSWER_TYPES

    cfg = TrainConfig(pretrained=False, model_config_overrides=overrides)
    torch.manual_seed(seed)
    model = qa_model.build_model(cfg.model_name_or_path, False, cfg.backbone_overrides)
    with torch.no_grad():
        for name, value in (type_bias or {}).items():
            model.answer_type_head.bias[ANSWER_TYPES.index(name)] += value
    window = {**asdict(cfg.window), "max_seq_length": 128, "doc_stride": 32, "max_question_length": 24}
    return qa_model.save_model_dir(out, model.state_dict(), model.config,
                                   qa_model.load_tokenizer(cfg.model_name_or_path),
                                   {"window": window, "postprocess": {**asdict(cfg.postprocess), **(postprocess or {})},
                                    "training": {"seed": seed}})


def settings_dir(out: Path, postprocess=None) -> Path:
    """A folder holding only a model directory's settings (`qa_config.json`: default windows, post-processing
    with `postprocess` changed): what `solution.evaluate --tune --model` reads and writes, no weights."""
    from solution.answers.postprocess import PostprocessConfig
    from solution.model.qa_config import write_qa_config
    from solution.windows.featurizer import WindowConfig

    out.mkdir()
    write_qa_config(out, {"window": asdict(WindowConfig()),
                          "postprocess": {**asdict(PostprocessConfig()), **(postprocess or {})}}, tokenizer_size=30522)
    return out


def plain_checkpoint(ckpt):
    """checkpoint-N as a single process writes it (model.safetensors), with what consolidation reads."""
    import shutil

    from solution.checkpoints.state import TrainerState

    write_model_dir(ckpt / "model_meta")
    shutil.copy(ckpt / "model_meta" / "model.safetensors", ckpt / "model.safetensors")
    (ckpt / "trainer_state.json").write_text(TrainerState(1, 0, 1, {}).to_json())
    return ckpt


# -- the checkpointer in one process, without Accelerate -------------------------------------------------

class FakeAccelerator:
    """A stand-in for Accelerate's save_state/load_state: writes the RNG file load() requires, or fails."""
    is_main_process, num_processes, process_index = True, 1, 0

    def __init__(self, fail_with=None):
        self.fail_with, self.loaded = fail_with, None

    def wait_for_everyone(self):
        pass

    def save_state(self, output_dir):
        Path(output_dir).mkdir(parents=True)
        (Path(output_dir) / "random_states_0.pkl").write_bytes(b"")  # the RNG file load() requires
        if self.fail_with:
            raise OSError(self.fail_with, "No space left on device", output_dir)

    def load_state(self, path):
        self.loaded = path


class FakeScheduler:
    def __init__(self, value=0):
        self.value = value

    def state_dict(self):
        return {"value": self.value}

    def load_state_dict(self, state):
        self.value = state["value"]


FINGERPRINT = {"strategy": "ddp", "world_size": 1, "per_device_train_batch_size": 4}


def checkpointer(out, every=2, limit=None, acc=None, scheduler=None):
    """A Checkpointer saving every `every` steps through FakeAccelerator."""
    from solution.checkpoints.checkpointer import Checkpointer

    return Checkpointer(acc or FakeAccelerator(), out, scheduler or FakeScheduler(7), FINGERPRINT,
                        save_due=lambda step, epoch_end: not epoch_end and step % every == 0,
                        save_total_limit=limit, log=lambda msg: None)


# -- the feature cache's small corpus --------------------------------------------------------------------

def cache_window():
    """The windows the feature-cache tests build: 64 tokens, stride 8."""
    from solution.windows.featurizer import WindowConfig

    return WindowConfig(max_seq_length=64, doc_stride=8, max_question_length=16)


def corpus(path, n=12, bad_line=None):
    """`n` pages of eight paragraphs, each question answered by one paragraph's last word."""
    lines = []
    for i in range(n):
        doc = "T <H1> T </H1> " + " ".join(f"<P> para {i} {j} says the capital is Place{j} . </P>" for j in range(8))
        toks = doc.split()
        s = toks.index(f"Place{i % 8}")
        lines.append(nq_line(example_id=str(1000 + i), document=doc, long=i % 8, shorts=[(s, s + 1)],
                             question=f"capital {i % 8}"))
    if bad_line is not None:
        lines.insert(3, bad_line)
    return write_jsonl(path, lines)


def rows(ds):
    """A window dataset's rows, sorted, as comparable tuples."""
    return sorted((r["example_id"], r["window_index"], tuple(r["input_ids"]), r["start_positions"],
                   r["answer_type"]) for r in ds)


# -- one-process trainings of the tiny BERT (resumes, the loop's shortcuts) ------------------------------

RESUME_RUN = ["--config", "configs/train/tiny.yaml", "--data_source", "dummy", "--dummy_num_windows", "16",
              "--per_device_train_batch_size", "8", "--optim", "sgd", "--weight_decay", "0",
              "--learning_rate", "0.3", "--dropout", "0.1",
              "--logging_steps", "1", "--eval_strategy", "no", "--disable_tqdm", "true"]
TRAIN_ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def train(out: Path, *extra, entry=("-m", "solution.train")) -> subprocess.CompletedProcess:
    """RESUME_RUN into `out`, `extra` arguments added (`entry` may be tests/faulty_train.py and a fault)."""
    return subprocess.run([sys.executable, *entry, *RESUME_RUN, "--output_dir", str(out), *extra], cwd=ROOT,
                          env=TRAIN_ENV, capture_output=True, text=True, timeout=300)


def steps(out: Path) -> dict:
    """step -> the record metrics.jsonl logged for it."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in records if "loss" in r and "event" not in r}


def error_lines(proc) -> list:
    return [line for line in proc.stderr.splitlines() if line.startswith(("error:", "stopped by"))]


# -- launches of two CPU ranks through the launchers users run -------------------------------------------

BIN = Path(sys.executable).parent
STEPS = 6
COMMON = ["--config", "configs/train/tiny.yaml", "--data_source", "dummy", "--dummy_num_windows", "256",
          "--optim", "sgd", "--weight_decay", "0", "--learning_rate", "0.3", "--max_grad_norm", "0", "--max_steps", str(STEPS),
          "--logging_steps", "1", "--eval_strategy", "no", "--disable_tqdm", "true",
          # Saved with the model: thresholds so low that the submission test's predictions are never blank.
          "--long_threshold", "-1e9", "--short_threshold", "-1e9"]
TWO_RANKS = ["--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "2"]

PORTS: set = set()  # every rendezvous port launch() used, for test_strategies' shared-memory check


def new_port() -> str:
    """A free port for one launch, remembered in PORTS."""
    from solution.distributed.ports import free_port

    port = str(free_port())
    PORTS.add(port)
    return port


def launch(strategy: str, launcher: str, out: Path, extra=(), env_extra=None, timeout=300, fault=None, port=None,
           ranks: int = 2):
    """`ranks` processes (two by default) of `python -m solution.train` through a real launcher; with
    `fault`, torchrun runs tests/faulty_train.py, which patches that fault in and then calls solution.train's
    main. `strategy` names the launch config (accelerate, deepspeed) or is passed as --strategy (torchrun)."""
    from solution.distributed.lifecycle import remove_shm_buffers

    port = port or new_port()
    entry = ["-m", "solution.train"] if fault is None else ["tests/faulty_train.py", fault]
    assert fault is None or launcher == "torchrun"
    batch = TWO_RANKS if ranks == 2 else ["--per_device_train_batch_size", str(8 // ranks)]
    train = [*entry, *COMMON, *batch, "--output_dir", str(out), *extra]
    if launcher == "accelerate":
        cmd = [str(BIN / "accelerate"), "launch", "--config_file", f"configs/accelerate/{strategy}.yaml",
               "--num_processes", str(ranks), "--main_process_port", port, *train]
    elif launcher == "deepspeed":
        cmd = [str(BIN / "deepspeed"), "--num_gpus", str(ranks), "--master_port", port, "--module", *train[1:],
               "--deepspeed", f"configs/ds/{strategy}.json"]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks), "--master_port", port,
               *train, "--strategy", strategy]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env_extra or {})}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        remove_shm_buffers(port)  # a killed or failed run had no chance to unlink its DeepSpeed buffers
        raise AssertionError(f"{strategy} via {launcher} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return read_run(out)


def read_run(out: Path) -> dict:
    """A finished run: its start record, step -> record, its model's weights, and `out`."""
    from safetensors.torch import load_file

    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = {r["step"]: r for r in records if "loss" in r and "event" not in r}
    start = [r for r in records if r.get("event") == "start"][-1]  # a resumed run appends a second one
    return {"start": start, "steps": steps, "weights": load_file(str(out / "model" / "model.safetensors")),
            "out": out}


# Two ranks, a checkpoint every 2 steps, 24 windows (an epoch is 3 steps), dropout 0.1: the uninterrupted
# run that a resumed one must equal bit for bit (same shuffle, same dropout draws), also the synchronous
# run that tests/checkpoints/test_async_save.py compares its background saves with. One per strategy and session.
UNINTERRUPTED = ["--save_steps", "2", "--max_steps", "8", "--dummy_num_windows", "24", "--dropout", "0.1"]


def uninterrupted(strategy: str, tmp_path_factory) -> dict:
    def build(out: Path) -> None:
        launch(strategy, "torchrun", out, extra=UNINTERRUPTED, timeout=900)

    return read_run(shared_output(tmp_path_factory, f"uninterrupted-{strategy}", build))


def records(out: Path) -> list:
    """Every record of a run's metrics.jsonl."""
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def weights(out: Path) -> dict:
    """The weights of a run's model directory."""
    from safetensors.torch import load_file

    return load_file(str(out / "model" / "model.safetensors"))


def kill_tree(pid: int, sig=signal.SIGKILL) -> None:
    """`sig` to a process and all its descendants (those that are still there)."""
    import psutil

    try:
        top = psutil.Process(pid)
        family = [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in family:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass

"""The commands the GPU check's parts launch, as a user would type them: the trainer under a small probe that
records peak GPU memory, one process or under torchrun, and `submission.predict` on the real NQ pages."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from solution.distributed.ports import free_port

# Runs the trainer's own entry point and, at exit, writes this process's peak GPU memory and the
# loss scale of any GradScaler it used: the trainer itself has no such reading, and this keeps it so.
WRAPPER = r"""
import atexit, json, runpy, sys
import torch
out = sys.argv.pop(1)
state = {}
_update = torch.amp.GradScaler.update
def update(self, new_scale=None):
    result = _update(self, new_scale)
    state["loss_scale"] = float(self.get_scale())
    state["scaler_updates"] = state.get("scaler_updates", 0) + 1
    return result
torch.amp.GradScaler.update = update
def dump():
    state.update(max_memory_allocated_bytes=torch.cuda.max_memory_allocated(),
                 max_memory_reserved_bytes=torch.cuda.max_memory_reserved())
    with open(out, "w") as f:
        json.dump(state, f)
atexit.register(dump)
sys.argv[0] = "solution.train"
runpy.run_module("solution.train", run_name="__main__", alter_sys=True)
"""


def train_overrides(args, name: str, strategy: str, precision: str, steps: int, config: str, extra=(),
                    batch=None, window: bool = True) -> list:
    """`batch`: per device (--batch-size); `window` False keeps the config's own window length."""
    seq, batch = args.max_seq_length, batch or args.batch_size
    # 64-token questions and BERT-joint's step of 128 pieces, as the real-data recipe.
    lengths = ["--max_seq_length", str(seq), "--max_question_length", str(seq // 8),
               "--doc_stride", str(seq - seq // 8 - 3 - seq // 4)] if window else []
    return ["--config", config, "--strategy", strategy, "--mixed_precision", precision,
            "--model_name_or_path", args.backbone,
            "--data_source", "dummy", "--dummy_num_windows", str(batch * steps),
            "--max_steps", str(steps), "--per_device_train_batch_size", str(batch), *lengths,
            "--measure_memory", "true", "--logging_steps", "1", "--output_dir", str(Path(args.work) / name),
            "--overwrite_output_dir", "true", *extra]


def train_command(args, name: str, strategy: str, precision: str, nproc: int, probe: Path,
                  config=None, steps=None, extra=(), batch=None, window: bool = True) -> list:
    """The wrapper around `solution.train`: a plain process for `single`, under torchrun for the others."""
    overrides = train_overrides(args, name, strategy, precision, steps or args.steps, config or args.config, extra,
                                batch, window)
    command = [sys.executable, "-c", WRAPPER, str(probe), *overrides]
    if strategy == "single":
        # Under a launcher, even with one rank, Accelerate wraps the model in DDP, and the trainer
        # refuses `single` with another engine: single is one process without a launcher.
        return command
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
            "--master_port", str(free_port()), "--no-python", *command]


def predict_command(args, model: str, name: str) -> list:
    return [sys.executable, "-m", "submission.predict", "--model", model, "--input", str(Path(args.work) / "pages.jsonl"),
            "--output", str(Path(args.out) / f"{name}.csv"), "--device", args.device, "--precision", "auto",
            "--quiet"]


@dataclass
class Group:
    """Commands that run at the same time, each chain of them in order: {chain name: [command, ...]}. The
    reading part's trainings share one GPU (MiniLM's step leaves it mostly idle) and its pages the host's
    cores; one after another they would not fit one call."""

    chains: dict

    @staticmethod
    def label(chain: str, k: int, length: int) -> str:
        """The name of a chain's k-th command (its log's name): the chain's own when it holds one."""
        return f"{chain}-{k}" if length > 1 else chain

    def commands(self) -> list:
        return [(self.label(name, k, len(cmds)), cmd) for name, cmds in self.chains.items() for k, cmd in enumerate(cmds)]


def shown(cmd: list) -> str:
    """The command as a user would read it: `python` for the interpreter, the wrapper's code named, not printed."""
    wrapper = "'<wrapper: runs solution.train, records peak GPU memory>'"
    return " ".join("python" if c == sys.executable else wrapper if c == WRAPPER else c for c in cmd)

"""A test-side entry point: `python tests/faulty_train.py FAULT [solution.train arguments ...]`,
also launched as the script of `torchrun ... tests/faulty_train.py FAULT ...`.

Patches a fault into what `solution.train` calls, then runs its `main`, so that nothing in
`solution/` carries test-only branches. FAULT is one of:
  enospc-checkpoint-N      the N-th `Accelerator.save_state` writes its files, then raises ENOSPC
                           (a disk that fills up halfway through checkpoint-N.tmp)
  eio-checkpoint-N         the N-th `Accelerator.save_state` writes its files, then raises EIO (a storage
                           that fails: what save_first_step is there to find in the first minute)
  enospc-model             the final model's safetensors file is written in part, then raises ENOSPC
  kill-after-step-N        SIGKILL right after the checkpoint of step N (or the first one past it),
  kill-rank-R-after-step-N   on every rank or on rank R only, as a crash or an OOM kill would
  kill-in-save-N           SIGKILL once checkpoint-N.tmp holds the engine's state, before it is complete
  slow-eval-S              every dev-evaluation forward sleeps S seconds first (an evaluation that takes
                           minutes); the first forward of each evaluation prints "faulty_train: evaluating"
  slow-checkpoint-writes-S an asynchronous save's writer thread sleeps S seconds before it writes (a slow
                           storage: training goes on, and changes its tensors, while the checkpoint is written)
  slow-features-S          featurising the training file takes S seconds a document; the first document
                           prints "faulty_train: featurising" (in each featurising process)
  record-samples           every training sample carries its index (input_ids[1] = 1000 + index) and each
                           micro-batch appends {rank, epoch, step, ids} to $SAMPLE_LOG/rank-R-pidP.jsonl
  overflow-steps-N         the first N optimizer steps overflow as under fp16's loss scaler (which the CPU
                           lacks): the gradient norm is inf, the optimizer skips the step and says so
  grad-scaler-K            a real GradScaler (Accelerate makes none on the CPU) with an initial scale of 2**K:
                           the first steps' scaled gradients overflow and it skips them, as fp16 does on a GPU
  count-reads              not a fault, an instrument: every call that reads a tensor's value on the host
                           (item, tolist, __float__, __int__, __bool__, __index__, numpy, cpu) outside the
                           loader's fetch is counted by the optimizer step it belongs to (from the first
                           micro-batch of step N to the first of step N+1) and written, with the phase and
                           the caller, to $READ_LOG/rank-R.jsonl when the process exits
  FAULT+FAULT              several at once (record-samples+kill-after-step-4)
  sum-gradients            bugs the strategy-equivalence test must catch: gradients summed over ranks,
  same-data                every rank reading the whole loader (the same batches),
  double-accumulation      accumulated gradients not divided by the accumulation steps
"""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def no_space(path) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", str(path))


def wrap_save_state(after) -> None:
    """Accelerator.save_state, then `after(output_dir, call_number)`."""
    import accelerate

    original = accelerate.Accelerator.save_state
    calls = {"n": 0}

    def save_state(self, output_dir=None, *args, **kwargs):
        calls["n"] += 1
        result = original(self, output_dir, *args, **kwargs)
        after(Path(output_dir), calls["n"])
        return result

    accelerate.Accelerator.save_state = save_state


def fail_storage_in_checkpoint(n: int) -> None:
    def after(output_dir: Path, call: int) -> None:
        if call == n:
            raise OSError(errno.EIO, "Input/output error", str(output_dir / "optimizer.bin"))

    wrap_save_state(after)


def fill_disk_in_checkpoint(n: int) -> None:
    def after(output_dir: Path, call: int) -> None:
        if call == n:
            raise no_space(output_dir / "optimizer.bin")

    wrap_save_state(after)


def fill_disk_in_model_save() -> None:
    import safetensors.torch

    def save_file(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 1024)  # part of the file made it to disk
        raise no_space(filename)

    safetensors.torch.save_file = save_file


def kill_in_save(step: int) -> None:
    def after(output_dir: Path, call: int) -> None:
        if output_dir.name == f"checkpoint-{step}.tmp":
            os.kill(os.getpid(), signal.SIGKILL)

    wrap_save_state(after)


def kill_after_checkpoint(step: int, rank) -> None:
    if rank is not None and int(os.environ.get("RANK", "0")) != rank:
        return
    from solution.checkpoints.checkpointer import Checkpointer

    original = Checkpointer.save

    def save(self, at_step, *args, **kwargs):
        path = original(self, at_step, *args, **kwargs)
        if at_step >= step:
            os.kill(os.getpid(), signal.SIGKILL)
        return path

    Checkpointer.save = save


def slow_evaluation(seconds: float) -> None:
    import time

    from solution.answers import inference

    original = inference.model_runner

    def model_runner(*args, **kwargs):
        run, started = original(*args, **kwargs), []

        def slow(batch):
            if not started:
                started.append(True)
                print("faulty_train: evaluating", flush=True)
            time.sleep(seconds)
            return run(batch)

        return slow

    inference.model_runner = model_runner


def slow_featurisation(seconds: float) -> None:
    import time

    from solution.windows.featurizer import Featurizer

    original = Featurizer.featurize

    def featurize(self, *args, **kwargs):
        for i, item in enumerate(original(self, *args, **kwargs)):
            if i == 0:
                print("faulty_train: featurising", flush=True)
            time.sleep(seconds)
            yield item

    Featurizer.featurize = featurize


def slow_checkpoint_writes(seconds: float) -> None:
    import time

    from solution.checkpoints.background import BackgroundSave

    original = BackgroundSave._write_mine

    def write_mine(self):
        time.sleep(seconds)
        return original(self)

    BackgroundSave._write_mine = write_mine


def record_samples(folder: Path) -> None:
    """Each sample's index rides in its window (the dummy windows are random tokens); each micro-batch
    the trainer runs appends the indexes it holds, with the optimizer step it belongs to."""
    import json

    from solution.training.trainer import Trainer
    from solution.windows import dataset as features

    original_item = features.DummyWindows.__getitem__

    def getitem(self, i):
        item = original_item(self, i)
        item["input_ids"][1] = 1000 + int(i)
        return item

    features.DummyWindows.__getitem__ = getitem
    original_step = Trainer.micro_step

    def micro_step(self, run, batch, meter, *args, **kwargs):
        ids = [int(x) - 1000 for x in batch["input_ids"][:, 1]]
        record = {"rank": self.accelerator.process_index, "epoch": run.sampler.epoch, "step": run.memory["step"],
                  "ids": ids}
        with open(folder / f"rank-{record['rank']}-pid{os.getpid()}.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        return original_step(self, run, batch, meter, *args, **kwargs)

    Trainer.micro_step = micro_step


def overflow_steps(n: int) -> None:
    """What a GradScaler does on a step whose gradients overflowed: their norm is inf, the optimizer's step
    is skipped (the weights do not move) and `step_was_skipped` says so."""
    from accelerate.optimizer import AcceleratedOptimizer

    from solution.distributed import strategy

    original_norm, original_step = strategy.Strategy.clip_and_norm, AcceleratedOptimizer.step
    steps = {"n": 0}

    def clip_and_norm(self, *args, **kwargs):
        steps["n"] += 1
        norm = original_norm(self, *args, **kwargs)
        return float("inf") if steps["n"] <= n else norm

    def step(self, *args, **kwargs):
        self._is_overflow = steps["n"] <= n
        if not self._is_overflow:
            return original_step(self, *args, **kwargs)

    strategy.Strategy.clip_and_norm, AcceleratedOptimizer.step = clip_and_norm, step


def grad_scaler(exponent: int) -> None:
    """fp16's dynamic loss scaling on the CPU: the scaler Accelerate makes for fp16 on a GPU, with an initial
    scale so high that the first steps' gradients overflow fp32, so that it skips them and halves its scale."""
    import accelerate
    import torch

    original_init = accelerate.Accelerator.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** exponent)

    def unscale_gradients(self, optimizer=None):  # what Accelerate does before clipping under fp16
        for opt in [optimizer] if optimizer is not None else self._optimizers:
            self.scaler.unscale_(getattr(opt, "optimizer", opt))

    accelerate.Accelerator.__init__ = init
    accelerate.Accelerator.unscale_gradients = unscale_gradients


READ_METHODS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "numpy", "cpu")


def count_reads(folder: Path) -> None:
    """On a GPU each of these calls waits for the device (a read of a CUDA tensor's value); on the CPU they
    are counted instead. Reads in the `data` phase (the loader's fetch, host tensors before they are sent to
    the device) are left out."""
    import atexit
    import json
    import traceback

    import torch

    from solution.training.trainer import Trainer

    state = {"step": 0, "reads": {}, "callers": {}, "ended": False}
    progress = {}

    def counted(name, original):
        def read(self, *args, **kwargs):
            trainer = progress.get("trainer")
            if trainer is not None and trainer.progress.phase != "data":
                step = state["step"]
                state["reads"][step] = state["reads"].get(step, 0) + 1
                frame = next((f for f in reversed(traceback.extract_stack()[:-1])
                              if "faulty_train" not in f.filename), None)
                where = f"{name} {trainer.progress.phase} {Path(frame.filename).name}:{frame.lineno}" if frame else name
                state["callers"].setdefault(step, []).append(where)
            return original(self, *args, **kwargs)

        return read

    for name in READ_METHODS:
        setattr(torch.Tensor, name, counted(name, getattr(torch.Tensor, name)))
    original_step, original_loop = Trainer.micro_step, Trainer.train_loop

    def micro_step(self, run, batch, meter, *args, **kwargs):
        if state["ended"]:  # the previous micro-batch closed a step: this one opens the next
            state["step"], state["ended"] = state["step"] + 1, False
        state["ended"] = original_step(self, run, batch, meter, *args, **kwargs)
        return state["ended"]

    def train_loop(self, run):
        progress["trainer"] = self
        state["step"] = run.step + 1
        try:
            return original_loop(self, run)
        finally:
            progress.pop("trainer", None)

    def dump():
        rank = os.environ.get("RANK", "0")
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"rank-{rank}.jsonl", "w") as f:
            for step in sorted(state["reads"]):
                f.write(json.dumps({"step": step, "reads": state["reads"][step],
                                    "callers": state["callers"][step]}) + "\n")

    Trainer.micro_step, Trainer.train_loop = micro_step, train_loop
    atexit.register(dump)


def inject_training_bug(bug: str) -> None:
    import accelerate
    from torch.utils.data import DataLoader

    if bug == "same_data":  # the loader is not handed to prepare(): every rank iterates all of it
        original_prepare = accelerate.Accelerator.prepare

        def prepare(self, *objects, **kwargs):
            prepared = iter(original_prepare(self, *[o for o in objects if not isinstance(o, DataLoader)], **kwargs))
            return tuple(o if isinstance(o, DataLoader) else next(prepared) for o in objects)

        accelerate.Accelerator.prepare = prepare
        return
    original_backward = accelerate.Accelerator.backward

    def backward(self, loss, **kwargs):
        scale = self.num_processes if bug == "sum_gradients" else self.gradient_accumulation_steps
        return original_backward(self, loss * scale, **kwargs)

    accelerate.Accelerator.backward = backward


def apply(fault: str) -> None:
    if "+" in fault:
        for one in fault.split("+"):
            apply(one)
        return
    if fault == "record-samples":
        record_samples(Path(os.environ["SAMPLE_LOG"]))
    elif fault == "count-reads":
        count_reads(Path(os.environ["READ_LOG"]))
    elif m := re.fullmatch(r"enospc-checkpoint-(\d+)", fault):
        fill_disk_in_checkpoint(int(m[1]))
    elif m := re.fullmatch(r"eio-checkpoint-(\d+)", fault):
        fail_storage_in_checkpoint(int(m[1]))
    elif fault == "enospc-model":
        fill_disk_in_model_save()
    elif m := re.fullmatch(r"kill(?:-rank-(\d+))?-after-step-(\d+)", fault):
        kill_after_checkpoint(int(m[2]), None if m[1] is None else int(m[1]))
    elif m := re.fullmatch(r"kill-in-save-(\d+)", fault):
        kill_in_save(int(m[1]))
    elif m := re.fullmatch(r"slow-eval-([\d.]+)", fault):
        slow_evaluation(float(m[1]))
    elif m := re.fullmatch(r"slow-checkpoint-writes-([\d.]+)", fault):
        slow_checkpoint_writes(float(m[1]))
    elif m := re.fullmatch(r"slow-features-([\d.]+)", fault):
        slow_featurisation(float(m[1]))
    elif m := re.fullmatch(r"grad-scaler-(\d+)", fault):
        grad_scaler(int(m[1]))
    elif m := re.fullmatch(r"overflow-steps-(\d+)", fault):
        overflow_steps(int(m[1]))
    elif fault in ("sum-gradients", "same-data", "double-accumulation"):
        inject_training_bug(fault.replace("-", "_"))
    else:
        raise SystemExit(f"faulty_train: unknown fault {fault!r}")


def main(argv: list) -> int:
    apply(argv[0])
    from solution.train import main as train_main

    return train_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Fine-tune a BERT QA model on simplified-NQ: `python -m solution.train --config FILE [--name value ...]`.

`--help` lists every setting (generated from `solution.config`).

The same loop runs on one process and under `accelerate launch`; the
strategy comes from `solution.strategy`, never from this file. Writes to
`output_dir`:
  config.yaml     the resolved config
  metrics.jsonl   a start record, one record per logging step, dev scores, an end record
  model/          the consolidated model directory that `submission/` loads

Exit codes: 0 done; 2 bad input or config (`error: ...`); 1 stopped by a fault it names (the loss or
gradient norm stopped being finite, no space left on device); 3 stopped by SIGTERM or SIGINT after
writing a checkpoint at the step reached (continue with `--resume latest`).
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import signal
import sys
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from solution import strategy
from solution.config import TrainConfig, load_config, parse_command_line
from solution.features import DummyWindows, WindowDataset, build_train_features
from solution.fsutil import atomic_write_text, check_writable, disk_full_message
from solution.inference import collate, model_runner, predict_documents
from solution.memory import probe_memory
from solution.metric import format_report, load_gold, score
from solution.model import build_model, load_tokenizer, save_model_dir, save_model_meta
from solution.nq import ReadStats, read_examples
from solution.windows import Featurizer, add_structure_tokens


def param_groups(model: torch.nn.Module, cfg: TrainConfig) -> list:
    """Decoupled weight decay, not on biases and LayerNorm weights (BERT's recipe); none for SGD."""
    if cfg.optim == "sgd":
        return [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": 0.0}]
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 else decay).append(p)
    return [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class EpochShuffle(torch.utils.data.Sampler):
    """A permutation that is a pure function of (seed, epoch).

    Resuming from a checkpoint then reproduces the order exactly, with no generator state to carry,
    and every rank computes the same order before Accelerate deals the batches out."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())

    def __len__(self) -> int:
        return self.n


EXIT_FAULT = 1  # diverged, disk full
EXIT_STOPPED = 3  # SIGTERM/SIGINT: a checkpoint was written at the step reached


class TrainingStopped(Exception):
    """Training ended before its last step for a reason it names in one line; `exit_code` is main()'s."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class StopRequest:
    """SIGTERM/SIGINT set a flag; the loop acts on it at the next optimizer step, on every rank at once.

    Before the loop is armed (featurisation, model set-up) there is nothing to save, so a signal stops
    at once. A second signal during the checkpoint save only sets the flag again: the save goes on."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.signum, self.armed, self._previous = 0, False, {}

    def __enter__(self):
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
            signal.siginterrupt(sig, False)  # restart interrupted system calls (gloo's sockets, file writes)
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def _handle(self, signum, frame) -> None:
        if not self.armed:
            raise TrainingStopped(f"stopped by {signal.Signals(signum).name} before the first optimizer step; "
                                  "nothing was saved", 128 + signum)
        self.signum = self.signum or signum

    def agreed(self, accelerator) -> int:
        """The signal any rank received (0: none). One all-reduce per step when world size > 1: a rank
        that stopped alone would leave the others waiting forever in the next collective."""
        if accelerator.num_processes == 1:
            return self.signum
        import torch.distributed as dist

        flag = torch.tensor([self.signum], dtype=torch.int64, device=accelerator.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())


def disk_full(path: Path, note: str = "") -> TrainingStopped:
    """One line naming what could not be written and the free space left on its filesystem."""
    return TrainingStopped(disk_full_message(path) + (f"; {note}" if note else ""), EXIT_FAULT)


def lr_schedule(optimizer, cfg: TrainConfig, num_total: int):
    """transformers' schedule named by lr_scheduler_type (a LambdaLR: its state is JSON-safe)."""
    from transformers import get_scheduler

    return get_scheduler(cfg.lr_scheduler_type, optimizer, num_warmup_steps=cfg.num_warmup_steps(num_total),
                         num_training_steps=num_total)


TRACKER_PROJECT = "nq-bert-qa"  # TensorBoard writes under output_dir/nq-bert-qa; W&B's project name


def tracker_values(record: dict, prefix: str) -> dict:
    """The numbers of a metrics.jsonl record, as the trackers take them (`train/loss`, `eval/...`)."""
    return {f"{prefix}/{k}": v for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "event")}


class MetricsLog:
    """metrics.jsonl, written by the main process only."""

    def __init__(self, path: Path, enabled: bool, append: bool = False):
        self.path, self.enabled = path, enabled
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not append:
                path.write_text("")

    def write(self, record: dict) -> None:
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")


CHECKPOINT_FORMAT = "nq-bert-qa-checkpoint/1"


LATEST = "latest"  # output_dir/latest names the newest complete checkpoint; written last


def numbered_checkpoints(output_dir: Path) -> list:
    """output_dir/checkpoint-N directories, oldest first (`.tmp` leftovers of a killed save excluded)."""
    found = [p for p in output_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))


def find_checkpoint(output_dir: Path, spec: str) -> Path:
    """`latest` -> output_dir/latest's checkpoint (else the newest complete checkpoint-N); else a path."""
    if spec == "latest":
        pointer = output_dir / LATEST
        if pointer.is_file():
            named = output_dir / pointer.read_text().strip()
            if (named / "trainer_state.json").is_file():
                return named
        done = [p for p in numbered_checkpoints(output_dir) if (p / "trainer_state.json").is_file()]
        if not done:
            raise ValueError(f"resume_from_checkpoint latest: no complete checkpoint-N in {output_dir}")
        return done[-1]
    path = Path(spec)
    if not (path / "trainer_state.json").is_file():
        raise ValueError(f"{path}: not a checkpoint (no trainer_state.json); checkpoints are "
                         "output_dir/checkpoint-N, written every save_steps")
    return path


class Trainer:
    def __init__(self, cfg: TrainConfig, stop_request: StopRequest | None = None):
        self.cfg = cfg
        self.stop_request = stop_request or StopRequest()
        self.strategy = strategy.Strategy(cfg)
        self.accelerator = self.strategy.accelerator
        from accelerate.utils import set_seed

        set_seed(cfg.seed)
        self.out = Path(cfg.output_dir)
        self.is_main = self.accelerator.is_main_process
        self.tokenizer = load_tokenizer(cfg.model_name_or_path)
        self.model = build_model(cfg.model_name_or_path, cfg.pretrained, cfg.backbone_overrides)
        if add_structure_tokens(self.tokenizer, cfg.window):  # window.structure_tokens: new vocabulary rows
            self.model.backbone.resize_token_embeddings(len(self.tokenizer))
        if cfg.gradient_checkpointing:
            self.model.backbone.gradient_checkpointing_enable()
        self.num_parameters = sum(p.numel() for p in self.model.parameters())  # before any engine shards them
        self.data_summary: dict = {}
        self._dev_gold = None  # loaded once, on the first evaluation
        self.accounting: dict = {}

    def log(self, msg: str) -> None:
        if self.is_main:
            print(msg, flush=True)

    # -- data ---------------------------------------------------------------
    def train_dataset(self):
        cfg = self.cfg
        if cfg.data_source == "dummy":
            return DummyWindows(cfg.dummy_num_windows, cfg.window.max_seq_length, self.model.config.vocab_size,
                                cfg.seed, self.tokenizer.cls_token_id, self.tokenizer.sep_token_id)
        # The main process featurises (or finds the cache); the others then load it.
        with self.accelerator.main_process_first():
            ds, summary = build_train_features(
                cfg.train_file, self.tokenizer, cfg.window, cfg.sampling, cfg.cache_dir,
                cfg.num_proc, cfg.on_error, cfg.max_train_examples, log=self.log, seed=cfg.seed)
        self.data_summary = summary
        if summary.get("skipped"):
            self.log(f"WARNING: {cfg.train_file}: skipped {summary['skipped']} bad lines "
                     f"{summary['skipped_by_reason']}; first: {summary['first_errors'][:2]}")
        self.log(f"train data: {summary['documents']} documents ({summary['unanswerable_documents']} without an "
                 f"answer), {summary['windows']} windows, {summary['windows_kept']} kept {summary['windows_per_type']}; "
                 f"no-answer windows kept: {summary['negatives_kept_answerable']} from answerable documents, "
                 f"{summary['negatives_kept_unanswerable']} from unanswerable ones")
        return WindowDataset(ds)

    # -- evaluation -----------------------------------------------------------
    def evaluate(self, model) -> dict:
        """Score the dev file with the competition metric; every rank predicts its share."""
        cfg, acc = self.cfg, self.accelerator
        stats = ReadStats()
        # Streamed, each rank parsing only its own lines: dev documents are never all in memory.
        mine = read_examples(cfg.dev_file, on_error=cfg.on_error, stats=stats, max_lines=cfg.max_dev_examples,
                             shard=(acc.process_index, acc.num_processes), check_duplicates=False)
        featurizer = Featurizer(self.tokenizer, cfg.window)
        unwrapped = acc.unwrap_model(model)
        was_training = unwrapped.training
        unwrapped.eval()
        autocast = torch.bfloat16 if cfg.mixed_precision == "bf16" else None
        sharded = self.strategy.plan.shards_parameters
        run = model_runner(unwrapped, acc.device, autocast, inference_mode=not sharded)
        # Under ZeRO-3/FSDP each forward is a collective: ranks with fewer windows keep joining in.
        n = cfg.window.max_seq_length  # a rank with no batch of its own joins in on one padding window
        dummy = collate([{"input_ids": [0] * n, "token_type_ids": [0] * n}], pad_to=n)
        run, finish = self.strategy.lockstep(run, dummy)
        preds = {}
        for p in predict_documents(run, featurizer, mine, cfg.postprocess, cfg.per_device_eval_batch_size):
            preds[f"{p.example_id}_long"], preds[f"{p.example_id}_short"] = p.long, p.short
        finish()
        unwrapped.train(was_training)
        from accelerate.utils import gather_object

        merged = {}
        for part in gather_object([preds]):
            merged.update(part)
        # Reading the whole gold file also catches duplicate ids across ranks; once is enough.
        if self._dev_gold is None:
            self._dev_gold = load_gold(cfg.dev_file, on_error=cfg.on_error)
        ids = {row_id.rsplit("_", 1)[0] for row_id in merged}
        gold = {k: v for k, v in self._dev_gold.items() if k in ids}
        result = score(merged, gold)
        skipped = sum(gather_object([stats.num_skipped]))
        if skipped:
            result["dev_skipped"] = skipped
        return result

    # -- checkpoints ------------------------------------------------------------
    def qa_config(self) -> dict:
        return {"window": asdict(self.cfg.window), "postprocess": asdict(self.cfg.postprocess),
                "training": {"model_name_or_path": self.cfg.model_name_or_path, "seed": self.cfg.seed,
                             "strategy": self.strategy.name, "world_size": self.accelerator.num_processes}}

    def save_checkpoint(self, step: int, epoch: int, batches_into_epoch: int) -> Path:
        """Write checkpoint-N; a full disk removes the half-written `.tmp` and leaves `latest` as it was."""
        try:
            return self._write_checkpoint(step, epoch, batches_into_epoch)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            tmp = self.out / f"checkpoint-{step}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            (self.out / (LATEST + ".tmp")).unlink(missing_ok=True)
            raise disk_full(tmp, self._last_good()) from None

    def _write_checkpoint(self, step: int, epoch: int, batches_into_epoch: int) -> Path:
        """A resumable, strategy-native checkpoint: Accelerate's save_state (DeepSpeed's own shards,
        FSDP's distributed checkpoint, or plain weights) plus what it takes to continue and to
        consolidate: trainer_state.json and model_meta/ (config, tokenizer, qa_config)."""
        acc = self.accelerator
        final = self.out / f"checkpoint-{step}"
        tmp = self.out / f"checkpoint-{step}.tmp"
        if self.is_main and tmp.exists():
            shutil.rmtree(tmp)
        acc.wait_for_everyone()
        acc.save_state(str(tmp))
        acc.wait_for_everyone()
        if self.is_main:
            save_model_meta(tmp / "model_meta", acc.unwrap_model(self.model).config, self.tokenizer,
                            self.qa_config())
            state = {"format": CHECKPOINT_FORMAT, "step": step, "epoch": epoch,
                     "batches_into_epoch": batches_into_epoch, "scheduler": self._scheduler.state_dict(), **{k: self.accounting.get(k) for k in (
                         "strategy", "engine", "zero_stage", "world_size", "per_device_train_batch_size",
                         "gradient_accumulation_steps", "global_batch_size", "mixed_precision",
                         "num_optimizer_steps")}}
            (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n")
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)  # a checkpoint is complete or absent, never half-written
            atomic_write_text(self.out / LATEST, final.name + "\n")  # then the pointer; then, only now, pruning
            self._prune_checkpoints()
        acc.wait_for_everyone()
        self.log(f"checkpoint: {final}")
        return final

    def _prune_checkpoints(self) -> None:
        limit = self.cfg.save_total_limit
        if not limit:
            return
        for old in numbered_checkpoints(self.out)[:-limit]:
            shutil.rmtree(old, ignore_errors=True)

    def load_checkpoint(self, path: Path, steps_per_epoch: int, batches_per_epoch: int) -> tuple[int, int, int]:
        state = json.loads((path / "trainer_state.json").read_text())
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{path}/trainer_state.json: format {state.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
        mine = self.accounting
        for key in ("strategy", "world_size", "global_batch_size", "per_device_train_batch_size",
                    "gradient_accumulation_steps"):
            if state.get(key) != mine.get(key):
                raise ValueError(f"{path}: field '{key}' is {state.get(key)!r} in the checkpoint but "
                                 f"{mine.get(key)!r} in this run; resume with the same strategy and batch "
                                 "(or consolidate it with python -m solution.consolidate and start anew)")
        from solution.consolidate import verify_checkpoint_files

        verify_checkpoint_files(path)  # the engines' loaders unpickle; nothing but tensors may reach them
        for rank in range(self.accelerator.num_processes):
            # Accelerate only logs "Could not load random states" and goes on: dropout would then differ.
            rng = path / f"random_states_{rank}.pkl"
            if not rng.is_file():
                raise ValueError(f"{rng}: missing; rank {rank}'s RNG state is needed to continue exactly "
                                 "(dropout); resume from another checkpoint")
        self.accelerator.load_state(str(path))
        self._scheduler.load_state_dict(state["scheduler"])
        step, epoch, batches = state["step"], state["epoch"], state["batches_into_epoch"]
        if batches >= batches_per_epoch:  # the checkpoint closed its epoch
            epoch, batches = epoch + 1, 0
        self.log(f"resumed from {path}: step {step}, epoch {epoch}, {batches} batches into it")
        return step, epoch, batches

    # -- training -------------------------------------------------------------
    def train(self) -> dict:
        cfg, acc = self.cfg, self.accelerator
        check_writable(self.out, "output_dir", create_dir=True)
        train_set = self.train_dataset()
        pad_id = self.tokenizer.pad_token_id or 0
        sampler = EpochShuffle(len(train_set), cfg.seed)
        # Fixed-length batches: the same shapes whatever the world size, so runs compare exactly.
        # Its own generator: a new iterator draws a base seed from it, not from the global RNG stream that
        # dropout uses and a checkpoint restores (mid-epoch resume would otherwise shift dropout by one draw).
        loader = DataLoader(train_set, batch_size=cfg.per_device_train_batch_size, sampler=sampler,
                            drop_last=False, generator=torch.Generator().manual_seed(cfg.seed),
                            num_workers=cfg.dataloader_num_workers,
                            collate_fn=partial(collate, pad_token_id=pad_id, pad_to=cfg.window.max_seq_length))
        optimizer = self.strategy.make_optimizer(param_groups(self.model, cfg), cfg)
        memory = probe_memory(optimizer) if cfg.measure_memory else {"step": 0}  # before prepare(): see memory.py
        model, optimizer, loader = acc.prepare(self.model, optimizer, loader)
        engine = self.strategy.check_engine(model)

        batches_per_epoch = len(loader)
        steps_per_epoch = math.ceil(batches_per_epoch / cfg.gradient_accumulation_steps)
        if steps_per_epoch == 0:
            raise ValueError(f"{cfg.train_file}: no training windows (check negative_keep_rate and the data)")
        total_steps = cfg.max_steps if cfg.max_steps > 0 else math.ceil(cfg.num_train_epochs * steps_per_epoch)
        num_epochs = math.ceil(total_steps / steps_per_epoch)
        # Not passed to prepare(): Accelerate would step it once per process. Saved with the checkpoints.
        scheduler = lr_schedule(optimizer, cfg, total_steps)
        self._scheduler = scheduler  # its state travels in trainer_state.json (JSON, not a pickle)

        global_batch = cfg.per_device_train_batch_size * acc.num_processes * cfg.gradient_accumulation_steps
        start = {"event": "start", "strategy": self.strategy.name, "engine": engine,
                 "zero_stage": self.strategy.zero_stage, "world_size": acc.num_processes,
                 "per_device_train_batch_size": cfg.per_device_train_batch_size,
                 "gradient_accumulation_steps": cfg.gradient_accumulation_steps, "global_batch_size": global_batch,
                 "mixed_precision": cfg.mixed_precision, "num_optimizer_steps": total_steps,
                 "num_epochs": num_epochs, "train_windows": len(train_set), "device": str(acc.device),
                 "num_parameters": self.num_parameters,
                 "strategy_origin": self.strategy.plan.origin, "distributed_type": str(acc.distributed_type),
                 "cpu_offload": self.strategy.plan.cpu_offload,
                 "train_data": {k: self.data_summary.get(k) for k in
                                ("documents", "windows", "windows_kept", "windows_per_type", "unanswerable_documents",
                                 "negatives_kept_answerable", "negatives_kept_unanswerable", "skipped",
                                 "skipped_by_reason")}
                 if self.data_summary else {"source": cfg.data_source}}
        self.accounting = start
        step, first_epoch, skip = 0, 0, 0
        if cfg.resume_from_checkpoint:
            path = find_checkpoint(self.out, cfg.resume_from_checkpoint)
            step, first_epoch, skip = self.load_checkpoint(path, steps_per_epoch, batches_per_epoch)
            start["resumed_from"] = {"checkpoint": str(path), "step": step}
        self.metrics = MetricsLog(self.out / "metrics.jsonl", self.is_main, append=bool(cfg.resume_from_checkpoint))
        self.metrics.write(start)
        if cfg.report_to:  # once; Accelerate's trackers act on the main process only
            acc.init_trackers(TRACKER_PROJECT, config=cfg.tracker_config())
        self.log("accounting: " + ", ".join(f"{k}={v}" for k, v in start.items() if k != "event"))
        if self.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "config.yaml").write_text(cfg.to_yaml())

        from tqdm.auto import tqdm

        bar = tqdm(total=total_steps, initial=step, desc=f"train [{self.strategy.name} x{acc.num_processes}]",
                   disable=not self.is_main or cfg.disable_tqdm, dynamic_ncols=True, file=sys.stdout)
        model.train()
        last_eval = {}
        window_loss = torch.zeros((), device=acc.device)
        micro = 0
        grad_norm = None
        t_log, samples_since_log = time.perf_counter(), 0
        t_step = t_log
        self.stop_request.armed = True
        for epoch in range(first_epoch, num_epochs):
            if step >= total_steps:
                break
            batches = skip
            epoch_loader = acc.skip_first_batches(loader, skip) if skip else loader
            # Accelerate's loader re-sets the sampler's epoch from its own counter at each __iter__, and that
            # counter starts at 0 in a new process: a resumed run would replay epoch 0's order. So the epoch
            # is set on the loader itself (the skipping one too), and on the sampler, which a loader that was
            # not prepared (tests/faulty_train.py same-data) iterates directly.
            if hasattr(epoch_loader, "set_epoch"):
                epoch_loader.set_epoch(epoch)
            sampler.set_epoch(epoch)
            skip = 0
            for batch in epoch_loader:
                batches += 1
                memory["step"] = step + 1  # the optimizer step this micro-batch belongs to
                with acc.accumulate(model):
                    out = model(**batch)
                    acc.backward(out["loss"])
                    window_loss += out["loss"].detach()
                    micro += 1
                    samples_since_log += batch["input_ids"].shape[0] * acc.num_processes
                    if acc.sync_gradients:
                        lr = scheduler.get_last_lr()[0]  # the rate this step uses
                        grad_norm = self.strategy.clip_and_norm(model, cfg.max_grad_norm)
                        optimizer.step()
                        scheduler.step()
                        optimizer.zero_grad(set_to_none=True)
                if not acc.sync_gradients:
                    continue
                step += 1
                now = time.perf_counter()
                step_time, t_step = now - t_step, now
                # Mean over micro-batches, then over ranks: the loss of the whole global batch.
                loss = acc.reduce(window_loss / micro, reduction="mean").item()
                window_loss.zero_()
                micro = 0
                self._check_finite(step, loss, grad_norm)
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", epoch=epoch)
                if step % cfg.logging_steps == 0 or step == total_steps:
                    elapsed = time.perf_counter() - t_log
                    record = {"step": step, "epoch": epoch, "loss": loss, "grad_norm": grad_norm,
                              "lr": lr, "step_time_s": step_time,
                              "samples_per_s": samples_since_log / max(elapsed, 1e-9)}
                    self.metrics.write(record)
                    if cfg.report_to:
                        acc.log(tracker_values(record, "train"), step=step)
                    t_log, samples_since_log = time.perf_counter(), 0
                if cfg.save_due(step, epoch_end=False):
                    self.save_checkpoint(step, epoch, batches)
                if step < total_steps:
                    self._stop_if_requested(step, epoch, batches)
                if step >= total_steps:
                    break
            if cfg.save_due(step, epoch_end=True):
                self.save_checkpoint(step, epoch, batches)
            if cfg.eval_strategy == "epoch" and cfg.dev_file and cfg.data_source == "files":
                last_eval = self.evaluate(model)
                self.metrics.write({"event": "eval", "epoch": epoch, "step": step, **last_eval})
                if cfg.report_to:
                    acc.log(tracker_values(last_eval, "eval"), step=step)
                self.log(f"dev after epoch {epoch} (step {step}):\n{format_report(last_eval)}")
        bar.close()
        self.save_final(model)
        end = {"event": "end", "step": step, "dev": last_eval or None}
        if cfg.measure_memory:
            import resource

            from accelerate.utils import gather_object

            # ru_maxrss is in KiB on Linux.
            mine = {**memory, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
            mine.pop("step", None)
            end["memory_per_rank"] = gather_object([mine])
        self.metrics.write(end)
        acc.wait_for_everyone()
        self.strategy.close()
        return last_eval

    def _check_finite(self, step: int, loss: float, grad_norm) -> None:
        """Stop before anything is saved from a diverged model. The loss is reduced over ranks and the
        norm is global, so every rank stops at the same step."""
        if math.isfinite(loss) and (grad_norm is None or math.isfinite(grad_norm)):
            return
        raise TrainingStopped(f"training diverged at step {step}: loss {loss}, grad_norm {grad_norm}; "
                              f"{self._last_good()}", EXIT_FAULT)

    def _last_good(self) -> str:
        pointer = self.out / LATEST
        if pointer.is_file():
            return f"the last good checkpoint is {self.out / pointer.read_text().strip()} (latest)"
        return "no checkpoint was written"

    def _stop_if_requested(self, step: int, epoch: int, batches: int) -> None:
        signum = self.stop_request.agreed(self.accelerator)
        if not signum:
            return
        path = self.out / f"checkpoint-{step}"
        if not (self.cfg.save_steps and step % self.cfg.save_steps == 0):  # else just written
            path = self.save_checkpoint(step, epoch, batches)
        raise TrainingStopped(f"stopped by {signal.Signals(signum).name} at step {step}: saved {path}; "
                              "continue with --resume latest", EXIT_STOPPED)

    def save_final(self, model) -> None:
        acc = self.accelerator
        acc.wait_for_everyone()
        state = self.strategy.full_state_dict(model)  # full fp32 weights on the main process, whatever the strategy
        if self.is_main:
            try:
                path = save_model_dir(self.out / "model", state, acc.unwrap_model(model).config, self.tokenizer,
                                      self.qa_config())
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                shutil.rmtree(self.out / "model.tmp", ignore_errors=True)  # save_model_dir's temporary name
                raise disk_full(self.out / "model") from None
            self.log(f"model directory: {path}")


DESCRIPTION = ("Fine-tune BERT QA on simplified-NQ. The YAML file (--config) is read first; each option below "
               "overrides one of its settings: --name value, --name=value or --name-with-dashes value.")


def main(argv=None) -> int:
    """Train; returns the exit code: 0 done, 2 bad input or config, 1 diverged or disk full (one line
    naming the step or the path), 3 stopped by SIGTERM/SIGINT after saving checkpoint-N at the step
    reached (the line says which; continue with --resume latest)."""
    try:
        path, overrides = parse_command_line(sys.argv[1:] if argv is None else argv, "python -m solution.train",
                                             DESCRIPTION)
        with StopRequest() as stop_request:
            cfg = load_config(path, overrides)
            Trainer(cfg, stop_request).train()
    except (ValueError, FileNotFoundError) as e:  # NQFormatError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingStopped as e:
        if os.environ.get("RANK", "0") == "0":  # one line, not one per rank
            print(str(e) if e.exit_code == EXIT_STOPPED else f"error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())

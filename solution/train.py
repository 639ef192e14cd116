"""Fine-tune a BERT QA model on simplified-NQ: `python -m solution.train --config FILE [--name value ...]`.

The same loop runs on one process and under `accelerate launch`; the
strategy comes from `solution.strategy`, never from this file. Writes to
`output_dir`:
  config.yaml     the resolved config
  metrics.jsonl   a start record, one record per logging step, dev scores, an end record
  model/          the consolidated model directory that `submission/` loads
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from solution import strategy
from solution.config import TrainConfig, load_config
from solution.features import DummyWindows, WindowDataset, build_train_features
from solution.inference import collate, model_runner, predict_documents
from solution.metric import format_report, load_gold, score
from solution.model import build_model, load_tokenizer, save_model_dir
from solution.nq import ReadStats, read_examples
from solution.windows import Featurizer


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optim == "sgd":
        return torch.optim.SGD(model.parameters(), lr=cfg.learning_rate)
    # Decoupled weight decay, not on biases and LayerNorm weights (BERT's recipe).
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                             eps=cfg.adam_epsilon)


def linear_schedule(optimizer, num_warmup: int, num_total: int):
    def factor(step: int) -> float:
        if step < num_warmup:
            return (step + 1) / max(1, num_warmup)
        return max(0.0, (num_total - step) / max(1, num_total - num_warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class MetricsLog:
    """metrics.jsonl, written by the main process only."""

    def __init__(self, path: Path, enabled: bool):
        self.path, self.enabled = path, enabled
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

    def write(self, record: dict) -> None:
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")


class Trainer:
    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.accelerator = strategy.build_accelerator(cfg)
        from accelerate.utils import set_seed

        set_seed(cfg.seed)
        self.out = Path(cfg.output_dir)
        self.is_main = self.accelerator.is_main_process
        self.metrics = MetricsLog(self.out / "metrics.jsonl", self.is_main)
        self.tokenizer = load_tokenizer(cfg.model_name_or_path)
        self.model = build_model(cfg.model_name_or_path, cfg.pretrained, cfg.backbone_overrides)
        if cfg.gradient_checkpointing:
            self.model.backbone.gradient_checkpointing_enable()
        self.data_summary: dict = {}
        self._dev_gold = None  # loaded once, on the first evaluation

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
                cfg.train_file, self.tokenizer, cfg.window, cfg.negative_keep_rate, cfg.seed, cfg.cache_dir,
                cfg.num_proc, cfg.on_error, cfg.max_train_examples, log=self.log)
        self.data_summary = summary
        if summary.get("skipped"):
            self.log(f"WARNING: {cfg.train_file}: skipped {summary['skipped']} bad lines "
                     f"{summary['skipped_by_reason']}; first: {summary['first_errors'][:2]}")
        self.log(f"train data: {summary['documents']} documents, {summary['windows']} windows, "
                 f"{summary['windows_kept']} kept {summary['windows_per_type']}")
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
        run = model_runner(unwrapped, acc.device, autocast)
        preds = {}
        for p in predict_documents(run, featurizer, mine, cfg.postprocess, cfg.per_device_eval_batch_size):
            preds[f"{p.example_id}_long"], preds[f"{p.example_id}_short"] = p.long, p.short
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

    # -- training -------------------------------------------------------------
    def train(self) -> dict:
        cfg, acc = self.cfg, self.accelerator
        train_set = self.train_dataset()
        generator = torch.Generator().manual_seed(cfg.seed)
        pad_id = self.tokenizer.pad_token_id or 0
        # Fixed-length batches: the same shapes whatever the world size, so runs compare exactly.
        loader = DataLoader(train_set, batch_size=cfg.per_device_train_batch_size, shuffle=True,
                            generator=generator, drop_last=False,
                            collate_fn=partial(collate, pad_token_id=pad_id, pad_to=cfg.window.max_seq_length))
        optimizer = build_optimizer(self.model, cfg)
        model, optimizer, loader = acc.prepare(self.model, optimizer, loader)

        steps_per_epoch = math.ceil(len(loader) / cfg.gradient_accumulation_steps)
        if steps_per_epoch == 0:
            raise ValueError(f"{cfg.train_file}: no training windows (check negative_keep_rate and the data)")
        total_steps = cfg.max_steps if cfg.max_steps > 0 else math.ceil(cfg.num_train_epochs * steps_per_epoch)
        num_epochs = math.ceil(total_steps / steps_per_epoch)
        # Not passed to prepare(): Accelerate would step it once per process.
        scheduler = linear_schedule(optimizer, int(cfg.warmup_ratio * total_steps), total_steps)

        global_batch = cfg.per_device_train_batch_size * acc.num_processes * cfg.gradient_accumulation_steps
        start = {"event": "start", "strategy": strategy.strategy_name(acc), "engine": strategy.engine_name(model),
                 "zero_stage": None, "world_size": acc.num_processes,
                 "per_device_train_batch_size": cfg.per_device_train_batch_size,
                 "gradient_accumulation_steps": cfg.gradient_accumulation_steps, "global_batch_size": global_batch,
                 "mixed_precision": cfg.mixed_precision, "num_optimizer_steps": total_steps,
                 "num_epochs": num_epochs, "train_windows": len(train_set), "device": str(acc.device),
                 "train_data": {k: self.data_summary.get(k) for k in
                                ("documents", "windows", "windows_kept", "skipped", "skipped_by_reason")}
                 if self.data_summary else {"source": cfg.data_source}}
        self.metrics.write(start)
        self.log("accounting: " + ", ".join(f"{k}={v}" for k, v in start.items() if k != "event"))
        if self.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "config.yaml").write_text(cfg.to_yaml())

        from tqdm.auto import tqdm

        bar = tqdm(total=total_steps, desc="train", disable=not self.is_main or cfg.disable_tqdm,
                   dynamic_ncols=True, file=sys.stdout)
        model.train()
        step, last_eval = 0, {}
        window_loss = torch.zeros((), device=acc.device)
        micro = 0
        t_log, samples_since_log = time.perf_counter(), 0
        for epoch in range(num_epochs):
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)
            for batch in loader:
                with acc.accumulate(model):
                    out = model(**batch)
                    acc.backward(out["loss"])
                    window_loss += out["loss"].detach()
                    micro += 1
                    samples_since_log += batch["input_ids"].shape[0] * acc.num_processes
                    if acc.sync_gradients:
                        max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
                        grad_norm = acc.clip_grad_norm_(model.parameters(), max_norm)
                        optimizer.step()
                        scheduler.step()
                        optimizer.zero_grad(set_to_none=True)
                if not acc.sync_gradients:
                    continue
                step += 1
                # Mean over micro-batches, then over ranks: the loss of the whole global batch.
                loss = acc.reduce(window_loss / micro, reduction="mean").item()
                window_loss.zero_()
                micro = 0
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", epoch=epoch)
                if step % cfg.logging_steps == 0 or step == total_steps:
                    elapsed = time.perf_counter() - t_log
                    self.metrics.write({"step": step, "epoch": epoch, "loss": loss,
                                        "grad_norm": float(grad_norm) if grad_norm is not None else None,
                                        "lr": scheduler.get_last_lr()[0],
                                        "samples_per_s": samples_since_log / max(elapsed, 1e-9)})
                    t_log, samples_since_log = time.perf_counter(), 0
                if step >= total_steps:
                    break
            if cfg.eval_strategy == "epoch" and cfg.dev_file and cfg.data_source == "files":
                last_eval = self.evaluate(model)
                self.metrics.write({"event": "eval", "epoch": epoch, "step": step, **last_eval})
                self.log(f"dev after epoch {epoch} (step {step}):\n{format_report(last_eval)}")
            if step >= total_steps:
                break
        bar.close()
        self.save_final(model)
        self.metrics.write({"event": "end", "step": step, "dev": last_eval or None})
        acc.wait_for_everyone()
        acc.end_training()
        return last_eval

    def save_final(self, model) -> None:
        acc = self.accelerator
        acc.wait_for_everyone()
        state = acc.get_state_dict(model)  # full weights on the main process, whatever the strategy
        if self.is_main:
            qa_config = {"window": asdict(self.cfg.window), "postprocess": asdict(self.cfg.postprocess),
                         "training": {"model_name_or_path": self.cfg.model_name_or_path,
                                      "seed": self.cfg.seed, "world_size": acc.num_processes}}
            path = save_model_dir(self.out / "model", state, acc.unwrap_model(model).config, self.tokenizer, qa_config)
            self.log(f"model directory: {path}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m solution.train",
        description="Fine-tune BERT QA on simplified-NQ. Any config field can be overridden as --name value "
                    "(e.g. --learning_rate 3e-5 --max_steps 100 --max_seq_length 256).")
    parser.add_argument("--config", help="YAML training config (configs/train/*.yaml)")
    return parser.parse_known_args(argv)


def main(argv=None) -> int:
    args, overrides = parse_args(argv)
    try:
        cfg = load_config(args.config, overrides)
        Trainer(cfg).train()
    except (ValueError, FileNotFoundError) as e:  # NQFormatError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

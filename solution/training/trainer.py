"""The trainer: the epoch's shuffle, the step meter and the loop itself (`Trainer`), one stateful part the
checkpointer saves among others. The optimizer, its parameter groups and its schedule are built by
solution.training.optimizer; the engine by solution.distributed.strategy.
"""

from __future__ import annotations

import math
import signal
import sys
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Optional

import torch
from torch.utils.data import DataLoader

from solution.answers.inference import collate, model_runner, predict_documents
from solution.checkpoints.checkpointer import Checkpointer, SavePolicy
from solution.checkpoints.resume import ResumeTarget
from solution.checkpoints.state import find_checkpoint
from solution.common.fsutil import DiskFullError, check_writable, disk_full_message, removed_if_disk_full
from solution.data.nq import ReadStats, read_examples
from solution.distributed import strategy
from solution.distributed.watchdog import Progress, collective_timeout
from solution.model.qa_model import (
    architecture,
    build_model,
    compile_layers,
    init_structure_embeddings,
    load_tokenizer,
    save_model_dir,
    save_model_meta,
)
from solution.model.sentences import first_pass_embed
from solution.scoring.metric import format_report, load_gold, score
from solution.training.agreement import check_same_settings
from solution.training.config import TrainConfig
from solution.training.memory import probe_memory, retain_freed_memory
from solution.training.optimizer import (
    build_optimizer,
    build_schedule,
    param_groups,
    parameter_order,
    start_facts,
    warmup_warning,
)
from solution.training.profiling import StepProfiler
from solution.training.records import TRACKER_PROJECT, MetricsLog, StartRecord, tracker_values
from solution.training.steps import EpochShuffle, StepFigures, StepMeter
from solution.training.stop import (
    EXIT_FAULT,
    EXIT_STOPPED,
    EvaluationStopped,
    Health,
    StopRequest,
    TrainingStopped,
    on_device,
)
from solution.windows.dataset import DummyWindows, build_train_features
from solution.windows.featurizer import Featurizer, add_structure_tokens, structure_vocabulary


def disk_full(path: Path) -> TrainingStopped:
    """One line naming what could not be written and the free space left on its filesystem."""
    return TrainingStopped(disk_full_message(path), EXIT_FAULT)


@dataclass
class TrainingRun:
    """What `Trainer.setup` prepares for the loop, and where the loop starts."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    loader: DataLoader
    sampler: EpochShuffle
    batches_per_epoch: int
    total_steps: int
    num_epochs: int
    start: StartRecord
    memory: dict  # the memory probe's numbers (`step`: the step being measured)
    step: int = 0  # the resume position: optimizer steps done, the epoch, batches of it already trained
    epoch: int = 0
    skip: int = 0


class Trainer:
    def __init__(self, cfg: TrainConfig, stop_request: StopRequest | None = None, progress: Progress | None = None):
        self.cfg = cfg
        self.stop_request = stop_request or StopRequest()
        self.strategy = strategy.Strategy(cfg.distributed, cfg.training_facts())
        # global_batch_size: the accumulation this world size needs, derived by the strategy, recorded here
        # (config.yaml, the start record and the step count read it from the config)
        cfg.gradient_accumulation_steps = self.strategy.accumulation
        self.accelerator = self.strategy.accelerator
        check_same_settings(cfg, self.accelerator.num_processes)  # before anything is built from them
        from accelerate.utils import set_seed

        set_seed(cfg.seed)
        self.out = Path(cfg.output_dir)
        self.is_main = self.accelerator.is_main_process
        self.tokenizer = load_tokenizer(cfg.model_name_or_path)
        # The dev evaluation's sentence encoder, built before training (a missing package fails now, not after
        # an epoch), and only for a run that evaluates: without one it would hold a model for nothing.
        self.first_pass_embed = (first_pass_embed(cfg.window, self.accelerator.device, cfg.postprocess.sentence_weight > 0)
                                 if cfg.evaluates_dev else None)
        self.model = build_model(cfg.model_name_or_path, cfg.pretrained, cfg.backbone_overrides)
        known = len(self.tokenizer)
        if add_structure_tokens(self.tokenizer, cfg.window):  # window.structure_tokens: new vocabulary rows
            self.model.backbone.resize_token_embeddings(len(self.tokenizer))
            added = [t for t in structure_vocabulary(cfg.window) if self.tokenizer.convert_tokens_to_ids(t) >= known]
            init_structure_embeddings(self.model, self.tokenizer, added)
        if cfg.gradient_checkpointing:
            self.model.backbone.gradient_checkpointing_enable()
        if cfg.torch_compile:  # before any engine wraps the layers: FSDP2 then shards the compiled ones
            compile_layers(self.model)
        self.num_parameters = sum(p.numel() for p in self.model.parameters())  # before any engine shards them
        self.data_summary: dict = {}
        self._dev_gold = None  # loaded once, on the first evaluation
        self.checkpointer: Checkpointer | None = None  # set up with the scheduler, in setup()
        # The step and phase this rank is in, for the hang watchdog (solution.train runs it, from before the
        # process group starts until every rank has shut down).
        self.progress = progress or Progress()

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
            try:
                ds, summary = build_train_features(
                    cfg.train_file, self.tokenizer, cfg.window, cfg.sampling, cfg.cache_dir,
                    cfg.num_proc, cfg.on_error, cfg.max_train_examples, log=self.log, seed=cfg.seed,
                    # a resume compares the windows' digest: the one of the bytes proven here, not a stale record
                    verify=self.is_main and (cfg.verify_cache or bool(cfg.resume_from_checkpoint)))
            except DiskFullError as e:  # the half-built entry is gone; one line naming it and the free space
                raise TrainingStopped(str(e), EXIT_FAULT) from None
        self.data_summary = summary
        if summary.get("skipped"):
            self.log(f"WARNING: {cfg.train_file}: skipped {summary['skipped']} bad lines "
                     f"{summary['skipped_by_reason']}; first: {summary['first_errors'][:2]}")
        self.log(f"train data: {summary['documents']} documents ({summary['unanswerable_documents']} without an "
                 f"answer), {summary['windows']} windows, {summary['windows_kept']} kept {summary['windows_per_type']}; "
                 f"no-answer windows kept: {summary['negatives_kept_answerable']} from answerable documents, "
                 f"{summary['negatives_kept_unanswerable']} from unanswerable ones")
        return ds  # memory-mapped column files: a data loader worker reads only the windows it is given

    # -- evaluation -----------------------------------------------------------
    def evaluate(self, model) -> dict:
        """Score the dev file with the competition metric; every rank predicts its share."""
        cfg, acc = self.cfg, self.accelerator
        stats = ReadStats()
        # Streamed, each rank parsing only its own lines: dev documents are never all in memory.
        mine = read_examples(cfg.dev_file, on_error=cfg.on_error, stats=stats, max_lines=cfg.max_dev_examples,
                             shard=(acc.process_index, acc.num_processes), check_duplicates=False)
        featurizer = Featurizer(self.tokenizer, cfg.window, self.first_pass_embed)
        unwrapped = acc.unwrap_model(model)
        was_training = unwrapped.training
        unwrapped.eval()
        autocast = torch.bfloat16 if cfg.mixed_precision == "bf16" else None
        sharded = self.strategy.plan.shards_parameters
        run = self.marked_runner(model_runner(unwrapped, acc.device, autocast, inference_mode=not sharded))
        # Under ZeRO-3/FSDP each forward is a collective: ranks with fewer windows keep joining in.
        n = cfg.window.max_seq_length  # a rank with no batch of its own joins in on one padding window
        dummy = collate([{"input_ids": [0] * n, "token_type_ids": [0] * n}], pad_to=n)
        # Each batch, the ranks also agree on a stop request: an evaluation takes minutes, longer than a
        # scheduler waits between its signal and SIGKILL (SLURM's KillWait: 30 s by default).
        run, finish = self.strategy.lockstep(run, dummy, self.stop_request.flags, self._stop_evaluation)
        preds = {}
        try:
            for p in predict_documents(run, featurizer, mine, cfg.postprocess, cfg.per_device_eval_batch_size):
                preds[f"{p.example_id}_long"], preds[f"{p.example_id}_short"] = p.long, p.short
            finish()
        finally:
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

    def marked_runner(self, run):
        """`run`, each batch marked as progress in the `evaluate` phase (an evaluation takes minutes)."""
        def marked(batch):
            self.progress.mark("evaluate")
            return run(batch)

        return marked

    def _stop_evaluation(self, summed: list) -> None:
        """Every evaluation batch, with the stop flags summed over ranks (the same sums on every rank)."""
        signum = self.stop_request.agreed(summed)
        if signum:
            raise EvaluationStopped(signum)

    # -- checkpoints ------------------------------------------------------------
    def qa_config(self) -> dict:
        return {"window": asdict(self.cfg.window), "postprocess": asdict(self.cfg.postprocess),
                "training": {"model_name_or_path": self.cfg.model_name_or_path, "seed": self.cfg.seed,
                             "strategy": self.strategy.name, "world_size": self.accelerator.num_processes}}

    def write_model_meta(self, checkpoint_dir: Path) -> None:
        """model_meta/ (config, tokenizer, qa_config): what consolidating a checkpoint needs besides weights."""
        save_model_meta(checkpoint_dir / "model_meta", self.accelerator.unwrap_model(self.model).config,
                        self.tokenizer, self.qa_config())

    # -- set-up -------------------------------------------------------------------
    def data_loader(self, train_set, sampler: EpochShuffle) -> DataLoader:
        cfg = self.cfg
        pad_id = self.tokenizer.pad_token_id or 0
        # Fixed-length batches: the same shapes whatever the world size, so runs compare exactly.
        # Its own generator: a new iterator draws a base seed from it, not from the global RNG stream that
        # dropout uses and a checkpoint restores (mid-epoch resume would otherwise shift dropout by one draw).
        return DataLoader(train_set, batch_size=cfg.per_device_train_batch_size, sampler=sampler,
                          drop_last=False, generator=torch.Generator().manual_seed(cfg.seed),
                          num_workers=cfg.dataloader_num_workers,
                          # Pinned (page-locked) batches: the copy to the GPU can then run without the host waiting.
                          pin_memory=self.accelerator.device.type == "cuda",
                          collate_fn=partial(collate, pad_token_id=pad_id, pad_to=cfg.window.max_seq_length))

    def start_record(self, engine: str, total_steps: int, num_epochs: int, train_windows: int,
                     engine_settings: Optional[dict] = None) -> StartRecord:
        cfg, acc, plan = self.cfg, self.accelerator, self.strategy.plan
        summary = self.data_summary
        return StartRecord(
            strategy=self.strategy.name, engine=engine, zero_stage=self.strategy.zero_stage,
            world_size=acc.num_processes, per_device_train_batch_size=cfg.per_device_train_batch_size,
            gradient_accumulation_steps=cfg.gradient_accumulation_steps,
            global_batch_size=cfg.per_device_train_batch_size * acc.num_processes * cfg.gradient_accumulation_steps,
            mixed_precision=cfg.mixed_precision, num_optimizer_steps=total_steps, num_epochs=num_epochs,
            train_windows=train_windows, device=str(acc.device), num_parameters=self.num_parameters,
            strategy_origin=plan.origin, distributed_type=str(acc.distributed_type), cpu_offload=plan.cpu_offload,
            train_data={k: summary.get(k) for k in StartRecord.TRAIN_DATA_KEYS} if summary
            else {"source": cfg.data_source}, **start_facts(cfg.optimizer, total_steps),
            seed=cfg.seed, architecture=architecture(self.model.config), window=asdict(cfg.window),
            train_data_digest=summary.get("windows_digest", "") if summary else cfg.data_source,
            train_data_source=summary.get("source", {}) if summary else {},
            engine_settings=engine_settings or {}, attention=str(getattr(self.model.config, "_attn_implementation", "")),
            torch_compile=cfg.torch_compile)

    def setup(self) -> TrainingRun:
        """Data, optimizer, engine, schedule and checkpointer; the resume position when resuming."""
        cfg, acc = self.cfg, self.accelerator
        if self.strategy.accounting:  # global_batch_size: the accumulation this world size needs
            self.log(self.strategy.accounting)
        train_set = self.train_dataset()
        sampler = EpochShuffle(len(train_set), cfg.seed)
        loader = self.data_loader(train_set, sampler)
        groups = param_groups(self.model, cfg.optimizer)
        param_names = parameter_order(self.model, groups)  # before prepare(): engines may replace the parameters
        optimizer = build_optimizer(groups, cfg.optimizer, self.strategy.engine_adam)
        memory = probe_memory(optimizer) if cfg.measure_memory else {"step": 0}  # before prepare(): see memory.py
        model, optimizer, loader = acc.prepare(self.model, optimizer, loader)
        engine = self.strategy.check_engine(model)

        batches_per_epoch = len(loader)
        steps_per_epoch = math.ceil(batches_per_epoch / cfg.gradient_accumulation_steps)
        if steps_per_epoch == 0:
            raise ValueError(f"{cfg.train_file}: no training windows (check negative_keep_rate and the data)")
        total_steps = cfg.max_steps if cfg.max_steps > 0 else math.ceil(cfg.num_train_epochs * steps_per_epoch)
        num_epochs = math.ceil(total_steps / steps_per_epoch)
        # Not passed to prepare(): Accelerate would step it once per process. The checkpointer saves its
        # state in trainer_state.json (JSON, not a pickle).
        scheduler = build_schedule(optimizer, cfg.optimizer, total_steps)
        if warning := warmup_warning(cfg.optimizer, total_steps):
            self.log(warning)
        start = self.start_record(engine, total_steps, num_epochs, len(train_set), self.strategy.engine_settings(model))
        self.checkpointer = Checkpointer(acc, self.out, scheduler, start.fingerprint(), SavePolicy.from_config(cfg),
                                         cfg.save_total_limit, write_meta=self.write_model_meta, log=self.log,
                                         async_save=cfg.async_save, checkpoint_group=self.strategy.checkpoint_group,
                                         record=lambda entry: self.metrics.write(entry))
        run = TrainingRun(model, optimizer, scheduler, loader, sampler, batches_per_epoch, total_steps,
                          num_epochs, start, memory)
        path = self.resume_path()
        if path:
            target = ResumeTarget(model, partial(self.strategy.load_full_state, model),
                                  partial(self.strategy.load_full_optimizer_state, model, optimizer, param_names),
                                  param_names, cfg.seed)
            run.step, run.epoch, run.skip = self.checkpointer.load(
                path, start.resume_key(), batches_per_epoch, target,
                manifest_checked=self.cfg.resume_from_checkpoint in ("latest", "auto"))
            start.resumed_from = {"checkpoint": str(path), "step": run.step}
        else:
            self.checkpointer.note_earlier_checkpoints()
        self.open_outputs(start)
        return run

    def resume_path(self) -> Optional[Path]:
        """The checkpoint to continue from (None: start fresh); under `auto`, one line says which."""
        spec = self.cfg.resume_from_checkpoint
        path = find_checkpoint(self.out, spec, log=self.log) if spec else None
        if spec == "auto":  # a requeued job's log says whether it continued
            self.log(f"resume auto: continuing from {path}" if path
                     else f"resume auto: no complete checkpoint in {self.out}; starting fresh")
        return path

    def open_outputs(self, start: StartRecord) -> None:
        """metrics.jsonl's start record, the trackers, and config.yaml."""
        cfg = self.cfg
        self.metrics = MetricsLog(self.out / "metrics.jsonl", self.is_main, append=bool(cfg.resume_from_checkpoint))
        record = start.as_dict()
        self.metrics.write(record)
        if cfg.report_to:  # once; Accelerate's trackers act on the main process only
            self.accelerator.init_trackers(TRACKER_PROJECT, config=cfg.tracker_config())
        self.log("accounting: " + ", ".join(f"{k}={v}" for k, v in record.items() if k != "event"))
        if self.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "config.yaml").write_text(cfg.to_yaml())

    # -- training -------------------------------------------------------------
    def train(self) -> dict:
        check_writable(self.out, "output_dir", create_dir=True)  # on every rank, before the data is read
        run = self.setup()
        self.before_loop(run)
        last_eval = self.train_loop(run)
        self.finish(run, run.step, last_eval)
        self.progress.mark("shutdown")  # the closing barrier: a rank stopped now is named too
        self.strategy.close()
        return last_eval

    def before_loop(self, run: TrainingRun) -> None:
        """Once set-up is done: the heap kept, the first-step save, the collectives' timeout lowered."""
        cfg = self.cfg
        if cfg.cpu_retain_freed_memory and self.accelerator.device.type == "cpu":
            # After the data is read: only the loop's steady allocations should land on a heap that never shrinks.
            self.log("cpu memory: " + retain_freed_memory()[1])
        if cfg.save_first_step:
            self.checkpointer.save_due.first_step = run.step + 1  # the first step this start runs
        # Only now: during set-up the other ranks may wait in a barrier while the main process featurises,
        # and the engines' own process groups exist only after prepare().
        if cfg.distributed.hang_timeout > 0:
            strategy.set_collective_timeout(collective_timeout(cfg.distributed.hang_timeout))

    def train_loop(self, run: TrainingRun) -> dict:
        """Every epoch from the resume position; returns the last dev scores. `run.step` follows the loop."""
        from tqdm.auto import tqdm

        bar = tqdm(total=run.total_steps, initial=run.step, disable=not self.is_main or self.cfg.disable_tqdm,
                   desc=f"train [{self.strategy.name} x{self.accelerator.num_processes}]",
                   dynamic_ncols=True, file=sys.stdout)
        run.model.train()
        last_eval = {}
        device = self.accelerator.device
        meter = StepMeter(torch.zeros((), device=device), Health(device))
        step = first = run.step
        # profile_steps: the steps right after the first logging window, so compilation and warm-up are out
        profiler = StepProfiler(self.out, first + self.cfg.logging_steps + 1, self.cfg.profile_steps, device,
                                write=self.is_main) if self.cfg.profile_steps > 0 else None
        self.stop_request.armed = True
        last_eval = self.evaluate_resumed_epoch(run) or last_eval
        for epoch in range(run.epoch, run.num_epochs):
            if step >= run.total_steps:
                break
            batches, run.skip = run.skip, 0
            for batch in self.marked(self.epoch_batches(run, epoch, skip=batches)):
                batches += 1
                run.memory["step"] = step + 1  # the optimizer step this micro-batch belongs to
                sync = self.sync_due(step + 1, run.total_steps, epoch_end=batches == run.batches_per_epoch,
                                     first=step == first)
                if not self.micro_step(run, batch, meter, want_norm=sync):
                    continue
                step += 1
                bar.update(1)
                if profiler is not None:
                    profiler.after_step(step)
                if sync:
                    self.after_synced_step(run, meter, step, epoch, batches, bar, first=step == first + 1)
                elif step < run.total_steps and self.accelerator.num_processes == 1 and self.stop_request.signum:
                    # One process: its own signal needs no agreement, and the flag is a host value. The read
                    # first: a diverged run stops there instead of saving.
                    self.read_step(meter, step)
                    self._stop_if_requested(step, epoch, batches, self.stop_request.signum)
                if step >= run.total_steps:
                    break
            self.progress.mark("save")
            self.checkpointer.maybe_save(step, epoch, batches, epoch_end=True)
            last_eval = self.end_of_epoch(run.model, epoch, step, batches) or last_eval
        bar.close()
        run.step = step
        return last_eval

    def after_synced_step(self, run: TrainingRun, meter: StepMeter, step: int, epoch: int, batches: int, bar,
                          first: bool = False) -> None:
        """A step that logs, saves, ends the run or is this start's first: read its figures (stopping a
        diverged run), write its record, save when due, and stop when a rank received a signal."""
        figures = self.read_step(meter, step)
        bar.set_postfix(loss=f"{figures.loss:.4f}", epoch=epoch)
        self.log_step(step, epoch, figures, meter, run.total_steps, first=first)
        self.progress.mark("save")
        self.checkpointer.maybe_save(step, epoch, batches)
        if step < run.total_steps:
            self._stop_if_requested(step, epoch, batches, self.stop_request.agreed(figures.flags))

    def read_step(self, meter: StepMeter, step: int) -> StepFigures:
        """The figures of step `step`, read at once: the loss averaged over ranks (the loss of the whole global
        batch) and the stop flags summed over ranks in one all-reduce, then one read. Stops the run when the
        divergence check found a bad step since the last read, naming the first (agreed over ranks)."""
        acc = self.accelerator
        self.progress.mark("collective", step)
        f64 = dict(dtype=torch.float64, device=meter.loss_sum.device)
        health = meter.health.figures()
        # [loss, *stop flags, bad]: summed over ranks; each blocking collective is a point where every rank
        # waits for the slowest, so one carries them all.
        shared = torch.cat([on_device(meter.loss, **f64).reshape(1),
                            torch.tensor(self.stop_request.flags(), dtype=torch.float64).to(f64["device"]),
                            (health[:1] >= 0).to(torch.float64)])
        if acc.num_processes > 1:
            import torch.distributed as dist

            dist.all_reduce(shared)
            shared[0] /= acc.num_processes
        norm = torch.zeros(2, **f64) if meter.grad_norm is None else \
            torch.stack([on_device(meter.grad_norm, **f64), torch.ones((), **f64)])
        values = torch.cat([shared, norm, health]).tolist()
        n = len(self.stop_request.SIGNALS)
        loss, flags, bad, (grad_norm, has_norm), health = values[0], values[1:1 + n], values[1 + n], \
            values[2 + n:4 + n], values[4 + n:]
        figures = StepFigures(loss, grad_norm if has_norm else None, flags, int(health[-1]))
        if bad > 0:
            self.stop_diverged(health)
        return figures

    def stop_diverged(self, figures: list) -> None:
        """Raise TrainingStopped naming the first step that went bad on any rank (ranks agree on it first)."""
        acc = self.accelerator
        mine = Health.why(figures)
        first = mine[0] if mine else float("inf")
        if acc.num_processes > 1:
            import torch.distributed as dist

            agreed = torch.tensor([float(first)], dtype=torch.float64).to(acc.device)
            dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
            first = int(agreed.item())
        why = mine[1] if mine and mine[0] == first else "another rank's loss or gradient norm was not finite"
        raise TrainingStopped(f"training diverged at step {first}: {why}; {self.checkpointer.last_good()}",
                              EXIT_FAULT)

    def marked(self, batches):
        """The batches of `batches`, each fetch marked as the `data` phase (a stuck loader shows as one)."""
        it = iter(batches)
        while True:
            self.progress.mark("data")
            try:
                batch = next(it)
            except StopIteration:
                return
            yield batch

    def epoch_batches(self, run: TrainingRun, epoch: int, skip: int):
        """The loader for `epoch`, past its first `skip` batches (a resumed run's position)."""
        loader = self.accelerator.skip_first_batches(run.loader, skip) if skip else run.loader
        # Accelerate's loader re-sets the sampler's epoch from its own counter at each __iter__, and that
        # counter starts at 0 in a new process: a resumed run would replay epoch 0's order. So the epoch
        # is set on the loader itself (the skipping one too), and on the sampler, which a loader that was
        # not prepared (tests/faulty_train.py same-data) iterates directly.
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        run.sampler.set_epoch(epoch)
        return loader

    def micro_step(self, run: TrainingRun, batch: dict, meter: StepMeter, want_norm: bool = True) -> bool:
        """Forward and backward one micro-batch; the optimizer steps on the last of an accumulation.
        True when it did (an optimizer step ended). `want_norm`: see `sync_due`."""
        acc = self.accelerator
        with acc.accumulate(run.model):
            self.progress.mark("forward")
            out = run.model(**batch)
            self.progress.mark("backward")
            acc.backward(out["loss"])
            meter.loss_sum += out["loss"].detach()
            meter.micro += 1
            meter.samples += batch["input_ids"].shape[0] * acc.num_processes
            if acc.sync_gradients:
                self.progress.mark("optimizer")
                meter.lr = run.scheduler.get_last_lr()[0]  # the rate this step uses
                meter.grad_norm = self.strategy.clip_and_norm(run.model, self.cfg.max_grad_norm, want_norm)
                scale = self.strategy.loss_scale()
                run.optimizer.step()
                skipped = self.strategy.step_was_skipped(scale)
                run.scheduler.step()
                run.optimizer.zero_grad(set_to_none=True)
                meter.close_step(run.memory["step"], skipped)
        return acc.sync_gradients

    def sync_due(self, step: int, total_steps: int, epoch_end: bool, first: bool = False) -> bool:
        """Whether step `step` reads its figures from the device: it logs, saves or ends the run, or it is the
        first step of this start (timed apart: it holds compilation and the device's warm-up). Only these
        steps compute the gradient norm when nothing is clipped (a pass over every gradient), and only these
        wait for the device. Between them a diverged model is caught by the sticky check (`Health`) and
        named at the next one, before any save. Every rank must decide the same (under FSDP the norm is
        a collective)."""
        cfg = self.cfg
        return (first or step % cfg.logging_steps == 0 or step == total_steps
                or self.checkpointer.save_due(step, epoch_end))

    def log_step(self, step: int, epoch: int, figures: StepFigures, meter: StepMeter, total_steps: int,
                 first: bool = False) -> None:
        """A metrics.jsonl record (and the trackers') every logging_steps and at the last step. The first step
        of a start closes a window of its own: its time (compilation, warm-up) stays out of the next one's,
        written as a `first_step` event where it does not log."""
        logs = step % self.cfg.logging_steps == 0 or step == total_steps
        if not (logs or first):
            return
        steps, samples = meter.steps, meter.samples
        elapsed = meter.close_window()
        if not logs:
            self.metrics.write({"event": "first_step", "step": step, "seconds": elapsed})
            return
        record = {"step": step, "epoch": epoch, "loss": figures.loss, "grad_norm": figures.grad_norm,
                  "lr": meter.lr, "step_time_s": elapsed / max(steps, 1),  # the window's mean
                  "samples_per_s": samples / max(elapsed, 1e-9)}
        if figures.skipped_steps:  # fp16: steps the loss scaler skipped so far (their weights did not move)
            record["skipped_steps"] = figures.skipped_steps
        self.metrics.write(record)
        if self.cfg.report_to:
            self.accelerator.log(tracker_values(record, "train"), step=step)

    def evaluate_resumed_epoch(self, run: TrainingRun) -> dict | None:
        """A run resumed at the end of an epoch (or at its last step) evaluates that epoch first: its
        evaluation may not have run, stopped by a signal or killed. Its scores are those the
        uninterrupted run wrote there; an evaluation that did finish before is only repeated."""
        if run.start.resumed_from is None:
            return None
        if run.skip == 0 and run.epoch > 0:  # the checkpoint closed epoch - 1
            return self.end_of_epoch(run.model, run.epoch - 1, run.step, run.batches_per_epoch)
        if run.step >= run.total_steps:  # max_steps ended the run inside this epoch
            return self.end_of_epoch(run.model, run.epoch, run.step, run.skip)
        return None

    def end_of_epoch(self, model, epoch: int, step: int, batches: int) -> dict | None:
        """Dev scores after the epoch when eval_strategy is `epoch` (None: no evaluation). A stop request
        ends the evaluation at its next batch with a checkpoint at `step` (`batches` into `epoch`)."""
        if not self.cfg.evaluates_dev:
            return None
        try:
            result = self.evaluate(model)
        except EvaluationStopped as stop:  # a signal is set: this checkpoints and raises TrainingStopped
            self._stop_if_requested(step, epoch, batches, stop.signum,
                                    during=f"the evaluation of epoch {epoch} (a resumed run evaluates it again)")
        self.metrics.write({"event": "eval", "epoch": epoch, "step": step, **result})
        if self.cfg.report_to:
            self.accelerator.log(tracker_values(result, "eval"), step=step)
        self.log(f"dev after epoch {epoch} (step {step}):\n{format_report(result)}")
        return result

    def finish(self, run: TrainingRun, step: int, last_eval: dict) -> None:
        """The model directory, the end record (with each rank's peak memory when measured), shutdown."""
        acc = self.accelerator
        self.progress.mark("save")
        self.checkpointer.wait()  # an asynchronous save still being written: complete, or its error, first
        if self.cfg.save_final_model:
            self.save_final(run.model)
        end = {"event": "end", "step": step, "dev": last_eval or None}
        if self.cfg.measure_memory:
            import resource

            from accelerate.utils import gather_object

            # ru_maxrss is in KiB on Linux.
            mine = {**run.memory, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
            mine.pop("step", None)
            end["memory_per_rank"] = gather_object([mine])
        self.metrics.write(end)
        self.progress.mark("collective")
        acc.wait_for_everyone()

    def _stop_if_requested(self, step: int, epoch: int, batches: int, signum: int, during: str = "") -> None:
        """Checkpoint at `step` and stop (`during`: where, when not between optimizer steps)."""
        if not signum:
            return
        path = self.checkpointer.save_now(step, epoch, batches)
        name = signal.Signals(signum).name
        # The record a script reads to tell "stopped and saved" from a crash (scripts/launch_slurm.sh).
        self.metrics.write({"event": "stopped", "signal": name, "step": step, "checkpoint": str(path)})
        where = f" during {during}" if during else ""
        raise TrainingStopped(f"stopped by {name} at step {step}{where}: saved {path}; continue with --resume "
                              "latest", EXIT_STOPPED)

    def save_final(self, model) -> None:
        acc = self.accelerator
        self.progress.mark("save")
        acc.wait_for_everyone()
        state = self.strategy.full_state_dict(model)  # full fp32 weights on the main process, whatever the strategy
        if self.is_main:
            # model.tmp: save_model_dir's temporary name; a full disk removes it and ends in one line.
            with removed_if_disk_full(self.out / "model.tmp", lambda: disk_full(self.out / "model")):
                path = save_model_dir(self.out / "model", state, acc.unwrap_model(model).config, self.tokenizer,
                                      self.qa_config())
            self.log(f"model directory: {path}")

"""The one place that turns a strategy into what Accelerate needs.

Model, data and post-processing code never import accelerate or deepspeed;
the trainer asks this module for a `Strategy`, which owns the `Accelerator`
and the few facts that differ between engines: what really wraps the model,
how to read the gradient norm, how to make every rank's forward passes line
up when parameters are sharded, how to save and read checkpoints.

Which strategy a run uses, and from which source, is `distributed.plan`'s `plan_strategy`.
`Strategy` then builds the plan's engine (`distributed.engines`: `build_deepspeed`, `build_fsdp`,
`build_ddp`) and `verify_launch` checks what Accelerate set up. It is given the training config's
`distributed:` section and the few training facts the engine is told (`plan.TrainingFacts`), never the
whole config, and writes nothing back: the accumulation it derives is `Strategy.accumulation`.

CPU-only machines (see docs/cpu-distributed-facts.md for the measurements). Several
obvious calls silently run something else there, so this module never relies
on them and checks the result:
  * `Accelerator(cpu=True, deepspeed_plugin=...)` or `(cpu=True, fsdp_plugin=...)`
    quietly becomes plain DDP: DeepSpeed is built without `cpu=True` and with
    a gloo process group instead;
  * `Accelerator(fsdp_plugin=...)` without a GPU gives unsynchronised ranks:
    FSDP2 on CPU starts from a gloo MULTI_CPU state that is then switched to
    FSDP, which is what Accelerate's own FSDP2 path needs;
  * Accelerate's distributed type and process count are checked against the
    plan and the launcher's world size (`verify_launch`), and after `prepare`
    the engine that wraps the model against the strategy's name
    (`Strategy.check_engine`: `DeepSpeedEngine` with its ZeRO stage and
    offload, an FSDP2 module, `DistributedDataParallel`; for `single`, the
    bare model or DDP over a world of one); a mismatch stops the run
    instead of training with the wrong engine.
"""

from __future__ import annotations

import copy
import os
import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Callable, Optional

import torch

from solution.checkpoints.resume import ADAM_KEYS
from solution.common.precision import cpu_native_bf16
from solution.distributed.engines import build_ddp, build_deepspeed, build_fsdp, verify_launch
from solution.distributed.lifecycle import (
    closing_barrier,
    destroy_process_groups,
    launcher_rank,
    remove_shm_buffers,
    unlink_own_shm_buffer,
)
from solution.distributed.plan import (
    DistributedConfig,
    Plan,
    TrainingFacts,
    derive_accumulation,
    launcher_world_size,
    plan_strategy,
)
from solution.distributed.watchdog import STACKS_DIR, collective_timeout


def _init_handlers(cuda: bool, hang_timeout: float = 0.0) -> list:
    """gloo on CPU (on GPUs Accelerate picks NCCL itself), and the process group's timeout.

    The timeout at start-up is the larger of the library's default (NCCL 10 min, gloo 30 min) and the
    one hang_timeout sets (`watchdog.collective_timeout`): the ranks that wait while the main process
    featurises wait in a barrier. The training loop lowers it (`set_collective_timeout`).
    Only with a launcher: a backend given to a lone process makes Accelerate expect a process group."""
    from datetime import timedelta

    from accelerate.utils import InitProcessGroupKwargs

    if "LOCAL_RANK" not in os.environ:
        return []
    kwargs = {} if cuda else {"backend": "gloo"}
    if hang_timeout > 0:
        library_default = 600 if cuda else 1800
        kwargs["timeout"] = timedelta(seconds=max(library_default, collective_timeout(hang_timeout)))
    return [InitProcessGroupKwargs(**kwargs)] if kwargs else []


def set_collective_timeout(seconds: float) -> int:
    """Every process group of this rank (the world's, and those DeepSpeed or FSDP made, which new_group
    gives the library's default, not the world's) times out its collectives after `seconds`; returns
    how many groups. torch's `_set_pg_timeout` is private: where it is missing, a warning, nothing else."""
    from datetime import timedelta

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 0
    c10d = dist.distributed_c10d
    try:
        groups = list(c10d._world.pg_map)
        for group in groups:
            c10d._set_pg_timeout(timedelta(seconds=seconds), group)
    except (AttributeError, RuntimeError, ValueError) as e:
        print(f"warning: rank {launcher_rank()}: cannot set the collective timeout to {seconds:.0f} s "
              f"({type(e).__name__}: {e}); the library's default applies", file=sys.stderr, flush=True)
        return 0
    return len(groups)


NCCL_WATCHDOG_ENV = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",  # a timed-out collective aborts the communicator and the process
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",  # the flight recorder: the last 2000 collectives of each rank
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",  # ... written out when a collective times out
}


def nccl_watchdog_env(output_dir: str) -> None:
    """NCCL's own watchdog and flight recorder, each variable only where the user has not set it: the
    recorder's dump goes to output_dir/hang-stacks/nccl_trace_rank_<R> beside the watchdog's stacks."""
    stacks = Path(output_dir) / STACKS_DIR
    for key, value in {**NCCL_WATCHDOG_ENV, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{stacks}/nccl_trace_rank_"}.items():
        os.environ.setdefault(key, value)
    stacks.mkdir(parents=True, exist_ok=True)


def _check_machine(cfg: TrainingFacts, plan: Plan, cuda: bool) -> None:
    """What this machine or the accelerate launch YAML cannot run as configured: stop before building anything."""
    if cfg.torch_compile and plan.is_deepspeed:
        raise ValueError(f"torch_compile with strategy {plan.name}: DeepSpeed's ZeRO hooks inside each layer are not "
                         "compiled with it here; use single, ddp, fsdp or fsdp_grad_op, or torch_compile: false")
    if cfg.mixed_precision == "fp16" and not cuda:
        raise ValueError("mixed_precision fp16 needs a GPU (CPU autocast supports bf16 only); "
                         "use mixed_precision: bf16 or no")
    if cfg.mixed_precision == "bf16" and not cuda and not cpu_native_bf16():
        print("warning: mixed_precision bf16 on a CPU without native bf16 (no AVX512-BF16 or AMX): torch emulates "
              "it, several times slower than float32; mixed_precision: no trains faster here", file=sys.stderr, flush=True)
    launched = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    if launched not in ("no", cfg.mixed_precision):
        raise ValueError(f"accelerate launch config says mixed_precision {launched}, the training config "
                         f"{cfg.mixed_precision}; the training config decides: make them agree")
    if plan.is_fsdp and plan.cpu_offload and not cuda:
        raise ValueError(f"strategy {plan.name} with cpu_offload needs a GPU: FSDP2's CPUOffloadPolicy moves "
                         "shards between GPU and CPU memory (measured: torch refuses it without an accelerator). "
                         "Without a GPU everything already lives in CPU memory: drop cpu_offload")


def check_trackers(report_to: list) -> None:
    """Refuse a tracker whose package is missing: Accelerate drops it with a debug message only, and the
    run trains untracked. Its own availability checks decide, as they do in Accelerate."""
    from accelerate.utils import is_tensorboard_available, is_wandb_available

    packages = {"tensorboard": (is_tensorboard_available, "tensorboard", " (or tensorboardX)"),
                "wandb": (is_wandb_available, "wandb", "")}
    for name in report_to:
        available, package, alternative = packages[name]
        if not available():
            raise ValueError(f"config: report_to {name}, but the package {package}{alternative} is not installed; "
                             f"pip install {package}, or leave {name} out of report_to")


def resumes_universal(cfg: TrainingFacts, plan: Plan) -> bool:
    """Whether this run resumes a ZeRO checkpoint through DeepSpeed's universal checkpoint (same stage,
    another world size, optimizer state to carry); the engine must be built knowing it."""
    if not (plan.is_deepspeed and cfg.resume_from_checkpoint):
        return False
    from solution.checkpoints.resume import resume_route
    from solution.checkpoints.state import TrainerState, find_checkpoint

    path = find_checkpoint(cfg.output_dir, cfg.resume_from_checkpoint)
    if path is None:  # --resume auto with nothing to resume: a fresh start
        return False
    saved = TrainerState.read(path).fingerprint
    mine = {"strategy": plan.name, "zero_stage": plan.zero_stage, "world_size": launcher_world_size(), "optim": cfg.optim}
    return resume_route(saved, mine) == "universal"


def ds_set_full(param, value: torch.Tensor, key: Optional[str] = None) -> None:
    """This rank's part of a full fp32 value (the master weight, or optimizer state `key`) of a ZeRO parameter.

    DeepSpeed's safe_set_full_fp32_param/safe_set_full_optimizer_state, except under ZeRO-3, where
    0.19.8 slices the last rank's partition past the end of a parameter whose size does not divide by
    the world size (a 5-element bias on 2 ranks: "start (3) + length (3) exceeds dimension size (5)");
    here the value is padded with zeros as ZeRO-3 pads that partition."""
    from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

    if not hasattr(param, "ds_id"):  # ZeRO-1/2
        safe_set_full_fp32_param(param, value) if key is None else safe_set_full_optimizer_state(param, value, key)
        return
    if not param.requires_grad:
        return
    opt = param._z3_optimizer
    part, group = opt._get_fp32_opt_state_partition(param, release_swap_buffers=False, optim_state_key=key)
    start = part.numel() * opt._get_param_partition_rank(param)
    flat = value.flatten()
    flat = torch.nn.functional.pad(flat, (0, max(0, start + part.numel() - flat.numel())))
    part.data.copy_(flat.narrow(0, start, part.numel()))
    if opt._swappable_optimizer_subgroup(group):  # NVMe offload: write the subgroup back, as DeepSpeed does
        opt._optimizer_states_and_gradient_swap_out(group)


class Strategy:
    """The Accelerator for a plan, plus the per-engine facts the trainer needs."""

    def __init__(self, settings: DistributedConfig, facts: TrainingFacts):
        """Build the engine for the `distributed:` section and the training facts it is told. With
        global_batch_size the accumulation steps are derived for this world size: `self.accumulation`,
        for the training stage to apply (`self.accounting`: the line saying so, or None)."""
        # Before the plan: a DeepSpeed JSON's fixed accumulation is checked against the derived one.
        self.accumulation, self.accounting = derive_accumulation(facts, launcher_world_size())
        facts = replace(facts, gradient_accumulation_steps=self.accumulation)
        self.plan = plan_strategy(settings, facts)
        self.cuda = torch.cuda.is_available()
        _check_machine(facts, self.plan, self.cuda)
        check_trackers(facts.report_to)
        self.plan.ds_load_universal = resumes_universal(facts, self.plan)
        self._checkpoint_groups: list = []  # gloo groups of asynchronous DCP writes (checkpoint_group)
        self._hang_timeout = settings.hang_timeout  # the closing barrier outlasts the watchdog (see close)
        build = build_deepspeed if self.plan.is_deepspeed else build_fsdp if self.plan.is_fsdp else build_ddp
        if self.cuda and settings.hang_timeout > 0 and "LOCAL_RANK" in os.environ:  # NCCL: before the group exists
            nccl_watchdog_env(facts.output_dir)
        from accelerate.utils import DataLoaderConfiguration

        # non_blocking: each batch is copied to the GPU without the host waiting for the copy (the loader pins
        # its memory, see Trainer.data_loader); a blocking copy would wait for the device to finish its queue.
        kwargs = dict(mixed_precision=facts.mixed_precision, gradient_accumulation_steps=self.accumulation,
                      log_with=list(facts.report_to) or None, project_dir=facts.output_dir,  # report_to: Accelerate's trackers
                      dataloader_config=DataLoaderConfiguration(non_blocking=self.cuda))
        self.accelerator = build(facts, self.plan, self.cuda, kwargs, _init_handlers(self.cuda, settings.hang_timeout))
        global _OPEN
        _OPEN = self  # from here on, shutdown() has something to close
        # DeepSpeed on CPU: its shared-memory buffers are mapped by now; unlink them (see the function).
        self._shm_port = unlink_own_shm_buffer() if self.plan.is_deepspeed and not self.cuda else None
        verify_launch(self.accelerator, self.plan, self.cuda)

    # -- facts ------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def zero_stage(self) -> Optional[int]:
        return self.plan.zero_stage

    @property
    def engine_adam(self) -> Optional[Callable]:
        """The AdamW this engine needs instead of torch's, called as torch's (None: torch's own). With
        DeepSpeed's optimizer offload the step runs on the CPU copy of the weights: DeepSpeed's CPU Adam,
        in its AdamW mode. The optimizer itself is built by solution.training.optimizer."""
        if not (self.plan.is_deepspeed and self.plan.cpu_offload):
            return None
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return partial(DeepSpeedCPUAdam, adamw_mode=True)

    def check_engine(self, prepared_model) -> str:
        """The class that really wraps the model; stop if it is not the engine the strategy names."""
        engine = type(prepared_model).__name__
        plan = self.plan
        if plan.is_deepspeed:
            from deepspeed import DeepSpeedEngine

            ok = isinstance(prepared_model, DeepSpeedEngine) and prepared_model.zero_optimization_stage() == plan.zero_stage
            if ok and plan.cpu_offload:
                ok = prepared_model.zero_cpu_offload()
        elif plan.is_fsdp:
            from torch.distributed.fsdp import FSDPModule

            ok = isinstance(prepared_model, FSDPModule)
        elif plan.name == "ddp":
            ok = isinstance(prepared_model, torch.nn.parallel.DistributedDataParallel)
        else:
            # One rank under a launcher: on CPU Accelerate wraps it in DistributedDataParallel over a world
            # of one (MULTI_CPU always wraps; MULTI_GPU only from two ranks), which exchanges gradients with
            # nobody, so it is still one process; the start record names that wrapper as the engine.
            ok = self.accelerator.num_processes == 1 or \
                not isinstance(prepared_model, torch.nn.parallel.DistributedDataParallel)
        if not ok:
            raise ValueError(f"strategy {plan.name} expected its engine, but the model is wrapped by {engine}; "
                             "refusing to train with a different engine than configured")
        return engine

    def engine_settings(self, prepared_model) -> dict:
        """What the engine runs with, as resolved after prepare(), for the run's start record: a run says what
        it ran. DeepSpeed: its config with every "auto" filled; FSDP2: resharding, units, mixed precision;
        DDP and one process: whether the forward runs under autocast."""
        acc = self.accelerator
        if self.plan.is_deepspeed:
            ds = acc.state.deepspeed_plugin.deepspeed_config
            keys = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping", "bf16",
                    "fp16", "zero_optimization", "timers")
            return {k: copy.deepcopy(ds[k]) for k in keys if k in ds}
        if self.plan.is_fsdp:
            from torch.distributed.fsdp import FSDPModule

            plugin, policy = acc.state.fsdp_plugin, acc.state.fsdp_plugin.mixed_precision_policy
            return {"reshard_after_forward": plugin.reshard_after_forward, "autocast": acc.native_amp,
                    "units": sum(isinstance(m, FSDPModule) for m in prepared_model.modules()),
                    "mixed_precision_policy": None if policy is None else {
                        k: str(getattr(policy, k)).replace("torch.", "") for k in ("param_dtype", "reduce_dtype")}}
        return {"autocast": acc.native_amp}

    def clip_and_norm(self, model, max_norm: float, want_norm: bool = True):
        """Global gradient norm before clipping, a device scalar (clipping applied here, or by DeepSpeed inside
        its step); not read here: the trainer reads it on the steps that log or save.

        Without clipping (max_norm 0) and `want_norm` False, nothing is computed (None): the norm is a
        pass over every gradient, which the trainer only needs on logging and saving steps. Every rank
        must pass the same `want_norm` (under FSDP the norm is a collective)."""
        if self.plan.is_deepspeed:
            # Accelerate's backward already ran engine.step() on the accumulation boundary; DeepSpeed
            # clipped there with `gradient_clipping` and kept the norm it measured first (a device scalar,
            # or a number: inf on a step its fp16 loss scaler skipped).
            return model.get_global_grad_norm()
        if max_norm <= 0 and not want_norm:
            return None
        if max_norm <= 0 and not self.plan.is_fsdp and self.accelerator.scaler is None:  # fp16 unscales first
            # No clipping: only the norm (for the log and the divergence check). clip_grad_norm_ would also
            # multiply every gradient by 1.0, a pass over all of them (BERT-base on CPU: ~25 ms a step).
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            return torch.nn.utils.get_total_norm(grads)
        norm = self.accelerator.clip_grad_norm_(model.parameters(), max_norm if max_norm > 0 else float("inf"))
        if hasattr(norm, "full_tensor"):  # FSDP2 returns a DTensor
            norm = norm.full_tensor()
        return norm

    def loss_scale(self):
        """The fp16 loss scaler's scale now, a device scalar (None without one: bf16, fp32, or DeepSpeed's own
        scaler). A copy: the scaler updates its own in place."""
        scaler = self.accelerator.scaler
        if scaler is None:
            return None
        scale = scaler._get_scale_async()  # the scale tensor itself; get_scale() would read it on the host
        return None if scale is None else scale.detach().clone()

    def step_was_skipped(self, scale_before):
        """Whether the optimizer step just taken was skipped for overflowed gradients (a device bool, or a
        bool); `scale_before` is loss_scale() before it. Accelerate tells a skip by whether the scaler called
        the optimizer's step, but a fused or foreach AdamW takes the overflow flag and is called either way
        (the H100's first fp16 runs): the scaler lowering its scale is what every skip has in common."""
        if scale_before is not None:
            return self.accelerator.scaler._get_scale_async() < scale_before
        return bool(self.accelerator.optimizer_step_was_skipped)  # DeepSpeed's engine: its overflow flag

    def lockstep(self, run: Callable, dummy_batch: dict, flags: Callable[[], list] = list,
                 agree: Callable[[list], None] = lambda summed: None) -> tuple[Callable, Callable[[], None]]:
        """Wrap a forward function so that before each forward every rank agrees on two things.

        Whether any rank still has work: under ZeRO-3 and FSDP every forward gathers parameters from all
        ranks, so a rank that has finished its documents must keep running forwards (on one row of its
        last batch, or on `dummy_batch`, a batch of one the caller built) until every rank has; under DDP
        it only keeps joining the agreement. And `flags()` summed over ranks, handed to `agree`: the same
        sums on every rank in the same round, so `agree` may raise to stop every rank there (a stop
        request in the middle of an evaluation). One all-reduce a round carries both; one process
        calls `agree` with its own flags. Returns (wrapped run, finish), finish() called once the
        rank's own work is done."""
        if self.accelerator.num_processes == 1:
            def alone(batch):
                agree(flags())
                return run(batch)

            return alone, lambda: None
        import torch.distributed as dist

        device = self.accelerator.device
        sharded = self.plan.shards_parameters
        last = {}

        def any_work(flag: int) -> bool:
            t = torch.tensor([flag, *flags()], dtype=torch.float32, device=device)
            dist.all_reduce(t)
            work, *summed = t.tolist()
            agree(summed)
            return work > 0

        def wrapped(batch):
            any_work(1)
            last["batch"] = {k: v[:1] if torch.is_tensor(v) else v for k, v in batch.items()}
            return run(batch)

        def finish():
            while any_work(0):
                if sharded:
                    run(last.get("batch") or dummy_batch)

        return wrapped, finish

    def full_state_dict(self, model) -> Optional[dict]:
        """Full float32 weights on the main process (None on the others). Every rank must call it.

        DeepSpeed: the fp32 master copy from the optimizer partitions (under bf16 the module itself
        holds bf16 copies), gathered parameter by parameter. FSDP2: torch's full state dict, gathered
        to CPU. DDP/single: the module's own state dict."""
        acc = self.accelerator
        if self.plan.is_deepspeed:
            from deepspeed.utils import safe_get_full_fp32_param

            module = model.module
            keys = set(module.state_dict().keys())
            out = {}
            for name, p in module.named_parameters():
                full = safe_get_full_fp32_param(p)  # a collective under ZeRO-3
                if acc.is_main_process:
                    out[name] = full.detach().float().cpu().clone()
            for name, b in module.named_buffers():
                if name in keys and acc.is_main_process:
                    out[name] = b.detach().cpu().clone()
            return out if acc.is_main_process else None
        if self.plan.is_fsdp:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            return {k: v.float() if v.is_floating_point() else v for k, v in state.items()} \
                if acc.is_main_process else None
        state = acc.get_state_dict(model)
        return state if acc.is_main_process else None

    def load_full_state(self, model, state: dict) -> None:
        """Full fp32 weights by name (every rank holds them all) into the prepared model: resuming a
        checkpoint of another engine. DeepSpeed: the module's weights (gathered under ZeRO-3, then
        re-partitioned from rank 0) and the optimizer's fp32 master copy. FSDP2: torch's full state dict,
        each rank keeping its shards. DDP/single: the module's state dict."""
        if self.plan.is_deepspeed:
            import deepspeed

            params = dict(model.module.named_parameters())
            with deepspeed.zero.GatheredParameters(list(params.values()), modifier_rank=0):
                with torch.no_grad():
                    for name, p in params.items():
                        p.data.copy_(state[name].view(p.shape))
            for name, p in params.items():
                ds_set_full(p, state[name].to(self.accelerator.device))
            return
        if self.plan.is_fsdp:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

            set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))
            return
        self.accelerator.unwrap_model(model).load_state_dict(state)

    def load_full_optimizer_state(self, model, optimizer, names: list, moments: dict) -> None:
        """Adam's state by parameter name (full tensors, `step` a number) into the prepared optimizer.
        DeepSpeed: each rank's partition of the moments, and the step count of the optimizer over its
        flat partitions. FSDP2: torch's full optimizer state dict, sharded on load. DDP/single: the
        optimizer's own state dict, parameters numbered in param_groups order (`names`)."""
        if self.plan.is_deepspeed:
            zero, base = model.optimizer, model.optimizer.optimizer  # base: Adam over ZeRO's flat fp32 partitions
            # Adam's state appears at the first step: create it here, as DeepSpeed's universal loader does
            # (DeepSpeed's CPU Adam counts steps in an int), and, under ZeRO-1/2, link it to each parameter.
            flats = getattr(zero, "fp32_partitioned_groups_flat", None) or zero.single_partition_of_fp32_groups
            for flat in flats:
                state = base.state[flat]
                state.setdefault("step", 0 if type(base).__name__ == "DeepSpeedCPUAdam" else torch.tensor(0.0))
                for key in ADAM_KEYS:
                    state.setdefault(key, torch.zeros_like(flat))
            if hasattr(zero, "_lazy_init_hp_params_optimizer_state"):
                zero._lazy_init_hp_params_optimizer_state()
            for name, p in model.module.named_parameters():
                for key in ADAM_KEYS:
                    ds_set_full(p, moments[name][key].to(self.accelerator.device), key)
            step = next(iter(moments.values()))["step"]
            for state in base.state.values():
                state["step"] = torch.full_like(state["step"], step) if torch.is_tensor(state["step"]) else int(step)
            return
        inner = optimizer.optimizer  # Accelerate's AcceleratedOptimizer wraps the torch optimizer
        full = {n: {"step": torch.tensor(m["step"]), "exp_avg": m["exp_avg"], "exp_avg_sq": m["exp_avg_sq"]}
                for n, m in moments.items()}
        if self.plan.is_fsdp:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_optimizer_state_dict,
                set_optimizer_state_dict,
            )

            options = StateDictOptions(full_state_dict=True)
            state = get_optimizer_state_dict(model, inner, options=options)  # param_groups keyed by name
            set_optimizer_state_dict(model, inner, {**state, "state": full}, options=options)
            return
        state = inner.state_dict()
        inner.load_state_dict({**state, "state": {i: full[n] for i, n in enumerate(names)}})

    def checkpoint_group(self, index: int):
        """A gloo process group of its own for the `index`-th distributed-checkpoint write of an asynchronous
        save (None in one process without a group). FSDP2: torch's async_save runs DCP's collectives in a
        background thread; on the training's group they could pair with the loop's all-reduces, and two
        writes in flight at once (the model's, the optimizer's) each need their own. Made once, by every
        rank in the same order (new_group is itself a collective)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return None
        while len(self._checkpoint_groups) <= index:
            self._checkpoint_groups.append(dist.new_group(backend="gloo"))
        return self._checkpoint_groups[index]

    def close(self, barrier: bool = True) -> None:
        """Shut down in order; once, whatever way training ends (see `shutdown`).

        barrier: wait for every rank first (a run that finished); False on an error or a signal, where
        a rank may be gone or still inside another collective, so waiting could hang or pair wrongly."""
        global _OPEN
        if _OPEN is not self:
            return
        _OPEN = None
        import torch.distributed as dist

        if barrier and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            # Longer than the watchdog needs to name a rank stopped here: a barrier given up first lets this
            # rank go on to wait for the others' exit, where the stopped rank's silence counts from zero again.
            closing_barrier(max(CLOSE_BARRIER_TIMEOUT_S, collective_timeout(self._hang_timeout)))
        try:
            # First, while deepspeed.comm still works (DeepSpeed's engine.destroy() asks it for the rank):
            # the engine's hooks and Accelerate's references to the engine, models and optimizers go.
            self.accelerator.free_memory()
        finally:
            destroy_process_groups()
            self.accelerator.end_training()  # the trackers finish (its process-group teardown is done already)
            if self._shm_port is not None:  # unlinked after start-up already; this catches a failed barrier there
                remove_shm_buffers(self._shm_port, rank=launcher_rank())


CLOSE_BARRIER_TIMEOUT_S = 300
"""How long a finished rank waits at the closing barrier for the others before shutting down anyway (at
least: the collective timeout where hang_timeout makes that longer)."""

_OPEN: Optional[Strategy] = None
"""The strategy this process built and has not closed: what `shutdown` closes on the way out."""


def shutdown() -> None:
    """The last step of every way out of training: `finally: strategy.shutdown()` in `solution.train.main`.

    A run that finished has closed its strategy already (`Strategy.close` after the final barrier). After an
    error or a signal it is closed here without a barrier. Either way the process groups are destroyed and
    their objects collected before the interpreter exits: a gloo process group still alive then is destroyed
    during interpreter teardown, which is where "terminate called without an active exception" came from
    (docs/cpu-distributed-facts.md, "Shutting down")."""
    try:
        if _OPEN is not None:
            _OPEN.close(barrier=False)
        destroy_process_groups()
    except Exception as e:  # in a `finally`: a teardown error must not hide why training ended
        print(f"warning: rank {launcher_rank()}: shutdown: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr, flush=True)



"""Each engine's Accelerator, built as the plan says (`build_deepspeed`, `build_fsdp`, `build_ddp`), and the
check that Accelerate set up what the plan names (`verify_launch`). `Strategy` (solution.distributed.strategy)
picks the builder; the reasons behind each workaround are in its module docstring.

A builder reads the plan, the training facts the engine is told (`TrainingFacts`: batch, accumulation,
clipping, precision) and the process group's handlers, which the strategy makes from its section.
"""

from __future__ import annotations

import copy
import math
import os

import torch

from solution.distributed.lifecycle import drop_stale_shm_buffers
from solution.distributed.plan import Plan, TrainingFacts, launcher_world_size
from solution.distributed.ports import free_port


def require_cpu_adam() -> None:
    """DeepSpeed's CPU Adam is a C++ op built on first use; fail now, clearly, if it cannot be."""
    try:
        from deepspeed.ops.op_builder import CPUAdamBuilder

        builder = CPUAdamBuilder()
        if not builder.is_compatible(verbose=False):
            raise RuntimeError("not compatible with this machine")
        builder.load(verbose=False)
    except Exception as e:  # any build failure: compiler, ninja, headers
        raise ValueError(f"strategy zero3_offload with an AdamW optim needs DeepSpeed's CPUAdam op, which could "
                         f"not be built here ({type(e).__name__}: {str(e)[:300]}). Install a C++ compiler and ninja, "
                         f"or pre-build it with DS_BUILD_CPU_ADAM=1 pip install deepspeed") from None


def engine_ds_config(plan: Plan, cuda: bool) -> dict:
    """The plan's DeepSpeed JSON with the settings this trainer needs from it."""
    ds = copy.deepcopy(plan.ds_config)
    ds.pop("_why", None)  # the configs' reasons for their values (JSON has no comments): not DeepSpeed's
    # The trainer builds the optimizer itself (see make_optimizer); without this Accelerate would
    # swap any optimizer, SGD included, for DeepSpeed's CPU Adam when the optimizer is offloaded.
    ds["zero_force_ds_cpu_optimizer"] = False
    if launcher_world_size() == 1:
        # One process: nothing to overlap, and overlap_comm synchronises the device at the end of each
        # backward (it waits for its reduction stream).
        ds["zero_optimization"]["overlap_comm"] = False
    if not cuda:
        # overlap_comm overlaps reduction with backward on a separate CUDA stream, and
        # contiguous_gradients copies gradients into one buffer against GPU allocator
        # fragmentation; on CPU neither helps and both cost copies (ZeRO-2, BERT-base bf16,
        # 2 ranks: step 1.2-1.3x -> 1.0x of DDP's, model states 11 -> 10 bytes per parameter).
        ds["zero_optimization"]["overlap_comm"] = False
        ds["zero_optimization"]["contiguous_gradients"] = False
    if plan.ds_load_universal:  # read at engine construction: see resumes_universal
        ds["checkpoint"] = {"load_universal": True}
    if plan.zero_stage == 3:
        # Needed for get_state_dict to gather full weights (else it raises).
        ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
    return ds


def zero_without_overflow_reads() -> None:
    """ZeRO's step asks `is_invalid_grad_norm(norm)` of the gradient norm, a `bool()` of a device value,
    every step (ZeRO-3 always, ZeRO-1/2 when clipping or in fp32): the host waits there for the whole
    backward. It is how fp16's loss scaler finds an overflow to skip; in bf16 and fp32 there is no scale to
    lower, so it only skips a step whose norm is not finite, a diverged model. That the trainer catches on
    the device instead (training.stop.Health: the run stops naming the first such step, before any save),
    as it does for DDP and FSDP2. So outside fp16 the check says "valid" without reading anything; under
    fp16 DeepSpeed's own check stays, and reads. DeepSpeed's modules import the function by name: it is
    replaced in each of them."""
    import importlib

    def never_read(norm) -> bool:
        if torch.is_tensor(norm):
            return False
        return not math.isfinite(float(norm)) or norm < 0  # a number: DeepSpeed's own rule, nothing to wait for

    for module in ("deepspeed.runtime.zero.stage_1_and_2", "deepspeed.runtime.zero.stage3",
                   "deepspeed.runtime.bf16_optimizer"):
        loaded = importlib.import_module(module)
        if hasattr(loaded, "is_invalid_grad_norm"):
            loaded.is_invalid_grad_norm = never_read


def build_deepspeed(cfg: TrainingFacts, plan: Plan, cuda: bool, kwargs: dict, handlers: list):
    """ZeRO: DeepSpeed's plugin, never with `cpu=True` (that quietly becomes DDP), gloo on CPU."""
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin

    if "LOCAL_RANK" not in os.environ:  # one process without a launcher: a world of one
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    if plan.name == "zero3_offload" and cfg.optim != "sgd":
        require_cpu_adam()
    if not cuda:
        drop_stale_shm_buffers()
    if cfg.mixed_precision != "fp16":
        zero_without_overflow_reads()
    # zero3_init_flag off: the model is built whole and identically on every rank (same weights as one
    # process), then partitioned by the engine. Building it inside zero.Init would only matter for
    # models that do not fit one device's memory, far above BERT sizes.
    plugin = DeepSpeedPlugin(hf_ds_config=engine_ds_config(plan, cuda),
                             gradient_accumulation_steps=cfg.gradient_accumulation_steps,
                             gradient_clipping=cfg.max_grad_norm, zero3_init_flag=False)
    accelerator = Accelerator(deepspeed_plugin=plugin, kwargs_handlers=handlers, **kwargs)
    # Accelerate registers the config with transformers even when zero3_init_flag is off, and
    # transformers then builds every model inside zero.Init (partitioned, initialised per rank:
    # different weights from one process). Withdraw it so the flag means what it says.
    from transformers.integrations import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    return accelerator


def fsdp_mixed_precision(mixed_precision: str):
    """FSDP2's own mixed precision for bf16: parameters gathered in bf16 and computed in bf16, gradients
    reduced in fp32 (torchtitan's default), the fp32 shards kept for the optimizer. The one path: Accelerate's
    autocast is not added on top (see build_fsdp). None for fp16 and fp32: Accelerate's own handling."""
    if mixed_precision != "bf16":
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def build_fsdp(cfg: TrainingFacts, plan: Plan, cuda: bool, kwargs: dict, handlers: list):
    """FSDP2 (`fully_shard`); on CPU from a gloo MULTI_CPU state switched to FSDP (see the module docstring).

    One process: parameters stay gathered after the forward (`reshard_after_forward` off), since with
    nothing to shard a reshard would only gather them again for the backward. bf16: FSDP2's own policy
    (`fsdp_mixed_precision`), and Accelerate's autocast left off, which would otherwise wrap the forward too."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    policy = fsdp_mixed_precision(cfg.mixed_precision)
    alone = launcher_world_size() == 1
    if plan.fsdp_from_env:  # accelerate launch: the FSDP_* variables from its YAML fill the plugin
        if plan.fsdp_offload:  # the training config's cpu_offload, or the YAML's own
            os.environ["FSDP_OFFLOAD_PARAMS"] = "true"
        plugin = FullyShardedDataParallelPlugin(mixed_precision_policy=policy)
        if alone:
            plugin.reshard_after_forward = False
    else:
        plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2, reshard_after_forward=plan.name == "fsdp" and not alone,
            auto_wrap_policy="transformer_based_wrap", cpu_offload=plan.cpu_offload,
            state_dict_type="SHARDED_STATE_DICT", mixed_precision_policy=policy)
    if cuda:
        accelerator = Accelerator(fsdp_plugin=plugin, kwargs_handlers=handlers, **kwargs)
    else:
        accelerator = Accelerator(cpu=True, kwargs_handlers=handlers, **kwargs)
        state = accelerator.state
        if state.distributed_type == DistributedType.MULTI_CPU:
            if cfg.mixed_precision != "no" and policy is None:
                plugin.set_mixed_precision(cfg.mixed_precision)
            state.fsdp_plugin = plugin
            state.distributed_type = DistributedType.FSDP
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP
            AcceleratorState._shared_state["distributed_type"] = DistributedType.FSDP
    if policy is not None:
        accelerator.native_amp = False  # prepare() would wrap the forward in autocast on top of the policy
    return accelerator


def build_ddp(cfg: TrainingFacts, plan: Plan, cuda: bool, kwargs: dict, handlers: list):
    """DDP, or one process (`single`): plain Accelerate.

    gradient_as_bucket_view: the gradients are views into DDP's all-reduce buckets, so the reduced
    values are not copied back into separate `.grad` tensors every step (BERT-base: 440 MB of copies
    and of memory saved per step; the values are bitwise the same)."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    handlers = [*handlers, DistributedDataParallelKwargs(gradient_as_bucket_view=True)]
    return Accelerator(cpu=not cuda, kwargs_handlers=handlers, **kwargs)


def verify_launch(accelerator, plan: Plan, cuda: bool) -> None:
    """Stop unless Accelerate set up the engine the plan names, with the launcher's number of processes."""
    from accelerate.utils import DistributedType

    got, num = accelerator.distributed_type, accelerator.num_processes
    if plan.name == "single":
        if num != 1:
            raise ValueError(f"strategy single, but Accelerate set up {num} processes")
    else:
        expected = (DistributedType.DEEPSPEED if plan.is_deepspeed else DistributedType.FSDP if plan.is_fsdp
                    else DistributedType.MULTI_GPU if cuda else DistributedType.MULTI_CPU)
        if got != expected:
            raise ValueError(f"strategy {plan.name} ({plan.origin}) needs Accelerate's {expected}, but it set up "
                             f"{got}; refusing to train with a different engine than configured")
    if num != launcher_world_size():
        raise ValueError(f"strategy {plan.name}: Accelerate counts {num} processes, the launcher "
                         f"started {launcher_world_size()}; ranks would not be synchronised")

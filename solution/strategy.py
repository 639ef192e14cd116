"""The one place that turns a strategy into what Accelerate needs.

Model, data and post-processing code never import accelerate or deepspeed;
the trainer asks this module for a `Strategy`, which owns the `Accelerator`
and the few facts that differ between engines: what really wraps the model,
how to read the gradient norm, how to make every rank's forward passes line
up when parameters are sharded, how to save and read checkpoints.

Where the strategy comes from (first match wins):
  1. `--deepspeed FILE` (the `deepspeed` launcher's convention, as in the
     transformers Trainer): ZeRO stage and offload read from the JSON;
  2. `accelerate launch --config_file X.yaml`: the environment Accelerate's
     launcher sets (ACCELERATE_USE_DEEPSPEED / ACCELERATE_USE_FSDP);
  3. `strategy:` in the training config or `--strategy NAME` (torchrun);
  4. otherwise `ddp` when the launcher started several ranks, `single` if not.
A config's explicit `strategy` that disagrees with the launcher is an error.

CPU-only machines (see docs/cpu-distributed-facts.md for the measurements). Several
obvious calls silently run something else there, so this module never relies
on them and checks the result:
  * `Accelerator(cpu=True, deepspeed_plugin=...)` or `(cpu=True, fsdp_plugin=...)`
    quietly becomes plain DDP: DeepSpeed is built without `cpu=True` and with
    a gloo process group instead;
  * `Accelerator(fsdp_plugin=...)` without a GPU gives unsynchronised ranks:
    FSDP2 on CPU starts from a gloo MULTI_CPU state that is then switched to
    FSDP, which is what Accelerate's own FSDP2 path needs;
  * after `prepare`, the engine that wraps the model is checked against the
    strategy's name (`DeepSpeedEngine` and its ZeRO stage, an FSDP2 module,
    `DistributedDataParallel`), and the world size against the launcher's;
    a mismatch stops the run instead of training with the wrong engine.
"""

from __future__ import annotations

import copy
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

from solution.config import read_settings_file

DS_CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs" / "ds"


def _env_true(name: str) -> bool:
    return os.environ.get(name, "false").lower() in ("true", "1", "yes")


def _env_number(name: str):
    """A number the accelerate launch YAML put in the environment, or "auto" where it set none."""
    value = os.environ.get(name, "auto").strip().lower()
    if value in ("auto", "none", ""):
        return "auto"
    try:
        return int(value) if value.isdigit() else float(value)
    except ValueError:
        return value  # not a number: refused by the check as contradicting the training config


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def read_ds_config(path: str) -> dict:
    config = read_settings_file(path, "DeepSpeed config")
    if not isinstance(config, dict) or not isinstance(config.get("zero_optimization"), dict):
        raise ValueError(f"{path}: field 'zero_optimization': a DeepSpeed config needs this mapping")
    stage = config["zero_optimization"].get("stage")
    if stage not in (1, 2, 3):
        raise ValueError(f"{path}: field 'zero_optimization.stage': expected 1, 2 or 3, got {stage!r}")
    if "optimizer" in config or "scheduler" in config:
        raise ValueError(f"{path}: fields 'optimizer'/'scheduler': leave them out; the training config's "
                         "`optim`, `learning_rate` and warm-up are the one source of truth")
    return config


def _ds_number(ds: dict, field: str):
    """The JSON's value at a dotted field, or None where it is absent or "auto" (then the training config fills it)."""
    value = ds
    for part in field.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return None if value == "auto" else value


def check_ds_against_config(ds: dict, cfg, path: str, world: int) -> None:
    """Refuse a DeepSpeed JSON whose fixed numbers contradict the training config.

    The training config is the one source of truth (the shipped files say "auto" throughout). A fixed
    value that disagrees would otherwise win silently (accumulation: Accelerate only warns, while the start
    record still shows the config's figure) or fail late inside DeepSpeed's own assertion, after featurisation.
    """
    accumulation = cfg.gradient_accumulation_steps
    precision = cfg.mixed_precision
    expected = {
        "train_micro_batch_size_per_gpu": (cfg.per_device_train_batch_size, "per_device_train_batch_size"),
        "gradient_accumulation_steps": (accumulation, "gradient_accumulation_steps"),
        "train_batch_size": (cfg.per_device_train_batch_size * world * accumulation,
                             f"per_device_train_batch_size {cfg.per_device_train_batch_size} x world size {world} "
                             f"x gradient_accumulation_steps {accumulation}"),
        "gradient_clipping": (cfg.max_grad_norm, "max_grad_norm"),
        "bf16.enabled": (precision == "bf16", f"mixed_precision {precision}"),
        "bfloat16.enabled": (precision == "bf16", f"mixed_precision {precision}"),  # DeepSpeed's older spelling
        "fp16.enabled": (precision == "fp16", f"mixed_precision {precision}"),
    }
    for field, (want, source) in expected.items():
        got = _ds_number(ds, field)
        if got is None:
            continue
        if isinstance(want, bool):
            same = isinstance(got, bool) and got == want
        else:
            same = isinstance(got, (int, float)) and not isinstance(got, bool) and float(got) == float(want)
        if not same:
            raise ValueError(f"{path}: field '{field}': {got!r} contradicts the training config "
                             f"({source} gives {want!r}); set it to \"auto\" so the training config decides, "
                             f"or change the training config")


def _offloads(ds: dict) -> bool:
    zero = ds["zero_optimization"]
    return any(zero.get(k, {}).get("device", "none") not in ("none", None) for k in ("offload_optimizer", "offload_param"))


def ds_strategy_name(ds: dict) -> str:
    """zero1..zero3, with `_offload` when the JSON offloads (a user's ZeRO-2 offload file -> zero2_offload)."""
    stage = ds["zero_optimization"]["stage"]
    return f"zero{stage}_offload" if _offloads(ds) else f"zero{stage}"


@dataclass
class Plan:
    """What to build: the strategy's name, where the choice came from, its engine settings."""

    name: str
    origin: str
    ds_config: Optional[dict] = None
    ds_path: Optional[str] = None
    """The DeepSpeed JSON the plan read (named in errors about it)."""
    fsdp_from_env: bool = False
    cpu_offload: bool = False

    @property
    def is_deepspeed(self) -> bool:
        return self.name.startswith("zero")

    @property
    def is_fsdp(self) -> bool:
        return self.name.startswith("fsdp")

    @property
    def zero_stage(self) -> Optional[int]:
        return self.ds_config["zero_optimization"]["stage"] if self.is_deepspeed else None

    @property
    def shards_parameters(self) -> bool:
        """Forward passes gather parameters collectively: every rank must run the same number of them."""
        return self.name in ("zero3", "zero3_offload", "fsdp", "fsdp_grad_op")


def plan_strategy(cfg) -> Plan:
    """Decide the strategy from the launcher's environment and the config; refuse contradictions."""
    asked = cfg.strategy
    world = _world_size()

    def agree(name: str, origin: str) -> None:
        if asked not in ("auto", name):
            raise ValueError(f"config: strategy is '{asked}' but {origin} selects '{name}'; "
                             f"drop one of them (strategy: auto follows the launcher)")

    if _env_true("ACCELERATE_USE_DEEPSPEED") and _env_true("ACCELERATE_USE_FSDP"):
        raise ValueError("accelerate launch config enables both DeepSpeed and FSDP")
    if cfg.deepspeed:
        if _env_true("ACCELERATE_USE_FSDP"):
            raise ValueError(f"--deepspeed {cfg.deepspeed} given, but the accelerate launch config selects FSDP")
        ds = read_ds_config(cfg.deepspeed)
        name = ds_strategy_name(ds)
        agree(name, f"--deepspeed {cfg.deepspeed}")
        plan = Plan(name, f"--deepspeed {cfg.deepspeed}", ds_config=ds, ds_path=cfg.deepspeed)
    elif _env_true("ACCELERATE_USE_DEEPSPEED"):
        path = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none")
        if path != "none":
            ds = read_ds_config(path)
            origin = f"accelerate launch (deepspeed_config_file {path})"
            ds_path = path
        else:  # a YAML written by `accelerate config` without a JSON file
            ds = {"zero_optimization": {
                "stage": int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")),
                "offload_optimizer": {"device": os.environ.get("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "none")},
                "offload_param": {"device": os.environ.get("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "none")}},
                "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                # The YAML's own numbers: checked against the training config like a JSON's (below).
                "gradient_accumulation_steps": _env_number("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"),
                "gradient_clipping": _env_number("ACCELERATE_GRADIENT_CLIPPING"),
                "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}}
            origin = "accelerate launch (deepspeed_config)"
            ds_path = "accelerate launch config (deepspeed_config)"
        name = ds_strategy_name(ds)
        agree(name, origin)
        plan = Plan(name, origin, ds_config=ds, ds_path=ds_path)
    elif _env_true("ACCELERATE_USE_FSDP"):
        version = os.environ.get("FSDP_VERSION", "1")
        if version != "2":
            raise ValueError("accelerate launch config: fsdp_version must be 2 (FSDP2, fully_shard); "
                             "FSDP1 is not supported by this project (and never ran on CPU upstream)")
        reshard = os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() in ("true", "1", "full_shard")
        name = "fsdp" if reshard else "fsdp_grad_op"
        agree(name, "accelerate launch (FSDP)")
        plan = Plan(name, "accelerate launch (FSDP)", fsdp_from_env=True,
                    cpu_offload=_env_true("FSDP_OFFLOAD_PARAMS") or cfg.cpu_offload)
    elif asked != "auto":
        name = asked
        if cfg.cpu_offload and name == "zero3":
            name = "zero3_offload"
        plan = Plan(name, "config strategy")
        if plan.is_deepspeed:
            path = DS_CONFIG_DIR / f"{name}.json"
            if not path.is_file():
                raise ValueError(f"strategy {name}: {path} is missing; pass --deepspeed FILE instead")
            plan.ds_config, plan.ds_path = read_ds_config(str(path)), str(path)
            plan.origin = f"config strategy (configs/ds/{name}.json)"
        plan.cpu_offload = cfg.cpu_offload
    else:
        plan = Plan("ddp" if world > 1 else "single", f"launcher world size {world}")

    if plan.is_deepspeed:
        check_ds_against_config(plan.ds_config, cfg, plan.ds_path, world)
    if cfg.cpu_offload and not (plan.is_fsdp or plan.name == "zero3_offload"):
        raise ValueError(f"config: cpu_offload needs strategy zero3 or fsdp/fsdp_grad_op, not {plan.name}")
    if plan.name == "single" and world > 1:
        raise ValueError(f"strategy single, but the launcher started {world} ranks; use ddp or another strategy")
    if plan.name == "ddp" and world == 1:
        raise ValueError("strategy ddp needs several ranks: start it with accelerate launch, torchrun or deepspeed")
    return plan


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _require_cpu_adam() -> None:
    """DeepSpeed's CPU Adam is a C++ op built on first use; fail now, clearly, if it cannot be."""
    try:
        from deepspeed.ops.op_builder import CPUAdamBuilder

        builder = CPUAdamBuilder()
        if not builder.is_compatible(verbose=False):
            raise RuntimeError("not compatible with this machine")
        builder.load(verbose=False)
    except Exception as e:  # any build failure: compiler, ninja, headers
        raise ValueError(f"strategy zero3_offload with optim adamw_torch needs DeepSpeed's CPUAdam op, which could "
                         f"not be built here ({type(e).__name__}: {str(e)[:300]}). Install a C++ compiler and ninja, "
                         f"or pre-build it with DS_BUILD_CPU_ADAM=1 pip install deepspeed") from None


class Strategy:
    """The Accelerator for a plan, plus the per-engine facts the trainer needs."""

    def __init__(self, cfg):
        from accelerate import Accelerator
        from accelerate.utils import DistributedType, InitProcessGroupKwargs

        self.cfg = cfg
        self.plan = plan_strategy(cfg)
        self.cuda = torch.cuda.is_available()
        if cfg.mixed_precision == "fp16" and not self.cuda:
            raise ValueError("mixed_precision fp16 needs a GPU (CPU autocast supports bf16 only); "
                             "use mixed_precision: bf16 or no")
        launched = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        if launched not in ("no", cfg.mixed_precision):
            raise ValueError(f"accelerate launch config says mixed_precision {launched}, the training config "
                             f"{cfg.mixed_precision}; the training config decides: make them agree")
        if self.plan.is_fsdp and self.plan.cpu_offload and not self.cuda:
            raise ValueError(f"strategy {self.plan.name} with cpu_offload needs a GPU: FSDP2's CPUOffloadPolicy moves "
                             "shards between GPU and CPU memory (measured: torch refuses it without an accelerator). "
                             "Without a GPU everything already lives in CPU memory: drop cpu_offload")
        kwargs = dict(mixed_precision=cfg.mixed_precision, gradient_accumulation_steps=cfg.gradient_accumulation_steps,
                      log_with=cfg.report_to or None, project_dir=cfg.output_dir)  # report_to: Accelerate's trackers
        plan = self.plan
        if plan.is_deepspeed and "LOCAL_RANK" not in os.environ:  # one process without a launcher: a world of one
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                              MASTER_PORT=str(_free_port()))
        # gloo on CPU; on GPUs Accelerate picks NCCL itself.
        # (Only with a launcher: a backend given to a lone process makes Accelerate expect a process group.)
        gloo = [InitProcessGroupKwargs(backend="gloo")] if not self.cuda and "LOCAL_RANK" in os.environ else []
        if plan.is_deepspeed:
            if plan.name == "zero3_offload" and cfg.optim == "adamw_torch":
                _require_cpu_adam()
            from accelerate.utils import DeepSpeedPlugin

            ds = copy.deepcopy(plan.ds_config)
            # The trainer builds the optimizer itself (see make_optimizer); without this Accelerate would
            # swap any optimizer, SGD included, for DeepSpeed's CPU Adam when the optimizer is offloaded.
            ds["zero_force_ds_cpu_optimizer"] = False
            if not self.cuda:
                # overlap_comm overlaps reduction with backward on a separate CUDA stream, and
                # contiguous_gradients copies gradients into one buffer against GPU allocator
                # fragmentation; on CPU neither helps and both cost copies (ZeRO-2, BERT-base bf16,
                # 2 ranks: step 1.2-1.3x -> 1.0x of DDP's, model states 11 -> 10 bytes per parameter).
                ds["zero_optimization"]["overlap_comm"] = False
                ds["zero_optimization"]["contiguous_gradients"] = False
            if plan.zero_stage == 3:
                # Needed for get_state_dict to gather full weights (else it raises).
                ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
            # zero3_init_flag off: the model is built whole and identically on every rank (same weights as one
            # process), then partitioned by the engine. Building it inside zero.Init would only matter for
            # models that do not fit one device's memory, far above BERT sizes.
            plugin = DeepSpeedPlugin(hf_ds_config=ds, gradient_accumulation_steps=cfg.gradient_accumulation_steps,
                                     gradient_clipping=cfg.max_grad_norm, zero3_init_flag=False)
            self.accelerator = Accelerator(deepspeed_plugin=plugin, kwargs_handlers=gloo, **kwargs)
            # Accelerate registers the config with transformers even when zero3_init_flag is off, and
            # transformers then builds every model inside zero.Init (partitioned, initialised per rank:
            # different weights from one process). Withdraw it so the flag means what it says.
            from transformers.integrations import unset_hf_deepspeed_config

            unset_hf_deepspeed_config()
            expected = DistributedType.DEEPSPEED
        elif plan.is_fsdp:
            from accelerate.utils import FullyShardedDataParallelPlugin

            if plan.fsdp_from_env:  # accelerate launch: the FSDP_* variables from its YAML fill the plugin
                if cfg.cpu_offload:
                    os.environ["FSDP_OFFLOAD_PARAMS"] = "true"
                plugin = FullyShardedDataParallelPlugin()
            else:
                plugin = FullyShardedDataParallelPlugin(
                    fsdp_version=2, reshard_after_forward=plan.name == "fsdp",
                    auto_wrap_policy="transformer_based_wrap", cpu_offload=plan.cpu_offload,
                    state_dict_type="SHARDED_STATE_DICT")
            if self.cuda:
                self.accelerator = Accelerator(fsdp_plugin=plugin, **kwargs)
            else:
                # See the module docstring: start from gloo DDP state, then switch it to FSDP with the plugin.
                from accelerate.state import AcceleratorState, PartialState

                self.accelerator = Accelerator(cpu=True, kwargs_handlers=gloo, **kwargs)
                state = self.accelerator.state
                if state.distributed_type == DistributedType.MULTI_CPU:
                    if cfg.mixed_precision != "no":
                        plugin.set_mixed_precision(cfg.mixed_precision)
                    state.fsdp_plugin = plugin
                    state.distributed_type = DistributedType.FSDP
                    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
                    AcceleratorState._shared_state["distributed_type"] = DistributedType.FSDP
            expected = DistributedType.FSDP
        else:
            self.accelerator = Accelerator(cpu=not self.cuda, kwargs_handlers=gloo, **kwargs)
            expected = None if plan.name == "single" else (DistributedType.MULTI_GPU if self.cuda
                                                           else DistributedType.MULTI_CPU)
        acc = self.accelerator
        got = acc.distributed_type
        if plan.name == "single":
            if acc.num_processes != 1:
                raise ValueError(f"strategy single, but Accelerate set up {acc.num_processes} processes")
        elif got != expected:
            raise ValueError(f"strategy {plan.name} ({plan.origin}) needs Accelerate's {expected}, but it set up "
                             f"{got}; refusing to train with a different engine than configured")
        if acc.num_processes != _world_size():
            raise ValueError(f"strategy {plan.name}: Accelerate counts {acc.num_processes} processes, the launcher "
                             f"started {_world_size()}; ranks would not be synchronised")

    # -- facts ------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def zero_stage(self) -> Optional[int]:
        return self.plan.zero_stage

    def make_optimizer(self, model: torch.nn.Module, groups: list, cfg) -> torch.optim.Optimizer:
        """The configured optimizer; with DeepSpeed optimizer offload, Adam runs as DeepSpeed's CPU Adam."""
        if cfg.optim == "sgd":
            return torch.optim.SGD(groups, lr=cfg.learning_rate)
        if self.plan.is_deepspeed and _offloads(self.plan.ds_config):
            from deepspeed.ops.adam import DeepSpeedCPUAdam

            return DeepSpeedCPUAdam(groups, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                    eps=cfg.adam_epsilon, adamw_mode=True)
        return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                 eps=cfg.adam_epsilon)

    def check_engine(self, prepared_model) -> str:
        """The class that really wraps the model; stop if it is not the engine the strategy names."""
        engine = type(prepared_model).__name__
        plan = self.plan
        if plan.is_deepspeed:
            from deepspeed import DeepSpeedEngine

            ok = isinstance(prepared_model, DeepSpeedEngine) and prepared_model.zero_optimization_stage() == plan.zero_stage
            if ok and plan.name.endswith("offload"):
                ok = prepared_model.zero_cpu_offload()
        elif plan.is_fsdp:
            from torch.distributed.fsdp import FSDPModule

            ok = isinstance(prepared_model, FSDPModule)
        elif plan.name == "ddp":
            ok = isinstance(prepared_model, torch.nn.parallel.DistributedDataParallel)
        else:
            ok = not isinstance(prepared_model, torch.nn.parallel.DistributedDataParallel)
        if not ok:
            raise ValueError(f"strategy {plan.name} expected its engine, but the model is wrapped by {engine}; "
                             "refusing to train with a different engine than configured")
        return engine

    def clip_and_norm(self, model, max_norm: float) -> Optional[float]:
        """Global gradient norm before clipping (clipping applied here, or by DeepSpeed inside its step)."""
        if self.plan.is_deepspeed:
            # Accelerate's backward already ran engine.step() on the accumulation boundary; DeepSpeed
            # clipped there with `gradient_clipping` and kept the norm it measured first.
            norm = model.get_global_grad_norm()
            return None if norm is None else float(norm)
        norm = self.accelerator.clip_grad_norm_(model.parameters(), max_norm if max_norm > 0 else float("inf"))
        if hasattr(norm, "full_tensor"):  # FSDP2 returns a DTensor
            norm = norm.full_tensor()
        return float(norm)

    def lockstep(self, run: Callable) -> tuple[Callable, Callable[[], None]]:
        """Wrap a forward function so that ranks with fewer batches keep joining the others' collectives.

        Under ZeRO-3 and FSDP every forward gathers parameters from all ranks, so a rank that has
        finished its documents must keep running forwards (on a dummy batch) until every rank has.
        Each round all ranks first agree by an all-reduce whether anyone still has work.
        Returns (wrapped run, finish) where finish() is called once the rank's own work is done.
        """
        if not self.plan.shards_parameters or self.accelerator.num_processes == 1:
            return run, lambda: None
        import torch.distributed as dist

        device = self.accelerator.device
        last = {}

        def any_work(flag: int) -> bool:
            t = torch.tensor([flag], device=device)
            dist.all_reduce(t)
            return int(t.item()) > 0

        def wrapped(batch):
            any_work(1)
            last["batch"] = {k: v[:1] for k, v in batch.items()}
            return run(batch)

        def finish():
            while any_work(0):
                run(last.get("batch") or self._dummy_batch())

        return wrapped, finish

    def _dummy_batch(self) -> dict:
        n = self.cfg.window.max_seq_length
        return {"input_ids": torch.zeros(1, n, dtype=torch.long), "attention_mask": torch.ones(1, n, dtype=torch.long),
                "token_type_ids": torch.zeros(1, n, dtype=torch.long)}

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

    @staticmethod
    def live_tensor_bytes(optimizer: torch.optim.Optimizer) -> dict:
        """Bytes of every tensor storage alive in this process, and of the optimizer's state.

        Called from a pre-step hook of the optimizer the trainer built (DeepSpeed calls that same
        optimizer on its partitions), so parameters, gradients, master copies and optimizer state
        all exist. Storages are counted once (views and flat buffers share them). Tensors held only
        inside C++ (DDP's gradient buckets) are not seen, which understates DDP, not the others."""
        import gc

        seen, total = set(), 0
        for obj in gc.get_objects():
            try:
                if not isinstance(obj, torch.Tensor):
                    continue
                t = getattr(obj, "_local_tensor", obj)  # a DTensor's shard
                storage = t.untyped_storage()
                ptr = storage.data_ptr()
                if ptr and ptr not in seen and t.device.type != "meta":
                    seen.add(ptr)
                    total += storage.nbytes()
            except Exception:  # tensor subclasses without storage
                continue
        state = 0
        for per_param in optimizer.state.values():
            for v in per_param.values():
                v = getattr(v, "_local_tensor", v)  # FSDP2 keeps DTensor state: count the local shard
                if isinstance(v, torch.Tensor) and v.numel() > 1:
                    state += v.numel() * v.element_size()
        return {"live_tensor_bytes": total, "optimizer_state_bytes": state}

    def close(self) -> None:
        """Tear down the process group (else ranks can die with 'terminate called without an active exception')."""
        import torch.distributed as dist

        self.accelerator.end_training()
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()

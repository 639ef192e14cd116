"""Which strategy a run uses and where it comes from (first match wins; one `plan_from_*` function
per source, each returning a `Plan` or None, tried in order by `plan_strategy`):
  1. `--deepspeed FILE` (the `deepspeed` launcher's convention, as in the
     transformers Trainer): ZeRO stage and offload read from the JSON;
  2. `accelerate launch --config_file X.yaml`: the environment Accelerate's
     launcher sets (ACCELERATE_USE_DEEPSPEED / ACCELERATE_USE_FSDP);
  3. `strategy:` in the training config or `--strategy NAME` (torchrun);
  4. otherwise `ddp` when the launcher started several ranks, `single` if not.
A config's explicit `strategy` that disagrees with the launcher is an error. No accelerate here.

The strategy reads the training config's `distributed:` section (`DistributedConfig`, declared here beside
the decoder of its names) and, of the rest, only what `TrainingFacts` holds: what the engine is told about
each step. Neither is written back: the accumulation a `global_batch_size` derives is returned
(`derive_accumulation`), and the training stage applies it to its config.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from solution.common.settings import read_settings_file

DS_CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "ds"
STRATEGY_CHOICES = ("auto", "single", "ddp", "zero1", "zero2", "zero3", "zero3_offload", "fsdp", "fsdp_grad_op")


@dataclass
class DistributedConfig:
    """Which engine trains and how it is watched (in YAML at the top level or in a `distributed:` section)."""

    strategy: str = "auto"
    """`auto` follows the launcher (accelerate launch YAML, --deepspeed FILE, else ddp/single by world size);
    or one of single, ddp, zero1, zero2, zero3, zero3_offload, fsdp, fsdp_grad_op (e.g. under torchrun)."""
    deepspeed: Optional[str] = None
    """DeepSpeed JSON (configs/ds/*.json), as the `deepspeed` launcher's `--deepspeed FILE` passes it."""
    cpu_offload: bool = False
    """Offload parameters and optimizer state to CPU: FSDP2 `cpu_offload`, or ZeRO-3 -> zero3_offload."""
    hang_timeout: float = 600.0
    """Seconds a rank may go without progress (a new phase of a step: data, forward, backward, optimizer,
    collective, save, or a dev-evaluation batch) before the run ends with exit 4, one `hang:` line naming
    the step, the phase and the stalled ranks, and every rank's stacks under output_dir/hang-stacks
    (solution.distributed.watchdog); 0 turns it off. It must exceed the longest step, checkpoint save and final model
    save. Before the first step (start-up, process group included, and set-up, however long) and once a rank is done
    (waiting for the others to shut down) a rank whose heartbeat stops for this long is named. It also sets the
    collectives' timeouts (gloo, NCCL) to about a minute more, from the first step on. The default, 10 minutes,
    is NCCL's own default timeout."""

    def __post_init__(self):
        if self.strategy not in STRATEGY_CHOICES:
            raise ValueError(f"strategy must be one of {STRATEGY_CHOICES}, got {self.strategy!r}")
        if not self.hang_timeout >= 0:
            raise ValueError(f"hang_timeout must be >= 0 (0: no watchdog), got {self.hang_timeout!r}")


@dataclass(frozen=True)
class TrainingFacts:
    """The training settings outside the `distributed:` section that the engine is built for: read by the
    strategy, never written (`TrainConfig.training_facts()` makes one)."""

    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    global_batch_size: Optional[int] = None
    max_grad_norm: float = 1.0
    mixed_precision: str = "no"
    optim: str = "adamw_torch_fused"
    torch_compile: bool = False
    report_to: tuple = ()
    output_dir: str = "runs/default"
    resume_from_checkpoint: Optional[str] = None


def derive_accumulation(facts: TrainingFacts, world_size: int) -> tuple:
    """(gradient accumulation steps, one line saying how they were derived or None). With global_batch_size
    the steps are global_batch_size / (per_device_train_batch_size x world size), which must divide; without
    it, the config's gradient_accumulation_steps."""
    if facts.global_batch_size is None:
        return facts.gradient_accumulation_steps, None
    per_device = facts.per_device_train_batch_size
    per_step = per_device * world_size
    if facts.global_batch_size % per_step:
        raise ValueError(f"config: global_batch_size {facts.global_batch_size} is not a multiple of "
                         f"per_device_train_batch_size {per_device} x world size {world_size} ({per_step}); choose "
                         "a per-device batch that divides it at every world size the run may take")
    steps = facts.global_batch_size // per_step
    return steps, (f"global_batch_size {facts.global_batch_size} at world size {world_size}: "
                   f"{per_device} per device x {steps} accumulation steps")


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


def launcher_world_size() -> int:
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


def check_ds_against_config(ds: dict, cfg: TrainingFacts, path: str, world: int) -> None:
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


def _ds_offloads(ds: dict) -> bool:
    zero = ds["zero_optimization"]
    return any(zero.get(k, {}).get("device", "none") not in ("none", None) for k in ("offload_optimizer", "offload_param"))


def ds_strategy_name(ds: dict) -> str:
    """zero1..zero3, with `_offload` when the JSON offloads (a user's ZeRO-2 offload file -> zero2_offload)."""
    stage = ds["zero_optimization"]["stage"]
    return f"zero{stage}_offload" if _ds_offloads(ds) else f"zero{stage}"


@dataclass
class Plan:
    """What to build: the strategy's name, where the choice came from, its engine settings."""

    name: str
    origin: str
    ds_config: Optional[dict] = None
    ds_path: Optional[str] = None
    """The DeepSpeed JSON the plan read (named in errors about it)."""
    fsdp_from_env: bool = False
    """FSDP from `accelerate launch`: its FSDP_* environment variables fill the plugin."""
    fsdp_offload: bool = False
    """FSDP2 only: `cpu_offload` (or the launch YAML's fsdp_offload_params); DeepSpeed's offload is in its JSON."""
    ds_load_universal: bool = False
    """DeepSpeed only: the run resumes a ZeRO checkpoint of another world size through its universal checkpoint."""

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
    def cpu_offload(self) -> bool:
        """Parameters and optimizer state live in CPU memory: the DeepSpeed JSON offloads, or FSDP2 offloads."""
        if self.is_deepspeed:
            return _ds_offloads(self.ds_config)
        return self.is_fsdp and self.fsdp_offload

    @property
    def shards_parameters(self) -> bool:
        """Forward passes gather parameters collectively: every rank must run the same number of them."""
        return self.zero_stage == 3 or self.is_fsdp


# -- where the strategy comes from: one function per source, tried in order by plan_strategy ----------------

def _agree(cfg: DistributedConfig, name: str, origin: str) -> None:
    """A launcher's choice must match the config's explicit `strategy` (auto follows the launcher)."""
    if cfg.strategy not in ("auto", name):
        raise ValueError(f"config: strategy is '{cfg.strategy}' but {origin} selects '{name}'; "
                         f"drop one of them (strategy: auto follows the launcher)")


def _deepspeed_plan(cfg: DistributedConfig, ds: dict, ds_path: str, origin: str) -> Plan:
    name = ds_strategy_name(ds)
    _agree(cfg, name, origin)
    return Plan(name, origin, ds_config=ds, ds_path=ds_path)


def plan_from_deepspeed_flag(cfg: DistributedConfig) -> Optional[Plan]:
    """1. `--deepspeed FILE`: ZeRO stage and offload read from the JSON."""
    if not cfg.deepspeed:
        return None
    if _env_true("ACCELERATE_USE_FSDP"):
        raise ValueError(f"--deepspeed {cfg.deepspeed} given, but the accelerate launch config selects FSDP")
    return _deepspeed_plan(cfg, read_ds_config(cfg.deepspeed), cfg.deepspeed, f"--deepspeed {cfg.deepspeed}")


def _ds_config_from_launch_yaml() -> dict:
    """The DeepSpeed settings of a YAML written by `accelerate config` without a JSON file."""
    return {"zero_optimization": {
        "stage": int(os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")),
        "offload_optimizer": {"device": os.environ.get("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "none")},
        "offload_param": {"device": os.environ.get("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "none")}},
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
        # The YAML's own numbers: checked against the training config like a JSON's (plan_strategy).
        "gradient_accumulation_steps": _env_number("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"),
        "gradient_clipping": _env_number("ACCELERATE_GRADIENT_CLIPPING"),
        "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}}


def plan_from_accelerate_deepspeed(cfg: DistributedConfig) -> Optional[Plan]:
    """2a. `accelerate launch` with a DeepSpeed YAML (ACCELERATE_USE_DEEPSPEED), its JSON or inline settings."""
    if not _env_true("ACCELERATE_USE_DEEPSPEED"):
        return None
    path = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none")
    if path != "none":
        return _deepspeed_plan(cfg, read_ds_config(path), path, f"accelerate launch (deepspeed_config_file {path})")
    return _deepspeed_plan(cfg, _ds_config_from_launch_yaml(), "accelerate launch config (deepspeed_config)",
                           "accelerate launch (deepspeed_config)")


def plan_from_accelerate_fsdp(cfg: DistributedConfig) -> Optional[Plan]:
    """2b. `accelerate launch` with an FSDP YAML (ACCELERATE_USE_FSDP); FSDP2 only."""
    if not _env_true("ACCELERATE_USE_FSDP"):
        return None
    if os.environ.get("FSDP_VERSION", "1") != "2":
        raise ValueError("accelerate launch config: fsdp_version must be 2 (FSDP2, fully_shard); "
                         "FSDP1 is not supported by this project (and never ran on CPU upstream)")
    reshard = os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() in ("true", "1", "full_shard")
    name = "fsdp" if reshard else "fsdp_grad_op"
    _agree(cfg, name, "accelerate launch (FSDP)")
    return Plan(name, "accelerate launch (FSDP)", fsdp_from_env=True,
                fsdp_offload=_env_true("FSDP_OFFLOAD_PARAMS") or cfg.cpu_offload)


def plan_from_config(cfg: DistributedConfig) -> Optional[Plan]:
    """3. `strategy:` in the training config or `--strategy NAME`; a ZeRO name reads configs/ds/NAME.json."""
    name = cfg.strategy
    if name == "auto":
        return None
    if cfg.cpu_offload and name == "zero3":
        name = "zero3_offload"
    if not name.startswith("zero"):
        return Plan(name, "config strategy", fsdp_offload=cfg.cpu_offload)
    path = DS_CONFIG_DIR / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"strategy {name}: {path} is missing; pass --deepspeed FILE instead")
    return Plan(name, f"config strategy (configs/ds/{name}.json)", ds_config=read_ds_config(str(path)),
                ds_path=str(path))


def plan_from_world_size(world: int) -> Plan:
    """4. Nothing chose: `ddp` when the launcher started several ranks, `single` if not."""
    return Plan("ddp" if world > 1 else "single", f"launcher world size {world}")


def plan_strategy(cfg: DistributedConfig, facts: TrainingFacts) -> Plan:
    """Decide the strategy from the launcher's environment and the `distributed:` section (first source that
    chooses wins); refuse contradictions, and a DeepSpeed JSON whose numbers contradict `facts`."""
    if _env_true("ACCELERATE_USE_DEEPSPEED") and _env_true("ACCELERATE_USE_FSDP"):
        raise ValueError("accelerate launch config enables both DeepSpeed and FSDP")
    world = launcher_world_size()
    for source in (plan_from_deepspeed_flag, plan_from_accelerate_deepspeed, plan_from_accelerate_fsdp,
                   plan_from_config):
        plan = source(cfg)
        if plan is not None:
            break
    else:
        plan = plan_from_world_size(world)
    if plan.is_deepspeed:
        check_ds_against_config(plan.ds_config, facts, plan.ds_path, world)
    if cfg.cpu_offload and not (plan.is_fsdp or plan.name == "zero3_offload"):
        raise ValueError(f"config: cpu_offload needs strategy zero3 or fsdp/fsdp_grad_op, not {plan.name}")
    if plan.name == "single" and world > 1:
        raise ValueError(f"strategy single, but the launcher started {world} ranks; use ddp or another strategy")
    if plan.name == "ddp" and world == 1:
        raise ValueError("strategy ddp needs several ranks: start it with accelerate launch, torchrun or deepspeed "
                         "and two processes or more; one rank, under a launcher or not, is strategy single (or auto)")
    return plan

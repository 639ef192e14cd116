"""Which strategy a run uses and where it comes from (first match wins; one `plan_from_*` function
per source, each returning a `Plan` or None, tried in order by `plan_strategy`):
  1. `--deepspeed FILE` (the `deepspeed` launcher's convention, as in the
     transformers Trainer): ZeRO stage and offload read from the JSON;
  2. `accelerate launch --config_file X.yaml`: the environment Accelerate's
     launcher sets (ACCELERATE_USE_DEEPSPEED / ACCELERATE_USE_FSDP);
  3. `strategy:` in the training config or `--strategy NAME` (torchrun);
  4. otherwise `ddp` when the launcher started several ranks, `single` if not.
A config's explicit `strategy` that disagrees with the launcher is an error. No accelerate here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from solution.common.settings import read_settings_file

DS_CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "ds"


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

def _agree(cfg, name: str, origin: str) -> None:
    """A launcher's choice must match the config's explicit `strategy` (auto follows the launcher)."""
    if cfg.strategy not in ("auto", name):
        raise ValueError(f"config: strategy is '{cfg.strategy}' but {origin} selects '{name}'; "
                         f"drop one of them (strategy: auto follows the launcher)")


def _deepspeed_plan(cfg, ds: dict, ds_path: str, origin: str) -> Plan:
    name = ds_strategy_name(ds)
    _agree(cfg, name, origin)
    return Plan(name, origin, ds_config=ds, ds_path=ds_path)


def plan_from_deepspeed_flag(cfg) -> Optional[Plan]:
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


def plan_from_accelerate_deepspeed(cfg) -> Optional[Plan]:
    """2a. `accelerate launch` with a DeepSpeed YAML (ACCELERATE_USE_DEEPSPEED), its JSON or inline settings."""
    if not _env_true("ACCELERATE_USE_DEEPSPEED"):
        return None
    path = os.environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none")
    if path != "none":
        return _deepspeed_plan(cfg, read_ds_config(path), path, f"accelerate launch (deepspeed_config_file {path})")
    return _deepspeed_plan(cfg, _ds_config_from_launch_yaml(), "accelerate launch config (deepspeed_config)",
                           "accelerate launch (deepspeed_config)")


def plan_from_accelerate_fsdp(cfg) -> Optional[Plan]:
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


def plan_from_config(cfg) -> Optional[Plan]:
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


def plan_strategy(cfg) -> Plan:
    """Decide the strategy from the launcher's environment and the config (first source that chooses wins);
    refuse contradictions."""
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
        check_ds_against_config(plan.ds_config, cfg, plan.ds_path, world)
    if cfg.cpu_offload and not (plan.is_fsdp or plan.name == "zero3_offload"):
        raise ValueError(f"config: cpu_offload needs strategy zero3 or fsdp/fsdp_grad_op, not {plan.name}")
    if plan.name == "single" and world > 1:
        raise ValueError(f"strategy single, but the launcher started {world} ranks; use ddp or another strategy")
    if plan.name == "ddp" and world == 1:
        raise ValueError("strategy ddp needs several ranks: start it with accelerate launch, torchrun or deepspeed "
                         "and two processes or more; one rank, under a launcher or not, is strategy single (or auto)")
    return plan

"""The optimizer's settings and everything built from them, in one place: the parameter groups, the optimizer
and the learning-rate schedule (torchtitan's `optimizer` and `lr_scheduler` builders, each over its section).

The section is the training config's `optimizer:`; its fields keep their TrainingArguments names, and in
YAML they may stand at the top level too (configs written before the section existed), as on the command
line (`--learning_rate 3e-5`). The strategy only says whether the engine needs its own AdamW (DeepSpeed's
CPU Adam, under optimizer offload): which optimizer, with which rate, is decided here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

OPTIMIZERS = ("adamw_torch_fused", "adamw_torch", "sgd")
# transformers' SchedulerType names that get_scheduler builds from (warmup, total) alone; the others
# need a metric (reduce_lr_on_plateau) or extra arguments (cosine_with_min_lr, warmup_stable_decay).
LR_SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                 "inverse_sqrt")
DEFAULT_WARMUP_RATIO = 0.1


@dataclass
class OptimizerConfig:
    """The optimizer, its learning rate and the schedule of that rate (TrainingArguments names)."""

    learning_rate: float = 5e-5
    """Peak learning rate, reached at the end of warmup."""
    weight_decay: float = 0.01
    """Decoupled (AdamW) weight decay; not applied to biases and LayerNorm weights. Plain SGD (`optim: sgd`)
    has none: a non-zero value with it is refused (set 0). A resume keeps the checkpoint's value (and AdamW's
    betas and epsilon): another one is refused, as another learning rate is."""
    adam_beta1: float = 0.9
    """AdamW's first-moment decay."""
    adam_beta2: float = 0.999
    """AdamW's second-moment decay."""
    adam_epsilon: float = 1e-8
    """AdamW's denominator epsilon."""
    optim: str = "adamw_torch_fused"
    """`adamw_torch_fused` (AdamW in one fused kernel per parameter group: transformers' default since torch
    2.8, and on CPU a step ~5x faster than the per-tensor loop: 80 against 430-680 ms for BERT-base),
    `adamw_torch` (the same AdamW, one tensor at a time), or `sgd` (plain SGD: its step scales with the
    gradient, which equivalence tests need). The two AdamW's keep the same state: a checkpoint of one
    resumes under the other."""
    lr_scheduler_type: str = "linear"
    """Learning-rate schedule, built by `transformers.get_scheduler` and stepped once per optimizer step:
    linear, cosine, cosine_with_restarts, polynomial, constant, constant_with_warmup or inverse_sqrt."""
    warmup_steps: Optional[float] = None
    """Warmup (transformers 5's convention): an integer >= 1 is a number of optimizer steps, a value below 1
    a ratio of the total steps (null: warmup_ratio if given, else 0.1)."""
    warmup_ratio: Optional[float] = None
    """Older spelling of a warmup ratio in [0, 1); give warmup_steps or warmup_ratio, not both."""

    def __post_init__(self):
        whole = self.warmup_steps is None or float(self.warmup_steps).is_integer()
        checks = [
            (self.optim in OPTIMIZERS, "optim", f"one of {OPTIMIZERS}"),
            (self.lr_scheduler_type in LR_SCHEDULERS, "lr_scheduler_type", f"one of {LR_SCHEDULERS}"),
            (self.learning_rate > 0, "learning_rate", "> 0"),
            (self.weight_decay >= 0, "weight_decay", ">= 0"),
            (self.optim != "sgd" or self.weight_decay == 0, "weight_decay", "0 with optim sgd (plain SGD has no "
                                                                            "weight decay)"),
            (self.warmup_ratio is None or 0.0 <= self.warmup_ratio < 1.0, "warmup_ratio", "in [0, 1) or null"),
            (self.warmup_steps is None or (self.warmup_steps >= 0 and (self.warmup_steps < 1 or whole)),
             "warmup_steps", "a ratio in [0, 1) or a whole number of steps"),
        ]
        for ok, name, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}")
        if self.warmup_steps is not None and self.warmup_ratio is not None:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) and warmup_ratio ({self.warmup_ratio}) are both "
                             "set; give one (warmup_steps takes a ratio below 1 too)")

    def num_warmup_steps(self, num_total_steps: int) -> int:
        """Warmup in optimizer steps: warmup_steps (steps, or a ratio below 1), else warmup_ratio, else 0.1."""
        if self.warmup_steps is not None and self.warmup_steps >= 1:
            return int(self.warmup_steps)
        ratio = next(r for r in (self.warmup_steps, self.warmup_ratio, DEFAULT_WARMUP_RATIO) if r is not None)
        return int(ratio * num_total_steps)


def param_groups(model: torch.nn.Module, settings: OptimizerConfig) -> list:
    """Decoupled weight decay, not on biases and LayerNorm weights (BERT's recipe); none for SGD."""
    if settings.optim == "sgd":
        return [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": 0.0}]
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 else decay).append(p)
    return [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def parameter_order(model: torch.nn.Module, groups: list) -> list:
    """The optimizer's parameters by name, in the order its state dict numbers them."""
    names = {id(p): n for n, p in model.named_parameters()}
    return [names[id(p)] for group in groups for p in group["params"]]


def build_optimizer(groups: list, settings: OptimizerConfig,
                    engine_adam: Optional[Callable] = None) -> torch.optim.Optimizer:
    """The configured optimizer over `groups`. `engine_adam`: the AdamW class the engine needs instead of
    torch's (DeepSpeed's CPU Adam under optimizer offload: `Strategy.engine_adam`), called as AdamW."""
    if settings.optim == "sgd":
        return torch.optim.SGD(groups, lr=settings.learning_rate)
    betas = (settings.adam_beta1, settings.adam_beta2)
    if engine_adam is not None:
        return engine_adam(groups, lr=settings.learning_rate, betas=betas, eps=settings.adam_epsilon)
    return torch.optim.AdamW(groups, lr=settings.learning_rate, betas=betas, eps=settings.adam_epsilon,
                             fused=settings.optim == "adamw_torch_fused")


def build_schedule(optimizer, settings: OptimizerConfig, num_total: int):
    """transformers' schedule named by lr_scheduler_type (a LambdaLR: its state is JSON-safe)."""
    from transformers import get_scheduler

    return get_scheduler(settings.lr_scheduler_type, optimizer,
                         num_warmup_steps=settings.num_warmup_steps(num_total), num_training_steps=num_total)


def warmup_warning(settings: OptimizerConfig, num_total: int) -> Optional[str]:
    """One line when the warm-up lasts the whole run: the rate never reaches learning_rate, and a schedule
    that decays never does (a warm-up given in steps, from a config meant for a longer run)."""
    warmup = settings.num_warmup_steps(num_total)
    if settings.lr_scheduler_type == "constant" or warmup < num_total:  # constant: transformers ignores the warm-up
        return None
    return (f"WARNING: warmup_steps {warmup} >= the run's {num_total} optimizer steps: the learning rate never "
            f"reaches learning_rate {settings.learning_rate:g}; lower warmup_steps or give a ratio below 1")


def start_facts(settings: OptimizerConfig, total_steps: int) -> dict:
    """The start record's optimizer fields (`optim`, `schedule`, `optimizer`): what a resume must match."""
    adam = {} if settings.optim == "sgd" else {
        "weight_decay": settings.weight_decay, "adam_beta1": settings.adam_beta1,
        "adam_beta2": settings.adam_beta2, "adam_epsilon": settings.adam_epsilon}
    return {"optim": settings.optim, "optimizer": adam,
            "schedule": {"lr_scheduler_type": settings.lr_scheduler_type, "learning_rate": settings.learning_rate,
                         "num_warmup_steps": settings.num_warmup_steps(total_steps)}}

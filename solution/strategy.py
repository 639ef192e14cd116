"""The one place that turns a strategy into what Accelerate needs.

Model, data and post-processing code never import accelerate or deepspeed;
the trainer asks this module for an `Accelerator` and for the few facts that
differ between engines (what really wraps the model, how to read the
gradient norm, how to get full weights).

On a machine without a GPU, Accelerate needs `cpu=True` for gloo DDP; see
`../shared/notes/cpu-distributed-facts.md` for the combinations that
silently fall back to plain DDP or to unsynchronised ranks.
"""

from __future__ import annotations

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType


def build_accelerator(cfg) -> Accelerator:
    cuda = torch.cuda.is_available()
    if cfg.mixed_precision == "fp16" and not cuda:
        raise ValueError("mixed_precision fp16 needs a GPU (CPU autocast supports bf16 only); "
                         "use mixed_precision: bf16 or no")
    accelerator = Accelerator(cpu=not cuda, mixed_precision=cfg.mixed_precision,
                              gradient_accumulation_steps=cfg.gradient_accumulation_steps)
    return accelerator


def strategy_name(accelerator: Accelerator) -> str:
    return {DistributedType.NO: "single", DistributedType.MULTI_CPU: "ddp",
            DistributedType.MULTI_GPU: "ddp"}.get(accelerator.distributed_type,
                                                  str(accelerator.distributed_type).lower())


def engine_name(prepared_model) -> str:
    """Class name of the object that really wraps the model after `prepare`."""
    return type(prepared_model).__name__

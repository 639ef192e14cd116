"""What a training step holds in memory, measured from inside the optimizer (`measure_memory: true`).

The reading goes into the end record of `metrics.jsonl` (`memory_per_rank`), where the strategy benchmark
compares each engine's model states against its theoretical share. Torch only: the trainer registers the
probe on the optimizer it built, whatever engine wraps it later.
"""

from __future__ import annotations

import gc
import warnings

import torch

PROBE_STEP = 3
"""The optimizer step measured: Adam's moments exist by then, and gradients are still held."""


def live_tensor_bytes(optimizer: torch.optim.Optimizer) -> dict:
    """Bytes of every tensor storage alive in this process, and of the optimizer's state.

    Called from a pre-step hook of the optimizer the trainer built (DeepSpeed calls that same
    optimizer on its partitions), so parameters, gradients, master copies and optimizer state
    all exist. Storages are counted once (views and flat buffers share them). Tensors held only
    inside C++ (DDP's gradient buckets) are not seen, which understates DDP, not the others."""
    seen, total = set(), 0
    with warnings.catch_warnings():  # isinstance on torch's deprecated aliases (reduce_op) warns once per run
        warnings.simplefilter("ignore", FutureWarning)
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


def probe_memory(optimizer: torch.optim.Optimizer) -> dict:
    """Hook the memory reading on `optimizer`; returns the dict it fills.

    The caller sets `reading["step"]` to the optimizer step each micro-batch belongs to; during step
    PROBE_STEP the hook adds `live_tensor_bytes` and `optimizer_state_bytes`. Register it before
    `prepare()`: DeepSpeed steps this same object on its partitions, and may call it once per parameter
    sub-group, so the largest reading is kept."""
    reading: dict = {"step": 0}

    def measure(opt, args, kwargs):
        if reading["step"] == PROBE_STEP:
            now = live_tensor_bytes(opt)
            if now["live_tensor_bytes"] > reading.get("live_tensor_bytes", 0):
                reading.update(now)

    optimizer.register_step_pre_hook(measure)
    return reading

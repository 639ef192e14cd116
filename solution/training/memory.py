"""What a training step holds in memory, measured from inside the optimizer (`measure_memory: true`); and how
the process's C heap keeps what a CPU step frees (`retain_freed_memory`).

The reading goes into the end record of `metrics.jsonl` (`memory_per_rank`), where the strategy benchmark
compares each engine's model states against its theoretical share. Torch only: the trainer registers the
probe on the optimizer it built, whatever engine wraps it later.
"""

from __future__ import annotations

import ctypes
import gc
import sys
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


# glibc's mallopt(3) parameters.
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
TRIM_NEVER = 2**31 - 1  # mallopt takes an int: the heap's top is returned to the kernel past 2 GiB only


def retain_freed_memory() -> tuple[bool, str]:
    """Make glibc's malloc keep freed memory for the next allocations instead of giving it back to the kernel;
    returns whether it did and a line saying what was done (or why nothing was).

    glibc serves every block above its mmap threshold (at most 32 MiB) with a fresh mmap, unmaps it on free,
    and trims the heap's top once more than twice that threshold is free. A CPU training step frees and
    allocates the same large blocks every step (activations, gradients, the embedding's 94 MB gradient for
    BERT-base), so each comes back as new pages the kernel must fault in and zero: for BERT-base at 64 pieces
    ~190,000 page faults a step with the per-tensor AdamW (a quarter of the step), ~86,000 with the fused
    one (a tenth to a fifth; scripts/benchmark_loop.py). With mmap off for
    allocations and trimming off, the heap stays at its high-water mark and serves the next step from it,
    as a caching allocator does (the resident size stays at the peak instead of falling between steps).
    A block the heap cannot grow for still gets its own mapping (glibc falls back to mmap)."""
    if not sys.platform.startswith("linux"):
        return False, f"system allocator kept ({sys.platform} has no glibc mallopt)"
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False, "system allocator kept (the C library is not glibc)"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(M_MMAP_MAX, 0) != 1 or mallopt(M_TRIM_THRESHOLD, TRIM_NEVER) != 1:
        return False, "system allocator kept (glibc refused mallopt)"
    return True, "freed memory kept for reuse (glibc mallopt: M_MMAP_MAX 0, M_TRIM_THRESHOLD 2 GiB)"

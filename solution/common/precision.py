"""Which precision this machine computes natively: bf16 on a CPU with AVX512-BF16 or AMX, or a GPU of
compute capability 8 or later; elsewhere bf16 is emulated and slower than float32.
"""

from __future__ import annotations

import torch


def cpu_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 matmuls natively (AVX512-BF16 or AMX). Elsewhere torch emulates
    them, and bf16 autocast is slower than float32, not faster: a MiniLM training step at 384 tokens took
    110 s in bf16 and 8 s in float32 on a 2-core AVX2-only EPYC."""
    cpu = getattr(torch, "cpu", None)
    return bool(cpu and any(getattr(cpu, f, lambda: False)() for f in
                            ("_is_avx512_bf16_supported", "_is_amx_tile_supported")))


def native_bf16(device: str) -> bool:
    """Whether the device computes bfloat16 natively (elsewhere it is emulated, and slower than float32)."""
    if str(device).startswith("cuda"):
        # Compute capability 8 (Ampere) or later: torch.cuda.is_bf16_supported() also says yes where bf16 is
        # only emulated (a T4, 7.5, and a P100, 6.0: Kaggle's cards), and emulated bf16 is slower than fp32.
        return torch.cuda.is_available() and torch.cuda.get_device_capability(device)[0] >= 8
    return cpu_native_bf16()


def resolve_precision(precision: str, device: str) -> str:
    """fp32 or bf16 for --precision auto|fp32|bf16 on `device`: auto takes bf16 only where it is native."""
    if precision not in ("auto", "fp32", "bf16"):
        raise ValueError(f"precision must be auto, fp32 or bf16, got {precision!r}")
    if precision == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    return precision

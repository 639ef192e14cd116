"""Whether a --device names a torch device this machine has: checked before the work, so a bad one is a one-line
error and not a traceback from the first tensor moved there."""

from __future__ import annotations


def check_device(device: str) -> None:
    """ValueError unless `device` names a torch device this machine has (torch is imported for any but cpu)."""
    if device == "cpu":
        return
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"--device {device}: not a torch device ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: no CUDA device here (torch.cuda.is_available() is False)")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")

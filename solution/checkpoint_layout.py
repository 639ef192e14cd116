"""A checkpoint's layout as the engines write it, and the check that its files hold nothing but data.

checkpoint-N/ holds the weights in the form its strategy saved them: DeepSpeed's ZeRO partitions
(`DS_TAG`/), FSDP2's distributed checkpoint (`FSDP_DIR`/) or plain weights (model.safetensors);
`checkpoint_kind` says which, and `full_state_dict` reads any of them into full weights.
`verify_checkpoint_files` opens every pickled file with the safe loader before any engine's loader
(which unpickles) reads it. solution.checkpoint (saving, resuming) and
solution.consolidate both import this, so neither needs the other for it. Nothing here imports
accelerate or deepspeed at module level: consolidation runs without them for plain checkpoints.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import torch

DS_TAG = "pytorch_model"  # the tag Accelerate's save_state gives DeepSpeed's save_checkpoint
FSDP_DIR = "pytorch_model_fsdp_0"


def checkpoint_kind(ckpt: Path) -> str:
    """Which engine's files hold the weights: 'deepspeed', 'fsdp' or 'plain'."""
    if (ckpt / DS_TAG).is_dir() and any((ckpt / DS_TAG).glob("*model_states.pt")):
        return "deepspeed"
    if (ckpt / FSDP_DIR).is_dir():
        return "fsdp"
    if (ckpt / "model.safetensors").is_file() or (ckpt / "pytorch_model.bin").is_file():
        return "plain"
    raise ValueError(f"{ckpt}: no weights found (expected {DS_TAG}/ from DeepSpeed, {FSDP_DIR}/ from FSDP, "
                     "or model.safetensors)")


def loadable_globals() -> list:
    """The only non-tensor objects a checkpoint may hold: numpy RNG state (as Accelerate allows when
    it reads its own random_states files), DeepSpeed's ZeRO stage enum and its loss scalers (classes
    holding numbers)."""
    safe = []
    try:
        from accelerate.utils.other import TORCH_SAFE_GLOBALS

        safe += list(TORCH_SAFE_GLOBALS)
    except ImportError:
        pass
    try:
        from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
        from deepspeed.runtime.zero.config import ZeroStageEnum
        from deepspeed.utils.tensor_fragment import fragment_address

        # Plain-valued classes DeepSpeed pickles into its checkpoints (an enum, numbers, two ints).
        safe += [ZeroStageEnum, LossScaler, DynamicLossScaler, fragment_address]
    except ImportError:
        pass
    return safe


def checkpoint_files(ckpt: Path) -> list:
    """Every file in `ckpt` as the loaders will reach it: symbolic links followed, each real file once.

    A link (to a file or a folder) whose target lies outside `ckpt` is refused, naming it: its target
    is not part of what was checked, and could be swapped between the check and the load. A link back
    to a folder already walked is not walked again."""
    root = Path(ckpt).resolve()
    found, walked = {}, set()
    for folder, dirs, names in os.walk(ckpt, followlinks=True):
        if Path(folder).resolve() in walked:
            dirs.clear()
            continue
        walked.add(Path(folder).resolve())
        for entry in (Path(folder) / name for name in dirs + names):
            target = entry.resolve()
            if not target.is_relative_to(root):
                raise ValueError(f"{entry}: a symbolic link to {target}, outside the checkpoint {ckpt}; "
                                 "refusing to read through it (copy the files into the checkpoint instead)")
            if entry.name in names:
                found.setdefault(target, entry)
    return sorted(found.values())


def verify_checkpoint_files(ckpt: Path, show_progress: bool = False) -> int:
    """Open every pickled file of a checkpoint with torch.load(weights_only=True) before anything reads it.

    DeepSpeed's own loaders (resume, zero_to_fp32) call torch.load(weights_only=False), which would run
    any code a tampered file carries. Checked first with the safe loader, a file that holds anything
    beyond tensors, numbers, containers and the types above is refused, naming it. The files are those
    the loaders reach (`checkpoint_files`: through links, none leading out). Safetensors files
    (Accelerate's model.safetensors) are checked to be whole, so a truncated one is named here rather
    than failing inside Accelerate's loader. Returns the number of files checked; `show_progress`: a bar
    over the files (ZeRO checkpoints hold one per rank)."""
    from solution.cli import progress
    from solution.model import check_weights_file

    every = checkpoint_files(ckpt)
    files = [p for p in every if p.suffix in (".pt", ".bin", ".pkl", ".pth")]
    with torch.serialization.safe_globals(loadable_globals()):
        for path in progress(files, desc="consolidate: check files", unit=" files", disable=not show_progress):
            try:
                torch.load(path, map_location="cpu", weights_only=True)
            except Exception as e:
                found = re.search(r"GLOBAL (\S+)", str(e))
                if found:
                    raise ValueError(f"{path}: refusing to load a checkpoint file that holds more than tensors "
                                     f"and plain values (it names {found.group(1)})") from None
                first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                raise ValueError(f"{path}: unreadable checkpoint file, truncated or corrupt ({first})") from None
    weights = [p for p in every if p.suffix == ".safetensors"]
    for path in weights:
        check_weights_file(path)
    return len(files) + len(weights)


def full_state_dict(ckpt: Path, verify: bool = True) -> dict:
    """Full float32 weights of a checkpoint, whatever strategy wrote it (`verify`: check its files first;
    a resume checked them already)."""
    if verify:
        verify_checkpoint_files(ckpt, show_progress=True)
    kind = checkpoint_kind(ckpt)
    if kind == "deepspeed":
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        state = get_fp32_state_dict_from_zero_checkpoint(str(ckpt), tag=DS_TAG)
    elif kind == "fsdp":
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            dcp_to_torch_save(str(ckpt / FSDP_DIR), f"{tmp}/full.pt")
            loaded = torch.load(f"{tmp}/full.pt", weights_only=True, map_location="cpu")
        state = loaded.get("model", loaded)  # Accelerate saves {"model": state_dict}
    else:
        if (ckpt / "model.safetensors").is_file():
            from solution.model import read_weights

            state = read_weights(ckpt / "model.safetensors")  # a truncated file: a ValueError naming it
        else:
            state = torch.load(ckpt / "pytorch_model.bin", weights_only=True, map_location="cpu")
    return {k: (v.float() if v.is_floating_point() else v) for k, v in state.items()}

"""Resume routes: what a resuming run must share with the checkpoint, and how a checkpoint written by
another engine or world size is read (full weights and optimizer state, DeepSpeed's universal
checkpoint), with the RNG restored exactly.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Callable

import torch

from solution.checkpoints.layout import (
    DS_TAG,
    checkpoint_kind,
    derived_mismatch,
    full_state_dict,
    loadable_globals,
    write_derived_manifest,
)
from solution.checkpoints.state import CheckpointDiskFull
from solution.common.fsutil import disk_full_message, removed_if_disk_full


def compare_setting(key: str, old, mine, changed: list, unrecorded: list) -> None:
    """The checkpoint's value of a field against this run's: a difference goes to `changed` ("field 'K' is
    OLD in the checkpoint but NEW in this run"; an object by each of its fields, as 'K.sub'), a field the
    checkpoint lacks (`old` is MISSING) to `unrecorded`."""
    if old is MISSING:
        unrecorded.append(key)
        return
    if isinstance(old, dict) and isinstance(mine, dict):
        for sub, value in mine.items():
            compare_setting(f"{key}.{sub}", old.get(sub, MISSING), value, changed, unrecorded)
        return
    if key == "optim" and isinstance(old, str):  # fused or not, AdamW's state is the same
        old, mine = optimizer_family(old), optimizer_family(mine)
    if old != mine:
        changed.append(f"field '{key}' is {old!r} in the checkpoint but {mine!r} in this run")


# -- resuming in another layout: the route, the universal checkpoint, full state, RNG ---------------
@dataclass
class ResumeTarget:
    """What a resume outside Accelerate's own load_state needs from the trainer."""

    model: object  # the prepared model (a DeepSpeed engine for the universal route)
    load_full_state: Callable[[dict], None]  # full fp32 weights by name -> this run's engine
    load_full_optimizer_state: Callable[[dict], None]  # Adam's state by name (`full_optimizer_state`) -> its optimizer
    param_names: list  # the optimizer's parameters by name, in param_groups order (optimizer.bin numbers them so)
    seed: int = 0


def engine_family(strategy: str) -> str:
    """Checkpoints of one family share a layout: plain weights (single, ddp), ZeRO partitions, FSDP2's DCP."""
    return "deepspeed" if strategy.startswith("zero") else "fsdp" if strategy.startswith("fsdp") else "plain"


def resume_route(saved: dict, mine: dict) -> str:
    """How a checkpoint written with `saved`'s layout is loaded by a run with `mine` (both fingerprints).

    native: Accelerate's load_state. Same strategy and world size; or plain weights at any world size
    (one file); or FSDP2 at another world size (the distributed checkpoint reshards on load).
    universal: ZeRO-1/2, same stage, another world size, with Adam's state to carry: DeepSpeed's
    universal checkpoint. full: anything else, through full state by parameter name: fp32 weights
    (`full_weights`) and Adam's moments and step count (`full_optimizer_state`)."""
    s_strategy, m_strategy = saved.get("strategy") or "single", mine.get("strategy") or "single"
    family = engine_family(s_strategy)
    if (s_strategy == m_strategy and saved.get("world_size") == mine.get("world_size")) or \
            (family == engine_family(m_strategy) and family in ("plain", "fsdp")):
        return "native"
    # ZeRO-3's universal loader (DeepSpeed 0.19.8) resumes 2 ranks on 1 off by 7e-4 after one AdamW step
    # (measured; it also gives every param group the first one's weight decay), ZeRO-1/2's matches: ZeRO-3
    # takes the universal checkpoint's files through full state instead, which matches. SGD keeps no
    # state, and ds_to_universal refuses a checkpoint without Adam's moments.
    if s_strategy == m_strategy and mine.get("zero_stage") in (1, 2) and mine.get("optim") != "sgd":
        return "universal"
    return "full"


def full_weights(ckpt: Path) -> dict:
    """Full fp32 weights by name, from any checkpoint layout (files already verified)."""
    return full_state_dict(ckpt, verify=False)


ADAM_KEYS = ("exp_avg", "exp_avg_sq")


def _adam_state(state: dict) -> dict:
    """One parameter's Adam state as the full-state route carries it: full tensors and the step as a number."""
    step = state["step"]
    return {"step": float(step.item() if torch.is_tensor(step) else step), **{k: state[k] for k in ADAM_KEYS}}


def full_optimizer_state(ckpt: Path, names: list, accelerator, log: Callable[[str], None] = print) -> dict:
    """Adam's state by parameter name, full tensors, from any checkpoint layout (files already verified).

    Plain: Accelerate's optimizer.bin numbers parameters in param_groups order (`names`). FSDP2: the
    distributed checkpoint of the optimizer, keyed by name, gathered whole. DeepSpeed: the universal
    checkpoint's per-parameter files (converted once by the main process)."""
    kind = checkpoint_kind(ckpt)
    if kind == "deepspeed":
        zero = universal_on_every_rank(ckpt, accelerator, log) / DS_TAG / "zero"
        # Written by ds_to_universal from verified files. ZeRO-1/2 give each parameter its step.pt, ZeRO-3
        # keeps the step in the common optimizer_state.pt only.
        common = torch.load(zero / "optimizer_state.pt", map_location="cpu", weights_only=False)
        step = common.get("optimizer_state_dict", {}).get("state", {0: {}})[0].get("step")
        out = {}
        for name in names:
            keys = ("step", *ADAM_KEYS) if step is None else ADAM_KEYS
            files = {k: torch.load(zero / name / f"{k}.pt", map_location="cpu", weights_only=False) for k in keys}
            out[name] = _adam_state({"step": step, **{k: v["param"] if isinstance(v, dict) else v
                                                      for k, v in files.items()}})
        return out
    if kind == "fsdp":
        import tempfile

        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        with tempfile.TemporaryDirectory() as tmp:
            dcp_to_torch_save(str(ckpt / "optimizer_0"), f"{tmp}/optimizer.pt")
            loaded = torch.load(f"{tmp}/optimizer.pt", map_location="cpu", weights_only=True)
        return {name: _adam_state(st) for name, st in loaded["optimizer"]["state"].items()}
    loaded = torch.load(ckpt / "optimizer.bin", map_location="cpu", weights_only=True)
    return {names[i]: _adam_state(st) for i, st in loaded["state"].items()}


UNIVERSAL_DIR = "universal"  # checkpoint-N/universal/<DS_TAG>/: DeepSpeed's universal checkpoint, converted once


def convert_to_universal(ckpt: Path, log: Callable[[str], None] = print) -> Path:
    """checkpoint-N/universal, converted from the ZeRO partitions by DeepSpeed's ds_to_universal on first
    use (written to a temporary name with a manifest bound to this checkpoint's, then renamed).

    A universal/ already there is used only when its manifest verifies and names this checkpoint: one
    copied from another checkpoint, changed, or written by an older version would load another state.
    It is converted again, saying why in one line (a derived folder of ours, not the user's files)."""
    final = ckpt / UNIVERSAL_DIR
    stale = derived_mismatch(final, ckpt) if final.exists() else None
    if final.exists() and stale is None:
        return final
    log(f"{stale}; converting {ckpt / DS_TAG} again" if stale else
        f"converting {ckpt / DS_TAG} to a universal checkpoint in {final}")
    tmp = ckpt / f"{UNIVERSAL_DIR}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)

    def disk_full() -> CheckpointDiskFull:
        return CheckpointDiskFull(f"{disk_full_message(tmp)}; converting {ckpt / DS_TAG} to a universal checkpoint needs "
                                  "about as much free space as that folder holds, more while it works; the checkpoint "
                                  "is unchanged")

    with removed_if_disk_full(tmp, disk_full):
        _ds_to_universal(ckpt, tmp)
        write_derived_manifest(tmp, ckpt)
    _swap_in(tmp, final)
    return final


def _swap_in(tmp: Path, final: Path) -> None:
    """`tmp` renamed to `final`, a stale `final` renamed aside first and then removed: a later resume finds
    one whole or converts again (`universal.*` names are outside the checkpoint's manifest)."""
    old = final.with_name(f"{UNIVERSAL_DIR}.old")
    _remove(old)
    if final.is_symlink() or final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _ds_to_universal(ckpt: Path, out: Path) -> None:
    import argparse

    from deepspeed.checkpoint import ds_to_universal

    args = argparse.Namespace(input_folder=str(ckpt / DS_TAG), output_folder=str(out / DS_TAG),
                              num_extract_workers=1, num_merge_workers=1, keep_temp_folder=False, strict=True,
                              # Accelerate's save_state writes no universal-checkpoint info; none is needed
                              # without tensor or pipeline parallelism.
                              inject_missing_state=True)
    ds_to_universal.main(args)


def load_universal(ckpt: Path, engine, accelerator, log: Callable[[str], None]) -> None:
    """ZeRO-1/2 at another world size: the universal checkpoint (converted by the main process), loaded by an
    engine built with `"checkpoint": {"load_universal": true}` (solution.distributed.strategy)."""
    engine.load_checkpoint(str(universal_on_every_rank(ckpt, accelerator, log)), tag=DS_TAG)


def universal_on_every_rank(ckpt: Path, accelerator, log: Callable[[str], None] = print) -> Path:
    """checkpoint-N/universal, converted (or proven) by the main process only, seen by every rank after a barrier."""
    if accelerator.is_main_process:
        convert_to_universal(ckpt, log)
    accelerator.wait_for_everyone()
    return ckpt / UNIVERSAL_DIR


def restore_rng(ckpt: Path, rank: int) -> None:
    """This rank's RNG states as Accelerate saved them (random_states_<rank>.pkl), when resuming outside it."""
    import random

    import numpy as np

    with torch.serialization.safe_globals(loadable_globals()):
        states = torch.load(ckpt / f"random_states_{rank}.pkl", weights_only=True)
    random.setstate(states["random_state"])
    np.random.set_state(states["numpy_random_seed"])
    torch.set_rng_state(states["torch_manual_seed"])
    if "torch_cuda_manual_seed" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["torch_cuda_manual_seed"])


def reseed(seed: int, step: int, rank: int, log: Callable[[str], None]) -> None:
    """Another world size: the old ranks' RNG states have no counterpart here. Each rank is seeded from
    (seed, step, rank), so a resume is repeatable, but dropout draws cannot continue the old run's."""
    from accelerate.utils import set_seed

    set_seed(seed * 1_000_003 + step * 1_009 + rank)
    log("the world size changed: dropout draws cannot continue exactly (they differ between world sizes "
        f"anyway); each rank's RNG is seeded from (seed {seed}, step {step}, rank)")


def optimizer_family(optim: str) -> str:
    """What a checkpoint's optimizer state is: both AdamW's keep the same moments and step count."""
    return "adamw" if optim.startswith("adamw") else optim

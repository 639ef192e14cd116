"""A checkpoint's layout as the engines write it, and the check that its files hold nothing but data.

checkpoint-N/ holds the weights in the form its strategy saved them: DeepSpeed's ZeRO partitions
(`DS_TAG`/), FSDP2's distributed checkpoint (`FSDP_DIR`/) or plain weights (model.safetensors);
`checkpoint_kind` says which, and `full_state_dict` reads any of them into full weights.
`verify_checkpoint_files` opens every pickled file with the safe loader (a distributed checkpoint's
`.metadata` index with an unpickler that knows only its own classes) before any engine's loader (which
unpickles) reads it. solution.checkpoints (saving, resuming) and
solution.consolidate both import this, so neither needs the other for it. Nothing here imports
accelerate or deepspeed at module level: consolidation runs without them for plain checkpoints.
"""

from __future__ import annotations

import io
import os
import pathlib
import pickle
import re
import tempfile
from pathlib import Path
from typing import Optional

import torch

from solution.common.fsutil import atomic_write_text, file_digest
from solution.common.jsonio import JsonError, read_json_object

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


PICKLE_SUFFIXES = (".pt", ".bin", ".pkl", ".pth")  # torch.save's files, as Accelerate and DeepSpeed name them
DCP_INDEX = ".metadata"  # a distributed checkpoint's index: `.metadata`, or `__<rank>.metadata` without coordination


def _safe_load(source, name) -> None:
    """torch.load(weights_only=True) of a file or bytes (inside `safe_globals(loadable_globals())`);
    a failure is one ValueError naming `name`."""
    try:
        torch.load(source, map_location="cpu", weights_only=True)
    except Exception as e:
        found = re.search(r"GLOBAL (\S+)", str(e))
        if found:
            raise ValueError(f"{name}: refusing to load a checkpoint file that holds more than tensors "
                             f"and plain values (it names {found.group(1)})") from None
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ValueError(f"{name}: unreadable checkpoint file, truncated or corrupt ({first})") from None


def verify_checkpoint_files(ckpt: Path, show_progress: bool = False) -> int:
    """Open every pickled file of a checkpoint with a safe loader before anything reads it.

    DeepSpeed's own loaders (resume, zero_to_fp32) call torch.load(weights_only=False), which would run
    any code a tampered file carries. Checked first with the safe loader, a file that holds anything
    beyond tensors, numbers, containers and the types above is refused, naming it. A distributed
    checkpoint's index (`DCP_INDEX`, which torch unpickles with plain pickle) is checked by
    `check_dcp_folder`, with the values it points to. The files are those the loaders reach
    (`checkpoint_files`: through links, none leading out). Safetensors files (Accelerate's
    model.safetensors) are checked to be whole, so a truncated one is named here rather than failing
    inside Accelerate's loader. Returns the number of files checked; `show_progress`: a bar over the
    files (ZeRO checkpoints hold one per rank)."""
    from solution.common.cli import progress
    from solution.model.qa_model import check_weights_file

    every = checkpoint_files(ckpt)
    files = [p for p in every if p.suffix in PICKLE_SUFFIXES or p.name.endswith(DCP_INDEX)]
    dcp_data = set()
    with torch.serialization.safe_globals(loadable_globals()):
        for path in progress(files, desc="consolidate: check files", unit=" files", disable=not show_progress):
            if path.name.endswith(DCP_INDEX):
                dcp_data |= check_dcp_folder(path, ckpt)
            else:
                _safe_load(path, path)
    weights = [p for p in every if p.suffix == ".safetensors"]
    for path in weights:
        check_weights_file(path)
    return len(files) + len(dcp_data) + len(weights)


# -- torch.distributed.checkpoint (FSDP): the index torch unpickles, and the values it points to ------
class _RefusedGlobal(pickle.UnpicklingError):
    """A class or function an index may not name; its text is the dotted name."""


def dcp_index_classes() -> dict:
    """(module, name) -> object: all that torch (2.13) writes into a distributed checkpoint's index.

    Read from the indexes of real FSDP checkpoints (model and AdamW state): the metadata dataclasses,
    the file-system reader's _StorageInfo, torch.Size, dtypes, the layout (by torch's own lookup by
    name) and the pathlib.PosixPath the writer records. All are data: built from their arguments alone."""
    from collections import OrderedDict

    from torch.distributed.checkpoint import filesystem, metadata

    names = ("Metadata", "StorageMeta", "MetadataIndex", "ChunkStorageMetadata", "TensorProperties",
             "TensorStorageMetadata", "BytesStorageMetadata", "_MEM_FORMAT_ENCODING")
    allowed = {("torch.distributed.checkpoint.metadata", n): getattr(metadata, n) for n in names}
    allowed |= {("torch", n): v for n, v in vars(torch).items() if isinstance(v, torch.dtype)}
    allowed |= {("torch.distributed.checkpoint.filesystem", "_StorageInfo"): filesystem._StorageInfo,
                ("torch", "Size"): torch.Size, ("torch.serialization", "_get_layout"): torch.serialization._get_layout,
                ("pathlib", "PosixPath"): pathlib.PosixPath, ("collections", "OrderedDict"): OrderedDict}
    return allowed


class _IndexUnpickler(pickle.Unpickler):
    def __init__(self, file):
        super().__init__(file)
        self.allowed = dcp_index_classes()

    def find_class(self, module: str, name: str):
        found = self.allowed.get((module, name))
        if found is None:
            raise _RefusedGlobal(f"{module}.{name}")
        return found


def read_dcp_index(path: Path):
    """A distributed checkpoint's index, unpickled resolving only `dcp_index_classes`.

    torch's FileSystemReader.read_metadata unpickles it with plain pickle.load (an FSDP resume, and
    consolidation through dcp_to_torch_save), so a crafted index would run code there. Here naming
    anything else is refused in one line naming the file and what it names."""
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        with open(path, "rb") as f:
            index = _IndexUnpickler(f).load()
    except _RefusedGlobal as e:
        raise ValueError(f"{path}: refusing to load a distributed-checkpoint index that names {e} (only "
                         "torch.distributed.checkpoint's metadata classes may appear)") from None
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ValueError(f"{path}: unreadable distributed-checkpoint index, truncated or corrupt ({first})") from None
    if not isinstance(index, Metadata) or not isinstance(getattr(index, "storage_data", None), dict):
        raise ValueError(f"{path}: holds a {type(index).__name__} without storage_data, not a distributed-checkpoint "
                         "index as torch's file-system writer saves it")
    return index


def _dcp_locations(index_path: Path, index) -> list:
    """(name, _StorageInfo, is a non-tensor value) for each item of an index, refusing one torch's
    file-system writer would not have written (its reader would fail on it deep inside torch)."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

    kinds = getattr(index, "state_dict_metadata", None)
    items = []
    for key, info in index.storage_data.items():
        where = [getattr(info, f, None) for f in ("relative_path", "offset", "length")]
        plain = isinstance(key, MetadataIndex) and isinstance(getattr(key, "fqn", None), str) and \
            isinstance(info, _StorageInfo) and isinstance(kinds, dict) and isinstance(where[0], str) and \
            all(isinstance(n, int) and n >= 0 for n in where[1:])
        if not plain:
            raise ValueError(f"{index_path}: item {key!r}: not a file location as torch's file-system writer saves one")
        items.append((key.fqn, info, isinstance(kinds.get(key.fqn), BytesStorageMetadata)))
    return items


def check_dcp_folder(index_path: Path, ckpt: Path) -> set:
    """Check what torch's file-system reader takes from the folder of `index_path` (inside
    `safe_globals(loadable_globals())`); returns the data files (`__R_N.distcp`) the index names.

    Every item lies inside the checkpoint, within its file (a truncated shard is named here). Tensors
    torch reads with the safe loader; other values (an optimizer's param_groups: floats, tuples, names)
    its load planner reads with torch.load(weights_only=False), so each is loaded with the safe one first."""
    index = read_dcp_index(index_path)
    root, data_files = Path(ckpt).resolve(), set()
    for fqn, info, is_value in _dcp_locations(index_path, index):
        data, end = index_path.parent / info.relative_path, info.offset + info.length
        if not data.resolve().is_relative_to(root) or not data.is_file():
            raise ValueError(f"{index_path}: item {fqn} lies in {data}, not a file inside the checkpoint {ckpt}")
        if end > data.stat().st_size:
            raise ValueError(f"{data}: truncated, {data.stat().st_size} bytes, but {index_path} places "
                             f"{fqn} at bytes {info.offset}..{end}")
        data_files.add(data.resolve())
        if not is_value:
            continue
        if getattr(info, "transform_descriptors", None):  # compressed bytes: the safe loader could not read them
            raise ValueError(f"{data}: {fqn} is stored transformed ({info.transform_descriptors}); "
                             "only plain distributed checkpoints can be checked")
        with open(data, "rb") as f:
            f.seek(info.offset)
            _safe_load(io.BytesIO(f.read(info.length)), f"{data} ({fqn}, bytes {info.offset}..{end})")
    return data_files


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
            from solution.model.qa_model import read_weights

            state = read_weights(ckpt / "model.safetensors")  # a truncated file: a ValueError naming it
        else:
            state = torch.load(ckpt / "pytorch_model.bin", weights_only=True, map_location="cpu")
    return {k: (v.float() if v.is_floating_point() else v) for k, v in state.items()}


# -- the manifest: every file's size and sha256, written last ------------------------------------------
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "nq-bert-qa-manifest/1"
# Written into the checkpoint after its manifest, by a resume at another world size: not covered by it, but
# by a manifest of its own bound to the checkpoint's (`write_derived_manifest`, `derived_mismatch`).
ADDED_LATER = ("universal",)


def _listed_files(ckpt: Path) -> list:
    """The checkpoint's files by relative path, the manifest itself and later additions left out."""
    root = Path(ckpt)
    found = []
    for folder, dirs, names in os.walk(root):
        rel = Path(folder).relative_to(root)
        if rel == Path("."):
            dirs[:] = [d for d in dirs if d not in ADDED_LATER and not d.startswith(f"{ADDED_LATER[0]}.")]
        found += [(rel / n).as_posix() for n in names if not (rel == Path(".") and n == MANIFEST)]
    return sorted(found)


def write_manifest(ckpt: Path, record: Optional[dict] = None) -> Path:
    """ckpt/manifest.json: every file's size and sha256, written last (to a temporary name, then renamed),
    so a checkpoint whose manifest is there was complete when it was written. `record`: more fields."""
    import json

    files = {rel: {"size": (Path(ckpt) / rel).stat().st_size, "sha256": file_digest(Path(ckpt) / rel)}
             for rel in _listed_files(ckpt)}
    return atomic_write_text(Path(ckpt) / MANIFEST, json.dumps({"format": MANIFEST_FORMAT, **(record or {}),
                                                                "files": files}, indent=1) + "\n")


def read_manifest(ckpt: Path) -> dict:
    """The manifest's record, its `files` as {relative path: (size, sha256)}; a ValueError naming the file
    when it cannot be read (nested too deep, mistyped, another format)."""
    path = Path(ckpt) / MANIFEST
    try:
        record = read_json_object(path)
        files = record["files"]
        if record.get("format") != MANIFEST_FORMAT or not isinstance(files, dict):
            raise ValueError(f"format {record.get('format')!r}")
        listed = {rel: (int(v["size"]), str(v["sha256"])) for rel, v in files.items()}
    except JsonError as e:  # its text is "PATH: what is wrong"
        raise ValueError(f"{path}: unreadable manifest ({str(e).removeprefix(f'{path}: ')[:200]})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: unreadable manifest ({str(e)[:200]})") from None
    return {**record, "files": listed}


def verify_manifest(ckpt: Path, from_storage: bool = False) -> bool:
    """Check every file the manifest lists: there, of its size, of its sha256. False: no manifest (a
    checkpoint from before manifests); True: it verifies; a ValueError naming the first file that
    differs, or a file that no manifest lists (something added to the checkpoint since). `from_storage`:
    see `fsutil.file_digest` (the check right after a save). Folders written later (ADDED_LATER) are
    proven by their own manifest, bound to this one, when they are used (`derived_mismatch`)."""
    if not (Path(ckpt) / MANIFEST).is_file():
        return False
    listed = read_manifest(ckpt)["files"]
    for rel, (size, digest) in sorted(listed.items()):
        file = Path(ckpt) / rel
        if not file.is_file():
            raise ValueError(f"{file}: listed in {MANIFEST} but missing")
        if file.stat().st_size != size:
            raise ValueError(f"{file}: {file.stat().st_size} bytes, but {MANIFEST} says {size} (truncated or rewritten)")
        if file_digest(file, from_storage) != digest:
            raise ValueError(f"{file}: sha256 differs from {MANIFEST} (its bytes changed since it was written)")
    unlisted = sorted(set(_listed_files(ckpt)) - set(listed))
    if unlisted:
        raise ValueError(f"{Path(ckpt) / unlisted[0]}: not in {MANIFEST} (added to the checkpoint after it was written)")
    return True


def source_digest(ckpt: Path) -> str:
    """What a folder derived from `ckpt` is bound to: the sha256 of its manifest, which covers every file
    (with its trainer_state.json's save time, so no two saves share it); for a checkpoint from before
    manifests, the sha256 of its DeepSpeed files by name."""
    import hashlib

    if (Path(ckpt) / MANIFEST).is_file():
        return file_digest(Path(ckpt) / MANIFEST)
    h = hashlib.sha256()
    for file in sorted((Path(ckpt) / DS_TAG).rglob("*")):
        if file.is_file():
            h.update(f"{file.relative_to(ckpt).as_posix()} {file_digest(file)}\n".encode())
    return h.hexdigest()


def write_derived_manifest(folder: Path, ckpt: Path) -> Path:
    """folder/manifest.json for a folder made from checkpoint `ckpt` (its universal checkpoint): the
    folder's files and the `source_digest` of the checkpoint it was made from."""
    return write_manifest(folder, {"derived_from": source_digest(ckpt)})


def derived_mismatch(folder: Path, ckpt: Path) -> Optional[str]:
    """Why `folder` cannot be trusted as made from `ckpt` (one line naming the folder or its file that
    differs), or None: its manifest verifies and names this checkpoint. A folder without one was made by
    an older version or copied in; one naming another checkpoint was copied from it."""
    if not (Path(folder) / MANIFEST).is_file():
        return f"{folder}: no {MANIFEST} (converted by an older version, or copied in): its files cannot be checked"
    try:
        source, mine = read_manifest(folder).get("derived_from"), source_digest(ckpt)
        if source != mine:
            return (f"{folder}: converted from another checkpoint (its {MANIFEST} names {str(source)[:12]}, this "
                    f"checkpoint is {mine[:12]})")
        verify_manifest(folder)
    except ValueError as e:
        return str(e)
    return None

"""The feature cache's storage: labelled windows as numpy column files, memory-mapped when read.

A cache entry's `windows/` folder holds one `.npy` file per column (`numpy.load(..., mmap_mode="r")` opens
any of them) and `meta.json`, written last, naming the columns and the number of windows:

    window_index, start_positions, end_positions (int32), answer_type (int8)   one value per window
    input_ids (int32), token_type_ids (int8), nq_token_index (int32)            every window's pieces, one
                                                                                 after the other, and
    input_ids.offsets, ... (int64, windows + 1)                                 where each window's start
    example_id (uint8: UTF-8), example_id.offsets                               the same for the ids

Only numpy is needed to write and read them (no Arrow, no `datasets`). Workers write their shard's
columns as raw appends (`ShardWriter`); `merge_shards` joins the shards, in shard order, into the
`.npy` files, streaming, so memory stays flat however many windows there are.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

# name: (dtype, ragged). Ragged columns hold a sequence per window (the ids as UTF-8 bytes).
COLUMNS = {
    "example_id": (np.uint8, True),
    "window_index": (np.int32, False),
    "input_ids": (np.int32, True),
    "token_type_ids": (np.int8, True),
    "nq_token_index": (np.int32, True),
    "start_positions": (np.int32, False),
    "end_positions": (np.int32, False),
    "answer_type": (np.int8, False),
}
FORMAT = "nq-window-columns"
FLUSH_WINDOWS = 4096  # windows buffered in a worker before they are appended to its files


def _as_array(name: str, value) -> np.ndarray:
    dtype, _ = COLUMNS[name]
    if name == "example_id":
        return np.frombuffer(value.encode("utf-8"), dtype=np.uint8)
    return np.asarray(value, dtype=dtype)


class ShardWriter:
    """One worker's windows, appended to raw files in `directory` (NAME.bin, and NAME.len.bin: each
    window's length in a ragged column)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True)
        self.buffer = {name: [] for name in COLUMNS}

    def add(self, window: dict) -> None:
        for name in COLUMNS:
            self.buffer[name].append(_as_array(name, window[name]))
        if len(self.buffer["window_index"]) >= FLUSH_WINDOWS:
            self.flush()

    def flush(self) -> None:
        for name, (dtype, ragged) in COLUMNS.items():
            parts = self.buffer[name]
            values = np.concatenate(parts) if ragged and parts else np.asarray(parts, dtype=dtype)
            with open(self.directory / f"{name}.bin", "ab") as f:
                f.write(values.astype(dtype, copy=False).tobytes())
            if ragged:
                with open(self.directory / f"{name}.len.bin", "ab") as f:
                    f.write(np.asarray([len(p) for p in parts], dtype=np.int64).tobytes())
            self.buffer[name] = []


def _write_npy(path: Path, dtype, length: int, parts: list) -> None:
    """An .npy file of `length` values of `dtype`, its data copied from the raw files `parts` in order."""
    with open(path, "wb") as out:
        np.lib.format.write_array_header_1_0(
            out, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (length,)})
        for part in parts:
            if part.is_file():  # a shard that kept no window wrote no file
                with open(part, "rb") as f:
                    shutil.copyfileobj(f, out, 16 << 20)


def merge_shards(shards: list, directory: Path) -> int:
    """Join the shards' raw files, in order, into `directory`'s column files; the number of windows."""
    directory = Path(directory)
    directory.mkdir(parents=True)
    lengths = {name: [np.fromfile(s / f"{name}.len.bin", dtype=np.int64) if (s / f"{name}.len.bin").is_file()
                      else np.zeros(0, np.int64) for s in shards]
               for name, (_, ragged) in COLUMNS.items() if ragged}
    num_windows = sum(len(x) for x in lengths["example_id"])
    for name, (dtype, ragged) in COLUMNS.items():
        parts = [s / f"{name}.bin" for s in shards]
        if not ragged:
            _write_npy(directory / f"{name}.npy", dtype, num_windows, parts)
            continue
        offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths[name]))]).astype(np.int64)
        np.save(directory / f"{name}.offsets.npy", offsets)
        _write_npy(directory / f"{name}.npy", dtype, int(offsets[-1]), parts)
    meta = {"format": FORMAT, "num_windows": num_windows,
            "columns": {name: {"dtype": np.dtype(d).name, "ragged": r} for name, (d, r) in COLUMNS.items()}}
    (directory / "meta.json").write_text(json.dumps(meta, indent=2))  # last: the folder is complete
    return num_windows


class WindowDataset(torch.utils.data.Dataset):
    """The windows of a cache entry's `windows/` folder, memory-mapped (nothing is read until asked).

    `ds[i]` is a dict with the Hugging Face column names: numpy arrays for the pieces, ints, the id as
    a str; what `inference.collate` takes."""

    def __init__(self, directory):
        self.directory = Path(directory)
        meta_path = self.directory / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"{self.directory}: not a window cache folder (no meta.json)")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != FORMAT or set(meta.get("columns", {})) != set(COLUMNS):
            raise ValueError(f"{meta_path}: field 'format'/'columns': not this project's window columns ({FORMAT})")
        self.num_windows = int(meta["num_windows"])
        self.values = {name: np.load(self.directory / f"{name}.npy", mmap_mode="r") for name in COLUMNS}
        self.offsets = {name: np.load(self.directory / f"{name}.offsets.npy", mmap_mode="r")
                        for name, (_, ragged) in COLUMNS.items() if ragged}

    def __reduce__(self):
        # A data loader worker started by spawn reopens the files rather than receiving copies of them.
        return (WindowDataset, (str(self.directory),))

    def __len__(self) -> int:
        return self.num_windows

    def __getitem__(self, i) -> dict:
        i = int(i)
        if not -self.num_windows <= i < self.num_windows:
            raise IndexError(f"window {i} of {self.num_windows}")
        i %= self.num_windows
        row = {}
        for name, values in self.values.items():
            if name in self.offsets:
                lo, hi = self.offsets[name][i:i + 2]
                row[name] = np.asarray(values[lo:hi])
            else:
                row[name] = int(values[i])
        row["example_id"] = row["example_id"].tobytes().decode("utf-8")
        return row

    def __iter__(self):
        return (self[i] for i in range(self.num_windows))

    def example_ids(self, start: int, stop: int) -> list:
        """The ids of windows start..stop-1, decoded in one pass."""
        off = self.offsets["example_id"]
        blob = self.values["example_id"][off[start]:off[stop]].tobytes()
        return [blob[a:b].decode("utf-8") for a, b in zip(off[start:stop] - off[start], off[start + 1:stop + 1] - off[start])]

"""The feature cache's storage: labelled windows as numpy column files, memory-mapped when read.

A cache entry's `windows/` folder holds one `.npy` file per column (`numpy.load(..., mmap_mode="r")` opens
any of them) and `meta.json`, written last, naming the columns and the number of windows:

    window_index, start_positions, end_positions (int32), answer_type (int8)   one value per window
    input_ids (int32), token_type_ids (int8), nq_token_index (int32)            every window's pieces, one
                                                                                 after the other, and
    input_ids.offsets, ... (int64, windows + 1)                                 where each window's start
    example_id (uint8: UTF-8), example_id.offsets                               the same for the ids

Only numpy is needed to write and read them (no Arrow, no `datasets`). Workers write their shard's
columns as raw appends (`ShardWriter`); `merge_shards` joins the shards into the `.npy` files, in the
order it is given (the file's line order: the same windows in the same order whatever the number of
workers), streaming, so memory stays flat however many windows there are. `solution.windows.assemble`
joins whole entries' folders the same way (`write_npy`, `save_npy`, `write_meta`).

`meta.json` also records, for each file, its size in bytes, its number of rows and its sha256, hashed
as it is written. Opening the folder checks every size and row count (a few `stat` calls: a cut or
swapped file is one line naming it, not numpy's "mmap length is greater than file size");
`check_columns(..., digests=True)` hashes the files again and compares.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from solution.common.fsutil import file_digest
from solution.common.jsonio import read_json_object

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


class ColumnsError(ValueError):
    """A column file that is not the one meta.json records (cut, replaced, changed); one line naming it."""


class _HashedFile:
    """A file written, counted and hashed at once (no second read): its record in meta.json."""

    def __init__(self, path: Path):
        self.file = open(path, "wb")
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def __enter__(self) -> "_HashedFile":
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()

    def write(self, data) -> None:
        self.file.write(data)
        self.sha256.update(data)
        self.bytes += len(data)

    def record(self, rows: int) -> dict:
        return {"bytes": self.bytes, "rows": rows, "sha256": self.sha256.hexdigest()}


def _npy_header(out: _HashedFile, dtype, length: int) -> None:
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (length,)}
    np.lib.format.write_array_header_1_0(out, header)


COPY_VALUES = 4 << 20  # values copied at a time: memory stays flat however long a run of windows is


def _raw(path: Path, dtype) -> np.ndarray:
    """A shard's raw column file, memory-mapped (empty when the shard kept no window)."""
    if not path.is_file() or path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def write_npy(path: Path, dtype, length: int, spans: list) -> dict:
    """An .npy file of `length` values of `dtype`: the raw values `spans` name, (array, start, stop) each,
    one after the other; its record (bytes, rows, sha256)."""
    with _HashedFile(path) as out:
        _npy_header(out, dtype, length)
        pending, size = [], 0
        for values, start, stop in spans:
            for lo in range(start, stop, COPY_VALUES):
                pending.append(values[lo:min(stop, lo + COPY_VALUES)])
                size += len(pending[-1])
                if size >= COPY_VALUES:
                    out.write(np.concatenate(pending).astype(dtype, copy=False).tobytes())
                    pending, size = [], 0
        if pending:
            out.write(np.concatenate(pending).astype(dtype, copy=False).tobytes())
    return out.record(length)


def save_npy(path: Path, values: np.ndarray) -> dict:
    """`numpy.save` of a 1-D array, with its record (bytes, rows, sha256)."""
    with _HashedFile(path) as out:
        _npy_header(out, values.dtype, len(values))
        out.write(np.ascontiguousarray(values).tobytes())
    return out.record(len(values))


def merge_shards(shards: list, directory: Path, runs: Optional[list] = None) -> int:
    """Join the shards' raw files into `directory`'s column files; the number of windows.

    `runs`: (shard, number of windows) pairs in the order the windows go, each taking its shard's next
    windows (how the windows of a file's documents are put back in line order, whatever the number of
    workers); None: each shard whole, in shard order."""
    directory = Path(directory)
    directory.mkdir(parents=True)
    lengths = {name: [np.fromfile(s / f"{name}.len.bin", dtype=np.int64) if (s / f"{name}.len.bin").is_file()
                      else np.zeros(0, np.int64) for s in shards]
               for name, (_, ragged) in COLUMNS.items() if ragged}
    rows = _row_spans([len(x) for x in lengths["example_id"]], runs)
    num_windows = sum(stop - start for _, start, stop in rows)
    files = {}
    for name, (dtype, ragged) in COLUMNS.items():
        values = [_raw(s / f"{name}.bin", dtype) for s in shards]
        if not ragged:
            files[f"{name}.npy"] = write_npy(directory / f"{name}.npy", dtype, num_windows,
                                              [(values[k], a, b) for k, a, b in rows])
            continue
        ends = [np.concatenate([[0], np.cumsum(x)]) for x in lengths[name]]  # each shard's window k: ends[k]..
        ordered = [lengths[name][k][a:b] for k, a, b in rows]
        offsets = np.concatenate([[0], np.cumsum(np.concatenate(ordered or [np.zeros(0, np.int64)]))]).astype(np.int64)
        files[f"{name}.offsets.npy"] = save_npy(directory / f"{name}.offsets.npy", offsets)
        files[f"{name}.npy"] = write_npy(directory / f"{name}.npy", dtype, int(offsets[-1]),
                                          [(values[k], int(ends[k][a]), int(ends[k][b])) for k, a, b in rows])
    write_meta(directory, num_windows, files)
    return num_windows


def write_meta(directory: Path, num_windows: int, files: dict) -> None:
    """`directory`'s meta.json, written once every column file is: the columns, the window count and
    `files` (each file's record, in COLUMNS order, each ragged column's offsets before its values)."""
    meta = {"format": FORMAT, "num_windows": num_windows,
            "columns": {name: {"dtype": np.dtype(d).name, "ragged": r} for name, (d, r) in COLUMNS.items()},
            "files": files}
    (directory / "meta.json").write_text(json.dumps(meta, indent=2))  # last: the folder is complete


def _row_spans(counts: list, runs: Optional[list]) -> list:
    """(shard, first window, end) spans of the shards' windows in the order `runs` gives (see
    `merge_shards`), which must take every window of every shard."""
    if runs is None:
        runs = list(enumerate(counts))
    taken = [0] * len(counts)
    spans = []
    for shard, n in runs:
        spans.append((shard, taken[shard], taken[shard] + n))
        taken[shard] += n
    if taken != counts:
        raise ValueError(f"window runs take {taken} windows of the shards, which hold {counts}")
    return spans


def _npy_rows(path: Path) -> int:
    """The number of rows an .npy file's header declares (the header alone is read)."""
    try:
        with open(path, "rb") as f:
            major, _ = np.lib.format.read_magic(f)
            read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, _, _ = read_header(f)
    except (ValueError, OSError) as e:
        raise ColumnsError(f"{path}: not a readable .npy file ({str(e).splitlines()[0]})") from None
    if len(shape) != 1:
        raise ColumnsError(f"{path}: shape {shape}, expected one dimension")
    return int(shape[0])


def expected_rows(name: str, num_windows: int) -> Optional[int]:
    """The rows a column file of a folder of `num_windows` windows has (None: a ragged column's pieces,
    as many as its offsets' last value)."""
    if name.endswith(".offsets.npy"):
        return num_windows + 1
    return None if COLUMNS[name[:-len(".npy")]][1] else num_windows


def check_columns(directory: Path, meta: dict, digests: bool = False) -> None:
    """Every column file against its record in `meta` (meta.json): there, of the recorded size and
    row count, the rows the window count needs; with `digests`, also the recorded sha256 (every byte
    read). The first difference is a ColumnsError naming the file and what differs."""
    files = meta.get("files")
    expected = {f"{name}.npy" for name in COLUMNS} | {f"{name}.offsets.npy" for name, (_, r) in COLUMNS.items() if r}
    if (not isinstance(files, dict) or set(files) != expected
            or not all(isinstance(record, dict) for record in files.values())):
        raise ColumnsError(f"{directory / 'meta.json'}: field 'files' does not list the column files (written by "
                           "an older version, or edited); featurise again")
    for name in sorted(expected):
        _check_file(directory / name, files[name], expected_rows(name, meta["num_windows"]), digests)


def _check_file(path: Path, record: dict, rows: Optional[int], digest: bool) -> None:
    try:
        size = path.stat().st_size
    except OSError as e:
        raise ColumnsError(f"{path}: cannot be read ({e.strerror}); meta.json lists it") from None
    if size != record.get("bytes"):
        raise ColumnsError(f"{path}: {size} bytes, meta.json recorded {record.get('bytes')} (cut, or another file)")
    have = _npy_rows(path)
    if have != record.get("rows") or (rows is not None and have != rows):
        raise ColumnsError(f"{path}: {have} rows, meta.json recorded {record.get('rows')}"
                           + (f" and its window count needs {rows}" if rows is not None else ""))
    if digest and file_digest(path) != record.get("sha256"):
        raise ColumnsError(f"{path}: sha256 differs from meta.json's (its bytes changed since it was written)")


class WindowDataset(torch.utils.data.Dataset):
    """The windows of a cache entry's `windows/` folder, memory-mapped (nothing is read until asked).

    `ds[i]` is a dict with the Hugging Face column names: numpy arrays for the pieces, ints, the id as
    a str; what `inference.collate` takes."""

    def __init__(self, directory):
        self.directory = Path(directory)
        meta_path = self.directory / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"{self.directory}: not a window cache folder (no meta.json)")
        meta = read_json_object(meta_path)
        if meta.get("format") != FORMAT or set(meta.get("columns", {})) != set(COLUMNS):
            raise ValueError(f"{meta_path}: field 'format'/'columns': not this project's window columns ({FORMAT})")
        if not isinstance(meta.get("num_windows"), int) or meta["num_windows"] < 0:
            raise ColumnsError(f"{meta_path}: field 'num_windows' is {meta.get('num_windows')!r}, not a count")
        self.meta = meta
        self.num_windows = meta["num_windows"]
        check_columns(self.directory, meta)  # before numpy maps a file shorter than its header says
        self.values = {name: np.load(self.directory / f"{name}.npy", mmap_mode="r") for name in COLUMNS}
        self.offsets = {name: np.load(self.directory / f"{name}.offsets.npy", mmap_mode="r")
                        for name, (_, ragged) in COLUMNS.items() if ragged}
        for name, offsets in self.offsets.items():
            if offsets[0] != 0 or offsets[-1] != len(self.values[name]):
                raise ColumnsError(f"{self.directory / name}.offsets.npy: runs {offsets[0]}..{offsets[-1]}, but "
                                   f"{name}.npy holds {len(self.values[name])} values")

    def check_digests(self) -> None:
        """Hash every column file and compare with meta.json's record (every byte is read)."""
        check_columns(self.directory, self.meta, digests=True)

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

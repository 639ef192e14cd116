"""A training file's feature-cache entry joined from the entries of the files it is made of, featurising nothing.

A learning curve trains on nested files (8,000, 16,000 and 32,000 pages, each the one before and more
pages): featurised one by one they cost 56,000 pages of featurising where 32,000 pages are distinct.
A page's windows depend only on the page and the settings, their sampling on (seed, example id,
window index) (`featurizer.keep_window`), and an entry holds them in the file's line order (the reason
`num_proc` changes nothing). So when a file's lines are exactly those of files A, B, ... in order, its
windows are A's, then B's, ...: the column files of their entries joined one after the other, and its
counts their sums. `assemble_train_features` publishes that join under the very key
`build_train_features` computes for the whole file, so a later build of it (`python -m solution.train`)
finds and proves it and logs "reusing cache".

What is checked before anything is built: the whole file holds the parts' lines, byte for byte, in
order (a part's last line may lack its newline), and no example id comes twice (featurising refuses a
duplicate id, whatever `on_error`). Hard-negative sampling is refused: its scores file belongs to one
training file.
"""

from __future__ import annotations

import codecs
import gzip
import itertools
import os
import zlib
from collections import Counter
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from solution.data.nq import NQFormatError, open_binary, parse_example, recover_example_id
from solution.windows.columns import COLUMNS, WindowDataset, save_npy, write_meta, write_npy
from solution.windows.dataset import (
    Summary,
    build_train_features,
    existing_entry,
    finish_entry,
    publish_entry,
    source_key,
    windows_source,
)
from solution.windows.featurizer import ANSWER_TYPES, WindowConfig
from solution.windows.sampling import NegativeSampling

# What a build keeps of its gold answers not recovered (`Summary._check`) and of its skipped lines
# (`ReadStats.record`): the whole keeps the first of its parts' in line order, as one process would.
MISSES_KEPT = 20
FIRST_ERRORS_KEPT = 5


class NotConcatenationError(ValueError):
    """The whole file is not its parts' lines in order; the message names the part and the line."""


def assemble_train_features(path: str, parts: list, tokenizer, window: WindowConfig,
                            sampling: Optional[NegativeSampling], cache_dir: str, on_error: str = "raise",
                            limit: Optional[int] = None, seed: int = 0, num_proc: int = 1, log=print,
                            verify: bool = False) -> tuple:
    """(WindowDataset, summary) of `path`, as `build_train_features(path, ..., limit=limit)` gives them,
    its entry joined from those of `parts` (each found or built by `build_train_features(part, ...)`).

    `path` must hold exactly the lines of `parts`, in order; `limit` None or at least its line count
    (then its windows are the parts'). An entry of the whole that exists is proven and returned."""
    sampling = sampling or NegativeSampling()
    if sampling.hard_negatives_file:
        raise ValueError("assemble_train_features: hard-negative sampling (hard_negatives_file) is not supported: "
                         "its scores belong to one training file; featurise the file with build_train_features")
    if sampling.top_window_ranking_file:
        raise ValueError("assemble_train_features: a rankings file (top_window_ranking_file) is not supported: it "
                         "ranks one training file's pages; featurise the file with build_train_features")
    if not parts:
        raise ValueError("assemble_train_features: no parts given")
    state, part_states = _file_state(path), [_file_state(part) for part in parts]
    counts = check_concatenation(path, parts)
    if limit is not None and limit < sum(counts):
        raise ValueError(f"limit {limit} is below {path}'s {sum(counts)} lines: its windows are not its parts'; "
                         "featurise it with build_train_features")
    if len(parts) == 1 and Path(parts[0]).resolve() == Path(path).resolve():
        # Its own one part: the part's entry is the file's, and joining it again would only copy it over itself.
        return build_train_features(str(path), tokenizer, window, sampling, cache_dir, num_proc=num_proc,
                                    on_error=on_error, limit=limit, log=log, seed=seed, verify=verify)
    source = windows_source(path, tokenizer, window, sampling, limit, on_error, seed)
    if (source["size"], source["mtime"]) != state:
        raise RuntimeError(f"{path} changed while its lines were compared with its parts'")
    key = source_key(source)
    final = Path(cache_dir) / f"{Path(path).name}-{key}"  # the name build_train_features gives the entry
    found = existing_entry(final, key, verify, log)
    if found:
        return found
    summaries = []
    for part, part_state in zip(parts, part_states):
        _, summary = build_train_features(str(part), tokenizer, window, sampling, cache_dir, num_proc=num_proc,
                                          on_error=on_error, limit=None, log=log, seed=seed, verify=verify)
        if (summary["source"]["size"], summary["source"]["mtime"]) != part_state:
            raise RuntimeError(f"{part} changed while {path} was assembled from it")
        summaries.append(summary)
    log(f"features: assembling {path} from {len(parts)} part(s), featurising nothing -> {final}")
    whole = whole_summary(str(path), [str(p) for p in parts], summaries, counts)
    folders = [s["dataset_dir"] for s in summaries]

    def join(tmp: Path) -> dict:
        join_windows(folders, tmp / "windows")
        return finish_entry(tmp, whole, key, source)
    return publish_entry(final, join, log)


def _file_state(path) -> tuple:
    """(size, modification time) of a file, as its cache key records them."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file")
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _lines(path) -> Iterator[bytes]:
    """Each line of `path` as the reader sees it, as bytes: gunzipped (.gz), without line 1's UTF-8 BOM
    (`nq.iter_lines` drops it) and without its newline."""
    with open_binary(path) as f:
        for number in itertools.count(1):
            try:
                raw = f.readline()
            except (EOFError, gzip.BadGzipFile, zlib.error) as e:
                raise NQFormatError(path, number, "<gzip>", f"compressed stream is damaged or truncated ({e})") from None
            if not raw:
                return
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            yield raw[:-1] if raw.endswith(b"\n") else raw


def check_concatenation(path: str, parts: list) -> list:
    """Each part's line count, once `path` is proven to hold their lines, in order (streamed: memory holds
    a line at a time and the ids); a NotConcatenationError naming the first line that differs otherwise,
    an NQFormatError for an example id that comes twice (as featurising the whole would raise)."""
    whole, ids, counts, number = _lines(path), DocumentIds(path), [], 0
    for part in parts:
        count = 0
        for count, line in enumerate(_lines(part), 1):
            have, number = next(whole, None), number + 1
            if have != line:
                why = "the file ends before it" if have is None else "its bytes differ"
                raise NotConcatenationError(f"{path} is not the concatenation of its parts: its line {number} "
                                            f"should be line {count} of part {part} ({why})")
            ids.add(number, line)
        counts.append(count)
    if next(whole, None) is not None:
        raise NotConcatenationError(f"{path} is not the concatenation of its parts: its line {number + 1} comes "
                                    f"after the last line of the last part, {parts[-1]}")
    return counts


class DocumentIds:
    """The example ids of a file's documents, line by line, and the first id that comes twice.

    An id is read from the raw text (`recover_example_id`: a regular expression, not a JSON parse of
    the whole page), or by parsing the line where that finds none; a repeat is confirmed by parsing
    both lines, so a line featurising skips (`on_error: skip`) is no document here either."""

    def __init__(self, path: str):
        self.path, self.first_line = path, {}

    def add(self, number: int, line: bytes) -> None:
        found = self._id(number, line)
        if found is None:
            return
        first = self.first_line.get(found)
        if first is None:
            self.first_line[found] = number
        elif self._parsed_id(number, line) == found:  # this line is a document of that id
            if self._parsed_id(first, self._line(first)) == found:
                raise NQFormatError(self.path, number, "example_id",
                                    f"duplicate example_id {found} (first on line {first})")
            self.first_line[found] = number  # the first was no document (a line featurising skips)

    def _id(self, number: int, line: bytes) -> Optional[str]:
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            return None  # no document: refused, or skipped with on_error skip
        if not text.strip():
            return None  # a blank line: the reader passes over it
        return recover_example_id(text) or self._parsed_id(number, line)

    def _parsed_id(self, number: int, line: bytes) -> Optional[str]:
        try:
            return parse_example(line.decode("utf-8"), self.path, number, require_annotations=True).example_id
        except (NQFormatError, UnicodeDecodeError):
            return None

    def _line(self, number: int) -> bytes:
        return next(itertools.islice(_lines(self.path), number - 1, None))


def whole_summary(path: str, parts: list, summaries: list, counts: list) -> dict:
    """The summary featurising `path` in one process records, from its parts': counts added up, the
    first misses and skipped lines kept in line order (a skipped line renamed to its line in `path`).
    Those two lists are examples, not counts: a build with `num_proc` > 1 keeps each worker's first."""
    out = {k: sum(s[k] for s in summaries) for k in Summary.KEYS}
    out["windows_per_type"] = {t: sum(s["windows_per_type"].get(t, 0) for s in summaries) for t in ANSWER_TYPES}
    out["misses"] = [m for s in summaries for m in s["misses"]][:MISSES_KEPT]
    for part, summary, count in zip(parts, summaries, counts):
        if summary["lines"] != count:
            raise RuntimeError(f"{part}: its entry counts {summary['lines']} lines, the file has {count} (changed?)")
    skipped = Counter()
    for s in summaries:
        skipped.update(s["skipped_by_reason"])
    starts = np.cumsum([0, *counts[:-1]])
    errors = [_renamed(e, part, path, int(start)) for part, s, start in zip(parts, summaries, starts)
              for e in s["first_errors"]]
    out.update(path=path, lines=sum(counts), examples=sum(s["examples"] for s in summaries),
               skipped=sum(skipped.values()), skipped_by_reason=dict(skipped), first_errors=errors[:FIRST_ERRORS_KEPT])
    return out


def _renamed(error: str, part: str, path: str, start: int) -> str:
    """A part's skipped-line message (`NQFormatError`: "PART:LINE: ...") as the whole file's."""
    head, sep, rest = error.partition(": ")
    if not sep or not head.startswith(f"{part}:") or not head[len(part) + 1:].isdigit():
        return error
    return f"{path}:{int(head[len(part) + 1:]) + start}: {rest}"


def join_windows(folders: list, directory: Path) -> int:
    """`directory`'s column files: those of the `windows/` folders `folders`, one after the other (no
    window decoded; memory holds the offsets); the number of windows."""
    directory.mkdir(parents=True)
    entries = [WindowDataset(folder) for folder in folders]
    num_windows = sum(len(e) for e in entries)
    files = {}
    for name, (dtype, ragged) in COLUMNS.items():  # the order merge_shards writes meta.json's records in
        if ragged:
            starts = np.cumsum([0, *(int(e.offsets[name][-1]) for e in entries)])
            offsets = np.concatenate([np.zeros(1, np.int64)] + [np.asarray(e.offsets[name][1:], np.int64) + start
                                                                for e, start in zip(entries, starts)])
            files[f"{name}.offsets.npy"] = save_npy(directory / f"{name}.offsets.npy", offsets)
        spans = [(e.values[name], 0, len(e.values[name])) for e in entries]
        files[f"{name}.npy"] = write_npy(directory / f"{name}.npy", dtype, sum(b for _, _, b in spans), spans)
    write_meta(directory, num_windows, files)
    return num_windows

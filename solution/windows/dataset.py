"""Training windows as a cached `datasets` Arrow dataset, and the dummy source.

The cache key covers everything that changes the windows: the input file
(path, size, modification time), the tokenizer's vocabulary, the window
settings, the negative down-sampling rate and seed, the example limit and
the code version. A second run with the same key loads the Arrow files
instead of featurising again.

With `num_proc` > 1 each worker takes every num_proc-th line (raw lines are
cheap to skip; only a worker's own lines are parsed), and duplicate
example ids are checked across workers once all are done.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from solution.common.cli import progress
from solution.common.fsutil import atomic_write_text, publish_dir
from solution.data.nq import (
    NQFormatError,
    ReadStats,
    candidate_array,
    containing_candidate,
    is_html_token,
    label_annotation,
    read_examples,
)
from solution.data.words import content_words, question_word_share
from solution.windows.featurizer import (
    ANSWER_TYPES,
    TYPE_ID,
    Featurizer,
    WindowConfig,
    has_answer,
    keep_window,
    label_long_answer,
    top_window_indices,
)
from solution.windows.sampling import HardNegativeWeights, NegativeSampling

FEATURES_VERSION = 4  # bump when windows, labels or the cache layout change (4: NQ's single-space numbering)


def _features():
    import datasets

    return datasets.Features({
        "example_id": datasets.Value("string"),
        "window_index": datasets.Value("int32"),
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "token_type_ids": datasets.Sequence(datasets.Value("int8")),
        "nq_token_index": datasets.Sequence(datasets.Value("int32")),
        "start_positions": datasets.Value("int32"),
        "end_positions": datasets.Value("int32"),
        "answer_type": datasets.Value("int8"),
    })


def tokenizer_fingerprint(tokenizer) -> str:
    vocab = json.dumps(sorted(tokenizer.get_vocab().items()))
    extra = json.dumps([type(tokenizer).__name__, getattr(tokenizer, "do_lower_case", None)])
    return hashlib.sha256((vocab + extra).encode()).hexdigest()[:16]


def cache_key(path: str, tokenizer, window: WindowConfig, sampling: NegativeSampling,
              limit: Optional[int], on_error: str, seed: int = 0) -> str:
    st = os.stat(path)
    blob = json.dumps({"path": os.path.abspath(path), "size": st.st_size, "mtime": st.st_mtime_ns,
                       "tokenizer": tokenizer_fingerprint(tokenizer), "window": asdict(window),
                       "sampling": sampling.key(seed), "limit": limit,
                       "on_error": on_error, "version": FEATURES_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


DIGEST_COLUMNS = ("example_id", "window_index", "input_ids", "token_type_ids", "start_positions", "end_positions",
                  "answer_type")


def windows_digest(ds, batch_size: int = 8192) -> str:
    """sha256 (16 hex digits) of the training windows in order: their ids, tokens and labels. What a
    checkpoint records of its data, since another file can give as many windows (a resume compares it)."""
    h = hashlib.sha256()
    for table in ds.with_format("arrow").iter(batch_size=batch_size):
        for name in DIGEST_COLUMNS:
            column = table.column(name).combine_chunks()
            if name == "example_id":
                h.update("\n".join(column.to_pylist()).encode() + b"\n")
                continue
            values = column.flatten() if hasattr(column, "flatten") and name in ("input_ids", "token_type_ids") \
                else column
            h.update(np.asarray(values.to_numpy(zero_copy_only=False)).tobytes())
            if values is not column:  # where each window's tokens end
                h.update(np.asarray(column.offsets.to_numpy()).tobytes())
    return h.hexdigest()[:16]


def recovered_answers(example, windows) -> tuple:
    """(short span, long span) that the window labels point back to, as NQ (start, end); None if none.

    Short: the labelled positions mapped through `nq_token_index`. Long: the
    candidate that post-processing would pick from those labels (the
    container of a short span; for LONG/YES/NO labels the first candidate
    whose text begins and ends at the labelled tokens).
    """
    cands = candidate_array(example)
    short = long = None
    for w in windows:
        if w.answer_type == TYPE_ID["UNKNOWN"]:
            continue
        s, e = int(w.nq_token_index[w.start_position]), int(w.nq_token_index[w.end_position])
        if w.answer_type == TYPE_ID["SHORT"]:
            short = (s, e + 1)
            idx = containing_candidate(cands, s, e + 1)
        else:
            match = np.nonzero((cands[:, 3] == s) & (cands[:, 4] == e))[0] if len(cands) else []
            if not len(match) and len(cands) and e == int(w.nq_token_index.max()):
                # A label cut at the window's end (`long_overrun_labels`): the candidate starting there.
                match = np.nonzero((cands[:, 3] == s) & (cands[:, 4] > e))[0]
            idx = int(match[0]) if len(match) else -1
        if idx >= 0:
            long = (int(cands[idx, 0]), int(cands[idx, 1]))
    return short, long


# Words compared at each end of a long answer: a numbering shift shows at its edges, and a whole
# long answer (tables run to thousands of words) would cost a tokenizer pass of its own.
TEXT_EDGE_WORDS = 16


def _text_mismatch(featurizer: Featurizer, example, span, labelled: list) -> Optional[str]:
    """Why the labelled word pieces are not the gold text (None when they are).

    The gold words come from NQ's own numbering of document_text, spelled out here rather than
    read through `Example.tokens` or the windows' `nq_token_index`, so that a numbering error
    there cannot agree with itself. A long span is compared on its first and last
    TEXT_EDGE_WORDS words."""
    if not labelled:
        return None
    toks = example.document_text.split(" ")
    text_at = [i for i in range(span.start_token, min(span.end_token, len(toks))) if not is_html_token(toks[i])]
    words = [toks[i] for i in text_at]
    whole = len(words) <= 2 * TEXT_EDGE_WORDS
    parts = [words] if whole else [words[:TEXT_EDGE_WORDS], words[-TEXT_EDGE_WORDS:]]
    enc = featurizer.tokenizer(parts, is_split_into_words=True, add_special_tokens=False,
                               return_attention_mask=False, return_token_type_ids=False)
    head, tail = (np.asarray(ids, dtype=np.int32) for ids in (enc["input_ids"][0], enc["input_ids"][-1]))
    for w in labelled:
        ids = w.input_ids[w.start_position:w.end_position + 1]
        have = ids[~np.isin(ids, featurizer.structure_ids)]  # structure tokens are not answer text
        if text_at and int(w.nq_token_index[w.end_position]) < text_at[-1]:
            ok = np.array_equal(have[:len(head)], head[:len(have)])  # cut at the window's end: a prefix
        elif whole:
            ok = np.array_equal(have, head)
        else:
            ok = (np.array_equal(have[:len(head)], head) and len(have) >= len(tail)
                  and np.array_equal(have[len(have) - len(tail):], tail))
        if not ok:
            decode = featurizer.tokenizer.decode
            return f"-> labels hold {decode(have[:40])!r}, the gold text is {decode(head[:40])!r}"
    return None


class _Summary:
    """Counts for the `prepare` report, added up across workers.

    A gold answer counts as recovered when the labels map back to its NQ span AND the labelled
    word pieces are the tokenised gold text (both checks, so a token-numbering error that shifts
    gold and labels alike is still seen). With `nested_to_top_level`, the long answer the labels
    aim at is the nested gold answer's top-level container."""

    KEYS = ("documents", "windows", "windows_kept", "answerable_short", "recovered_short",
            "answerable_long", "recovered_long", "unanswerable_documents",
            "negatives_kept_answerable", "negatives_kept_unanswerable")

    def __init__(self):
        self.counts = Counter({k: 0 for k in self.KEYS})
        self.by_type = Counter()
        self.misses: list = []

    def add(self, example, windows, kept, answerable: bool, featurizer: Featurizer):
        c = self.counts
        c["documents"] += 1
        c["windows"] += len(windows)
        c["windows_kept"] += len(kept)
        self.by_type.update(ANSWER_TYPES[w.answer_type] for w in kept)
        negatives = sum(w.answer_type == TYPE_ID["UNKNOWN"] for w in kept)
        if answerable:
            c["negatives_kept_answerable"] += negatives
        else:
            c["unanswerable_documents"] += 1
            c["negatives_kept_unanswerable"] += negatives
        ann = label_annotation(example)
        if ann is None:
            return
        short, long = recovered_answers(example, windows)
        labelled = [w for w in windows if w.answer_type != TYPE_ID["UNKNOWN"]]
        if ann.answer_type == "SHORT":
            self._check("short", example, ann.short_answers[0], short, labelled, featurizer)
        gold_long = label_long_answer(example, featurizer.config.nested_to_top_level)
        if gold_long is not None:
            # A SHORT label's long answer is the candidate containing it: no labelled text of its own.
            self._check("long", example, gold_long, long, [] if ann.answer_type == "SHORT" else labelled, featurizer)

    def _check(self, kind: str, example, gold, got, labelled: list, featurizer: Featurizer) -> None:
        self.counts[f"answerable_{kind}"] += 1
        if got != (gold.start_token, gold.end_token):
            problem = f"-> {got}"
        else:
            problem = _text_mismatch(featurizer, example, gold, labelled)
        if problem is None:
            self.counts[f"recovered_{kind}"] += 1
        elif len(self.misses) < 20:
            self.misses.append(f"{example.example_id}: {kind} {gold.start_token}:{gold.end_token} {problem}")

    def to_dict(self) -> dict:
        return {**dict(self.counts), "windows_per_type": {t: self.by_type.get(t, 0) for t in ANSWER_TYPES},
                "misses": self.misses}


PROGRESS_SECONDS = 10.0


def window_rates(sampling: NegativeSampling, example, windows: list, answerable: bool) -> list:
    """Each window's keep rate if it holds no answer (windows with an answer are always kept)."""
    if sampling.question_word_keep_rate is None:
        rates = [sampling.rate(answerable)] * len(windows)
    else:
        words = content_words(example.question_text)
        rates = [sampling.window_rate(answerable, question_word_share(words, example.tokens, w.nq_token_index))
                 for w in windows]
    if sampling.top_window_keep:
        for i in top_window_indices(example, windows, sampling.top_window_keep):
            rates[i] = 1.0
    return rates


def _generate(shards, path, tokenizer_dir, window, sampling, seed, on_error, limit, num_shards, side_dir):
    """datasets.Dataset.from_generator worker: windows of this worker's lines."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, use_fast=True)
    featurizer = Featurizer(tokenizer, WindowConfig(**window))
    sampling = NegativeSampling(**sampling)
    hard = (HardNegativeWeights(sampling.hard_negatives_file, sampling.hard_negative_fraction)
            if sampling.hard_negatives_file else None)
    for shard in shards:
        stats, ids, summary = ReadStats(path=path), [], _Summary()
        # `limit` counts lines, so every worker stops at the same place.
        examples = read_examples(path, on_error, stats, require_annotations=True, shard=(shard, num_shards),
                                 max_lines=limit, check_duplicates=False)
        t0 = last = time.perf_counter()
        # One process: a bar (it runs in the main process). Several: each worker prints its own lines.
        bar = progress(desc="features", unit=" documents", disable=num_shards > 1)
        try:
            for ex, windows in featurizer.featurize(examples, with_labels=True):
                ids.append((ex.example_id, ex.line))
                bar.update()
                now = time.perf_counter()
                if num_shards > 1 and now - last >= PROGRESS_SECONDS:  # a long file is never silent
                    last = now
                    print(f"features: worker {shard + 1}/{num_shards}: {len(ids)} documents, line {ex.line}, "
                          f"{len(ids) / (now - t0):.0f} documents/s", file=sys.stderr, flush=True)
                answerable = has_answer(ex)
                rates = window_rates(sampling, ex, windows, answerable)
                if hard is None:
                    kept = [w for w, rate in zip(windows, rates) if keep_window(w, rate, seed)]
                else:
                    weights = hard.weights(ex.example_id, answerable, len(windows))
                    if weights is None:
                        raise NQFormatError(path, ex.line, "example_id",
                                            hard.mismatch(ex.example_id, answerable, len(windows)))
                    kept = [w for w, rate, wt in zip(windows, rates, weights) if keep_window(w, rate, seed, wt)]
                kept = [w for w in kept for _ in range(sampling.copies(ANSWER_TYPES[w.answer_type]))]
                summary.add(ex, windows, kept, answerable, featurizer)
                for w in kept:
                    yield w.as_dict()
        except NQFormatError as err:
            # A worker's exception loses its cause on the way back to the main process;
            # leave it where the main process looks, so the user sees file, line and field.
            Path(side_dir, f"error-{shard}.json").write_text(
                json.dumps({"path": err.path, "line": err.line, "field": err.field, "reason": err.reason}))
            raise
        finally:
            bar.close()
        side = {"stats": {**stats.as_dict(), "first_errors": stats.first_errors},
                "summary": summary.to_dict(), "ids": ids}
        Path(side_dir, f"shard-{shard}.json").write_text(json.dumps(side))


def build_train_features(path: str, tokenizer, window: WindowConfig, sampling: Optional[NegativeSampling] = None,
                         cache_dir: str = "cache/features", num_proc: int = 1,
                         on_error: str = "raise", limit: Optional[int] = None, log=print, seed: int = 0):
    """(datasets.Dataset of labelled windows, summary dict), from the cache when possible.

    `seed` draws which no-answer windows the sampling rates keep."""
    import datasets

    datasets.disable_progress_bars()  # our own log lines say what is happening
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file")
    sampling = sampling or NegativeSampling()
    key = cache_key(path, tokenizer, window, sampling, limit, on_error, seed)
    final = Path(cache_dir) / f"{Path(path).name}-{key}"
    if (final / "summary.json").is_file():
        return _reuse_cache(final, key, log)

    if sampling.hard_negatives_file:
        # Read here first, so a bad file is an error naming it rather than a worker's failure inside
        # `datasets` (a cache hit above means this same file, by size and mtime, was read already).
        HardNegativeWeights(sampling.hard_negatives_file, sampling.hard_negative_fraction).check_window(window)
    tmp = Path(cache_dir) / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "side").mkdir(parents=True)
    tok_dir = tmp / "tokenizer"
    tokenizer.save_pretrained(tok_dir)
    log(f"features: featurising {path} with {num_proc} process(es) -> {final}")
    if num_proc > 1:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the workers already use the cores
    gen_kwargs = {"shards": list(range(num_proc)), "path": path, "tokenizer_dir": str(tok_dir),
                  "window": asdict(window), "sampling": asdict(sampling), "seed": seed,
                  "on_error": on_error, "limit": limit, "num_shards": num_proc, "side_dir": str(tmp / "side")}
    ds = _generate_windows(tmp, gen_kwargs, num_proc)
    summary = _merge_sides(tmp / "side", num_proc, path)
    if summary["examples"] == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise NQFormatError(path, summary["lines"], "<file>", "the file holds no usable examples")
    summary["windows_digest"] = windows_digest(ds)
    _keep_arrow_files(ds, tmp / "arrow", key)
    del ds
    (tmp / "summary.json").write_text(json.dumps(summary, indent=2))
    shutil.rmtree(tmp / "hf", ignore_errors=True)
    shutil.rmtree(tok_dir, ignore_errors=True)
    if not publish_dir(tmp, final):  # another process finished first: theirs is kept (same key, same windows)
        log(f"features: {final} was published by another process meanwhile; using it")
    return _load_arrow(final / "arrow"), {**summary, "dataset_dir": str(final / "arrow")}


def _reuse_cache(final: Path, key: str, log) -> tuple:
    """A published cache entry: its windows and summary."""
    summary = json.loads((final / "summary.json").read_text())
    log(f"features: reusing cache {final} ({summary['windows_kept']} windows)")
    ds = _load_arrow(final / "arrow")
    if not (final / "arrow" / "state.json").is_file():  # an entry written before the metadata files were
        write_dataset_metadata(final / "arrow", ds, json.loads((final / "arrow" / "files.json").read_text()), key)
    if "windows_digest" not in summary:  # an entry written before summaries recorded it
        summary["windows_digest"] = windows_digest(ds)
    return ds, {**summary, "dataset_dir": str(final / "arrow")}


def _interruption(error: BaseException) -> Optional[BaseException]:
    """The stop request (a BaseException that is no Exception: the trainer's signal stop, KeyboardInterrupt)
    that `error` is or was raised while handling; None when there is none."""
    seen = set()
    while error is not None and id(error) not in seen:
        if not isinstance(error, Exception):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _generate_windows(tmp: Path, gen_kwargs: dict, num_proc: int):
    """Run `_generate` through `datasets` into tmp/hf; a worker's failure becomes its own error, and a stop
    request stays itself."""
    import datasets

    try:
        return datasets.Dataset.from_generator(
            _generate, features=_features(), cache_dir=str(tmp / "hf"), num_proc=num_proc if num_proc > 1 else None,
            gen_kwargs=gen_kwargs)
    except BaseException as e:
        stop = _interruption(e)
        if stop is not None:  # with workers, their pool's clean-up may fail on the way out and hide the stop
            shutil.rmtree(tmp, ignore_errors=True)
            raise stop from None
        if not isinstance(e, datasets.exceptions.DatasetGenerationError):
            raise
        # The worker's own error (an NQFormatError naming file, line, field) is the one to show.
        errors = sorted((json.loads(f.read_text()) for f in (tmp / "side").glob("error-*.json")),
                        key=lambda err: err["line"])
        cause = e.__cause__ or e.__context__
        shutil.rmtree(tmp, ignore_errors=True)
        if errors:
            raise NQFormatError(errors[0]["path"], errors[0]["line"], errors[0]["field"], errors[0]["reason"]) from None
        if isinstance(cause, (NQFormatError, FileNotFoundError)):
            raise cause from None
        raise


def _keep_arrow_files(ds, arrow_dir: Path, key: str) -> None:
    """Keep the Arrow files the generator wrote (moved, not copied): save_to_disk would read the whole
    dataset back through a memory map, and peak memory would grow with the file (measured 1.45x
    for 10x the documents)."""
    arrow_dir.mkdir()
    names = []
    for i, cache_file in enumerate(sorted({c["filename"] for c in ds.cache_files})):
        names.append(f"windows-{i:05d}.arrow")
        os.replace(cache_file, arrow_dir / names[-1])
    (arrow_dir / "files.json").write_text(json.dumps(names))
    write_dataset_metadata(arrow_dir, ds, names, key)


def write_dataset_metadata(directory: Path, ds, names: list, fingerprint: str) -> None:
    """`state.json` and `dataset_info.json` beside the Arrow files, as `Dataset.save_to_disk` writes them,
    so that `datasets.load_from_disk(directory)` opens the cache (the Arrow files stay where they are)."""
    from datasets.utils.py_utils import asdict

    state = {"_data_files": [{"filename": name} for name in names], "_fingerprint": fingerprint,
             "_format_columns": None, "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
             "_split": str(ds.split) if ds.split is not None else None}
    info = asdict(ds.info)
    # Through temporary names: a reader of a published cache entry never sees half a file.
    # save_to_disk sorts only the first level of the info: nested feature order is the column order.
    atomic_write_text(directory / "dataset_info.json", json.dumps({k: info[k] for k in sorted(info)}, indent=2))
    atomic_write_text(directory / "state.json", json.dumps(state, indent=2, sort_keys=True))


def _load_arrow(directory: Path):
    """The cached windows, memory-mapped from their Arrow files (nothing is read into memory)."""
    import datasets

    parts = [datasets.Dataset.from_file(str(directory / name))
             for name in json.loads((directory / "files.json").read_text())]
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def _merge_sides(side_dir: Path, num_shards: int, path: str) -> dict:
    merged = _Summary()
    skipped = Counter()
    first_errors: list = []
    examples = 0
    lines = 0
    seen: dict = {}
    for shard in range(num_shards):
        side = json.loads((side_dir / f"shard-{shard}.json").read_text())
        lines = max(lines, side["stats"]["lines"])
        examples += side["stats"]["examples"]
        skipped.update(side["stats"]["skipped_by_reason"])
        first_errors += side["stats"]["first_errors"]
        for k in _Summary.KEYS:
            merged.counts[k] += side["summary"][k]
        merged.by_type.update(side["summary"]["windows_per_type"])
        merged.misses += side["summary"]["misses"]
        for example_id, line_no in side["ids"]:
            if example_id in seen:
                raise NQFormatError(path, line_no, "example_id",
                                    f"duplicate example_id {example_id} (first on line {seen[example_id]})")
            seen[example_id] = line_no
    out = merged.to_dict()
    out.update(path=path, lines=lines, examples=examples, skipped=sum(skipped.values()),
               skipped_by_reason=dict(skipped), first_errors=first_errors[:5])
    return out


class WindowDataset(torch.utils.data.Dataset):
    """Arrow windows as dicts of numpy arrays, for `inference.collate`."""

    def __init__(self, ds):
        self.ds = ds.with_format("numpy")

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        return self.ds[int(i)]


class DummyWindows(torch.utils.data.Dataset):
    """Random full-length windows made on the fly: no files, no tokenizer (isolates compute and communication)."""

    def __init__(self, num_windows: int, seq_len: int, vocab_size: int, seed: int = 0,
                 cls_token_id: int = 101, sep_token_id: int = 102):
        self.num_windows, self.seq_len, self.vocab_size, self.seed = num_windows, seq_len, vocab_size, seed
        self.cls_token_id, self.sep_token_id = cls_token_id, sep_token_id

    def __len__(self):
        return self.num_windows

    def __getitem__(self, i):
        rng = np.random.default_rng([self.seed, int(i)])
        ids = rng.integers(0, self.vocab_size, self.seq_len, dtype=np.int32)
        ids[0], ids[-1] = self.cls_token_id, self.sep_token_id
        answer_type = int(rng.integers(0, len(ANSWER_TYPES)))
        start = int(rng.integers(1, self.seq_len - 1)) if answer_type else 0
        end = min(start + int(rng.integers(0, 5)), self.seq_len - 2) if answer_type else 0
        types = np.zeros(self.seq_len, dtype=np.int8)
        types[self.seq_len // 8:] = 1
        return {"input_ids": ids, "token_type_ids": types, "start_positions": start,
                "end_positions": end, "answer_type": answer_type}

"""Training windows in a feature cache of numpy column files, and the dummy source.

The cache key covers everything that changes the windows: the input file
(path, size, modification time), the tokenizer (its normaliser: lower case,
accents, Chinese characters; its pre-tokeniser, vocabulary and added
tokens), the window settings, the negative down-sampling rate and seed, the
example limit and the code version. A second run with the same key
memory-maps the column files (`solution/windows/columns.py`) instead of
featurising again, once the entry is proven (`proven_entry`): each file's
size and row count every time, its sha256 with `verify`; an entry that fails
is built again, one line saying which file and what differed.

With `num_proc` > 1, num_proc forked worker processes each take every
num_proc-th line (raw lines are cheap to skip; only a worker's own lines are
parsed) and write their own shard; the shards are joined in the file's line
order (so the windows, their order and their digest are the same whatever
num_proc is, and it stays out of the key), and duplicate example ids are
checked across workers once all are done. An entry is built in a temporary
folder and renamed into place complete: a failed or interrupted build leaves
nothing behind, nor does a full disk (one line naming the entry). A build
killed outright (SIGKILL, the out-of-memory killer) takes its workers with
it (they die with their parent) and leaves its folder, named after its host
and pid: the next run on this machine removes it once that pid is gone, and
names one it cannot check.
"""

from __future__ import annotations

import errno
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import socket
import sys
import time
import traceback
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from solution.common.cli import progress
from solution.common.fsutil import (
    DiskFullError,
    atomic_write_text,
    check_writable,
    file_digest,
    out_of_space,
    publish_dir,
    removed_if_disk_full,
    replace_dir,
)
from solution.common.jsonio import read_json_object
from solution.common.processes import die_with_parent, process_running
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
from solution.windows.columns import ShardWriter, WindowDataset, merge_shards
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
from solution.windows.first_pass import word_method
from solution.windows.sampling import HardNegativeWeights, NegativeSampling, WindowRankings

FEATURES_VERSION = 6  # bump when windows, labels or the cache layout change (6: files proven by size, rows, sha256)


# The parts of a fast tokenizer's serialisation that decide its word pieces: the normaliser (lower case,
# strip_accents, tokenize_chinese_chars as handle_chinese_chars, clean_text), the pre-tokeniser, the
# vocabulary and the added tokens (structure tokens among them). Its truncation and padding are left out:
# they are whatever the last call set.
TOKENIZER_PARTS = ("normalizer", "pre_tokenizer", "model", "added_tokens")


def tokenizer_fingerprint(tokenizer) -> str:
    """16 hex digits that change with every tokenizer setting that changes the windows."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        serialised = json.loads(backend.to_str())
        parts = {name: serialised.get(name) for name in TOKENIZER_PARTS}
    else:  # a slow tokenizer (the Featurizer refuses it; the key is made before)
        parts = {"vocab": sorted(tokenizer.get_vocab().items()), "init": repr(sorted(tokenizer.init_kwargs.items()))}
    parts["class"] = type(tokenizer).__name__
    parts["special"] = [tokenizer.cls_token_id, tokenizer.sep_token_id]  # what each window starts and ends with
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def windows_source(path: str, tokenizer, window: WindowConfig, sampling: NegativeSampling,
                   limit: Optional[int], on_error: str, seed: int = 0) -> dict:
    """What the windows are made from: the file (path, size, modification time), the tokenizer's
    fingerprint, the settings and the code version. A cache entry's summary records it, and a checkpoint
    too, so a resume refused on other windows can say what made them other."""
    st = os.stat(path)
    return {"path": os.path.abspath(path), "size": st.st_size, "mtime": st.st_mtime_ns,
            "tokenizer": tokenizer_fingerprint(tokenizer), "window": window_key(window, sampling),
            "sampling": sampling.key(seed), "limit": limit, "on_error": on_error, "version": FEATURES_VERSION}


def window_key(window: WindowConfig, sampling: NegativeSampling) -> dict:
    """The window settings as the features depend on them. The first pass decides only which windows
    inference runs, except through `top_window_keep`, whose ranking is its word part (or the first pass
    itself, from `top_window_ranking_file`): the ranking is named when it is not the first one, so a cache
    made before the setting existed keeps its key."""
    out = asdict(window)
    del out["first_pass"], out["first_pass_model"], out["first_pass_keep_first"]
    ranking = top_window_ranking(window, sampling)
    if sampling.top_window_keep and ranking != "words":
        out["top_window_ranking"] = ranking
    if sampling.top_window_keep and window.first_pass_keep_first:
        out["top_window_keep_first"] = window.first_pass_keep_first
    return out


def top_window_ranking(window: WindowConfig, sampling: NegativeSampling) -> str:
    """The ranking `top_window_keep` keeps by: the first pass itself from a rankings file, else its word part."""
    return window.first_pass if sampling.top_window_ranking_file else word_method(window.first_pass)


def rankings_made_with(tokenizer, window: WindowConfig) -> dict:
    """What a rankings file must have been ranked with to serve training's windows (`WindowRankings.check`):
    its windows are cut by these settings and this tokenizer, and ranked by the first pass they name."""
    return {"window": asdict(window), "tokenizer": tokenizer_fingerprint(tokenizer)}


def cache_key(path: str, tokenizer, window: WindowConfig, sampling: NegativeSampling,
              limit: Optional[int], on_error: str, seed: int = 0) -> str:
    return source_key(windows_source(path, tokenizer, window, sampling, limit, on_error, seed))


def source_key(source: dict) -> str:
    """The cache key of a `windows_source`: 16 hex digits of its sha256."""
    return hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()[:16]


DIGEST_COLUMNS = ("example_id", "window_index", "input_ids", "token_type_ids", "start_positions", "end_positions",
                  "answer_type")


def windows_digest(ds: WindowDataset, batch_size: int = 8192) -> str:
    """sha256 (16 hex digits) of the training windows in order: their ids, tokens and labels. What a
    checkpoint records of its data, since another file can give as many windows (a resume compares it).

    Hashed in batches of `batch_size` windows, each column's bytes in turn and, for the pieces, where
    each window's end (int32, counted from the batch's start): the bytes the Arrow cache of
    FEATURES_VERSION 4 hashed, so the same windows keep the digest they had there."""
    h = hashlib.sha256()
    for start in range(0, len(ds), batch_size):
        stop = min(start + batch_size, len(ds))
        for name in DIGEST_COLUMNS:
            values = ds.values[name]
            if name == "example_id":
                h.update("\n".join(ds.example_ids(start, stop)).encode() + b"\n")
            elif name in ds.offsets:
                offsets = np.asarray(ds.offsets[name][start:stop + 1])
                h.update(np.asarray(values[offsets[0]:offsets[-1]]).tobytes())
                h.update((offsets - offsets[0]).astype(np.int32).tobytes())
            else:
                h.update(np.asarray(values[start:stop]).tobytes())
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


class Summary:
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


def window_rates(sampling: NegativeSampling, example, windows: list, answerable: bool,
                 first_pass: str = "words", keep_first: int = 0, top: Optional[list] = None) -> list:
    """Each window's keep rate if it holds no answer (windows with an answer are always kept). `first_pass`
    and `keep_first` are the window settings: `top_window_keep` ranks by the first pass's word part
    (`first_pass.word_method`), the first `keep_first` windows kept as inference keeps them; `top`, where
    given, are the windows it keeps instead (a rankings file's, `WindowRankings.top`)."""
    if sampling.question_word_keep_rate is None:
        rates = [sampling.rate(answerable)] * len(windows)
    else:
        words = content_words(example.question_text)
        rates = [sampling.window_rate(answerable, question_word_share(words, example.tokens, w.nq_token_index))
                 for w in windows]
    if sampling.top_window_keep:
        if top is None:
            top = top_window_indices(example, windows, sampling.top_window_keep, word_method(first_pass),
                                     keep_first=keep_first)
        for i in top:
            rates[i] = 1.0
    return rates


def _shard_windows(shard: int, job: dict, summary: "Summary", ids: list, stats: ReadStats):
    """The kept windows of this shard's lines (every num_shards-th), as dicts; counts go to `summary`,
    `ids` and `stats`."""
    path, num_shards = job["path"], job["num_shards"]
    featurizer = Featurizer(job["tokenizer"], job["window"])
    # `limit` counts lines, so every worker stops at the same place.
    examples = read_examples(path, job["on_error"], stats, require_annotations=True, shard=(shard, num_shards),
                             max_lines=job["limit"], check_duplicates=False)
    t0 = last = time.perf_counter()
    # One process: a bar. Several: each worker prints its own lines.
    bar = progress(desc="features", unit=" documents", disable=num_shards > 1)
    try:
        for ex, windows in featurizer.featurize(examples, with_labels=True):
            bar.update()
            now = time.perf_counter()
            if num_shards > 1 and now - last >= PROGRESS_SECONDS:  # a long file is never silent
                last = now
                print(f"features: worker {shard + 1}/{num_shards}: {len(ids) + 1} documents, line {ex.line}, "
                      f"{(len(ids) + 1) / (now - t0):.0f} documents/s", file=sys.stderr, flush=True)
            answerable = has_answer(ex)
            kept = _kept_windows(ex, windows, answerable, job)
            ids.append((ex.example_id, ex.line, len(kept)))  # its line orders its windows (`_merge_sides`)
            summary.add(ex, windows, kept, answerable, featurizer)
            yield from (w.as_dict() for w in kept)
    finally:
        bar.close()


def _kept_windows(ex, windows: list, answerable: bool, job: dict) -> list:
    """The windows of one document that training keeps, each as many times as its answer type's copies."""
    sampling, seed, hard, rankings = job["sampling"], job["seed"], job["hard"], job["rankings"]
    top = rankings.top(ex.example_id, len(windows), sampling.top_window_keep) if rankings else None
    if rankings and top is None:
        raise NQFormatError(job["path"], ex.line, "example_id", rankings.mismatch(ex.example_id, len(windows)))
    rates = window_rates(sampling, ex, windows, answerable, job["window"].first_pass,
                         job["window"].first_pass_keep_first, top)
    if hard is None:
        kept = [w for w, rate in zip(windows, rates) if keep_window(w, rate, seed)]
    else:
        weights = hard.weights(ex.example_id, answerable, len(windows))
        if weights is None:
            raise NQFormatError(job["path"], ex.line, "example_id",
                                hard.mismatch(ex.example_id, answerable, len(windows)))
        kept = [w for w, rate, wt in zip(windows, rates, weights) if keep_window(w, rate, seed, wt)]
    return [w for w in kept for _ in range(sampling.copies(ANSWER_TYPES[w.answer_type]))]


def _featurize_shard(shard: int, job: dict) -> None:
    """Write shard `shard`'s windows to TMP/shard-K and its counts to TMP/side/shard-K.json."""
    stats, ids, summary = ReadStats(path=job["path"]), [], Summary()
    writer = ShardWriter(job["tmp"] / f"shard-{shard}")
    for window in _shard_windows(shard, job, summary, ids, stats):
        writer.add(window)
    writer.flush()
    side = {"stats": {**stats.as_dict(), "first_errors": stats.first_errors}, "summary": summary.to_dict(), "ids": ids}
    (job["tmp"] / "side" / f"shard-{shard}.json").write_text(json.dumps(side))


EXIT_DISK_FULL = 28  # a worker's exit code when the disk filled up (errno's ENOSPC): no file says so then


def _worker(shard: int, job: dict) -> None:
    """A forked worker: its shard, or its error left where the main process looks (a file: an exception
    does not cross the process boundary), and exit 1; a full disk, by its exit code alone."""
    die_with_parent(signal.SIGKILL, job["parent"])  # a builder killed outright leaves no worker running on
    try:
        _featurize_shard(shard, job)
    except Exception as err:
        if out_of_space(err, job["tmp"]):
            sys.exit(EXIT_DISK_FULL)
        where = ({"path": err.path, "line": err.line, "field": err.field, "reason": err.reason}
                 if isinstance(err, NQFormatError) else {"traceback": traceback.format_exc()})
        (job["tmp"] / "side" / f"error-{shard}.json").write_text(json.dumps(where))
        sys.exit(1)


def _run_workers(job: dict) -> None:
    """`num_shards` forked workers, all waited for. A stop request (the trainer's signal stop,
    KeyboardInterrupt) ends them and is raised as itself; a worker's failure is raised as its error,
    the lowest line's NQFormatError first."""
    context = multiprocessing.get_context("fork")  # the tokenizer and settings are inherited, not pickled
    job = {**job, "parent": os.getpid()}
    procs = [context.Process(target=_worker, args=(k, job), name=f"features-{k}") for k in range(job["num_shards"])]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    finally:
        for p in procs:  # only left alive when this process is being stopped
            if p.is_alive():
                p.terminate()
                p.join()
    failed = [k for k, p in enumerate(procs) if p.exitcode != 0]
    if failed:
        raise _worker_error(job["tmp"] / "side", failed, procs)


def _worker_error(side: Path, failed: list, procs: list) -> Exception:
    if any(procs[k].exitcode == EXIT_DISK_FULL for k in failed):
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(side.parent))
    errors = [json.loads(f.read_text()) for f in side.glob("error-*.json")]
    located = sorted((e for e in errors if "line" in e), key=lambda e: e["line"])
    if located:
        e = located[0]
        return NQFormatError(e["path"], e["line"], e["field"], e["reason"])
    if errors:
        return RuntimeError(f"features: a worker failed:\n{errors[0]['traceback']}")
    return RuntimeError(f"features: worker(s) {', '.join(str(k + 1) for k in failed)} ended with exit code(s) "
                        f"{', '.join(str(procs[k].exitcode) for k in failed)} and left no error")


def build_train_features(path: str, tokenizer, window: WindowConfig, sampling: Optional[NegativeSampling] = None,
                         cache_dir: str = "cache/features", num_proc: int = 1,
                         on_error: str = "raise", limit: Optional[int] = None, log=print, seed: int = 0,
                         verify: bool = False):
    """(WindowDataset of labelled windows, summary dict), from the cache when possible.

    `seed` is the run's: `sampling.draw_seed(seed)` draws which no-answer windows the sampling rates keep
    (`sampling_seed` when set), and the cache key names that seed. A cache entry is proven before it
    is used (`proven_entry`): every time, each column file's size and row count and the window count;
    with `verify`, also each file's sha256 and the windows' digest (every byte read). An entry that
    fails is built again, one line saying why."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if num_proc < 1:
        raise ValueError(f"num_proc must be at least 1, got {num_proc}")
    check_writable(cache_dir, "cache_dir", create_dir=True)  # a file in the way is one line, not a traceback
    sampling = sampling or NegativeSampling()
    source = windows_source(path, tokenizer, window, sampling, limit, on_error, seed)
    key = source_key(source)
    final = Path(cache_dir) / f"{Path(path).name}-{key}"
    clear_dead_builds(Path(cache_dir), log)
    found = existing_entry(final, key, verify, log)
    if found:
        return found
    hard, rankings = sampling_files(sampling, tokenizer, window)
    log(f"features: featurising {path} with {num_proc} process(es) -> {final}")
    job = {"path": path, "tokenizer": tokenizer, "window": window, "sampling": sampling, "seed": sampling.draw_seed(seed),
           "on_error": on_error, "limit": limit, "num_shards": num_proc, "key": key, "source": source,
           "hard": hard, "rankings": rankings}
    return publish_entry(final, lambda tmp: _build_entry(job | {"tmp": tmp}), log)


def sampling_files(sampling: NegativeSampling, tokenizer, window: WindowConfig) -> tuple:
    """(hard-negative weights, window rankings) of the sampling's files, None where not set: each read once
    and checked against training's windows here, before the work, so a bad file is an error naming it rather
    than a worker's failure; the forked workers inherit them."""
    hard = rankings = None
    if sampling.hard_negatives_file:
        hard = HardNegativeWeights(sampling.hard_negatives_file, sampling.hard_negative_fraction)
        hard.check_window(window)
    if sampling.top_window_ranking_file:
        rankings = WindowRankings(sampling.top_window_ranking_file)
        rankings.check(rankings_made_with(tokenizer, window))
    return hard, rankings


def existing_entry(final: Path, key: str, verify: bool, log) -> Optional[tuple]:
    """The published entry `final`'s (windows, summary) once proven (`proven_entry`); None where there is
    none, or where it fails its proof (one line saying why: it is then built again)."""
    if final.exists():
        try:
            return proven_entry(final, key, verify, log)
        except (ValueError, OSError) as e:  # ColumnsError, JsonError, a file gone
            log(f"features: rebuilding cache {final}: {e}")
    return None


def publish_entry(final: Path, build, log) -> tuple:
    """`build(tmp)` (its summary) in this process's builder folder beside `final`, renamed into place whole;
    (WindowDataset, summary). A failed or stopped build leaves nothing, nor does a full disk (one line
    naming the entry)."""
    tmp = builder_folder(final)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with removed_if_disk_full(tmp, lambda: DiskFullError(final)):  # one line naming the entry, not an OSError
            summary = build(tmp)
    except BaseException:  # an error, or a stop request: no half-built entry stays behind
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():  # the entry that failed its proof: replaced whole, never merged into
        replace_dir(tmp, final)
    elif not publish_dir(tmp, final):  # another process finished first: theirs is kept (same key, same windows)
        log(f"features: {final} was published by another process meanwhile; using it")
    return WindowDataset(final / "windows"), {**summary, "dataset_dir": str(final / "windows")}


def builder_folder(final: Path) -> Path:
    """Where this process builds the entry `final`: a hidden sibling named after the builder (host and
    pid), so that a later run can tell whether the builder of a folder left behind is still running."""
    return final.with_name(f".{final.name}.tmp-{socket.gethostname()}-{os.getpid()}")


BUILDER_FOLDER = re.compile(r"\..+\.tmp-(?P<host>.+)-(?P<pid>[0-9]+)")


def clear_dead_builds(cache_dir: Path, log) -> None:
    """Remove the half-built folders (`builder_folder`) of builders of this machine that are gone (killed
    outright, nothing could clean up), one line each; name, never remove, one whose builder is running
    or of another machine (its pid cannot be checked from here)."""
    if not cache_dir.is_dir():
        return
    host = socket.gethostname()
    for folder in sorted(cache_dir.iterdir()):
        found = BUILDER_FOLDER.fullmatch(folder.name)
        if not found or not folder.is_dir() or (int(found["pid"]) == os.getpid() and found["host"] == host):
            continue
        pid = int(found["pid"])
        if found["host"] != host:
            log(f"features: {folder} is a half-built entry of pid {pid} on {found['host']}: not checked from here; "
                "remove it once no build runs there")
        elif process_running(pid):
            log(f"features: {folder} is being built by pid {pid} (running): left alone")
        else:
            shutil.rmtree(folder, ignore_errors=True)
            log(f"features: removed {folder}, a half-built entry whose builder, pid {pid}, is gone")


def _build_entry(job: dict) -> dict:
    """Featurise into job['tmp']: the joined column files in windows/ and summary.json; the summary."""
    tmp, num_shards = job["tmp"], job["num_shards"]
    (tmp / "side").mkdir()
    if num_shards > 1:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the workers already use the cores
        _run_workers(job)
    else:
        _featurize_shard(0, job)  # in this process: its errors and stop requests arrive as themselves
    summary, runs = _merge_sides(tmp / "side", num_shards, job["path"])
    if summary["examples"] == 0:
        raise NQFormatError(job["path"], summary["lines"], "<file>", "the file holds no usable examples")
    shards = [tmp / f"shard-{k}" for k in range(num_shards)]
    merge_shards(shards, tmp / "windows", runs)
    for directory in [*shards, tmp / "side"]:
        shutil.rmtree(directory)
    return finish_entry(tmp, summary, job["key"], job["source"])


def finish_entry(tmp: Path, summary: dict, key: str, source: dict) -> dict:
    """The summary of the windows in TMP/windows, completed and written to TMP/summary.json: their digest,
    the entry's key and source, and what ties windows/ to the entry (its meta.json, which holds every
    column file's sha256)."""
    summary["windows_digest"] = windows_digest(WindowDataset(tmp / "windows"))
    summary["cache_key"], summary["windows_meta_sha256"] = key, file_digest(tmp / "windows" / "meta.json")
    summary["source"] = source
    atomic_write_text(tmp / "summary.json", json.dumps(summary, indent=2))
    return summary


def proven_entry(final: Path, key: str, verify: bool, log) -> tuple:
    """A published cache entry's windows and summary, once proven to be what the entry wrote: its
    summary.json of this key, windows/'s meta.json the one it recorded, each column file of the size
    and row count meta.json records, as many windows as the summary counts; with `verify`, each file's
    sha256 and the windows' digest too. A ValueError (or OSError) naming what differs otherwise."""
    summary = read_json_object(final / "summary.json")
    if summary.get("cache_key") != key:
        raise ValueError(f"{final / 'summary.json'}: field 'cache_key' is {summary.get('cache_key')!r}, not this "
                         f"entry's {key!r}")
    windows = final / "windows"
    ds = WindowDataset(windows)  # sizes and row counts
    if len(ds) != summary.get("windows_kept"):
        raise ValueError(f"{windows} holds {len(ds)} windows but {final / 'summary.json'} says "
                         f"{summary.get('windows_kept')}")
    if file_digest(windows / "meta.json") != summary.get("windows_meta_sha256"):
        raise ValueError(f"{windows / 'meta.json'}: not the one {final / 'summary.json'} recorded (another entry's "
                         "windows?)")
    if verify:
        ds.check_digests()
        digest = windows_digest(ds)
        if digest != summary.get("windows_digest"):
            raise ValueError(f"{final / 'summary.json'}: field 'windows_digest' is {summary.get('windows_digest')!r} "
                             f"but the windows' is {digest!r}")
    proof = "every file's sha256 checked" if verify else "sizes and counts checked"
    log(f"features: reusing cache {final} ({len(ds)} windows, {proof})")
    return ds, {**summary, "dataset_dir": str(windows)}


def _merge_sides(side_dir: Path, num_shards: int, path: str) -> tuple:
    """(the workers' counts added up, the (shard, windows) runs that put their windows in line order)."""
    merged = Summary()
    skipped = Counter()
    first_errors: list = []
    examples = 0
    lines = 0
    seen: dict = {}
    documents = []  # (line, shard, kept windows) of every document
    for shard in range(num_shards):
        side = json.loads((side_dir / f"shard-{shard}.json").read_text())
        lines = max(lines, side["stats"]["lines"])
        examples += side["stats"]["examples"]
        skipped.update(side["stats"]["skipped_by_reason"])
        first_errors += side["stats"]["first_errors"]
        for k in Summary.KEYS:
            merged.counts[k] += side["summary"][k]
        merged.by_type.update(side["summary"]["windows_per_type"])
        merged.misses += side["summary"]["misses"]
        for example_id, line_no, kept in side["ids"]:
            if example_id in seen:
                raise NQFormatError(path, line_no, "example_id",
                                    f"duplicate example_id {example_id} (first on line {seen[example_id]})")
            seen[example_id] = line_no
            documents.append((line_no, shard, kept))
    out = merged.to_dict()
    out.update(path=path, lines=lines, examples=examples, skipped=sum(skipped.values()),
               skipped_by_reason=dict(skipped), first_errors=first_errors[:5])
    return out, _line_order_runs(documents)


def _line_order_runs(documents: list) -> list:
    """(shard, windows) runs taking the documents' windows in line order: consecutive documents of one
    shard make one run (with one worker, a single run)."""
    runs: list = []
    for _, shard, kept in sorted(documents):
        if runs and runs[-1][0] == shard:
            runs[-1][1] += kept
        else:
            runs.append([shard, kept])
    return [tuple(run) for run in runs]


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

"""A synthetic corpus with many more training pages, made on many cores.

    python -m solution.synth_more --out DIR [--profile nq] [--seed 0] [--num-train 4000] [--num-dev 400]
        [--num-test 400] --extra-train N [--extra-seed 1000000] [--shard-pages 2000] [--workers CORES]

Writes into DIR the four files `python -m solution.synth` writes with the same --profile, --seed,
--num-train, --num-dev and --num-test (the same bytes: the same function writes them), and
simplified-nq-train-more.jsonl: those training pages first, then N training pages more.

`solution.synth` draws every page of a corpus from one seeded generator in turn, so it cannot be split
across cores without changing the pages every recorded benchmark was made on. The extra pages come
instead from corpora of other seeds: shard k (k = 0, 1, ...) is the training file that `solution.synth
--profile P --seed EXTRA_SEED+k --num-train n` writes, byte for byte, n = --shard-pages (the last shard:
what remains), without its dev and test pages. The shards, and so the file, do not depend on --workers
(a split's answer types are drawn for its size, so a shard is not the start of a longer one). The extra seeds
start far above the seeds the benchmarks use (0 to 3). Training pages are made as training pages are
(never in the forms the nq profile holds out for dev and test), and every example id must be unique
across the training, dev and test files: a repeat is an error naming the file, line and field.
Training on the first P pages (`--max_train_examples P`) reads the base corpus's pages, then extra ones.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from solution.common.fsutil import atomic_output, claim_output, mark_output
from solution.common.jsonio import iter_json_lines
from solution.data.synth.corpus import CORPUS_FILES, PROFILES, page_lengths, write_corpus, write_train_split
from solution.synth import MADE_BY

MORE_NAME = "simplified-nq-train-more.jsonl"
EXTRA_SEED = 1_000_000  # far from the benchmark's corpus seeds (0 to 3)
MAX_WORKERS = 256  # past any machine's cores, processes only thrash it (and each holds a generator's pages)


def _parse_args(argv=None) -> argparse.Namespace:
    from solution.common import cli  # both --a-b and --a_b spellings
    p = cli.ArgumentParser(prog="python -m solution.synth_more", description=__doc__.split("\n\n")[0],
                           formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--out", required=True, help="directory for the corpus and simplified-nq-train-more.jsonl")
    p.add_argument("--overwrite", action="store_true",
                   help="write into a folder that holds files synth did not write (Kaggle's real files of the same "
                        "names would be replaced)")
    p.add_argument("--profile", choices=sorted(PROFILES), default="nq")
    p.add_argument("--seed", type=int, default=0, help="the base corpus's seed, as solution.synth's (default 0)")
    p.add_argument("--num-train", type=int, default=4000, help="the base corpus's training pages (default 4000)")
    p.add_argument("--num-dev", type=int, default=400, help="dev pages (default 400)")
    p.add_argument("--num-test", type=int, default=400, help="test pages (default 400)")
    p.add_argument("--extra-train", type=int, required=True, help="training pages more, from other seeds (0: none)")
    p.add_argument("--extra-seed", type=int, default=EXTRA_SEED, help=f"the first extra shard's seed ({EXTRA_SEED})")
    p.add_argument("--shard-pages", type=int, default=2000, help="training pages per extra shard (default 2000)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: every core)")
    p.add_argument("--min-words", type=int, default=None, help="shortest page, in words (default: the profile's)")
    p.add_argument("--max-words", type=int, default=None, help="longest page, in words (default: the profile's)")
    args = p.parse_args(argv)
    try:
        args.min_words, args.max_words = page_lengths(args.profile, args.min_words, args.max_words)
    except ValueError as e:
        p.error(str(e))
    for name in ("num_train", "num_dev", "num_test", "shard_pages", "workers"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers > MAX_WORKERS:
        p.error(f"--workers must be in [1, {MAX_WORKERS}], got {args.workers}")
    if args.extra_train < 0:
        p.error("--extra-train must be at least 0")
    shards = range(args.extra_seed, args.extra_seed + -(-args.extra_train // args.shard_pages))
    if args.seed in shards:
        p.error(f"--seed {args.seed} is one of the extra shards' seeds ({shards.start} to {shards.stop - 1})")
    return args


def shard_plan(extra_train: int, shard_pages: int, extra_seed: int) -> list:
    """[(seed, pages)] of the extra shards, in the order their pages are appended."""
    return [(extra_seed + k, min(shard_pages, extra_train - start))
            for k, start in enumerate(range(0, extra_train, shard_pages))]


def _ids(path: Path) -> list:
    return [record["example_id"] for _, record in iter_json_lines(path)]


def _base_job(out: str, seed: int, sizes: tuple, profile: str, words: tuple) -> dict:
    summary = write_corpus(out, seed, *sizes, *words, profile=profile)
    files = {name: Path(out) / f"simplified-nq-{name}.jsonl" for name in ("train", "dev", "test")}
    return {"lines": [s.line() for s in summary], "ids": {str(p): _ids(p) for p in files.values()}}


def _shard_job(path: str, seed: int, pages: int, profile: str, words: tuple) -> dict:
    return {"ids": {path: write_train_split(path, seed, pages, profile, *words)}}


def check_unique_ids(files: dict) -> int:
    """{path: [example ids in line order]} -> how many; a ValueError naming file, line and field on a repeat."""
    seen: dict = {}
    for path, ids in files.items():
        for line, example_id in enumerate(ids, 1):
            key = str(example_id)  # the test file writes ids as strings, the others as numbers
            if key in seen:
                raise ValueError(f"{path}:{line}: field 'example_id': {key} repeats {seen[key]}")
            seen[key] = f"{path}:{line}"
    return len(seen)


class WorkerLost(RuntimeError):
    """A worker process died (killed: by a user, or by the kernel when memory ran out) before its part was made."""


def collect(jobs: list) -> list:
    """The results of [(future, what it makes)], in order; a worker that died is one line naming the parts
    left unmade (the pool's own BrokenProcessPool traceback names none)."""
    results, lost = [], []
    for future, what in jobs:
        try:
            results.append(future.result())
        except BrokenProcessPool:
            lost.append(what)
    if lost:  # which worker died is not known: the pool fails every part it had not finished
        named = ", ".join(lost[:5]) + (f" and {len(lost) - 5} more" if len(lost) > 5 else "")
        raise WorkerLost(f"a worker process died (killed, or out of memory?); parts left unmade: {named}; "
                         "rerun the same command (the pages do not depend on --workers: fewer use less memory)")
    return results


def write_more(args) -> tuple:
    """Make the base corpus and the shards in parallel, check the ids, join the training pages; (lines, seconds).

    Everything is made in a temporary folder inside --out and moved in only once whole, so a stop midway
    leaves the previous files whole, never the new corpus beside an old seed's extra pages."""
    out, t0 = Path(args.out), time.perf_counter()
    tmp = out / f".synth-more.tmp-{os.getpid()}"
    tmp.mkdir(parents=True)
    try:
        plan = shard_plan(args.extra_train, args.shard_pages, args.extra_seed)
        shard_paths = [tmp / f"shard-{seed}.jsonl" for seed, _ in plan]
        with ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("fork")) as pool:
            words = (args.min_words, args.max_words)
            base = pool.submit(_base_job, str(tmp), args.seed, (args.num_train, args.num_dev, args.num_test),
                               args.profile, words)  # first: the longest job
            shards = [pool.submit(_shard_job, str(p), seed, n, args.profile, words)
                      for p, (seed, n) in zip(shard_paths, plan)]
            results = collect([(base, f"the base corpus of seed {args.seed}")] + [
                (s, f"the extra shard of seed {seed}") for s, (seed, _) in zip(shards, plan)])
        ids = {path: i for r in results for path, i in r["ids"].items()}
        check_unique_ids(ids)
        with atomic_output(tmp / MORE_NAME, "wb") as f:
            for part in [tmp / "simplified-nq-train.jsonl", *shard_paths]:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, f, 16 << 20)
        for name in (*CORPUS_FILES, MORE_NAME):
            os.replace(tmp / name, out / name)
        mark_output(out, MADE_BY, (*CORPUS_FILES, MORE_NAME))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [line.replace(str(tmp), str(out)) for line in results[0]["lines"]], time.perf_counter() - t0


def main(argv=None) -> int:
    args = _parse_args(argv)
    try:
        args.out = claim_output(args.out, "--out", folder=True, command=MADE_BY, overwrite=args.overwrite)
        lines, seconds = write_more(args)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except WorkerLost as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    print(f"wrote {Path(args.out) / MORE_NAME}: {args.num_train} training pages of seed {args.seed}, then "
          f"{args.extra_train} of seeds {args.extra_seed} and up ({args.shard_pages} a seed), on {args.workers} "
          f"processes, in {seconds:.1f}s (profile {args.profile})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

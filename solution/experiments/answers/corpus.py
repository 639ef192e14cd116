"""The answers benchmark's corpora: the synthetic pages of a profile (`solution.synth`), the yes/no pages
added to dev and test or to the training file, stage 1's easy pages, or the real NQ lines of a folder the
command is given."""

from __future__ import annotations

import json
from pathlib import Path

from solution.experiments.answers.runs import StepFailed, run
from solution.experiments.answers.techniques import (
    MEANING_FIRST_PASS,
    POLARITY,
    POLARITY_PAGES,
    REAL_TRAIN,
    TECHNIQUES,
    YES_NO_TRAIN_PAGES,
)

REAL_TRAIN_FILE, REAL_DEV_FILE = "simplified-nq-train-sample.jsonl", "simplified-nq-dev-sample.jsonl"


def num_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def real_corpus(real: Path, plan: dict) -> dict:
    """The real NQ sample in folder `real`: its training lines and dev lines, no test gold."""
    return {"train": str(real / REAL_TRAIN_FILE), "dev": str(real / REAL_DEV_FILE), "test": None, "test_gold": None,
            "train_overrides": plan["train"] + REAL_TRAIN}


def synthetic_corpus(args, plan: dict, out: Path) -> dict:
    """`solution.synth --profile` pages under OUT/data (the largest training size, the plan's dev and test),
    with the yes/no supplement and the yes/no training file where the plan and the techniques need them."""
    data = out / "data"
    cmd = ["-m", "solution.synth", "--profile", args.profile, "--out", str(data), "--seed", str(args.corpus_seed),
           "--num-train", str(max(plan["train_sizes"])), "--num-dev", str(plan["num_dev"]),
           "--num-test", str(plan["num_test"])]
    run(cmd + (["--max-words", str(plan["max_words"])] if plan["max_words"] else []))
    corpus = {"train": str(data / "simplified-nq-train.jsonl"), "dev": str(data / "simplified-nq-dev.jsonl"),
              "test": str(data / "simplified-nq-test.jsonl"),
              "test_gold": str(data / "simplified-nq-test-gold.jsonl"), "train_overrides": plan["train"]}
    if plan.get("yes_no"):
        corpus["yes_no"] = yes_no_corpus(corpus, plan, out, args)
    if any("{yes_no_train}" in TECHNIQUES[t][0] for t in args.techniques):
        corpus |= yes_no_train_corpus(corpus, plan, out, args)
    if POLARITY in args.techniques:
        corpus |= polarity_train_corpus(plan, out, args)
    return corpus


def prepare_corpus(args, plan: dict, out: Path) -> dict:
    """The corpus's files ({train, dev, test, test_gold, ...}), stage 1's easy pages if the plan warm-starts,
    the baseline's page count and the curve's sizes (a size past the file is the whole file)."""
    corpus = real_corpus(Path(args.real_lines), plan) if args.corpus == "real" else synthetic_corpus(args, plan, out)
    if plan.get("warm_start"):  # stage 1's corpus: easy pages, the profile's own sizes unless the plan gives some
        easy = out / "data-easy"
        run(["-m", "solution.synth", "--out", str(easy), "--seed", "0", *plan["warm_start"]["synth"]])
        corpus |= {"warm_train": str(easy / "simplified-nq-train.jsonl"), "warm_dev": str(easy / "simplified-nq-dev.jsonl")}
    n = num_lines(corpus["train"])  # the baseline's pages: a larger size is the whole file, and the curve ends there
    corpus |= {"num_train_documents": n, "train_sizes": sorted({min(s, n) for s in plan["train_sizes"]} | {n})}
    if any("{rankings}" in TECHNIQUES[t][0] for t in args.techniques):
        corpus["rankings"] = rankings_corpus(corpus, plan, out)
    return corpus


def rankings_corpus(corpus: dict, plan: dict, out: Path) -> str:
    """The training pages' windows ranked by the meaning first pass (`solution.rank_windows`) with the settings
    stage 2 trains with, for `first_pass_meaning_negatives`; a file of an earlier run is kept when its header
    names these pages (the training file's digest and page count) and ranking, since it costs seconds a page.
    Training proves it again against its own windows."""
    from solution.common.fsutil import file_digest
    from solution.common.jsonio import JsonError, loads

    path = out / "data-rankings" / "meaning-keep2.jsonl"
    settings = [*corpus["train_overrides"], "--max_train_examples", str(corpus["num_train_documents"]),
                *MEANING_FIRST_PASS]
    try:
        header = loads(path.open("rb").readline(), str(path)) if path.is_file() else {}
    except JsonError:
        header = {}
    window = header.get("window") or {}
    if (header.get("train_file_sha256") == file_digest(corpus["train"])
            and header.get("max_train_examples") == corpus["num_train_documents"]
            and (window.get("first_pass"), window.get("first_pass_keep_first")) == ("meaning", 2)):
        print(f"rankings: reusing {path} (ranked for these pages)", flush=True)
        return str(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # --overwrite: the run folder's own file, ranked for other pages or settings by an earlier run.
    run(["-m", "solution.rank_windows", "--out", str(path), "--overwrite", "--quiet", "--config", plan["config"],
         "--train_file", corpus["train"], *settings])
    return str(path)


def yes_no_synth(directory: Path, seed: int, sizes: tuple, plan: dict, args, types: str = "YES,NO") -> None:
    """`solution.synth` pages of the profile that are all of `types` (YES,NO: two YES to a NO): (train, dev,
    test) pages."""
    run(["-m", "solution.synth", "--profile", args.profile, "--out", str(directory), "--seed", str(seed),
         "--answer-types", types, *[x for flag, n in zip(("--num-train", "--num-dev", "--num-test"), sizes)
                                    for x in (flag, str(n))],
         *(["--max-words", str(plan["max_words"])] if plan["max_words"] else [])])


def yes_no_corpus(corpus: dict, plan: dict, out: Path, args) -> dict:
    """Dev and test with `plan["yes_no"]` yes/no questions each added (pages of the same profile and the next
    seed, `solution.synth --answer-types YES,NO`): the files of `corpus` keys, and how many were added."""
    extra, mixed = out / "data-yes-no", out / "data-with-yes-no"
    yes_no_synth(extra, args.corpus_seed + 1, (1, plan["yes_no"], plan["yes_no"]), plan, args)
    mixed.mkdir(parents=True, exist_ok=True)
    files = {"dev": "simplified-nq-dev.jsonl", "test": "simplified-nq-test.jsonl", "test_gold": "simplified-nq-test-gold.jsonl"}
    for key, name in files.items():
        lines = Path(corpus[key]).read_text().splitlines() + (extra / name).read_text().splitlines()
        ids = [json.loads(line)["example_id"] for line in lines]
        if len(set(map(str, ids))) != len(ids):  # 64-bit random ids: a clash would be a bug here, not luck
            raise StepFailed(f"{extra / name}: an example_id of the yes/no pages is also in {corpus[key]}")
        (mixed / name).write_text("\n".join(lines) + "\n")
    return {key: str(mixed / name) for key, name in files.items()} | {"added": plan["yes_no"]}


def yes_no_train_corpus(corpus: dict, plan: dict, out: Path, args) -> dict:
    """The training file with YES_NO_TRAIN_PAGES yes/no pages appended (`--answer-types YES,NO`, corpus seed + 2:
    neither the benchmark's pages nor its yes/no supplement's); its path and page count, for `yes_no_pages`."""
    pages = YES_NO_TRAIN_PAGES if plan["num_dev"] >= 100 else plan["yes_no"]  # --quick: a handful
    extra, mixed = out / "data-yes-no-train", out / "data-train-with-yes-no"
    yes_no_synth(extra, args.corpus_seed + 2, (pages, 1, 1), plan, args)
    lines = Path(corpus["train"]).read_text().splitlines()
    lines += (extra / "simplified-nq-train.jsonl").read_text().splitlines()
    path, count = training_file(mixed, lines)
    return {"yes_no_train": path, "yes_no_train_pages": count}


def polarity_train_corpus(plan: dict, out: Path, args) -> dict:
    """The polarity stage's training pages: POLARITY_PAGES YES-only pages (corpus seed + 3) and as many NO-only
    ones (seed + 4), none of them the benchmark's, its supplement's or `yes_no_pages`'s; their path and count."""
    pages = POLARITY_PAGES if plan["num_dev"] >= 100 else plan["yes_no"]  # --quick: a handful
    lines = []
    for types, seed in (("YES", args.corpus_seed + 3), ("NO", args.corpus_seed + 4)):
        folder = out / f"data-polarity-{types.lower()}"
        yes_no_synth(folder, seed, (pages, 1, 1), plan, args, types)
        lines += (folder / "simplified-nq-train.jsonl").read_text().splitlines()
    path, count = training_file(out / "data-polarity-train", lines)
    return {"polarity_train": path, "polarity_train_pages": count}


def training_file(folder: Path, lines: list) -> tuple:
    """(path, page count as the training command's text) of `lines` written as `folder`'s training file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "simplified-nq-train.jsonl").write_text("\n".join(lines) + "\n")
    return str(folder / "simplified-nq-train.jsonl"), str(len(lines))

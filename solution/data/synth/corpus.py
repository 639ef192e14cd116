"""A synthetic corpus on disk: annotations (five-way for dev and test), answer types in NQ's shares,
the splits written as simplified-NQ JSON lines with their statistics, and the profiles by name.
"""


import contextlib
import json
import random
import statistics
from collections import Counter
from pathlib import Path

from solution.common.fsutil import atomic_output
from solution.data.nq import ANNOTATION_TYPES
from solution.data.synth.easy import ANNOTATOR_RECALL, ANSWER_MIX, NUM_ANNOTATORS, make_example
from solution.data.synth.nq_pages import make_nq_example, make_nq_reading_example
from solution.data.synth.nq_shaped import make_nq_shaped_example


def _annotation(rng: random.Random, answer, candidates) -> dict:
    """One annotator's answer in the simplified-NQ layout; `answer` None is the null annotation."""
    if answer is None:
        long, shorts, yes_no = {"start_token": -1, "candidate_index": -1, "end_token": -1}, [], "NONE"
    else:
        c = candidates[answer["candidate_index"]]
        long = {"start_token": c["start_token"], "candidate_index": answer["candidate_index"], "end_token": c["end_token"]}
        shorts, yes_no = [{"start_token": s, "end_token": e} for s, e in answer["short"]], answer["yes_no"]
    return {"yes_no_answer": yes_no, "long_answer": long, "short_answers": shorts, "annotation_id": rng.getrandbits(64)}


def _annotations(rng: random.Random, answer, candidates, num_annotators: int) -> list:
    """One annotation (train) or five (dev, test gold): each annotator finds an answer with prob 0.8, one at least."""
    if num_annotators == 1:
        return [_annotation(rng, answer, candidates)]
    found = [answer is not None and rng.random() < ANNOTATOR_RECALL for _ in range(num_annotators)]
    if answer is not None and not any(found):
        found[rng.randrange(num_annotators)] = True
    return [_annotation(rng, answer if f else None, candidates) for f in found]


def answer_mix(types=None) -> dict:
    """ANSWER_MIX, or its shares of `types` alone scaled to sum 1 (`--answer-types YES,NO`: two YES to a NO)."""
    if types is None:
        return dict(ANSWER_MIX)
    unknown = [t for t in types if t not in ANSWER_MIX]
    if unknown or not types:
        raise ValueError(f"answer types must be some of {', '.join(ANNOTATION_TYPES)}, got {','.join(types) or 'none'}")
    total = sum(ANSWER_MIX[t] for t in set(types))
    return {t: ANSWER_MIX[t] / total for t in ANSWER_MIX if t in types}


def _answer_types(rng: random.Random, n: int, mix: dict = ANSWER_MIX) -> list:
    """Exactly the `mix` shares (largest remainder), shuffled: small splits keep the mix too."""
    exact = {t: n * p for t, p in mix.items()}
    counts = {t: int(x) for t, x in exact.items()}
    for t in sorted(exact, key=lambda t: counts[t] - exact[t])[: n - sum(counts.values())]:
        counts[t] += 1
    types = [t for t in ANNOTATION_TYPES for _ in range(counts.get(t, 0))]
    rng.shuffle(types)
    return types


def generate_split(seed: int, n: int, num_annotators: int, min_words: int, max_words: int, used_ids: set,
                   profile: str = "easy", mix: dict = ANSWER_MIX, held_out: bool = False):
    """Yield (record with int example_id, answer type) for one split; its own Random, so split sizes don't interact.

    `held_out`: a dev or test split, which a profile with held-out phrasings (HELD_OUT_PROFILES) asks in them."""
    rng = random.Random(seed)
    make = PROFILES[profile][0]
    extra = {"held_out": held_out} if profile in HELD_OUT_PROFILES else {}
    for answer_type in _answer_types(rng, n, mix):
        ex = make(rng, answer_type, min_words, max_words, **extra)
        example_id = rng.randrange(-2 ** 63, 2 ** 63)
        while example_id in used_ids:  # ids are unique across train, dev and test
            example_id = rng.randrange(-2 ** 63, 2 ** 63)
        used_ids.add(example_id)
        record = {
            "document_text": " ".join(ex["tokens"]),
            "long_answer_candidates": ex["candidates"],
            "question_text": ex["question"],
            "annotations": _annotations(rng, ex["answer"], ex["candidates"], num_annotators),
            "document_url": (f"https://en.wikipedia.org//w/index.php?title={ex['entity']}"
                             f"&amp;oldid={rng.randint(10**8, 9 * 10**8)}"),
            "example_id": example_id,
        }
        if "question_form" in ex:  # nq-shaped's pages say which kind of form asked them; other profiles' bytes stay
            record["question_form"] = ex["question_form"]
        yield record, answer_type


class _SplitStats:
    def __init__(self, name: str, paths: list):
        self.name, self.paths, self.types, self.lengths, self.num_cands = name, paths, Counter(), [], []

    def add(self, record: dict, answer_type: str) -> None:
        self.types[answer_type] += 1
        self.lengths.append(record["document_text"].count(" ") + 1)
        self.num_cands.append(len(record["long_answer_candidates"]))

    def line(self) -> str:
        def mmm(xs):
            return f"{min(xs)}/{int(statistics.median(xs))}/{max(xs)}"
        mix = " ".join(f"{t} {self.types[t]}" for t in ANNOTATION_TYPES)
        return (f"{self.name:<5} {len(self.lengths):>6} examples | {mix} | words min/median/max {mmm(self.lengths)} | "
                f"candidates {mmm(self.num_cands)} | " + ", ".join(str(p) for p in self.paths))


def split_seeds(seed: int) -> list:
    """The seeds of the train, dev and test splits of corpus seed `seed`."""
    master = random.Random(seed)
    return [master.getrandbits(64) for _ in range(3)]


def write_train_split(path, seed: int, num_train: int, profile: str = "easy", min_words=None, max_words=None) -> list:
    """Write the training file `write_corpus` writes for these arguments, byte for byte, without its dev and
    test splits; return its example ids in order.

    Its pages are made as write_corpus makes training pages (`held_out` False), so they never ask or
    state in the held-out forms, whatever the seed."""
    min_words = PROFILES[profile][1] if min_words is None else min_words
    max_words = PROFILES[profile][2] if max_words is None else max_words
    ids = []
    with atomic_output(path, "w", newline="\n") as f:
        for record, _ in generate_split(split_seeds(seed)[0], num_train, 1, min_words, max_words, set(), profile,
                                        answer_mix(None), held_out=False):
            ids.append(record["example_id"])
            f.write(json.dumps(record) + "\n")
    return ids


SPLIT_FILES = {"train": ("simplified-nq-train.jsonl",), "dev": ("simplified-nq-dev.jsonl",),
               "test": ("simplified-nq-test.jsonl", "simplified-nq-test-gold.jsonl")}
CORPUS_FILES = tuple(name for names in SPLIT_FILES.values() for name in names)


def write_corpus(out_dir, seed: int = 0, num_train: int = 1000, num_dev: int = 100, num_test: int = 100,
                 min_words=None, max_words=None, profile: str = "easy", answer_types=None) -> list:
    """Write the four files into `out_dir`; return one _SplitStats per split (train, dev, test).

    min_words/max_words default to the profile's bounds (PROFILES); `answer_types` keeps only those
    types of the mix (`answer_mix`). Every file is written under a temporary name and all four renamed
    only once the last is complete: a stop midway leaves the previous corpus whole, never two seeds mixed."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    mix = answer_mix(answer_types)
    min_words = PROFILES[profile][1] if min_words is None else min_words
    max_words = PROFILES[profile][2] if max_words is None else max_words
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seeds = split_seeds(seed)
    used_ids: set = set()
    summary = []
    with contextlib.ExitStack() as stack:
        for name, split_seed, n, num_annotators in (("train", seeds[0], num_train, 1),
                                                    ("dev", seeds[1], num_dev, NUM_ANNOTATORS),
                                                    ("test", seeds[2], num_test, NUM_ANNOTATORS)):
            paths = [out / f for f in SPLIT_FILES[name]]
            files = [stack.enter_context(atomic_output(p, "w", newline="\n")) for p in paths]
            records = generate_split(split_seed, n, num_annotators, min_words, max_words, used_ids, profile, mix,
                                     held_out=name != "train")
            summary.append(_write_split(name, paths, files, records))
    return summary


def _write_split(name: str, paths: list, files: list, records) -> "_SplitStats":
    stats = _SplitStats(name, paths)
    for record, answer_type in records:
        stats.add(record, answer_type)
        if name == "test":
            # Kaggle's test file: id as a JSON string, no annotations, no url; gold keeps them, same id text
            # (and nq-shaped's question_form stays in both, for scoring the test split by it).
            record["example_id"] = str(record["example_id"])
            files[1].write(json.dumps(record) + "\n")
            record = {k: record[k] for k in ("example_id", "question_text", "document_text", "long_answer_candidates",
                                             "question_form") if k in record}
        files[0].write(json.dumps(record) + "\n")
    return stats


# name -> (document maker, default shortest and longest document in words). `easy` is the demo's and
# the tests' corpus; `nq` is shaped like real NQ pages (log-normal lengths, median ~4,600 words) with
# questions that need reading; `nq-lexical` is the same pages with questions in the statements' words
# (the `nq` profile until its questions were rephrased: the same bytes for the same arguments); `nq-shaped`
# is the `nq` profile with the gold near the top of the page, a lead stating the main facts, questions naming
# their subject, composed filler and NO questions whose value may be on the page (nq_shaped.py).
PROFILES = {"easy": (make_example, 300, 3000), "nq": (make_nq_reading_example, 1000, 40000),
            "nq-lexical": (make_nq_example, 1000, 40000), "nq-shaped": (make_nq_shaped_example, 1000, 40000)}
MIN_WORDS = 200  # an article needs room for a title, an answer and a distractor


def page_lengths(profile: str, min_words=None, max_words=None) -> tuple:
    """(min, max) words a page: the profile's where not given; a ValueError naming the flag when out of range."""
    lo = PROFILES[profile][1] if min_words is None else min_words
    hi = PROFILES[profile][2] if max_words is None else max_words
    if lo < MIN_WORDS:
        raise ValueError(f"--min-words must be at least {MIN_WORDS}: an article needs room for a title, an answer "
                         "and a distractor")
    if hi < lo:
        raise ValueError("--max-words must be at least --min-words")
    return lo, hi


HELD_OUT_PROFILES = ("nq", "nq-shaped")  # profiles whose dev and test ask in forms their training split never shows

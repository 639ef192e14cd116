"""Which training windows without an answer are kept: the config's `sampling:` section and the
hard-negative scores that can weight it.

Most training windows hold no answer, so only a share of them is kept
(`negative_keep_rate` in documents that have an answer, `unanswerable_keep_rate`
in documents that have none), drawn deterministically per window (see
`solution.windows.featurizer.keep_window`). A hard-negative pass (`python -m
solution.hard_negatives`) writes a scores file; `HardNegativeWeights` reads it
and turns each window's score into a keep weight with the same expected count. A ranking pass (`python -m
solution.rank_windows`) writes each page's windows in the order the first pass ranks them, sentence vectors
and all; `WindowRankings` reads it for `top_window_keep`.
No torch here: numpy and the standard library.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Optional

import numpy as np

from solution.common.jsonio import JsonError, loads

FORMAT = "nq-hard-negative-scores"
VERSION = 1
RANKINGS_FORMAT = "nq-window-rankings"
RANKINGS_VERSION = 1
# Copies of one yes/no window: at 100 the yes/no windows (1.5% of NQ's pages) already outnumber all the
# others, and every copy is written to the feature cache (`--yes_no_repeat 10000000` fills a disk).
MAX_REPEAT = 100


def file_identity(path: str) -> dict:
    """A file's identity for cache keys: a file written again is a new entry."""
    st = os.stat(path)
    return {"path": os.path.abspath(path), "size": st.st_size, "mtime": st.st_mtime_ns}


class HardNegativeWeights:
    """A scores file, read for sampling: per document, a keep weight for each window."""

    def __init__(self, path: str, fraction: float):
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"hard_negative_fraction must be in [0, 1], got {fraction}")
        self.path, self.fraction = path, fraction
        self.scores: dict = {}  # example_id -> (answerable, float32 scores, nan where the window has an answer)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such hard-negative scores file (write one with "
                                    "python -m solution.hard_negatives)")
        with open(path, encoding="utf-8") as f:
            for line_no, text in enumerate(f, 1):
                try:
                    rec = loads(text, f"{path} line {line_no}")
                    if line_no == 1:
                        if rec.get("format") != FORMAT:
                            raise ValueError(f"not a hard-negative scores file (format {rec.get('format')!r})")
                        self.header = rec
                        continue
                    scores = np.array([np.nan if s is None else s for s in rec["scores"]], dtype=np.float32)
                    self.scores[str(rec["example_id"])] = (bool(rec["answerable"]), scores)
                except JsonError:
                    raise  # its line names the file and the line already
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"{path}:{line_no}: {type(e).__name__}: {e}") from None
        if not hasattr(self, "header"):
            raise ValueError(f"{path}: empty hard-negative scores file")
        self.mean = {}
        for group in (True, False):
            vals = [s[~np.isnan(s)] for a, s in self.scores.values() if a == group]
            flat = np.concatenate(vals) if vals else np.zeros(0, np.float32)
            # A floor, so a group the first model rejects everywhere does not divide by ~0.
            self.mean[group] = max(float(flat.mean()) if len(flat) else 1.0, 1e-6)

    def check_window(self, window_config) -> None:
        if self.header.get("window") != asdict(window_config):
            raise ValueError(f"{self.path}: scored with window settings {self.header.get('window')}, but training "
                             f"uses {asdict(window_config)}; score the training file again with these settings")

    def weights(self, example_id: str, answerable: bool, num_windows: int) -> Optional[np.ndarray]:
        """Per-window keep weights, or None when the file has no matching record for this document."""
        rec = self.scores.get(example_id)
        if rec is None or rec[0] != answerable or len(rec[1]) != num_windows:
            return None
        s = np.nan_to_num(rec[1], nan=0.0)
        return (1.0 - self.fraction) + self.fraction * s / self.mean[answerable]

    def mismatch(self, example_id: str, answerable: bool, num_windows: int) -> str:
        """Why `weights` found no record for this document, for the error that stops training."""
        rec = self.scores.get(example_id)
        if rec is None:
            return (f"{example_id}: no matching record in {self.path}, which holds {len(self.scores)} documents: "
                    "an incomplete scores file (a pass stopped before the end: run the same python -m "
                    "solution.hard_negatives command again and it finishes the file), or one of another "
                    "training file")
        return (f"{example_id}: no matching record in {self.path} (its record says answerable={rec[0]} and "
                f"{len(rec[1])} windows, the training file gives answerable={answerable} and {num_windows}); "
                "score this training file with python -m solution.hard_negatives")


class WindowRankings:
    """A rankings file (`python -m solution.rank_windows`), read for `top_window_keep`: per page, its windows
    holding a candidate in the order the first pass keeps them. Its header says what made the windows (window
    settings, tokenizer) and the ranking; `check` compares them with training's before any page is kept by it,
    and `top` refuses a page whose windows are not the ones ranked."""

    def __init__(self, path: str):
        self.path, self.rankings, self.header = path, {}, None
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such window rankings file (write one with python -m "
                                    "solution.rank_windows)")
        with open(path, encoding="utf-8") as f:
            for line_no, text in enumerate(f, 1):
                rec = loads(text, f"{path} line {line_no}")
                if line_no == 1:
                    if not isinstance(rec, dict) or rec.get("format") != RANKINGS_FORMAT:
                        raise ValueError(f"{path}: not a window rankings file (line 1 has no format "
                                         f"{RANKINGS_FORMAT!r}; write one with python -m solution.rank_windows)")
                    self.header = rec
                    continue
                self.rankings[self._example_id(rec, line_no)] = (rec["windows"], rec["ranking"])
        if self.header is None:
            raise ValueError(f"{path}: empty, not a window rankings file")
        if self.header.get("version") != RANKINGS_VERSION:
            raise ValueError(f"{path}: rankings format version {self.header.get('version')!r}, this code reads "
                             f"{RANKINGS_VERSION}; rank the training file again")

    def _example_id(self, rec, line_no: int) -> str:
        ok = (isinstance(rec, dict) and isinstance(rec.get("windows"), int) and isinstance(rec.get("ranking"), list)
              and all(isinstance(i, int) and 0 <= i < rec["windows"] for i in rec["ranking"]) and "example_id" in rec)
        if not ok:
            raise ValueError(f"{self.path}:{line_no}: expected example_id, windows (an integer) and ranking (window "
                             "indices below it), got {!r}".format(str(rec)[:200]))
        return str(rec["example_id"])

    def check(self, made_with: dict) -> None:
        """`made_with` ({window: the window settings as a dict, tokenizer: its fingerprint}) is what the file was
        ranked with, or a ValueError naming each difference."""
        diff = [f"{k}: file {self.header.get(k)!r}, training {v!r}" for k, v in made_with.items()
                if self.header.get(k) != v]
        if diff:
            raise ValueError(f"{self.path}: ranked for other windows than training makes ({'; '.join(diff)}); rank "
                             "the training file again with training's settings (python -m solution.rank_windows "
                             "with the same --config and settings)")

    def top(self, example_id: str, num_windows: int, limit: int) -> Optional[list]:
        """The indices of the page's `limit` first-ranked windows, in page order; None where the file has no
        ranking of these windows (`mismatch` says why)."""
        rec = self.rankings.get(str(example_id))
        if rec is None or rec[0] != num_windows:
            return None
        return sorted(rec[1][:limit])

    def mismatch(self, example_id: str, num_windows: int) -> str:
        rec = self.rankings.get(str(example_id))
        if rec is None:
            return (f"{example_id}: not in {self.path} ({len(self.rankings)} pages ranked): a rankings file of "
                    "another training file, or of fewer of its lines; rank this one with python -m solution.rank_windows")
        return (f"{example_id}: {self.path} ranked {rec[0]} windows of it, featurisation makes {num_windows}: "
                "ranked with other windows; rank the training file again")


@dataclass
class NegativeSampling:
    """Which training windows without an answer are kept (windows with one always are).

    The config's `sampling:` section. Which windows a rate keeps is drawn from the seed `draw_seed`
    gives: the training `seed`, passed beside these settings, unless `sampling_seed` is set."""

    negative_keep_rate: float = 0.05
    """Share kept of the no-answer windows of documents that have an answer (BERT-joint kept 2% of all)."""
    unanswerable_keep_rate: Optional[float] = None
    """Share kept of the windows of documents with no answer at all (null: negative_keep_rate)."""
    hard_negatives_file: Optional[str] = None
    """Hard-negative pass: scores from `python -m solution.hard_negatives`; negatives are then drawn
    in proportion to a first model's belief that they hold an answer (same expected count)."""
    hard_negative_fraction: float = 0.5
    """Share of the kept-negative budget drawn by score; the rest stays uniform (easy negatives)."""
    question_word_keep_rate: Optional[float] = None
    """Share kept of the no-answer windows whose document side holds at least `question_word_share` of the
    question's content words (stop words aside); null: no such rule. On NQ-shaped pages these windows state
    another entity's fact in the question's words, or name the page's entity beside other facts: the negatives
    a model must see to tie an answer to its entity, and ones a uniform 1-5% draw almost never keeps."""
    question_word_share: float = 0.5
    """The share of the question's content words a window must hold for `question_word_keep_rate`."""
    top_window_keep: int = 0
    """Keep every no-answer window among the document's `top_window_keep` windows that share the most of the
    question's content words (among the windows holding a candidate; ranked as `max_windows_per_document`
    ranks them at inference); 0: no such rule. Set it with the same N as `max_windows_per_document`: the model
    then learns on exactly the windows it is run on, the neighbour's fact in the question's words among them."""
    top_window_ranking_file: Optional[str] = None
    """The rankings `top_window_keep` keeps by, written by `python -m solution.rank_windows` with training's own
    settings: the first pass itself (`window.first_pass`, sentence vectors and all), as inference ranks. Null:
    the first pass's word part (`first_pass.word_method`: stems for meaning and fused), which needs no vectors."""

    yes_no_repeat: int = 1
    """How many times each window labelled YES or NO is trained on. Yes/no answers are about 1.5% of NQ's
    pages (and of the synthetic profiles'): an epoch shows the answer-type head a few dozen such windows
    against thousands of others, and a model trained so never answers YES or NO."""
    no_repeat: int = 1
    """How many times more each window labelled NO is trained on (on top of `yes_no_repeat`). Yes/no answers
    run about two YES to a NO, and a head trained on that mix answers YES to every yes/no question."""
    sampling_seed: Optional[int] = None
    """The seed the kept no-answer windows are drawn from (null: the run's `seed`). Set, runs that differ only
    in `seed` share one feature cache entry (one featurisation) and train on the same windows; their seeds
    then set only the initialisation and the data order."""

    def __post_init__(self):
        checks = [
            (0.0 < self.negative_keep_rate <= 1.0, "negative_keep_rate", "in (0, 1]"),
            (self.unanswerable_keep_rate is None or 0.0 < self.unanswerable_keep_rate <= 1.0,
             "unanswerable_keep_rate", "in (0, 1] or null"),
            (0.0 <= self.hard_negative_fraction <= 1.0, "hard_negative_fraction", "in [0, 1]"),
            (self.question_word_keep_rate is None or 0.0 < self.question_word_keep_rate <= 1.0,
             "question_word_keep_rate", "in (0, 1] or null"),
            (0.0 < self.question_word_share <= 1.0, "question_word_share", "in (0, 1]"),
            (isinstance(self.top_window_keep, int) and self.top_window_keep >= 0, "top_window_keep", "an integer >= 0"),
        ] + [(isinstance(n, int) and not isinstance(n, bool) and n >= 1, name, "an integer >= 1")
             for name, n in (("yes_no_repeat", self.yes_no_repeat), ("no_repeat", self.no_repeat))]
        checks.append((self.top_window_ranking_file is None or self.top_window_keep > 0, "top_window_ranking_file",
                       "null unless top_window_keep is above 0 (it ranks the windows that setting keeps)"))
        seed = self.sampling_seed
        checks.append((seed is None or (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0),
                       "sampling_seed", "an integer >= 0 or null"))
        for ok, name, expected in checks:
            if not ok:
                raise ValueError(f"{name} must be {expected}, got {getattr(self, name)!r}")
        if self.yes_no_repeat * self.no_repeat > MAX_REPEAT:
            raise ValueError(f"yes_no_repeat x no_repeat (the copies of a NO window) must be at most {MAX_REPEAT}, "
                             f"got {self.yes_no_repeat} x {self.no_repeat}")

    def copies(self, answer_type: str) -> int:
        """How many times a kept window of `answer_type` (an ANSWER_TYPES name) is trained on."""
        if answer_type == "NO":
            return self.yes_no_repeat * self.no_repeat
        return self.yes_no_repeat if answer_type == "YES" else 1

    def rate(self, answerable: bool) -> float:
        if answerable or self.unanswerable_keep_rate is None:
            return self.negative_keep_rate
        return self.unanswerable_keep_rate

    def window_rate(self, answerable: bool, share: float) -> float:
        """The keep rate of a no-answer window holding `share` of the question's content words."""
        rate = self.rate(answerable)
        if self.question_word_keep_rate is not None and share >= self.question_word_share:
            return max(rate, self.question_word_keep_rate)
        return rate

    def draw_seed(self, run_seed: int) -> int:
        """The seed the kept no-answer windows are drawn from: `sampling_seed` when set, else the run's. The
        featurisation and the cache key both ask here, so the key always names the seed the windows come from."""
        return run_seed if self.sampling_seed is None else self.sampling_seed

    def key(self, run_seed: int) -> dict:
        """These settings as the kept windows depend on them, for the feature cache's key."""
        # `seed` is the seed drawn from, whoever gave it: the same key as when the seed was a field here
        # (caches stay valid), and runs drawing from one seed share an entry.
        d = {**asdict(self), "seed": self.draw_seed(run_seed)}
        del d["sampling_seed"]
        for name in ("yes_no_repeat", "no_repeat"):
            if d[name] == 1:  # as before the setting existed: those caches stay valid too
                del d[name]
        if self.hard_negatives_file:  # the file's identity, so a rescored file is a new cache entry
            d["hard_negatives_file"] = file_identity(self.hard_negatives_file)
        if self.top_window_ranking_file:  # likewise: a file ranked again makes other windows
            d["top_window_ranking_file"] = file_identity(self.top_window_ranking_file)
        else:  # as before the setting existed: those caches stay valid
            del d["top_window_ranking_file"]
        return d



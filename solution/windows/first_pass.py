"""The first pass: which windows of a page are worth running the model on.

A page of real NQ cuts into dozens of windows; a reader (or an ensemble inside a kernel's time limit) runs on
the few a cheap ranking puts first (`window.max_windows_per_document`), and training keeps the no-answer
windows among those same few as negatives (`sampling.top_window_keep`). Four rankings:

- `words`: the share of the question's content words (exactly as written, the page title's among them) that
  the window holds. The first ranking the project had; kept as it was.
- `stems`: the question's content words less the page title's, compared on their stems (`words.stem`:
  "founded" matches "founder"), each matched stem weighed by its inverse document frequency over the page's
  own windows (BM25's form). The title's words are on every window of a page and so say nothing of which
  one; a stem found in few windows says more than one found in all. IDF over the page rather than over the
  file: a page is ranked alone, as a kernel reads it, and it measured as well (docs/answers-first-pass.md).
- `meaning`: the best cosine between the question and the sentences, list items and table rows the window
  holds (`words.segments`), in the sentence vectors of the `embed` callable the caller hands in (the
  backbone's own, `solution.model.sentences`), the page title's words replaced by a neutral phrase in
  question and sentences alike (`words.mask_subject`): an invented subject's name would otherwise
  dominate every vector. It finds the answer stated in other words, which no word ranking can.
- `fused`: reciprocal-rank fusion of `stems` and `meaning` (`FUSION_K`): each window scores
  1 / (k + its rank) summed over the two rankings, so a window near the top of either comes up.

Every ranking breaks ties towards the earlier window: NQ's answers sit near the top of the page more often
than not. Only numpy and the data stage: the sentence vectors come from the caller.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from solution.data.nq import Example
from solution.data.words import content_words, mask_subject, page_title, question_word_share, segments, stem

METHODS = ("words", "stems", "meaning", "fused")
SENTENCE_METHODS = frozenset({"meaning", "fused"})
"""The rankings that need sentence vectors (an `embed` callable)."""
FUSION_K = 60
"""Reciprocal-rank fusion's constant (Cormack et al. 2009's 60): with dozens of windows a page, a window's
first few ranks in either ranking weigh about alike, so one ranking's top choice cannot drown the other's."""


def word_method(method: str) -> str:
    """The word ranking standing in for `method` where sentence vectors cost too much (training's negatives
    on CPU): `words` for `words`, `stems` for every other."""
    return "words" if method == "words" else "stems"


def check_method(method: str, setting: str = "first_pass") -> None:
    if method not in METHODS:
        raise ValueError(f"{setting} must be one of {', '.join(METHODS)}, got {method!r}")


def windows_with_candidates(example: Example, windows: list) -> list:
    """The windows holding at least one token of a long-answer candidate."""
    return [windows[i] for i in candidate_window_indices(example, windows)]


def candidate_window_indices(example: Example, windows: list) -> list:
    covered = np.zeros(len(example.tokens) + 1, dtype=bool)
    for c in example.candidates:
        covered[c.start_token:c.end_token] = True
    keep = []
    for i, w in enumerate(windows):
        idx = w.nq_token_index[w.nq_token_index >= 0]
        if covered[idx].any():
            keep.append(i)
    return keep


def top_window_indices(example: Example, windows: list, limit: int, method: str = "words",
                       embed: Optional[Callable] = None, candidates_only: bool = True, keep_first: int = 0) -> list:
    """Indices of the `limit` windows `method` ranks first, in document order, among the windows holding a
    candidate (`candidates_only`); the first `keep_first` of them are kept whatever their rank (real NQ's
    answers sit near the top of the page). `embed(texts) -> unit vectors`, one row a text, for the sentence
    rankings. Training keeps the no-answer windows this picks (`NegativeSampling.top_window_keep`) so that it
    learns on the windows inference runs on."""
    pool = candidate_window_indices(example, windows) if candidates_only else list(range(len(windows)))
    if len(pool) <= limit:
        return pool
    return sorted(ranked_window_indices(example, windows, method, embed, pool, keep_first)[:limit])


def ranked_window_indices(example: Example, windows: list, method: str, embed: Optional[Callable] = None,
                          pool: Optional[list] = None, keep_first: int = 0) -> list:
    """The indices of `pool` (default: the windows holding a candidate) in the order the first pass keeps
    them: its first `keep_first`, then the rest as `method` ranks them."""
    pool = candidate_window_indices(example, windows) if pool is None else pool
    if keep_first >= len(pool):
        return list(pool)
    scores = window_scores(example, [windows[i] for i in pool], method, embed)  # IDF over the whole pool
    order = sorted(range(keep_first, len(pool)), key=lambda k: (-scores[k], k))
    return pool[:keep_first] + [pool[k] for k in order]


def top_windows(example: Example, windows: list, limit: int, method: str = "words",
                embed: Optional[Callable] = None, keep_first: int = 0) -> list:
    """The `limit` windows `method` ranks first (the first `keep_first` whatever their rank), in document order."""
    return [windows[i] for i in top_window_indices(example, windows, limit, method, embed, False, keep_first)]


def window_scores(example: Example, windows: list, method: str, embed: Optional[Callable] = None) -> np.ndarray:
    """One float a window, higher for a window more worth running (ties: the earlier window)."""
    check_method(method)
    if method in SENTENCE_METHODS and embed is None:
        raise ValueError(f"first_pass {method!r} ranks windows by sentence vectors and no embed callable was given "
                         "(build the sentence encoder: solution.model.sentences.first_pass_embed)")
    if method == "words":
        return word_scores(example, windows)
    if method == "stems":
        return stem_scores(example, windows)
    if method == "meaning":
        return meaning_scores(example, windows, embed)
    return fuse([stem_scores(example, windows), meaning_scores(example, windows, embed)])


def word_scores(example: Example, windows: list) -> np.ndarray:
    words = content_words(example.question_text)
    return np.array([question_word_share(words, example.tokens, w.nq_token_index) for w in windows], dtype=np.float64)


def window_ranges(windows: list) -> list:
    """[first, last + 1) NQ tokens each window covers (an empty range for a window holding none)."""
    out = []
    for w in windows:
        idx = w.nq_token_index[w.nq_token_index >= 0]
        out.append((int(idx.min()), int(idx.max()) + 1) if len(idx) else (0, 0))
    return out


def question_stems(example: Example) -> frozenset:
    """The stems of the question's content words less the page title's (all of them if nothing is left)."""
    asked = frozenset(stem(w) for w in content_words(example.question_text))
    return (asked - frozenset(stem(w) for w in page_title(example.tokens))) or asked


def stem_scores(example: Example, windows: list) -> np.ndarray:
    """Each window's matched question stems, each weighed by its IDF over the page's windows."""
    asked = question_stems(example)
    held = [asked & {stem(t) for t in example.tokens[a:b]} for a, b in window_ranges(windows)]
    n = len(windows)
    df = {s: sum(s in h for h in held) for s in asked}
    idf = {s: math.log(1.0 + (n - df[s] + 0.5) / (df[s] + 0.5)) for s in asked}
    return np.array([sum(idf[s] for s in h) for h in held], dtype=np.float64)


def question_cosines(example: Example, texts: list, embed: Callable) -> dict:
    """{text: its cosine with the question}, the texts already masked (`mask_subject`) and the question masked
    alike, in one `embed` call (a repeated text once: pages repeat sentences)."""
    unique = list(dict.fromkeys(texts))
    masked = mask_subject(example.question_text.split(), page_title(example.tokens))
    vectors = np.asarray(embed([masked] + unique), dtype=np.float32)
    return dict(zip(unique, vectors[1:] @ vectors[0]))


def meaning_scores(example: Example, windows: list, embed: Callable) -> np.ndarray:
    """Each window's best cosine between the question and a segment it holds (-inf for a window holding none),
    the page title's words masked in both."""
    ranges = window_ranges(windows)
    tokens, title = example.tokens, page_title(example.tokens)
    spans = [r for r in ranges if r[1] > r[0]]
    if not spans:
        return np.full(len(windows), -np.inf)
    segs = list(segments(tokens, min(a for a, _ in spans), max(b for _, b in spans)))
    texts = [mask_subject([tokens[i] for i in seg], title) for seg in segs]
    cosine = question_cosines(example, texts, embed)
    seg_cos = np.array([cosine[t] for t in texts], dtype=np.float64)
    firsts = np.array([seg[0] for seg in segs])
    lasts = np.array([seg[-1] for seg in segs])
    out = np.full(len(windows), -np.inf)
    for k, (a, b) in enumerate(ranges):
        inside = (lasts >= a) & (firsts < b)  # a segment the window holds at least part of
        if inside.any():
            out[k] = seg_cos[inside].max()
    return out


def candidate_cosines(example: Example, indices, embed: Callable) -> np.ndarray:
    """float [number of candidates]: for each candidate index in `indices`, the best cosine between the question
    and one of its segments (sentences, list items, table rows), the page title's words masked in both; NaN for
    the other candidates and for one with no segment. The sentence match of `solution.lexical --method
    sentences`, and what post-processing's `sentence_weight` adds to the reader's scores."""
    tokens, title = example.tokens, page_title(example.tokens)
    out = np.full(len(example.candidates), np.nan, dtype=np.float64)
    texts = {}  # candidate index -> its masked segments
    for k in indices:
        c = example.candidates[k]
        segs = [mask_subject([tokens[i] for i in seg], title) for seg in segments(tokens, c.start_token, c.end_token)]
        if segs:
            texts[k] = segs
    if not texts:
        return out
    cosine = question_cosines(example, [t for segs in texts.values() for t in segs], embed)
    for k, segs in texts.items():
        out[k] = max(cosine[t] for t in segs)
    return out


def ranks(scores: np.ndarray) -> np.ndarray:
    """1-based rank of each score, the highest first, a tie to the earlier index."""
    order = sorted(range(len(scores)), key=lambda k: (-scores[k], k))
    out = np.empty(len(scores), dtype=np.int64)
    out[order] = np.arange(1, len(scores) + 1)
    return out


def fuse(score_lists: list, k: int = FUSION_K) -> np.ndarray:
    """Reciprocal-rank fusion: sum over the rankings of 1 / (k + the window's rank in it)."""
    return sum(1.0 / (k + ranks(s)) for s in score_lists)

"""Post-processing as it was before the answer-extraction settings (top_level_only, n-best, ...): the reference that every
setting turned off must reproduce exactly. Test-side only.

Original docstring: window logits -> one long and one short answer per document. Pure numpy.

The same function serves dev evaluation during training and
`submission.predict`, so the score seen in training is the score the
submission gets.

Per document:
  * short spans: in every window, the top-k start and end positions over
    document tokens, pairs with start <= end and at most `max_answer_length`
    pieces, scored start + end - null, where null = start[CLS] + end[CLS];
  * long candidates: every candidate whose text lies wholly inside a window
    is scored on its own, start at its first text piece + end at its last
    - null (training labels LONG, YES and NO answers with exactly that span);
  * the window holding the best score of either kind gives the answer type
    (argmax over YES/NO/SHORT/LONG of the type head);
  * unless the best score is above `long_threshold`, both rows stay blank. SHORT: short = the best
    span (if its score is above `short_threshold`), long = the top-level
    candidate containing it. LONG: long = the best candidate. YES/NO: long =
    the best candidate, short = YES/NO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from solution.windows.featurizer import ANSWER_TYPES


@dataclass
class PostprocessConfig:
    """Saved in the model directory; `submission.predict` reads it from there."""

    top_k: int = 20
    """Start and end positions considered per window (n-best size)."""
    max_answer_length: int = 30
    """Longest short answer, in word pieces."""
    long_threshold: float = 0.0
    """Both rows stay blank unless the best score (logits over the [CLS] null score) is above this."""
    short_threshold: float = 0.0
    """The short row stays blank unless the best short span's score is above this."""
    skip_windows_without_candidates: bool = True
    """Do not run the model on windows that hold no token of any long-answer candidate: they cannot
    give a long answer, and NQ's short answers lie inside long ones. Real NQ pages have many (39% of
    the 192-token windows of the real dev sample); the synthetic corpus has none."""

    def __post_init__(self):
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.max_answer_length < 1:
            raise ValueError(f"max_answer_length must be >= 1, got {self.max_answer_length}")


@dataclass
class DocumentPrediction:
    example_id: str
    long: str  # "start:end" or ""
    short: str  # "start:end", "YES", "NO" or ""
    answer_type: str
    score: float  # best score of either kind (what long_threshold compares)
    short_score: float  # best short-span score (what short_threshold compares)
    long_candidate: int  # index of the chosen candidate, -1 when none
    error: str = ""  # why this document could not be answered (its rows are then blank)
    raw_long: str = ""  # the answers before the thresholds: what threshold tuning re-thresholds
    raw_short: str = ""


def blank_prediction(example_id: str, error: str = "") -> DocumentPrediction:
    """Both rows blank: no answer, or (with `error`) a document that could not be answered."""
    return DocumentPrediction(example_id, "", "", "UNKNOWN", float("-inf"), float("-inf"), -1, error=error)


def apply_thresholds(raw_long: str, raw_short: str, answer_type: str, score: float, short_score: float,
                     long_threshold: float, short_threshold: float) -> tuple:
    """(long, short) rows from a document's unthresholded answers. The one rule, shared by
    post-processing and threshold tuning: both rows blank unless score > long_threshold; a SHORT
    answer's short row blank unless short_score > short_threshold (YES/NO are not span scores)."""
    if not score > long_threshold:
        return "", ""
    short = raw_short if (answer_type != "SHORT" or short_score > short_threshold) else ""
    return raw_long, short


def postprocess_document(example_id: str, candidates: np.ndarray, start_logits: np.ndarray,
                         end_logits: np.ndarray, type_logits: np.ndarray, nq_token_index: np.ndarray,
                         cfg: PostprocessConfig) -> DocumentPrediction:
    """Answers for one document.

    candidates: int [num_candidates, 5] = start_token, end_token, top_level,
        first text token, last text token (-1, -1 for a candidate with no text).
    start_logits, end_logits: float [num_windows, seq]; type_logits [num_windows, 5];
    nq_token_index: int [num_windows, seq], the NQ token of each position, -1 where none.
    """
    blank = blank_prediction(example_id)
    if start_logits.shape[0] == 0:
        return blank
    null = start_logits[:, 0] + end_logits[:, 0]  # [num_windows]

    short = _best_short_span(start_logits, end_logits, nq_token_index, null, cfg)
    cand = _best_candidate(candidates, start_logits, end_logits, nq_token_index, null)
    if short is None and cand is None:
        return blank
    short_score = short[0] if short is not None else float("-inf")
    cand_score = cand[0] if cand is not None else float("-inf")
    best_window = short[1] if short_score >= cand_score else cand[1]
    score = max(short_score, cand_score)
    answer_type = ANSWER_TYPES[1 + int(np.argmax(type_logits[best_window, 1:]))]

    span = span_container = None  # the best short span as an NQ [start, end), and its candidate
    if short is not None:
        _, w, s, e = short
        span = (int(nq_token_index[w, s]), int(nq_token_index[w, e]) + 1)
        span_container = containing_candidate(candidates, *span)
    long_idx, short_text = -1, ""
    if answer_type == "SHORT" and span is not None:
        long_idx = span_container
        short_text = f"{span[0]}:{span[1]}"
    else:
        # No candidate fits a window: fall back to the short span's container.
        long_idx = cand[2] if cand is not None else span_container
        if answer_type in ("YES", "NO"):
            short_text = answer_type
    long_text = f"{candidates[long_idx, 0]}:{candidates[long_idx, 1]}" if long_idx >= 0 else ""
    if not long_text and short_text in ("YES", "NO"):
        short_text = ""  # a yes/no answer needs the passage it answers from
    long_row, short_row = apply_thresholds(long_text, short_text, answer_type, score, short_score,
                                           cfg.long_threshold, cfg.short_threshold)
    return DocumentPrediction(example_id, long_row, short_row, answer_type, score, short_score,
                              long_idx if long_row else -1, raw_long=long_text, raw_short=short_text)


def _best_short_span(start_logits, end_logits, nq_token_index, null, cfg) -> Optional[tuple]:
    """(score, window, start position, end position) of the best short span over all windows."""
    num_windows, seq = start_logits.shape
    k = min(cfg.top_k, seq)
    valid = nq_token_index >= 0
    masked_start = np.where(valid, start_logits, -np.inf)
    masked_end = np.where(valid, end_logits, -np.inf)
    top_s = np.argsort(-masked_start, axis=1)[:, :k]  # [W, k]
    top_e = np.argsort(-masked_end, axis=1)[:, :k]
    rows = np.arange(num_windows)[:, None]
    s_val = masked_start[rows, top_s]  # [W, k]
    e_val = masked_end[rows, top_e]
    scores = s_val[:, :, None] + e_val[:, None, :] - null[:, None, None]  # [W, k, k]
    length = top_e[:, None, :] - top_s[:, :, None]
    scores = np.where((length >= 0) & (length < cfg.max_answer_length), scores, -np.inf)
    flat = int(np.argmax(scores))
    w, i, j = np.unravel_index(flat, scores.shape)
    if not np.isfinite(scores[w, i, j]):
        return None
    return float(scores[w, i, j]), int(w), int(top_s[w, i]), int(top_e[w, j])


def _best_candidate(candidates, start_logits, end_logits, nq_token_index, null) -> Optional[tuple]:
    """(score, window, candidate index) of the best candidate scored on its own."""
    if len(candidates) == 0:
        return None
    first_text, last_text = candidates[:, 3], candidates[:, 4]
    has_text = first_text >= 0
    best = None
    for w in range(start_logits.shape[0]):
        doc_pos = np.nonzero(nq_token_index[w] >= 0)[0]
        if len(doc_pos) == 0:
            continue
        d0 = doc_pos[0]
        nq = nq_token_index[w, d0:doc_pos[-1] + 1]  # nondecreasing NQ indices of the window's pieces
        ps = np.searchsorted(nq, first_text, side="left")  # first piece of the first text token
        pe = np.searchsorted(nq, last_text, side="right") - 1  # last piece of the last text token
        inside = has_text & (ps < len(nq)) & (pe >= 0)
        inside &= nq[np.minimum(ps, len(nq) - 1)] == first_text
        inside &= nq[np.maximum(pe, 0)] == last_text
        if not inside.any():
            continue
        idx = np.nonzero(inside)[0]
        scores = start_logits[w, d0 + ps[idx]] + end_logits[w, d0 + pe[idx]] - null[w]
        j = int(np.argmax(scores))
        if best is None or scores[j] > best[0]:
            best = (float(scores[j]), w, int(idx[j]))
    return best


def containing_candidate(candidates: np.ndarray, start: int, end: int) -> int:
    """The candidate that holds NQ span [start, end): top-level first, else the smallest; -1 if none.

    Gold long answers are nearly always top-level (50 of 52 in the real NQ sample).
    """
    if len(candidates) == 0:
        return -1
    holds = (candidates[:, 0] <= start) & (end <= candidates[:, 1])
    if not holds.any():
        return -1
    top = np.nonzero(holds & (candidates[:, 2] == 1))[0]
    if len(top):
        return int(top[0])
    idx = np.nonzero(holds)[0]
    sizes = candidates[idx, 1] - candidates[idx, 0]
    return int(idx[int(np.argmin(sizes))])

"""Window logits -> one long and one short answer per document. Pure numpy.

The same functions serve dev evaluation during training and
`submission.predict`, so the score seen in training is the score the
submission gets. Two steps, so that scores can be combined between them
(an ensemble averages `DocumentScores` of models with different tokenizers):

* `score_document(...) -> DocumentScores`: everything keyed by NQ tokens, nothing by
  window position: a score per long-answer candidate, the best short spans as NQ
  `[start, end)` with their scores, and the answer-type scores of the answer window.
* `decide(scores, cfg) -> DocumentPrediction`: picks the long/short pair and the
  answer type, then applies the thresholds (`threshold_rows`, the one rule that
  threshold tuning applies too).
`postprocess_document` is the two in a row.

Scoring, per document (the settings are `PostprocessConfig` fields; all off is the BERT-joint rule):
  * short spans: in every window, the top-k start and end positions over
    document tokens, pairs with start <= end and at most `max_answer_length`
    pieces, scored start + end - null, where null = start[CLS] + end[CLS];
  * long candidates: every candidate whose text lies wholly inside a window
    is scored on its own, start at its first text piece + end at its last
    - null (training labels LONG, YES and NO answers with exactly that span);
    a candidate scored in several windows keeps its best score;
  * `score_space: probs`: start and end logits become per-window softmax
    probabilities p over all of the window's positions, and a span scores
    p_start(s) * p_end(e) - p_start(CLS) * p_end(CLS), in [-1, 1]: the span's
    probability minus the window's null probability. Inside one window this
    ranks spans as logits do, and it is positive exactly where the logit score
    is; across windows whose logits sit at different levels it compares
    probabilities, not raw logit differences (log-probabilities minus the null
    log-probability would equal the logit score: the softmax normaliser cancels);
  * `subtract_type_null`: every score from a window also subtracts the type head's
    UNKNOWN score of that window (its logit, or its softmax probability under `probs`);
  * `top_level_only`: only top-level candidates are scored and chosen as long answers
    (a short span's long row is its top-level container already);
  * `max_context`: a window's position may start a span (short or candidate) only if
    that document piece has its most context there: min(pieces left, pieces right)
    + 0.01 * window pieces, highest over the windows holding it, the first window on a
    tie (BERT's `_check_is_max_context`), among the windows run; needs each window's `doc_start`;
  * `n_best_aggregation`: a candidate's score is its best score among its own span and
    the distinct short spans inside it, plus the positive scores of the next
    `n_best_size - 1` of them (several good spans in one candidate add up; spans
    below their null add nothing);
  * the window holding the best score of either kind gives the type scores.

Deciding:
  * `sentence_weight` (off at 0): first, the reader's best candidates and the candidates of its best spans
    add the weight times the backbone's sentence match on them (`with_sentence_match`; the cosines come
    with the scores, computed by the caller, which has the page and the sentence vectors);
  * answer type: argmax over YES/NO/SHORT/LONG of the type scores;
  * the short span is the best one and the long answer the best candidate; with
    `n_best_aggregation` the pair (candidate, span inside it) with the highest sum
    among the top `n_best_size` of each (when one exists);
  * SHORT: long row = the candidate holding the span (its top-level container);
    LONG: the best candidate; YES/NO: the best candidate, short row YES/NO;
  * thresholds (`threshold_rows`): with `separate_thresholds` off, both rows stay blank
    unless the document's best score is above `long_threshold`, and a SHORT answer's
    short row also needs its span score above `short_threshold`. With it on, each row
    has its own: the long row needs score > `long_threshold`; the short row needs the
    span score > `short_threshold` (SHORT), yes_score > `yes_threshold` (YES) or
    no_score > `no_threshold` (NO), where yes_score/no_score are the type scores of YES/NO
    minus UNKNOWN.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

# Importable from here until its callers import it from common.settings, where it lives now.
from solution.data.nq import containing_candidate
from solution.windows.featurizer import ANSWER_TYPES

SCORE_SPACES = ("logits", "probs")
_YES, _NO = ANSWER_TYPES.index("YES"), ANSWER_TYPES.index("NO")


@dataclass
class PostprocessConfig:
    """Saved in the model directory; `submission.predict` reads it from there (`--set KEY=VALUE` overrides)."""

    SETTINGS_NAME = "post-processing"  # what `common.settings.apply_overrides` calls these in its errors

    top_k: int = 20
    """Start and end positions considered per window (n-best size)."""
    max_answer_length: int = 30
    """Longest short answer, in word pieces."""
    long_threshold: float = 0.0
    """Both rows stay blank unless the best score (logits over the [CLS] null score) is above this
    (with separate_thresholds: the long row alone)."""
    short_threshold: float = 0.0
    """The short row stays blank unless the best short span's score is above this."""
    skip_windows_without_candidates: bool = True
    """Do not run the model on windows that hold no token of any long-answer candidate: they cannot
    give a long answer, and NQ's short answers lie inside long ones. Real NQ pages have many (39% of
    the 192-token windows of the real dev sample); the synthetic corpus has none."""
    top_level_only: bool = False
    """Score only top-level candidates as long answers (BERT-joint's skip_nested_contexts; 1st/7th place)."""
    subtract_type_null: bool = False
    """Every window's scores also subtract the type head's UNKNOWN score of that window (21st place)."""
    score_space: str = "logits"
    """"logits": start + end - null in raw logits (BERT-joint); "probs": per-window softmax,
    p_start * p_end - p_null, comparable across windows whose logits differ in level."""
    separate_thresholds: bool = False
    """Independent thresholds for the long row, the short row, YES and NO (2nd/7th place); off: both
    rows blank together under long_threshold."""
    yes_threshold: float = 0.0
    """With separate_thresholds: a YES short row needs yes_score (type YES minus UNKNOWN) above this."""
    no_threshold: float = 0.0
    """With separate_thresholds: a NO short row needs no_score (type NO minus UNKNOWN) above this."""
    n_best_aggregation: bool = False
    """A candidate's score adds up the best n_best_size spans inside it (7th place), and the long/short
    pair is chosen jointly from the top n_best_size of each (21st place)."""
    n_best_size: int = 5
    """Spans summed per candidate, and candidates/spans paired, under n_best_aggregation."""
    max_context: bool = False
    """A piece in several overlapping windows starts spans only in the window where it has the most
    context on both sides (BERT's token_is_max_context; 2nd place)."""
    long_overrun: bool = False
    """A candidate that no window holds whole is scored in each window where it starts, from its first
    text piece to the window's last piece: how a model trained with `window.long_overrun_labels` marks
    a long answer longer than a window (without it such a candidate cannot be chosen)."""
    sentence_weight: float = 0.0
    """A long-answer candidate's score adds this times the backbone's sentence match on it (its best
    sentence's cosine with the question, as `solution.lexical --method sentences` scores candidates), and a
    short span its candidate's: where the reader and a no-training reading agree. 0: off. On, only the
    reader's best `SENTENCE_MATCHED` candidates and the candidates of its best `SENTENCE_MATCHED` spans are
    matched (the rest cannot be chosen), and the scores the thresholds compare are the fused ones, so tune
    them with it on."""
    polarity_offset: float = 0.0
    """With a polarity model (`submission.predict --polarity-model`): a yes/no answer is YES where that
    model's YES-minus-NO score on the page is above this, NO otherwise. `solution.evaluate --tune` sets it
    from dev's yes/no pages (YES and NO pages weighed alike) when the scores file holds the margins
    (`solution.answers.polarity.polarity_cut`): a polarity model can lean to one answer beyond what it reads."""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            # A NaN threshold compares false with every score: every row blank, and nothing says why.
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name} must be a finite number, got {value!r}")
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.max_answer_length < 1:
            raise ValueError(f"max_answer_length must be >= 1, got {self.max_answer_length}")
        if self.sentence_weight < 0:  # a negative weight would prefer the sentences unlike the question
            raise ValueError(f"sentence_weight must be >= 0, got {self.sentence_weight}")
        if self.n_best_size < 1:
            raise ValueError(f"n_best_size must be >= 1, got {self.n_best_size}")
        if self.score_space not in SCORE_SPACES:
            raise ValueError(f"score_space must be one of {', '.join(SCORE_SPACES)}, got {self.score_space!r}")


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
    yes_score: float = float("-inf")  # type score YES minus UNKNOWN (what yes_threshold compares)
    no_score: float = float("-inf")
    # Where a polarity model chose this YES or NO: its YES score minus its NO score on the page (YES above
    # polarity_offset), kept in the scores file so that the choice can be re-made from it without the model.
    polarity_margin: Optional[float] = None


def blank_prediction(example_id: str, error: str = "") -> DocumentPrediction:
    """Both rows blank: no answer, or (with `error`) a document that could not be answered."""
    return DocumentPrediction(example_id, "", "", "UNKNOWN", float("-inf"), float("-inf"), -1, error=error)


def _finite(x: float) -> float:
    return float(x) if x > -1e30 else -1e30  # JSON has no -Infinity: a document with no answer at all


def score_record(prediction: DocumentPrediction) -> dict:
    """The `--scores-out` line of one document: its answers before the thresholds and every score a
    threshold compares. `solution.scoring.tuning` reads exactly these fields, and post-processing thresholds
    this same record (`threshold_rows`)."""
    p = prediction
    record = {"example_id": p.example_id, "raw_long": p.raw_long, "raw_short": p.raw_short,
              "answer_type": p.answer_type, "score": _finite(p.score), "short_score": _finite(p.short_score),
              "yes_score": _finite(p.yes_score), "no_score": _finite(p.no_score)}
    if p.polarity_margin is not None:
        record["polarity_margin"] = min(_finite(p.polarity_margin), 1e30)  # one -inf type score: +-inf
    return record


def apply_thresholds(raw_long: str, raw_short: str, answer_type: str, score: float, short_score: float,
                     long_threshold: float, short_threshold: float) -> tuple:
    """(long, short) rows with separate_thresholds off: both rows blank unless score > long_threshold;
    a SHORT answer's short row blank unless short_score > short_threshold (YES/NO are not span scores)."""
    if not score > long_threshold:
        return "", ""
    short = raw_short if (answer_type != "SHORT" or short_score > short_threshold) else ""
    return raw_long, short


def threshold_rows(record: dict, cfg: PostprocessConfig) -> tuple:
    """(long, short) rows of a `score_record`. The one rule, shared by post-processing and threshold
    tuning: `apply_thresholds` with separate_thresholds off; with it on, each row on its own threshold."""
    r = record
    if not cfg.separate_thresholds:
        return apply_thresholds(r["raw_long"], r["raw_short"], r["answer_type"], r["score"], r["short_score"],
                                cfg.long_threshold, cfg.short_threshold)
    long = r["raw_long"] if r["score"] > cfg.long_threshold else ""
    key = {"SHORT": ("short_score", cfg.short_threshold), "YES": ("yes_score", cfg.yes_threshold),
           "NO": ("no_score", cfg.no_threshold)}.get(r["answer_type"])
    short = r["raw_short"] if key is not None and r[key[0]] > key[1] else ""
    return long, short


@dataclass
class DocumentScores:
    """One document's scores, keyed by NQ tokens (not by window): what models can average."""

    example_id: str
    candidates: np.ndarray  # int [num_candidates, 5], as postprocess_document takes them
    candidate_scores: np.ndarray  # float [num_candidates]; -inf where a candidate was not scored
    span_bounds: np.ndarray  # int [num_spans, 2]: NQ [start, end) of the best distinct short spans, best first
    span_scores: np.ndarray  # float [num_spans], descending
    type_scores: np.ndarray  # float [5]: the answer window's type scores (logits, or probabilities)
    empty: bool = False  # no window, or nothing that could be scored: the answer is blank
    # float [num_candidates]: the sentence match's cosine of the `sentence_matched` candidates, NaN elsewhere;
    # None where none was computed (`sentence_weight` 0).
    candidate_cosines: Optional[np.ndarray] = None


SENTENCE_MATCHED = 8
"""Candidates and spans the sentence match scores a page (`sentence_weight`): the reader's best of each. The
match costs ~3 CPU seconds on a whole page of the nq profile, ~0.15-0.2 s on these (2 Xeon cores)."""


def span_holders(candidates: np.ndarray, span_bounds: np.ndarray, top_level_only: bool) -> np.ndarray:
    """int [num_spans]: the candidate each short span's long row would be (`containing_candidate`), -1 for none."""
    return np.array([containing_candidate(candidates, int(a), int(b), top_level_only) for a, b in span_bounds],
                    dtype=np.int64)


def sentence_matched(s: DocumentScores, cfg: PostprocessConfig) -> np.ndarray:
    """Sorted candidate indices the sentence match scores: the best SENTENCE_MATCHED candidates by the reader's
    score and the candidates holding its best SENTENCE_MATCHED short spans."""
    finite = np.flatnonzero(np.isfinite(s.candidate_scores))
    best = finite[np.argsort(-s.candidate_scores[finite], kind="stable")[:SENTENCE_MATCHED]]
    holders = span_holders(s.candidates, s.span_bounds[:SENTENCE_MATCHED], cfg.top_level_only)
    return np.unique(np.concatenate([best, holders[holders >= 0]]).astype(np.int64))


def with_sentence_match(s: DocumentScores, cfg: PostprocessConfig) -> DocumentScores:
    """`s` with `sentence_weight` times the sentence match added to each matched candidate's score and to each
    short span's (its candidate's cosine); what was not matched can no longer be chosen."""
    if s.empty or not cfg.sentence_weight:
        return s
    if s.candidate_cosines is None:
        raise ValueError("sentence_weight is set and the page has no sentence match "
                         "(solution.answers.inference.match_sentences computes it)")
    # Unmatched: -inf. One -inf more at the end, which a span held by no candidate (-1) indexes.
    cos = np.append(np.where(np.isnan(s.candidate_cosines), -np.inf, s.candidate_cosines), -np.inf)
    span_scores = s.span_scores + cfg.sentence_weight * cos[span_holders(s.candidates, s.span_bounds, cfg.top_level_only)]
    keep = np.isfinite(span_scores)
    order = np.flatnonzero(keep)[np.argsort(-span_scores[keep], kind="stable")]  # best first, as score_document's
    return dataclasses.replace(s, candidate_scores=s.candidate_scores + cfg.sentence_weight * cos[:-1],
                               span_bounds=s.span_bounds[order], span_scores=span_scores[order])


def postprocess_document(example_id: str, candidates: np.ndarray, start_logits: np.ndarray,
                         end_logits: np.ndarray, type_logits: np.ndarray, nq_token_index: np.ndarray,
                         cfg: PostprocessConfig, doc_starts: Optional[np.ndarray] = None) -> DocumentPrediction:
    """Answers for one document: `decide(score_document(...), cfg)`.

    candidates: int [num_candidates, 5] = start_token, end_token, top_level,
        first text token, last text token (-1, -1 for a candidate with no text).
    start_logits, end_logits: float [num_windows, seq]; type_logits [num_windows, 5];
    nq_token_index: int [num_windows, seq], the NQ token of each position, -1 where none.
    doc_starts: int [num_windows], each window's first document piece in the document's piece
        sequence (`Window.doc_start`); needed by `max_context` only.
    """
    scores = score_document(example_id, candidates, start_logits, end_logits, type_logits, nq_token_index,
                            cfg, doc_starts)
    return decide(scores, cfg)


MAX_AGGREGATED_SPANS = 500
"""n_best_aggregation sums spans from the document's best 500 distinct short spans (bounds the work)."""


def score_document(example_id: str, candidates: np.ndarray, start_logits: np.ndarray, end_logits: np.ndarray,
                   type_logits: np.ndarray, nq_token_index: np.ndarray, cfg: PostprocessConfig,
                   doc_starts: Optional[np.ndarray] = None) -> DocumentScores:
    """The document's NQ-keyed scores (arguments as `postprocess_document`)."""
    num_types = type_logits.shape[-1] if type_logits.ndim == 2 else len(ANSWER_TYPES)
    empty = DocumentScores(example_id, candidates, np.full(len(candidates), -np.inf), np.zeros((0, 2), np.int64),
                           np.zeros(0), np.zeros(num_types, np.float32), empty=True)
    if start_logits.shape[0] == 0:
        return empty
    start_val, end_val, type_val, null = _window_values(start_logits, end_logits, type_logits, cfg)
    valid = nq_token_index >= 0
    start_ok = valid
    if cfg.max_context:
        if doc_starts is None:
            raise ValueError("max_context needs each window's doc_start")
        start_ok = valid & max_context_mask(nq_token_index, np.asarray(doc_starts))
    span_w, bounds, span_scores = _short_spans(start_logits, end_logits, start_val, end_val, null,
                                               nq_token_index, start_ok, valid, cfg)
    eligible = np.ones(len(candidates), dtype=bool)
    if cfg.top_level_only and len(candidates):
        eligible = candidates[:, 2] == 1
    cand_scores, cand_windows = _candidate_scores(candidates, eligible, start_val, end_val, null,
                                                  nq_token_index, start_ok, cfg.score_space, cfg.long_overrun)
    if not len(span_scores) and not np.isfinite(cand_scores).any():
        return empty
    short_score = span_scores[0] if len(span_scores) else -np.inf
    best_c = _best_candidate(cand_scores, cand_windows)
    cand_score = cand_scores[best_c] if best_c >= 0 else -np.inf
    answer_window = span_w[0] if short_score >= cand_score else cand_windows[best_c]
    if cfg.n_best_aggregation:
        cand_scores = aggregate_candidates(candidates, eligible, cand_scores, bounds[:MAX_AGGREGATED_SPANS],
                                           span_scores[:MAX_AGGREGATED_SPANS], cfg.n_best_size)
    else:
        bounds, span_scores = bounds[:cfg.top_k], span_scores[:cfg.top_k]  # enough for an ensemble to average
    return DocumentScores(example_id, candidates, cand_scores, bounds, span_scores, type_val[answer_window])


def _window_values(start_logits, end_logits, type_logits, cfg) -> tuple:
    """(start values, end values, type values, null score per window) in the configured score space.
    A span's score is combine(start value, end value) - null."""
    if cfg.score_space == "probs":
        start_val, end_val, type_val = (_softmax(x) for x in (start_logits, end_logits, type_logits))
    else:
        start_val, end_val, type_val = start_logits, end_logits, type_logits
    null = _combine(start_val[:, 0], end_val[:, 0], cfg.score_space)  # [num_windows]
    if cfg.subtract_type_null:
        null = null + type_val[:, 0]
    return start_val, end_val, type_val, null


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _combine(start, end, space: str):
    return start * end if space == "probs" else start + end


def _short_spans(start_logits, end_logits, start_val, end_val, null, nq_token_index, start_ok, valid, cfg):
    """(window, NQ bounds [n, 2], scores [n]) of the distinct short spans from every window's top-k
    starts and ends, best first (ties: window, then start rank, then end rank)."""
    num_windows, seq = start_logits.shape
    k = min(cfg.top_k, seq)
    # Rank by logits (the same order as probabilities within a window), score by values.
    top_s = np.argsort(-np.where(start_ok, start_logits, -np.inf), axis=1)[:, :k]  # [W, k]
    top_e = np.argsort(-np.where(valid, end_logits, -np.inf), axis=1)[:, :k]
    rows = np.arange(num_windows)[:, None]
    scores = _combine(start_val[rows, top_s][:, :, None], end_val[rows, top_e][:, None, :], cfg.score_space)
    scores = scores - null[:, None, None]  # [W, k, k]
    length = top_e[:, None, :] - top_s[:, :, None]
    ok = (length >= 0) & (length < cfg.max_answer_length)
    ok &= start_ok[rows, top_s][:, :, None] & valid[rows, top_e][:, None, :]
    flat = np.where(ok, scores, -np.inf).ravel()
    idx = np.flatnonzero(np.isfinite(flat))
    if not len(idx):
        return np.zeros(0, np.int64), np.zeros((0, 2), np.int64), np.zeros(0)
    if not cfg.n_best_aggregation and len(idx) > 4 * cfg.top_k:
        # Only the best top_k distinct spans are kept: rank a few more than that (duplicates across
        # windows), always with the first maximum, which is the best span whatever the ties.
        part = idx[np.argpartition(-flat[idx], 4 * cfg.top_k)[:4 * cfg.top_k]]
        idx = np.union1d(part, [int(np.argmax(flat))])
    idx = idx[np.argsort(-flat[idx], kind="stable")]
    w, i, j = np.unravel_index(idx, scores.shape)
    bounds = np.stack([nq_token_index[w, top_s[w, i]], nq_token_index[w, top_e[w, j]] + 1], axis=1).astype(np.int64)
    # One entry per NQ span (overlapping windows score the same span twice): keep its best.
    _, first = np.unique(bounds[:, 0] * (int(bounds[:, 1].max()) + 1) + bounds[:, 1], return_index=True)
    first = np.sort(first)
    return w[first], bounds[first], flat[idx[first]].astype(np.float64)


def _candidate_scores(candidates, eligible, start_val, end_val, null, nq_token_index, start_ok, space,
                      overrun: bool = False) -> tuple:
    """(score [C], window [C]) of each candidate scored on its own: its best over the windows that hold
    its text wholly, and the first window giving that best; -inf and -1 where none does. With `overrun`,
    a candidate no window holds whole scores its best over the windows where it starts and ends after
    the window's last piece, that piece taken as its end (`long_overrun`)."""
    num_c = len(candidates)
    best, over = np.full(num_c, -np.inf), np.full(num_c, -np.inf)
    where, over_where = np.full(num_c, -1, dtype=np.int64), np.full(num_c, -1, dtype=np.int64)
    if num_c == 0:
        return best, where
    first_text, last_text = candidates[:, 3], candidates[:, 4]
    has_text = (first_text >= 0) & eligible
    for w in range(start_val.shape[0]):
        doc_pos = np.nonzero(nq_token_index[w] >= 0)[0]
        if len(doc_pos) == 0:
            continue
        d0 = doc_pos[0]
        nq = nq_token_index[w, d0:doc_pos[-1] + 1]  # nondecreasing NQ indices of the window's pieces
        ps = np.searchsorted(nq, first_text, side="left")  # first piece of the first text token
        pe = np.searchsorted(nq, last_text, side="right") - 1  # last piece of the last text token
        ps_c, pe_c = np.minimum(ps, len(nq) - 1), np.maximum(pe, 0)
        starts = has_text & (ps < len(nq)) & (nq[ps_c] == first_text) & start_ok[w, d0 + ps_c]
        _keep_better(starts & (pe >= 0) & (nq[pe_c] == last_text), ps, pe, w, d0, start_val, end_val, null,
                     space, best, where)
        if overrun:
            _keep_better(starts & (last_text > nq[-1]), ps, np.full(num_c, len(nq) - 1), w, d0, start_val,
                         end_val, null, space, over, over_where)
    fill = ~np.isfinite(best) & np.isfinite(over)
    best[fill], where[fill] = over[fill], over_where[fill]
    return best, where


def _keep_better(mask, ps, pe, w, d0, start_val, end_val, null, space, best, where) -> None:
    """Into `best`/`where`: window w's score of each candidate in `mask` (start piece ps, end piece pe,
    relative to the window's first document piece d0) where it beats the best so far (a tie keeps the
    earlier window)."""
    idx = np.nonzero(mask)[0]
    if not len(idx):
        return
    scores = _combine(start_val[w, d0 + ps[idx]], end_val[w, d0 + pe[idx]], space) - null[w]
    better = scores > best[idx]
    best[idx[better]] = scores[better]
    where[idx[better]] = w


def _best_candidate(cand_scores, cand_windows) -> int:
    """The best-scoring candidate; on a tie, the one scored in the earliest window, then the first."""
    if not len(cand_scores) or not np.isfinite(cand_scores).any():
        return -1
    tied = np.flatnonzero(cand_scores == cand_scores.max())
    return int(tied[np.lexsort((tied, cand_windows[tied]))[0]])


def aggregate_candidates(candidates, eligible, cand_scores, span_bounds, span_scores, n_best_size: int):
    """float [C]: each eligible candidate's best score among its own and the spans inside it, plus the
    positive scores of the next n_best_size - 1 (7th place's n-best sum)."""
    if not len(candidates):
        return cand_scores
    inside = ((candidates[:, 0:1] <= span_bounds[None, :, 0]) & (span_bounds[None, :, 1] <= candidates[:, 1:2])
              & eligible[:, None])  # [C, S]
    pool = np.concatenate([cand_scores[:, None], np.where(inside, span_scores[None, :], -np.inf)], axis=1)
    n = min(n_best_size, pool.shape[1])
    top = -np.sort(-pool, axis=1)[:, :n] if pool.shape[1] <= 2 * n else \
        -np.sort(-np.partition(pool, pool.shape[1] - n, axis=1)[:, -n:], axis=1)
    rest = np.where(np.isfinite(top[:, 1:]), np.maximum(top[:, 1:], 0.0), 0.0).sum(axis=1)
    return np.where(np.isfinite(top[:, 0]), top[:, 0] + rest, -np.inf)


def max_context_mask(nq_token_index: np.ndarray, doc_starts: np.ndarray) -> np.ndarray:
    """bool [W, seq]: the document positions whose piece has its most context in this window
    (min(pieces left, pieces right) + 0.01 * window pieces; the first window on a tie), as BERT's
    `_check_is_max_context`. Window w holds document pieces doc_starts[w] ... in consecutive positions."""
    valid = nq_token_index >= 0
    num_windows, seq = valid.shape
    n = valid.sum(axis=1)  # document pieces per window
    d0 = np.argmax(valid, axis=1)  # first document position
    left = np.arange(seq)[None, :] - d0[:, None]
    piece = np.where(valid, doc_starts[:, None] + left, 0)
    context = np.where(valid, np.minimum(left, n[:, None] - 1 - left) + 0.01 * n[:, None], -np.inf)
    best = np.full(int(piece.max()) + 1, -np.inf)
    np.maximum.at(best, piece[valid], context[valid])
    is_best = valid & (context >= best[piece])
    rows = np.broadcast_to(np.arange(num_windows)[:, None], valid.shape)
    first = np.full(len(best), num_windows)
    np.minimum.at(first, piece[is_best], rows[is_best])
    return is_best & (rows == first[piece])


def decide(scores: DocumentScores, cfg: PostprocessConfig) -> DocumentPrediction:
    """The answer and its rows from a document's scores (see the module docstring). Candidates with exactly
    equal scores: the first is taken (window order, which `score_document` also uses for the answer
    window, is not part of NQ-keyed scores)."""
    s = with_sentence_match(scores, cfg)
    if s.empty:
        return blank_prediction(s.example_id)
    candidates = s.candidates
    answer_type = ANSWER_TYPES[1 + int(np.argmax(s.type_scores[1:]))]
    span_i = 0 if len(s.span_scores) else -1
    cand_i = int(np.argmax(s.candidate_scores)) if np.isfinite(s.candidate_scores).any() else -1
    joint = _joint_pair(s, cfg.n_best_size) if cfg.n_best_aggregation else None
    if joint is not None:
        cand_i, span_i = joint
    short_score = float(s.span_scores[span_i]) if span_i >= 0 else float("-inf")
    cand_score = float(s.candidate_scores[cand_i]) if cand_i >= 0 else float("-inf")
    score = max(short_score, cand_score)

    span = span_container = None  # the best short span as an NQ [start, end), and its candidate
    if span_i >= 0:
        span = (int(s.span_bounds[span_i, 0]), int(s.span_bounds[span_i, 1]))
        span_container = cand_i if joint is not None else containing_candidate(candidates, *span, cfg.top_level_only)
    long_idx, short_text = -1, ""
    if answer_type == "SHORT" and span is not None:
        long_idx = span_container
        short_text = f"{span[0]}:{span[1]}"
    else:
        # No candidate fits a window: fall back to the short span's container.
        long_idx = cand_i if cand_i >= 0 else span_container
        if answer_type in ("YES", "NO"):
            short_text = answer_type
    long_text = f"{candidates[long_idx, 0]}:{candidates[long_idx, 1]}" if long_idx >= 0 else ""
    if not long_text and short_text in ("YES", "NO"):
        short_text = ""  # a yes/no answer needs the passage it answers from
    t = s.type_scores
    pred = DocumentPrediction(s.example_id, "", "", answer_type, score, short_score, -1,
                              raw_long=long_text, raw_short=short_text,
                              yes_score=float(t[_YES] - t[0]), no_score=float(t[_NO] - t[0]))
    pred.long, pred.short = threshold_rows(score_record(pred), cfg)
    pred.long_candidate = long_idx if pred.long else -1
    return pred


def _joint_pair(s: DocumentScores, n: int) -> Optional[tuple]:
    """(candidate, span) with the highest summed score among the top n of each, the span inside the
    candidate (21st place); None when no such pair exists."""
    finite = np.flatnonzero(np.isfinite(s.candidate_scores))
    if not len(finite) or not len(s.span_scores):
        return None
    cands = finite[np.argsort(-s.candidate_scores[finite], kind="stable")[:n]]
    spans = np.arange(min(n, len(s.span_scores)))
    c = s.candidates[cands]
    inside = (c[:, 0:1] <= s.span_bounds[None, spans, 0]) & (s.span_bounds[None, spans, 1] <= c[:, 1:2])
    if not inside.any():
        return None
    pair = np.where(inside, s.candidate_scores[cands][:, None] + s.span_scores[None, spans], -np.inf)
    i, j = np.unravel_index(int(np.argmax(pair)), pair.shape)
    return int(cands[i]), int(spans[j])



"""Several models, one answer per document. Pure numpy and torch: the Kaggle kernel imports it.

Two ways to average, chosen per group of models:

  * models that share the tokenizer and the window settings see the very same
    windows: the windows are cut once, every model scores them, and the
    per-window start, end and type logits are averaged (`weighted_runner`)
    before one post-processing;
  * models whose tokenizers or window settings differ cannot share windows:
    each group cuts and scores its own, each document's per-candidate and
    per-span scores (`DocumentScores`, keyed by the NQ candidate index and the
    NQ token span, so they line up across tokenizers) are averaged
    (`combine_scores`) and `decide` picks the answers.

Weights are normalised to sum 1. A model with weight 0 is not run, so weights
`1,0` give the first model's rows exactly; the caller merges a model listed
twice into one member, so a model ensembled with itself is that model exactly.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Sequence

import numpy as np

from solution.inference import candidate_array, predict_documents, window_arrays
from solution.nq import Example
from solution.postprocess import (DocumentPrediction, PostprocessConfig, apply_thresholds, blank_prediction,
                                  containing_candidate)
from solution.windows import ANSWER_TYPES, Featurizer


def parse_weights(text: Optional[str], num_models: int) -> list:
    """`--weights 2,1` -> [2/3, 1/3]; None -> equal weights. Non-negative, not all zero."""
    if text is None:
        return [1.0 / num_models] * num_models
    try:
        raw = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--weights {text!r}: expected comma-separated numbers, one per --model") from None
    if len(raw) != num_models:
        raise ValueError(f"--weights {text!r}: {len(raw)} weights for {num_models} models (one per --model)")
    if any(not np.isfinite(w) or w < 0 for w in raw) or sum(raw) <= 0:
        raise ValueError(f"--weights {text!r}: weights must be finite, >= 0 and not all 0")
    total = sum(raw)
    return [w / total for w in raw]


def weighted_runner(runs: Sequence[Callable], weights: Sequence[float]) -> Callable:
    """A runner (batch -> start, end, type float32 logits) giving the weighted sum of `runs`' logits.

    `weights` sum to 1 (normalised by the caller). A lone model is returned as it is, so its logits
    are not even multiplied by 1.0. Logits are finite (masking happens later, with -1e4), so a
    weight of 0 could never produce 0 * inf; zero-weight models are dropped before they get here.
    """
    if len(runs) == 1:
        return runs[0]

    def run(batch):
        total = None
        for r, w in zip(runs, weights):
            logits = r(batch)
            if total is None:
                total = [np.float32(w) * x for x in logits]
            else:
                for acc, x in zip(total, logits):
                    acc += np.float32(w) * x
        return tuple(total)

    return run


@dataclass
class ModelGroup:
    """Models that share a tokenizer and window settings: their windows are cut once."""

    featurizer: Featurizer
    run: Callable  # batch -> averaged logits (weighted_runner over the group's members)
    weight: float  # the group's share of the ensemble (its members' weights summed)
    num_models: int


def predict_ensemble(groups: Sequence[ModelGroup], examples: Iterable[Example], cfg: PostprocessConfig,
                     batch_size: int = 32, docs_per_chunk: int = 64,
                     progress: Optional[Callable[[int, int], None]] = None) -> Iterator[DocumentPrediction]:
    """One prediction per example, in input order; `cfg` is the ensemble's post-processing (the first model's).

    One group: the ordinary stream over averaged logits. Several: documents go through in chunks,
    every group scores the chunk with its own windows, and the per-document scores are averaged.
    """
    if len(groups) == 1:
        yield from predict_documents(groups[0].run, groups[0].featurizer, examples, cfg, batch_size,
                                     docs_per_chunk, progress)
        return
    docs_done = windows_done = 0
    it = iter(examples)
    while True:
        chunk = list(itertools.islice(it, docs_per_chunk))
        if not chunk:
            return
        per_group = []
        for g in groups:
            counted = {"windows": 0}

            def count(docs, windows, counted=counted):
                counted["windows"] = windows

            per_group.append(list(predict_documents(g.run, g.featurizer, chunk, cfg, batch_size, len(chunk),
                                                    count, answer=document_scores)))
            windows_done += counted["windows"]
        for i, ex in enumerate(chunk):
            parts = [scores[i] for scores in per_group]
            failed = next((p for p in parts if isinstance(p, DocumentPrediction)), None)
            if failed is not None:  # a group could not read or score it: its rows are blank, with the reason
                yield failed
                continue
            try:
                yield decide(ex.example_id, combine_scores(parts, [g.weight for g in groups]), cfg)
            except Exception as e:  # one document's post-processing must not cost the others their rows
                yield blank_prediction(ex.example_id, error=f"{type(e).__name__}: {e}")
        docs_done += len(chunk)
        if progress:
            progress(docs_done, windows_done)


@dataclass
class DocumentScores:
    """One model's (or group's) scores for one document, before any threshold.

    Keyed by the document itself (candidate index, NQ token span), never by windows or word
    pieces, so models with different tokenizers and windows line up.
    """

    candidates: np.ndarray
    """int [num_candidates, 5], as `solution.inference.candidate_array`."""
    candidate_scores: np.ndarray
    """float64 [num_candidates]: a candidate's score as a long answer (its best window); 0 where not scored."""
    candidate_scored: np.ndarray
    """bool [num_candidates]: whether the candidate fitted a window and has a score."""
    spans: dict
    """{(NQ start, NQ end): score} of the short spans considered (end exclusive)."""
    type_logits: Optional[np.ndarray]
    """float [5] answer-type logits (ANSWER_TYPES order) of the window holding the best score; None if none."""


def combine_scores(parts: Sequence[DocumentScores], weights: Sequence[float]) -> DocumentScores:
    """The weighted mean of several models' scores for one document.

    A candidate or span that a model did not score (it fitted none of its windows, or was not among
    its top-k) counts with that model's lowest score of the kind: it ranked below all of them. A
    model that scored nothing of a kind has no say on it; the weights of those that do are
    renormalised. A candidate that no model scored stays unscored. Self-consistent: identical parts give back exactly those scores.
    """
    if not parts:
        raise ValueError("combine_scores needs at least one model's scores")
    cands = parts[0].candidates
    for p in parts[1:]:
        if not np.array_equal(p.candidates, cands):
            raise ValueError("the models' scores are for different candidate lists (not the same document?)")
    num = len(cands)
    total, norm, scored = np.zeros(num), np.zeros(num), np.zeros(num, dtype=bool)
    span_keys = list(dict.fromkeys(k for p in parts for k in p.spans))
    span_total, span_norm = np.zeros(len(span_keys)), np.zeros(len(span_keys))
    type_total, type_norm = np.zeros(len(ANSWER_TYPES)), 0.0
    for p, w in zip(parts, weights):
        if w == 0:
            continue
        if p.candidate_scored.any():
            floor = p.candidate_scores[p.candidate_scored].min()
            total += w * np.where(p.candidate_scored, p.candidate_scores, floor)
            norm += w
            scored |= p.candidate_scored
        if p.spans:
            floor = min(p.spans.values())
            span_total += w * np.array([p.spans.get(k, floor) for k in span_keys])
            span_norm += w
        if p.type_logits is not None:
            type_total += w * np.asarray(p.type_logits, dtype=np.float64)
            type_norm += w
    cand_scores = np.where(scored, total / np.where(scored, norm, 1.0), 0.0)
    spans = {k: float(s / n) for k, s, n in zip(span_keys, span_total, span_norm)}
    types = type_total / type_norm if type_norm > 0 else None
    return DocumentScores(cands, cand_scores, scored, spans, types)


def decide(example_id: str, scores: DocumentScores, cfg: PostprocessConfig) -> DocumentPrediction:
    """Answers from a document's scores: the rule of `postprocess_document`, over scores instead of windows."""
    cands = scores.candidates
    short = max(scores.spans.items(), key=lambda kv: kv[1]) if scores.spans else None
    cand = None
    if scores.candidate_scored.any():
        masked = np.where(scores.candidate_scored, scores.candidate_scores, -np.inf)
        best = int(np.argmax(masked))
        cand = (float(masked[best]), best)
    if (short is None and cand is None) or scores.type_logits is None:
        return blank_prediction(example_id)
    short_score = short[1] if short is not None else float("-inf")
    cand_score = cand[0] if cand is not None else float("-inf")
    score = max(short_score, cand_score)
    answer_type = ANSWER_TYPES[1 + int(np.argmax(scores.type_logits[1:]))]
    span = short[0] if short is not None else None
    span_container = containing_candidate(cands, *span) if span is not None else -1
    long_idx, short_text = -1, ""
    if answer_type == "SHORT" and span is not None:
        long_idx = span_container
        short_text = f"{span[0]}:{span[1]}"
    else:
        long_idx = cand[1] if cand is not None else span_container
        if answer_type in ("YES", "NO"):
            short_text = answer_type
    long_text = f"{cands[long_idx, 0]}:{cands[long_idx, 1]}" if long_idx >= 0 else ""
    if not long_text and short_text in ("YES", "NO"):
        short_text = ""  # a yes/no answer needs the passage it answers from
    long_row, short_row = apply_thresholds(long_text, short_text, answer_type, score, short_score,
                                           cfg.long_threshold, cfg.short_threshold)
    return DocumentPrediction(example_id, long_row, short_row, answer_type, score, short_score,
                              long_idx if long_row else -1, raw_long=long_text, raw_short=short_text)


def document_scores(example: Example, windows: list, logits: list, cfg: PostprocessConfig) -> DocumentScores:
    """One model's `DocumentScores` for a document: the adapter onto today's post-processing.

    It scores exactly as `solution.postprocess.postprocess_document` does (short spans: top-k starts
    and ends per window, start + end - null; candidates: first text piece + last text piece - null;
    type logits of the window holding the best score), keeping every span and candidate instead of
    only the best. The one place to rewire when post-processing exposes its own per-document scores.
    """
    cands = candidate_array(example)
    none = DocumentScores(cands, np.zeros(len(cands)), np.zeros(len(cands), dtype=bool), {}, None)
    if not windows:
        return none
    start, end, types, nq_idx = window_arrays(windows, logits)
    null = start[:, 0] + end[:, 0]
    spans, span_window = _span_scores(start, end, nq_idx, null, cfg)
    cand_scores, cand_window = _candidate_scores(cands, start, end, nq_idx, null)
    scored = cand_window >= 0
    if not spans and not scored.any():
        return none
    best_span = max(spans.items(), key=lambda kv: kv[1]) if spans else None
    best_cand = int(np.argmax(np.where(scored, cand_scores, -np.inf))) if scored.any() else -1
    span_score = best_span[1] if best_span else float("-inf")
    cand_score = cand_scores[best_cand] if best_cand >= 0 else float("-inf")
    window = span_window[best_span[0]] if span_score >= cand_score else cand_window[best_cand]
    return DocumentScores(cands, np.where(scored, cand_scores, 0.0), scored, spans, types[window].copy())


def _span_scores(start, end, nq_idx, null, cfg) -> tuple:
    """({(NQ start, NQ end): best score over windows}, {span: its window}), in postprocess's order."""
    num_windows, seq = start.shape
    k = min(cfg.top_k, seq)
    valid = nq_idx >= 0
    masked_start = np.where(valid, start, -np.inf)
    masked_end = np.where(valid, end, -np.inf)
    top_s = np.argsort(-masked_start, axis=1)[:, :k]
    top_e = np.argsort(-masked_end, axis=1)[:, :k]
    spans, where = {}, {}
    for w in range(num_windows):
        s_val, e_val = masked_start[w, top_s[w]], masked_end[w, top_e[w]]
        scores = s_val[:, None] + e_val[None, :] - null[w]  # [k, k]
        length = top_e[w][None, :] - top_s[w][:, None]
        ok = (length >= 0) & (length < cfg.max_answer_length) & np.isfinite(scores)
        for i, j in zip(*np.nonzero(ok)):
            key = (int(nq_idx[w, top_s[w, i]]), int(nq_idx[w, top_e[w, j]]) + 1)
            score = float(scores[i, j])
            if key not in spans or score > spans[key]:
                spans[key], where[key] = score, w
    return spans, where


def _candidate_scores(cands, start, end, nq_idx, null) -> tuple:
    """(float64 [C] best score of each candidate over windows, int [C] its window or -1 if none)."""
    best = np.zeros(len(cands))
    window = np.full(len(cands), -1, dtype=np.int64)
    if len(cands) == 0:
        return best, window
    first_text, last_text = cands[:, 3], cands[:, 4]
    for w in range(start.shape[0]):
        doc_pos = np.nonzero(nq_idx[w] >= 0)[0]
        if len(doc_pos) == 0:
            continue
        d0 = doc_pos[0]
        nq = nq_idx[w, d0:doc_pos[-1] + 1]
        ps = np.searchsorted(nq, first_text, side="left")
        pe = np.searchsorted(nq, last_text, side="right") - 1
        inside = (first_text >= 0) & (ps < len(nq)) & (pe >= 0)
        inside &= nq[np.minimum(ps, len(nq) - 1)] == first_text
        inside &= nq[np.maximum(pe, 0)] == last_text
        for c in np.nonzero(inside)[0]:
            score = float(start[w, d0 + ps[c]] + end[w, d0 + pe[c]] - null[w])
            if window[c] < 0 or score > best[c]:
                best[c], window[c] = score, w
    return best, window

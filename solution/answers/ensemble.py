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
    (`combine_scores`) and post-processing's own `decide` picks the answers, so
    every post-processing setting applies to both ways alike.

Weights are normalised to sum 1. A model with weight 0 is not run, so weights
`1,0` give the first model's rows exactly; the caller merges a model listed
twice into one member, so a model ensembled with itself is that model exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Sequence

import numpy as np

from solution.answers.inference import match_sentences, predict_documents, window_arrays
from solution.answers.postprocess import (
    DocumentPrediction,
    DocumentScores,
    PostprocessConfig,
    blank_prediction,
    decide,
    score_document,
)
from solution.data.nq import Example, batches_until_error, candidate_array
from solution.windows.featurizer import ANSWER_TYPES, Featurizer


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
    for chunk in batches_until_error(examples, docs_per_chunk):
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
                scores = combine_scores(parts, [g.weight for g in groups])
                yield decide(match_sentences(ex, scores, cfg, groups[0].featurizer.embed), cfg)
            except Exception as e:  # one document's post-processing must not cost the others their rows
                yield blank_prediction(ex.example_id, error=f"{type(e).__name__}: {e}")
        docs_done += len(chunk)
        if progress:
            progress(docs_done, windows_done)


def combine_scores(parts: Sequence[DocumentScores], weights: Sequence[float]) -> DocumentScores:
    """The weighted mean of several models' `DocumentScores` for one document.

    A candidate or span that a model did not score (it fitted none of its windows, or was not among
    its best spans) counts with that model's lowest score of the kind: it ranked below all of them. A
    model that scored nothing of a kind has no say on it; the weights of those that do are
    renormalised. A candidate that no model scored stays unscored (-inf). Identical parts give back
    exactly their scores.
    """
    if not parts:
        raise ValueError("combine_scores needs at least one model's scores")
    cands = parts[0].candidates
    for p in parts[1:]:
        if not np.array_equal(p.candidates, cands):
            raise ValueError("the models' scores are for different candidate lists (not the same document?)")
    live = [(p, w) for p, w in zip(parts, weights) if w > 0 and not p.empty]
    if not live:
        return parts[0]
    cand_scores = _mean_with_floor([(p.candidate_scores, w) for p, w in live], len(cands))
    keys = list(dict.fromkeys((int(a), int(b)) for p, _ in live for a, b in p.span_bounds))
    span_parts = []
    for p, w in live:
        own = {(int(a), int(b)): float(x) for (a, b), x in zip(p.span_bounds, p.span_scores)}
        span_parts.append((np.array([own.get(k, -np.inf) for k in keys]), w))
    span_scores = _mean_with_floor(span_parts, len(keys))
    order = np.argsort(-span_scores, kind="stable")  # best first, as score_document orders them
    bounds = np.array(keys, dtype=np.int64).reshape(-1, 2)[order]
    norm = sum(w for _, w in live)
    types = sum(w * np.asarray(p.type_scores, dtype=np.float64) for p, w in live) / norm
    return DocumentScores(parts[0].example_id, cands, cand_scores, bounds, span_scores[order], types)


def _mean_with_floor(parts: list, n: int) -> np.ndarray:
    """Weighted mean over [(scores [n] with -inf where unscored, weight)]; an unscored entry takes that
    part's lowest finite score; parts with no finite score are left out; -inf where no part scored."""
    total, norm, scored = np.zeros(n), 0.0, np.zeros(n, dtype=bool)
    for scores, w in parts:
        finite = np.isfinite(scores)
        if not finite.any():
            continue
        total += w * np.where(finite, scores, scores[finite].min())
        norm += w
        scored |= finite
    return np.where(scored, total / (norm or 1.0), -np.inf)


def document_scores(example: Example, windows: list, logits: list, cfg: PostprocessConfig) -> DocumentScores:
    """One model group's NQ-keyed scores for a document (`predict_documents`' `answer=` hook)."""
    cands = candidate_array(example)
    if not windows:
        none = np.zeros((0, 1), dtype=np.float32)
        return score_document(example.example_id, cands, none, none, np.zeros((0, len(ANSWER_TYPES))),
                              np.zeros((0, 1), dtype=np.int64), cfg)
    start, end, types, nq_idx, doc_starts = window_arrays(windows, logits)
    return score_document(example.example_id, cands, start, end, types, nq_idx, cfg, doc_starts)

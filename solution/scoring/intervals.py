"""95% bootstrap intervals over documents for micro-F1, and for the paired difference of two systems.

A micro-F1 pools rows, so its uncertainty comes from which documents happened to be drawn: resample
documents with replacement (their (tp, fp, fn) counts, `metric.document_counts`), recompute
2TP / (2TP + FP + FN), and take the 2.5th and 97.5th percentiles. Two systems scored on the same
documents are compared by resampling the same document indices for both (a paired bootstrap), which
cancels the documents' own difficulty: the interval of the difference is far narrower than the two
intervals side by side. A difference whose interval holds 0 is not shown, whatever its sign.
Pure numpy; the resamples are drawn from a fixed seed, so a figure is reproducible.
"""

from __future__ import annotations

import numpy as np

NUM_RESAMPLES = 2000


def _f1(counts: np.ndarray) -> np.ndarray:
    """micro-F1 of summed (tp, fp, fn) along the last axis but one; 0 where nothing was counted."""
    tp, fp, fn = counts[..., 0], counts[..., 1], counts[..., 2]
    den = 2 * tp + fp + fn
    return np.where(den > 0, 2 * tp / np.maximum(den, 1), 0.0)


def _resampled(counts: list, num_resamples: int, seed: int) -> tuple:
    c = np.asarray(counts, dtype=np.float64).reshape(-1, 3)
    if len(c) == 0:
        raise ValueError("no documents to resample")
    idx = np.random.default_rng(seed).integers(0, len(c), size=(num_resamples, len(c)))
    return c, idx


def f1_interval(counts: list, num_resamples: int = NUM_RESAMPLES, seed: int = 0) -> dict:
    """{"f1", "ci": [lo, hi], "num_documents"} for one system's per-document (tp, fp, fn)."""
    c, idx = _resampled(counts, num_resamples, seed)
    boot = _f1(c[idx].sum(axis=1))
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return {"f1": float(_f1(c.sum(axis=0))), "ci": [float(lo), float(hi)], "num_documents": len(c)}


def paired_difference(counts_a: list, counts_b: list, num_resamples: int = NUM_RESAMPLES, seed: int = 0) -> dict:
    """{"delta": F1(b) - F1(a), "ci": [lo, hi], "num_documents"}: b against a on the same documents."""
    if len(counts_a) != len(counts_b):
        raise ValueError(f"a paired difference needs the same documents: {len(counts_a)} against {len(counts_b)}")
    a, idx = _resampled(counts_a, num_resamples, seed)
    b = np.asarray(counts_b, dtype=np.float64).reshape(-1, 3)
    boot = _f1(b[idx].sum(axis=1)) - _f1(a[idx].sum(axis=1))
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return {"delta": float(_f1(b.sum(axis=0)) - _f1(a.sum(axis=0))), "ci": [float(lo), float(hi)],
            "num_documents": len(a)}


def share_interval(hits: list, num_resamples: int = NUM_RESAMPLES, seed: int = 0) -> dict:
    """{"share", "ci", "num_documents"}: the share of documents where something holds (a first pass's recall:
    the gold's window among those kept), with a 95% bootstrap interval resampling the documents."""
    h = np.asarray(hits, dtype=np.float64)
    if len(h) == 0:
        raise ValueError("no documents to resample")
    idx = np.random.default_rng(seed).integers(0, len(h), size=(num_resamples, len(h)))
    lo, hi = np.percentile(h[idx].mean(axis=1), [2.5, 97.5])
    return {"share": float(h.mean()), "ci": [float(lo), float(hi)], "num_documents": len(h)}


def polarity_gap(polarity: dict, num_resamples: int = NUM_RESAMPLES, seed: int = 0) -> dict:
    """{"gap", "ci"}: the share of NO pages a model says NO on minus the share of YES pages it says NO on
    (`metric.yes_no_polarity`), with a 95% bootstrap interval resampling each kind's pages. 0: the model
    says NO without reading which; 1: it says NO exactly on the NO pages."""
    rng = np.random.default_rng(seed)
    no = rng.binomial(polarity["no_pages"], polarity["no_on_no"] / polarity["no_pages"], num_resamples)
    yes = rng.binomial(polarity["yes_pages"], polarity["no_on_yes"] / polarity["yes_pages"], num_resamples)
    boot = no / polarity["no_pages"] - yes / polarity["yes_pages"]
    lo, hi = np.percentile(boot, [2.5, 97.5])
    gap = polarity["no_on_no"] / polarity["no_pages"] - polarity["no_on_yes"] / polarity["yes_pages"]
    return {"gap": float(gap), "ci": [float(lo), float(hi)]}

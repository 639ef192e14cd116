"""How NQ-shaped a simplified-NQ file is: the figures that hold the synthetic `nq` profile to the real sample.

    python -m solution.corpus_stats FILE [FILE ...] [--json]

Streams each file (the real training file is 17 GB) through the validating
reader and reports, counting words as non-HTML tokens only:

- median and 90th percentile (the value at rank floor(0.9 (n-1))) of words per document;
- median long-answer candidates per document;
- share of a document's candidates that are top-level, averaged over documents;
- share of 350-word chunks (stand-ins for 512-piece windows) holding no word
  of any candidate: navigation, references and text between candidates;
- median words of a gold long answer, and the share of gold long answers that
  are top-level candidates (each annotation with a long answer counts once).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from solution.nq import is_html_token, read_examples

CHUNK_WORDS = 350  # ~512 word pieces of running Wikipedia text

# (key, label, kind): kind "count" rows are compared relatively, "share" rows absolutely.
ROWS = (
    ("median_words", "median words per document", "count"),
    ("p90_words", "90th percentile of words", "count"),
    ("median_candidates", "median long-answer candidates per document", "count"),
    ("top_level_share", "share of candidates that are top-level", "share"),
    ("empty_chunk_share", "share of chunks holding no candidate token", "share"),
    ("median_gold_long_words", "median gold long answer, words", "count"),
    ("gold_top_level_share", "share of gold long answers that are top-level", "share"),
)


def _percentile(xs: list, q: float):
    """The q-quantile as a value of `xs` (numpy's method="lower"), as docs/data.md's table defines it."""
    return sorted(xs)[int((len(xs) - 1) * q)]


class CorpusStats:
    """Accumulates per-document figures one example at a time (constant memory per document)."""

    def __init__(self):
        self.words, self.num_cands = [], []
        self.top_level_shares = []
        self.chunks = self.empty_chunks = 0
        self.gold_words, self.gold_top = [], 0

    def add(self, ex) -> None:
        tokens = ex.tokens
        # word_prefix[i] = non-HTML tokens before token i; in_cand marks tokens inside any candidate.
        word_prefix, in_cand = [0] * (len(tokens) + 1), [False] * (len(tokens) + 1)
        for c in ex.candidates:  # mark with a difference array: +1 at start, -1 at end
            in_cand[c.start_token] = in_cand[c.start_token] + 1
            in_cand[c.end_token] = in_cand[c.end_token] - 1
        depth, chunk_has, n = 0, False, 0
        for i, tok in enumerate(tokens):
            depth += in_cand[i]
            html = is_html_token(tok)
            word_prefix[i + 1] = word_prefix[i] + (not html)
            if html:
                continue
            chunk_has = chunk_has or depth > 0
            n += 1
            if n % CHUNK_WORDS == 0:
                self.chunks, self.empty_chunks, chunk_has = self.chunks + 1, self.empty_chunks + (not chunk_has), False
        if n % CHUNK_WORDS:  # the last, shorter chunk
            self.chunks, self.empty_chunks = self.chunks + 1, self.empty_chunks + (not chunk_has)
        self.words.append(n)
        self.num_cands.append(len(ex.candidates))
        if ex.candidates:  # a per-document share, averaged: one huge page does not outweigh the rest
            self.top_level_shares.append(sum(c.top_level for c in ex.candidates) / len(ex.candidates))
        for ann in ex.annotations or ():
            if ann.long_answer is not None:
                self.gold_words.append(word_prefix[ann.long_answer.end_token] - word_prefix[ann.long_answer.start_token])
                self.gold_top += ex.candidates[ann.candidate_index].top_level

    def figures(self) -> dict:
        def share(a, b):
            return round(a / b, 4) if b else None
        return {
            "documents": len(self.words),
            "median_words": statistics.median(self.words) if self.words else None,
            "p90_words": _percentile(self.words, 0.9) if self.words else None,
            "median_candidates": statistics.median(self.num_cands) if self.num_cands else None,
            "top_level_share": share(sum(self.top_level_shares), len(self.top_level_shares)),
            "empty_chunk_share": share(self.empty_chunks, self.chunks),
            "median_gold_long_words": statistics.median(self.gold_words) if self.gold_words else None,
            "gold_top_level_share": share(self.gold_top, len(self.gold_words)),
            "gold_long_answers": len(self.gold_words),
        }


def corpus_figures(paths) -> dict:
    """The table's figures over all examples of `paths` (one pooled corpus)."""
    stats = CorpusStats()
    for path in paths:
        for ex in read_examples(path):
            stats.add(ex)
    return stats.figures()


def format_table(figures: dict, title: str = "figure") -> str:
    lines = [f"| {title} | value |", "|---|---|"]
    for key, label, kind in ROWS:
        v = figures[key]
        text = "-" if v is None else (f"{v:,.0f}" if kind == "count" else f"{v:.2f}")
        lines.append(f"| {label} | {text} |")
    lines.append(f"| documents (gold long answers) | {figures['documents']:,} ({figures['gold_long_answers']:,}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m solution.corpus_stats", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", metavar="FILE", help="simplified-NQ files (.jsonl or .jsonl.gz), pooled")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    try:
        figures = corpus_figures(args.files)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(figures) if args.json else format_table(figures, ", ".join(args.files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

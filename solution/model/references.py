"""The answerers that need no training: what a trained reader has to beat (`python -m solution.lexical` runs them).

`answer`: question words matched inside the page's sentences; `bm25_answer`: Okapi BM25 over the page's
top-level candidates; `sentence_answer`: the backbone's own sentence vectors. Each gives the score record
`submission.predict --scores-out` writes, so thresholds are tuned and predictions made from them exactly as
for a model (`solution.scoring.tuning.tuned_on_dev`). The command's docstring says how each one reads a page.
"""

from __future__ import annotations

import functools
import math
from collections import Counter

import numpy as np

from solution.data.nq import is_text_token, read_examples
from solution.data.words import CELL_TAGS, SEGMENT_ENDS, STOP_WORDS, content_words, mask_subject, page_title, segments, stem  # noqa: F401
from solution.windows.first_pass import candidate_cosines

YES_NO_OPENINGS = frozenset("is are was were does do did can has have".split())


def value_run(tokens: list, seg: list, question: frozenset) -> tuple:
    """(start, end) NQ tokens of the short answer a segment states; (-1, -1) without one.

    A table row states its value in its last cell (the first names what it is): that cell's words.
    A sentence states it in its last run of value words (`_value_word`): facts are put as
    "<subject> ... is <value> .", and a value names something (a capitalised word or a number);
    a sentence whose last run does not is answered with its long answer only."""
    cells = [j for j, i in enumerate(seg) if _opens_value_cell(tokens, i)]
    if cells and cells[-1] > 0:
        return seg[cells[-1]], seg[-1] + 1
    runs = []
    for k, i in enumerate(seg):
        if not _value_word(tokens[i], question, first=k == 0):
            continue
        if runs and runs[-1][1] == i:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1])
    if not runs:
        return -1, -1
    start, end = runs[-1]
    if not any(tokens[i][:1].isupper() or any(c.isdigit() for c in tokens[i]) for i in range(start, end)):
        return -1, -1
    return start, end


def _value_word(word: str, question: frozenset, first: bool) -> bool:
    """A word that can be part of a stated value: not a stop word, and not one of the question's unless
    capitalised inside the sentence ("Lake" of "Lake Grukva" answering "what is the largest lake")."""
    low = word.lower()
    if low in STOP_WORDS or not any(c.isalnum() for c in word):
        return False
    return low not in question or (word[:1].isupper() and not first)


def _opens_value_cell(tokens: list, i: int) -> bool:
    return tokens[i - 1] == "<Td>"


def in_table_row(tokens: list, seg: list) -> bool:
    """Whether a segment is a table row's cells (a row of the page's own table: the neighbour's facts
    are stated in sentences that name it)."""
    return tokens[seg[0] - 1] in CELL_TAGS


def header_row(tokens: list, seg: list) -> bool:
    """A table row of header cells only (column names): it states no value."""
    return in_table_row(tokens, seg) and not any(_opens_value_cell(tokens, i) for i in seg)


def answer(example, idf=None) -> dict:
    """The score record of one document (see the module docstring). `idf`: {word: weight}, from
    `inverse_document_frequency`; a word it lacks weighs as the rarest (None: every word weighs 1)."""
    q, toks = content_words(example.question_text), example.tokens
    title = page_title(toks) & q  # the question's words that name the page's subject
    asked = (q - title) or q
    weight = {w: 1.0 if idf is None else idf.get(w, idf.get("", 1.0)) for w in asked}
    total, best = sum(weight.values()), (0.0, None, None)
    for cand in example.candidates:
        if not cand.top_level:
            continue
        for seg in segments(toks, cand.start_token, cand.end_token):
            words = {toks[i].lower() for i in seg}
            if header_row(toks, seg):
                continue  # column names state no value
            if title and not title & words and not in_table_row(toks, seg):
                continue  # a sentence about another subject, however many of the words it shares
            share = sum(weight[w] for w in asked & words) / total if total else 0.0
            if share > best[0]:
                best = (share, cand, seg)
    share, cand, seg = best
    record = {"example_id": example.example_id, "raw_long": "", "raw_short": "", "answer_type": "LONG",
              "score": share, "short_score": 0.0, "yes_score": 0.0, "no_score": 0.0}
    if cand is None:
        return record
    record["raw_long"] = f"{cand.start_token}:{cand.end_token}"
    words = example.question_text.lower().split()
    if words and words[0] in YES_NO_OPENINGS:
        every = share >= 1.0 - 1e-9
        record["answer_type"] = record["raw_short"] = "YES" if every else "NO"
        record["yes_score" if every else "no_score"] = share
        return record
    start, end = value_run(toks, seg, q)
    if start >= 0:
        record.update(answer_type="SHORT", raw_short=f"{start}:{end}", short_score=share)
    return record


def inverse_document_frequency(path, on_error: str = "raise") -> dict:
    """{word: log(N / documents holding it)} over a file's pages (lower-cased text words); "" holds
    the weight of a word no page holds. A word on every page ("work", "large") then weighs little
    against one that names what is asked ("anthem")."""
    df, n = Counter(), 0
    for ex in read_examples(str(path), on_error=on_error):
        n += 1
        df.update({t.lower() for t in ex.tokens if is_text_token(t)})
    return {**{w: math.log(n / c) for w, c in df.items()}, "": math.log(n + 1)}


def _stems(words) -> list:
    """The stems (`words.stem`) of the words that are not stop words."""
    return [stem(w) for w in words if w.lower() not in STOP_WORDS and any(c.isalnum() for c in w)]


def bm25_answer(example) -> dict:
    """The score record of one document under `--method bm25` (see the module docstring)."""
    from rank_bm25 import BM25Okapi

    record = {"example_id": example.example_id, "raw_long": "", "raw_short": "", "answer_type": "LONG",
              "score": 0.0, "short_score": 0.0, "yes_score": 0.0, "no_score": 0.0}
    toks = example.tokens
    question = content_words(example.question_text)
    query = _stems((question - page_title(toks)) or question)
    cands = [c for c in example.candidates if c.top_level]
    texts = [_stems(t for t in toks[c.start_token:c.end_token] if is_text_token(t)) for c in cands]
    if not query or not any(texts):
        return record
    scores = BM25Okapi(texts).get_scores(query)
    best = max(range(len(cands)), key=lambda i: (scores[i], -i))  # a tie goes to the earlier candidate
    return record | {"raw_long": f"{cands[best].start_token}:{cands[best].end_token}", "score": float(scores[best])}


def sentence_answer(example, embed) -> dict:
    """The score record of one document under `--method sentences` (see the module docstring); `embed(texts)`
    -> unit-length rows, one a text (`SentenceEncoder.embed`)."""
    record = {"example_id": example.example_id, "raw_long": "", "raw_short": "", "answer_type": "LONG",
              "score": 0.0, "short_score": 0.0, "yes_score": 0.0, "no_score": 0.0}
    top = [k for k, c in enumerate(example.candidates) if c.top_level]
    cosines = candidate_cosines(example, top, embed)  # the match post-processing's sentence_weight fuses
    scored = [k for k in top if not np.isnan(cosines[k])]  # a candidate with no segment is no answer
    if not scored:
        return record
    best = max(scored, key=lambda k: (cosines[k], -k))  # a tie goes to the earlier candidate
    cand = example.candidates[best]
    return record | {"raw_long": f"{cand.start_token}:{cand.end_token}", "score": float(cosines[best])}


@functools.lru_cache(maxsize=1)
def sentence_embed(threads: int = 0, device: str = "cpu", model: str | None = None):
    """`model`'s `SentenceEncoder.embed` on `device` (None: the backbone's package; or a directory holding it, as
    on the GPU machine, which has no package), loaded once a process (torch is imported here alone: `words` and `bm25` never
    need it); `threads` > 0 sets torch's intra-op threads first."""
    import torch

    from solution.model.sentences import SENTENCE_BACKBONE, shared_encoder

    if threads > 0:
        torch.set_num_threads(threads)
    return shared_encoder(model or SENTENCE_BACKBONE, device).embed  # the first pass's own: one copy of the model a process


METHODS = ("words", "bm25", "sentences")


def lexical_records(path, on_error: str = "raise", method: str = "words", stats=None, threads: int = 0,
                    device: str = "cpu", model: str | None = None) -> list:
    """Score records of every document of a simplified-NQ file: `words`, the word-matching answerer (two
    passes: word weights, then answers), `bm25`, the retrieval reference, or `sentences`, the backbone's
    sentence vectors (of `model`) computed on `device` (`threads`: torch's CPU threads, 0 its default). `stats`: a
    `ReadStats` the answering pass counts its lines and skips into."""
    if method == "bm25":
        return [bm25_answer(ex) for ex in read_examples(str(path), on_error=on_error, stats=stats)]
    if method == "sentences":
        embed = sentence_embed(threads, device, model)
        return [sentence_answer(ex, embed) for ex in read_examples(str(path), on_error=on_error, stats=stats)]
    idf = inverse_document_frequency(path, on_error)
    return [answer(ex, idf) for ex in read_examples(str(path), on_error=on_error, stats=stats)]

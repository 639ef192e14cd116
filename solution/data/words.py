"""Words of questions and pages: the stop words that carry no content, a text's content words, the
share of a question's words a window covers (the first pass's ranking and the word-matching reference),
a page's sentences, items and rows (`segments`), and its subject masked (`mask_subject`).
"""

from __future__ import annotations

import numpy as np

from solution.data.nq import is_text_token

# Words that carry no content in a question: matching them says nothing about a passage.
STOP_WORDS = frozenset("""a an and are as at be been by did do does for from had has have how in into is it its
many much of on or that the their this to was were what when where which who whom whose why with
about describe kind like me tell type""".split())  # the last line: words that frame a question, not its subject


def content_words(text: str) -> frozenset:
    """The lower-cased words of `text` that are not stop words (NQ text is split by single spaces)."""
    return frozenset(w for w in text.lower().split() if w not in STOP_WORDS and any(c.isalnum() for c in w))


def question_word_share(question_words: frozenset, tokens: list, nq_token_index: np.ndarray) -> float:
    """Share of `question_words` among the document tokens a window covers (0 for a question without any)."""
    if not question_words:
        return 0.0
    covered = nq_token_index[nq_token_index >= 0]
    if len(covered) == 0:
        return 0.0
    seen = {tokens[i].lower() for i in range(int(covered.min()), int(covered.max()) + 1)}
    return len(question_words & seen) / len(question_words)


def page_title(tokens: list) -> frozenset:
    """The content words of the page's title: the text inside its first <H1>, as NQ pages open."""
    try:
        start = tokens.index("<H1>") + 1
        return content_words(" ".join(tokens[start:tokens.index("</H1>", start)]))
    except ValueError:
        return frozenset()


STEM_LETTERS = 6
"""A crude stem: words compared on their first letters ("founded" and "founder", "establ" for established and
establishment), as the question-answer overlap figures and the BM25 reference compare them."""


def stem(word: str) -> str:
    return word.lower()[:STEM_LETTERS]


SEGMENT_ENDS = frozenset({".", "</Tr>", "</Li>", "</P>", "<Tr>", "<Li>"})
CELL_TAGS = frozenset({"<Td>", "</Td>", "<Th>", "</Th>"})


def segments(tokens: list, start: int, end: int):
    """Token index lists of the sentences, items and rows between `start` and `end` (text tokens only)."""
    seg = []
    for i in range(start, end):
        tok = tokens[i]
        if tok in CELL_TAGS:
            continue  # a table row is one segment: its label cell names what its value cell states
        if tok in SEGMENT_ENDS or (not is_text_token(tok) and tok.startswith("</")):
            if seg:
                yield seg
            seg = []
        elif is_text_token(tok):
            seg.append(i)
    if seg:
        yield seg


NEUTRAL_SUBJECT = "the subject"


def mask_subject(words: list, subject: frozenset, neutral: str = NEUTRAL_SUBJECT) -> str:
    """`words` joined with each run of the subject's words (compared lower-cased) replaced by `neutral`.

    A question about an invented page names that page's subject, and so does every sentence on it; in
    sentence vectors the subject's name then dominates both, so it is masked in question and sentences alike."""
    out, in_run = [], False
    for w in words:
        if w.lower() in subject:
            if not in_run:
                out.append(neutral)
            in_run = True
        else:
            out.append(w)
            in_run = False
    return " ".join(out)

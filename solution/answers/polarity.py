"""YES or NO read by a second model: the answer model says where the answer is and that it is a yes/no; a
polarity model says which.

Why two models: on nq-shaped pages a model trained to read the polarity (several passes over yes/no windows
that hold their whole paragraph, then a pass over ordinary pages) keeps the YES-against-NO margin and loses
the answer model's sense of which pages are yes/no questions at all, while the answer model types them well
and reads no polarity (docs/answers-techniques.md, "A polarity model beside the answer model"). Here only a
yes/no answer's polarity changes: every other answer, and every span, is the answer model's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Optional

from solution.answers.postprocess import DocumentPrediction, score_record, threshold_rows

YES_NO = ("YES", "NO")


def reads_polarity(prediction: DocumentPrediction) -> bool:
    """Whether the polarity model is asked about this document: the answer model typed it YES or NO."""
    return prediction.answer_type in YES_NO and not prediction.error


def with_polarity(prediction: DocumentPrediction, polarity: DocumentPrediction, cfg) -> DocumentPrediction:
    """`prediction` with its YES/NO replaced by the polarity model's on the same page: YES where that model's
    YES type score minus its NO score is above `cfg.polarity_offset` (0: above its NO score). Both of the
    answer's type scores become the larger of its two, so that a threshold (tuned on these scores or the answer
    model's own) keeps or drops the answer as it would have, whichever polarity it now has; the margin it was
    chosen by is kept (`polarity_margin`). A polarity model that scored no window of the page changes nothing."""
    if not reads_polarity(prediction) or polarity.error or polarity.yes_score == polarity.no_score == float("-inf"):
        return prediction
    margin = polarity.yes_score - polarity.no_score
    which, raw_short = read_at(margin, cfg.polarity_offset, prediction.raw_short)
    top = max(prediction.yes_score, prediction.no_score)
    out = replace(prediction, answer_type=which, yes_score=top, no_score=top, polarity_margin=margin,
                  raw_short=raw_short)
    _, out.short = threshold_rows(score_record(out), cfg)  # the long row does not depend on the answer's type
    return out


def read_at(margin: float, offset: float, raw_short: str) -> tuple:
    """(answer type, raw short row) of a yes/no answer whose polarity model's margin is `margin`, cut at
    `offset`: YES above it, NO otherwise; a raw short row that is YES or NO says the same."""
    which = "YES" if margin > offset else "NO"
    return which, which if raw_short in YES_NO else raw_short


def gold_polarity(gold) -> str:
    """"YES" or "NO" where a page's annotators gave that one alone (`metric.Gold.short`), else ""."""
    kinds = [k for k in YES_NO if k in gold.short]
    return kinds[0] if len(kinds) == 1 else ""


def polarity_cut(records: list, gold: dict) -> Optional[dict]:
    """The `polarity_offset` that reads the YES pages and the NO pages best, each counted by its own share read
    right (their mean, `balanced`), among the `--scores-out` records a polarity model read (those with a
    `polarity_margin`) whose gold is YES or NO alone: every cut between two margins is tried and 0, a tie going
    to the cut that reads the most pages right, then to the one nearest 0. {"polarity_offset", "balanced",
    "balanced_at_0", "right", "pages", "right_at_0"}; None where the file has no such page (nothing to tune on).

    Why the mean of the two shares and not the most pages right: YES pages outnumber NO pages about two to one,
    so the most-right cut can give up NO pages for a few more YES ones; on fresh pages the balanced cut was never
    worse and read NO better (docs/answers-techniques.md, "The cut's objective")."""
    read = [(r["polarity_margin"], gold_polarity(gold[r["example_id"]])) for r in records
            if "polarity_margin" in r and r["example_id"] in gold]
    pages = [(m, g) for m, g in read if g]
    if not pages:
        return None
    margins = sorted({m for m, _ in pages})
    cuts = [0.0, margins[0] - 1.0, *((a + b) / 2 for a, b in zip(margins, margins[1:])), margins[-1] + 1.0]
    kinds = Counter(g for _, g in pages)  # the pages of each kind present

    def right(cut: float, kind: str = "") -> int:
        return sum(("YES" if m > cut else "NO") == g for m, g in pages if not kind or g == kind)

    def balanced(cut: float) -> float:
        return sum(right(cut, k) / n for k, n in kinds.items()) / len(kinds)

    best = max(cuts, key=lambda c: (balanced(c), right(c), -abs(c)))
    return {"polarity_offset": best, "balanced": round(balanced(best), 4), "balanced_at_0": round(balanced(0.0), 4),
            "right": right(best), "pages": len(pages), "right_at_0": right(0.0)}


def with_cut(records: list, offset: float) -> list:
    """The records with each polarity model's YES or NO chosen again at `offset`, as `with_polarity` chooses
    it (the type scores are already the larger of the two, so no threshold's decision changes)."""
    out = []
    for r in records:
        if "polarity_margin" in r and r["answer_type"] in YES_NO:
            which, raw_short = read_at(r["polarity_margin"], offset, r["raw_short"])
            r = {**r, "answer_type": which, "raw_short": raw_short}
        out.append(r)
    return out


def tuned_cut(records: list, gold: dict) -> tuple:
    """(records, cut): the records with a polarity model's YES or NO chosen again at the cut `polarity_cut`
    tunes on them, and that cut's figures; the records as they are and None where they hold no margin on a
    YES or NO page."""
    cut = polarity_cut(records, gold)
    return (records, None) if cut is None else (with_cut(records, cut["polarity_offset"]), cut)

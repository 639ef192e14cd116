"""YES or NO read by a second model: the answer model says where the answer is and that it is a yes/no; a
polarity model says which.

Why two models: on nq-shaped pages a model trained to read the polarity (several passes over yes/no windows
that hold their whole paragraph, then a pass over ordinary pages) keeps the YES-against-NO margin and loses
the answer model's sense of which pages are yes/no questions at all, while the answer model types them well
and reads no polarity (docs/answers-techniques.md, "A polarity model beside the answer model"). Here only a
yes/no answer's polarity changes: every other answer, and every span, is the answer model's.
"""

from __future__ import annotations

from dataclasses import replace

from solution.answers.postprocess import DocumentPrediction, score_record, threshold_rows

YES_NO = ("YES", "NO")


def reads_polarity(prediction: DocumentPrediction) -> bool:
    """Whether the polarity model is asked about this document: the answer model typed it YES or NO."""
    return prediction.answer_type in YES_NO and not prediction.error


def with_polarity(prediction: DocumentPrediction, polarity: DocumentPrediction, cfg) -> DocumentPrediction:
    """`prediction` with its YES/NO replaced by the polarity model's on the same page: YES where that model's
    YES type score is above its NO score. Both of the answer's type scores become the larger of its two, so
    that a threshold (tuned on these scores or the answer model's own) keeps or drops the answer as it would
    have, whichever polarity it now has; the margin it was chosen by is kept (`polarity_margin`). A polarity
    model that scored no window of the page changes nothing."""
    if not reads_polarity(prediction) or polarity.error or polarity.yes_score == polarity.no_score == float("-inf"):
        return prediction
    margin = polarity.yes_score - polarity.no_score
    which = "YES" if margin > 0 else "NO"
    top = max(prediction.yes_score, prediction.no_score)
    out = replace(prediction, answer_type=which, yes_score=top, no_score=top, polarity_margin=margin,
                  raw_short=which if prediction.raw_short in YES_NO else prediction.raw_short)
    _, out.short = threshold_rows(score_record(out), cfg)  # the long row does not depend on the answer's type
    return out

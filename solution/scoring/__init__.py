"""How answers are graded: the competition's micro-F1, MLE-bench's grader, threshold tuning, validating
a submission before upload, and bootstrap intervals over documents.

Separate because a grade must not depend on how the answers were made.
"""

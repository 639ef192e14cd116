"""The synthetic corpora in the exact simplified-NQ format (`python -m solution.synth`): the easy
profile, and pages shaped like real NQ whose questions match words (`nq-lexical`) or need reading (`nq`).
"""

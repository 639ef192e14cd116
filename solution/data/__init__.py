"""Reading simplified-NQ: lines checked and parsed into examples, candidates and annotations, and the
word helpers (content words, stop words) that the first pass and the word-matching reference share.

Separate because it needs neither a tokenizer nor torch: the first stage anything reads.
"""

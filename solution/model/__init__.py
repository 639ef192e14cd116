"""The QA model (any Hugging Face encoder with span and answer-type heads) and the self-describing
model directory that prediction rebuilds everything from, and what a model costs on Kaggle's cards
(the kernel's time budget).

Separate because it holds no distributed code: strategies wrap it from outside.
"""

"""From window logits to answers: post-processing (one path for dev scoring and the submission),
batched inference and ensembles.

Separate because the offline kernel ships this stage and the ones before it, and nothing of training.
"""

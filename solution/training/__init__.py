"""The training loop: the one typed config, the check that every rank runs the same settings, the trainer,
the stop protocol for signals, the run's records (metrics.jsonl) and the memory probe.

Separate because it is the last stage: it uses every other one and none uses it.
"""

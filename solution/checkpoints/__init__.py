"""Resumable checkpoints: their state and names, finding the one to resume, writes in the background,
the checkpointer that decides when to save and prunes, resume routes across engines and world
sizes, and the layout of what each engine writes.

Separate because consolidation and resume read the same files without the training loop.
"""

"""Helpers every stage uses: the command line's spellings and progress bars, files written whole,
settings files read safely, and which precision the machine computes natively.

Separate because everything below depends on it and it depends on nothing of the project.
"""

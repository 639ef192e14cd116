"""The experiments: the answers benchmark, the GPU check and the other benchmarks' code, over the library.

The last stage: it may import every stage before it and nothing imports it. `scripts/` holds the thin
commands that parse arguments and call in here; the prediction, scoring and loading they use are the
library's own (the same path `submission.predict` takes), never a copy.
"""

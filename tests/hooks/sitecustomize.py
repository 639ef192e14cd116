"""Imported by every Python process started with this folder on PYTHONPATH (Python's `site` does so).

In a rank a launcher started (LOCAL_RANK is set) it applies the fault that FAULTY_TRAIN names, from
tests/faulty_train.py: a fault then reaches ranks that a script starts as `-m solution.train`
(scripts/launch_slurm.sh), where tests/faulty_train.py cannot be the entry point. Elsewhere (the
launcher, the script's own Python calls) it does nothing.
"""

import os
import sys
from pathlib import Path

if os.environ.get("FAULTY_TRAIN") and "LOCAL_RANK" in os.environ:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import faulty_train

    faulty_train.apply(os.environ["FAULTY_TRAIN"])

"""Every rank runs the same settings: compared across ranks at start-up, before anything is built from them.

Each node's launcher (torchrun --nnodes, accelerate launch --machine_rank, srun) starts its ranks with its
own command line. Two nodes started with different settings (another learning rate, another max_steps)
would otherwise train together, each applying its own step to the all-reduced gradients, and config.yaml
would record only rank 0's. So every rank sends its resolved settings (small: the dict config.yaml is
written from) to every other, and if they differ every rank stops with exit 2 and one line naming each
differing setting with each group of ranks' value.
"""

from __future__ import annotations

import json
from typing import Optional

from solution.distributed.watchdog import format_ranks
from solution.training.config import SECTIONS, TrainConfig
from solution.training.stop import EXIT_CONFIG, TrainingStopped

PER_MACHINE_SETTINGS = ("num_proc", "dataloader_num_workers")
"""Settings a node may size to its own machine, left out of the comparison: neither changes what is trained.
num_proc: the processes that featurise (only the main process featurises, the others read its cache,
whose key leaves num_proc out). dataloader_num_workers: the loader's worker processes (the batches and
their order are the same: EpochShuffle orders them). Paths are compared: output_dir and cache_dir must be
one filesystem every machine sees (docs/checkpoints.md), and a path that differs is another train_file,
another cache key or another output_dir to the code, whatever it means on each node; mount it under the
same name everywhere."""


def compared_settings(cfg: TrainConfig) -> dict:
    """The resolved settings every rank must share, by name (a section's fields as `window.doc_stride`)."""
    flat = {}
    for key, value in cfg.to_dict().items():
        for name, v in (value.items() if key in SECTIONS else [(key, value)]):
            flat[f"{key}.{name}" if key in SECTIONS else name] = v
    for name in PER_MACHINE_SETTINGS:
        flat.pop(name)
    return flat


def settings_disagreement(per_rank: list) -> Optional[str]:
    """One line naming each setting whose value differs between ranks (`per_rank[r]`: rank r's
    `compared_settings`), each value with the ranks that run it; None when every rank agrees."""
    names = list(dict.fromkeys(name for settings in per_rank for name in settings))
    differing = []
    for name in names:
        groups: dict = {}  # the value as JSON -> the ranks that run it
        for rank, settings in enumerate(per_rank):
            groups.setdefault(json.dumps(settings.get(name), sort_keys=True), []).append(rank)
        if len(groups) > 1:
            values = [f"{value} on {'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)}"
                      for value, ranks in groups.items()]
            differing.append(f"{name} is {', '.join(values[:-1])} and {values[-1]}")
    if not differing:
        return None
    return (f"the ranks do not run the same settings: {'; '.join(differing)}; start every node with the same "
            "config and arguments")


def check_same_settings(cfg: TrainConfig, num_processes: int) -> None:
    """Stop every rank (exit 2, one line) unless all run the same settings. A collective: every rank
    calls it once the process group exists, before anything is built from the settings."""
    if num_processes == 1:
        return
    from accelerate.utils import gather_object

    why = settings_disagreement(gather_object([compared_settings(cfg)]))
    if why is not None:
        raise TrainingStopped(why, EXIT_CONFIG)

"""The run's records: metrics.jsonl's lines, the start record with the accounting, the trackers'
values.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

TRACKER_PROJECT = "nq-bert-qa"  # TensorBoard writes under output_dir/nq-bert-qa; W&B's project name


def tracker_values(record: dict, prefix: str) -> dict:
    """The numbers of a metrics.jsonl record, as the trackers take them (`train/loss`, `eval/...`)."""
    return {f"{prefix}/{k}": v for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "event")}


class MetricsLog:
    """metrics.jsonl, written by the main process only."""

    def __init__(self, path: Path, enabled: bool, append: bool = False):
        self.path, self.enabled = path, enabled
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not append:
                path.write_text("")

    def write(self, record: dict) -> None:
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")


@dataclass
class StartRecord:
    """metrics.jsonl's first record: how this run is laid out. Part of it is the fingerprint a checkpoint
    carries, and part of that a resumed run must match (`resume_key`)."""

    strategy: str
    engine: str
    zero_stage: Optional[int]
    world_size: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    global_batch_size: int
    mixed_precision: str
    num_optimizer_steps: int
    num_epochs: int
    train_windows: int
    device: str
    num_parameters: int
    strategy_origin: str
    distributed_type: str
    cpu_offload: bool
    train_data: dict
    optim: str
    schedule: dict = field(default_factory=dict)  # lr_scheduler_type, learning_rate, num_warmup_steps
    seed: int = 0  # the epoch order is a function of it
    architecture: dict = field(default_factory=dict)  # solution.model.qa_model.architecture: heads, layers, sizes
    window: dict = field(default_factory=dict)  # WindowConfig: max_seq_length, doc_stride, ...
    # AdamW's weight_decay, betas and epsilon: a checkpoint's optimizer state carries its param_groups, whose
    # values a resume would load over this run's, so they must match like the learning rate (empty for SGD)
    optimizer: dict = field(default_factory=dict)
    # sha256 of the training windows (ids, tokens, labels: windows.dataset.windows_digest), "dummy" for dummy
    # data: another train_file with as many windows is other data
    train_data_digest: str = ""
    # what those windows were made from (windows.dataset.windows_source: the file's path, size and time, the
    # tokenizer, the settings): never compared, it says why a resume on another digest is refused
    train_data_source: dict = field(default_factory=dict)
    # How the engine was set up, resolved (Strategy.engine_settings: DeepSpeed's filled config, FSDP2's
    # resharding and mixed precision, autocast), the backbone's attention implementation and torch.compile:
    # what the run ran, never part of what a resume must match
    engine_settings: dict = field(default_factory=dict)
    attention: str = ""
    torch_compile: bool = False
    resumed_from: Optional[dict] = None  # {"checkpoint", "step"} when resuming

    TRAIN_DATA_KEYS = ("documents", "windows", "windows_kept", "windows_per_type", "unanswerable_documents",
                       "negatives_kept_answerable", "negatives_kept_unanswerable", "skipped", "skipped_by_reason")
    FINGERPRINT = ("strategy", "engine", "zero_stage", "world_size", "per_device_train_batch_size",
                   "gradient_accumulation_steps", "global_batch_size", "mixed_precision", "num_optimizer_steps",
                   "optim", "num_parameters", "train_windows", "schedule", "seed", "architecture", "window", "optimizer",
                   "train_data_digest", "train_data_source")
    RATE_IGNORES_LENGTH = ("constant", "constant_with_warmup")  # schedules whose rates do not depend on max_steps

    def as_dict(self) -> dict:
        record = {"event": "start", **asdict(self)}
        if self.resumed_from is None:
            del record["resumed_from"]
        return record

    def fingerprint(self) -> dict:
        """What trainer_state.json records of the run that wrote it."""
        return {k: getattr(self, k) for k in self.FINGERPRINT}

    def resume_key(self) -> dict:
        """The fields a checkpoint must share with the run resuming it: the global batch (what "step N"
        means), precision and optimizer, the model (its size and architecture), the data (its windows, their
        digest, how they are cut, and the seed that orders each epoch) and the learning-rate schedule (its type, peak
        rate, warm-up, and its length unless the rates do not depend on it: under a constant schedule a
        stopped run may go on to another max_steps) and AdamW's weight decay, betas and epsilon (the loaded
        optimizer state would put the checkpoint's back). World size, strategy and per-device batch against
        accumulation may change (solution.checkpoints.resume.resume_route)."""
        keys = ["global_batch_size", "mixed_precision", "optim", "num_parameters", "architecture", "train_windows",
                "window", "seed", "schedule", "optimizer", "train_data_digest"]
        if self.schedule.get("lr_scheduler_type") not in self.RATE_IGNORES_LENGTH:
            keys.append("num_optimizer_steps")
        return {k: getattr(self, k) for k in keys}



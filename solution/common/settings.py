"""Settings files read safely: YAML or JSON by suffix, never evaluated, a repeated key an error naming its
line, and YAML's aliases bounded: a file whose aliases expand past `MAX_YAML_NODES` values (an alias bomb:
1.4 KB of nested aliases is billions of values, minutes and gigabytes for whatever walks it) is refused.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from pathlib import Path

import yaml

from solution.common import jsonio
from solution.common.values import coerce


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


MAX_YAML_NODES = 100_000  # values of a YAML settings file, each alias counted as what it stands for


class _TooLarge(Exception):
    """A YAML file whose aliases expand past MAX_YAML_NODES values."""


def _check_expanded_size(value) -> None:
    """Walk `value` as a reader of it would (an alias's target once per alias), stopping at MAX_YAML_NODES:
    the cost is bounded whatever the aliases multiply to (a self-referencing alias too)."""
    stack, count = [value], 0
    while stack:
        item = stack.pop()
        count += 1
        if count > MAX_YAML_NODES:
            raise _TooLarge(f"its aliases (*name) expand to more than {MAX_YAML_NODES:,} values; a settings "
                            "file this large is refused (write the values out, or use fewer nested aliases)")
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            stack.extend(item)


def read_settings_file(path: str, what: str):
    """Parse a YAML or JSON settings file (by suffix), never evaluating it; errors name the file.

    A key repeated in one mapping is an error (YAML: naming both lines), never "the last wins"."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{path}: no such {what} file")
    try:
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".json":  # the one JSON reader: depth-limited, finite numbers, a repeated key refused
            return jsonio.loads(text, str(path), unique_keys=True)
        loaded = yaml.load(text, Loader=_UniqueKeyLoader)
        _check_expanded_size(loaded)
        return loaded
    except (_DuplicateKey, _TooLarge) as e:
        raise ValueError(f"{path}: {e}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML ({e})") from None


def apply_overrides(cfg, overrides, what: str | None = None):
    """A copy of the settings dataclass `cfg` with each "key=value" applied, typed by the field as training's
    command line types its settings (`common.values.coerce`: the same words for true and false). An unknown
    key or a value that does not parse is a ValueError naming the key; `what` names the settings in it
    (default: the class's `SETTINGS_NAME`, else its name)."""
    what = what or getattr(cfg, "SETTINGS_NAME", type(cfg).__name__)
    types = typing.get_type_hints(type(cfg))
    changes = {}
    for item in overrides:
        key, sep, text = str(item).partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        if key not in types:
            raise ValueError(f"--set {key}: unknown {what} setting (known: {', '.join(sorted(types))})")
        kind = getattr(types[key], "__name__", str(types[key]))
        try:
            value = coerce(text, types[key])
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError("must be a finite number")
        except ValueError as e:
            raise ValueError(f"--set {key}={text}: not a valid {kind} ({e})") from None
        changes[key] = value
    try:
        return dataclasses.replace(cfg, **changes)
    except ValueError as e:
        raise ValueError(f"--set: {e}") from None

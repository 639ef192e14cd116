"""The one way this project reads JSON it did not just make in memory: a file, a line of a JSON-lines file.

    from solution.common.jsonio import JsonError, loads, read_json

Three things `json.loads` lets through become one line naming the file (and line):
- nesting deeper than Python's recursion allows (`[[[[...` 200,000 deep) is a RecursionError deep
  inside the decoder;
- `NaN`, `Infinity`, a float beyond double range (`1e400`, read as inf) and an integer of more than
  `MAX_INT_DIGITS` digits (`10**400`, an OverflowError wherever it meets a float) are numbers no file
  of ours holds;
- bytes that are not UTF-8, and the decoder's own message, which names neither file nor line.

Standard library only: `submission/` imports it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterator, Optional, Tuple, Union

from solution.common.inputs import input_problem

MAX_INT_DIGITS = 300  # a double holds about 1.8e308; an integer of more digits is no count or score of ours


class JsonError(ValueError):
    """A JSON text that cannot be read; its text is one line naming where."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonError(f"the number {text[:40]} is beyond a double's range")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonError(f"an integer of {len(text.lstrip('-'))} digits (more than {MAX_INT_DIGITS})")
    return int(text)


def _no_constant(name: str):
    raise JsonError(f"{name} is not a number a file of ours holds")


def _unique_object(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise JsonError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def loads(text: Union[str, bytes], where: str, unique_keys: bool = False, bounded_ints: bool = True) -> Any:
    """Parse one JSON text; any problem is a JsonError "WHERE: what is wrong" (`where`: "FILE" or "FILE line N").

    `bounded_ints` False: integers of any length pass, for a reader whose own checks bound every integer it
    takes (an NQ line's token offsets against its document): the check costs a Python call for each integer,
    and an NQ line holds thousands (its parse took 2.5x as long)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JsonError(f"{where}: not UTF-8 text (byte {e.start})") from None
    hooks = {"object_pairs_hook": _unique_object} if unique_keys else {}
    if bounded_ints:
        hooks["parse_int"] = _bounded_int
    try:
        return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant, **hooks)
    except JsonError as e:
        raise JsonError(f"{where}: {e}") from None
    except json.JSONDecodeError as e:
        raise JsonError(f"{where}: not valid JSON (line {e.lineno} column {e.colno}: {e.msg})") from None
    except RecursionError:
        raise JsonError(f"{where}: nested deeper than a reader can follow (thousands of [ or {{ inside each "
                        "other); not a file of ours") from None


def _readable_file(path: Union[str, "os.PathLike[str]"]) -> Path:
    problem = input_problem(path)
    if problem:
        raise JsonError(f"{path}: {problem}")
    return Path(path)


def read_json(path: Union[str, "os.PathLike[str]"], unique_keys: bool = False) -> Any:
    """The parsed content of a JSON file; a missing, unreadable or malformed one is a JsonError naming it."""
    p = _readable_file(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise JsonError(f"{path}: cannot be read ({e.strerror})") from None
    return loads(data, str(path), unique_keys=unique_keys)


def read_json_object(path: Union[str, "os.PathLike[str]"], unique_keys: bool = False) -> dict:
    """`read_json` of a file that must hold one object (a manifest, a state, a record)."""
    value = read_json(path, unique_keys=unique_keys)
    if not isinstance(value, dict):
        raise JsonError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


def iter_json_lines(path: Union[str, "os.PathLike[str]"], skip_blank: bool = True,
                    limit: Optional[int] = None) -> Iterator[Tuple[int, Any]]:
    """(line number, parsed value) for each line of a JSON-lines file; a bad line is a JsonError naming
    the file and its line number."""
    p = _readable_file(path)
    with open(p, "rb") as f:
        for number, raw in enumerate(f, 1):
            if limit is not None and number > limit:
                return
            if skip_blank and not raw.strip():
                continue
            yield number, loads(raw, f"{path} line {number}")

"""JSON values checked against a dataclass field's declared type: what a settings file, a model directory's
qa_config.json or a checkpoint's trainer_state.json holds is checked before it is used.
"""

from __future__ import annotations

import types
import typing


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

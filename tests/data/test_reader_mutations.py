"""Property: whatever a line turns into, the reader either parses it into a consistent example or
raises NQFormatError naming the file, the line and the field; with on_error skip, every line is
either an example or a counted skip. Never an exception from inside a library, never a silent drop."""

import copy
import json

from conftest import nq_line
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solution.data.nq import NQFormatError, ReadStats, read_examples

BASE = nq_line(long=0, shorts=[(12, 14)])
ODD_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                       st.text(max_size=12), st.lists(st.integers(-5, 50), max_size=3),
                       st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


def paths(obj, prefix=()):
    """Every (path, value) inside a JSON object."""
    yield prefix, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from paths(v, prefix + (i,))


ALL_PATHS = [p for p, _ in paths(BASE) if p]


@st.composite
def mutated_line(draw) -> bytes:
    obj = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(ALL_PATHS))
        parent = obj
        try:
            for key in path[:-1]:
                parent = parent[key]
            kind = draw(st.sampled_from(["delete", "replace", "int"]))
            if kind == "delete" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            elif kind == "int":
                parent[path[-1]] = draw(st.integers(-3, 60))
            else:
                parent[path[-1]] = draw(ODD_VALUES)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or retyped the parent
    text = json.dumps(obj).encode()
    damage = draw(st.sampled_from(["none", "none", "truncate", "bytes"]))
    if damage == "truncate":
        text = text[:draw(st.integers(0, len(text)))]
    elif damage == "bytes":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.binary(min_size=1, max_size=4)) + text[at:]
    return text.replace(b"\n", b" ")


def check_consistent(ex) -> None:
    n = len(ex.tokens)
    assert n > 0 and ex.example_id.lstrip("-").isdigit()
    for c in ex.candidates:
        assert 0 <= c.start_token < c.end_token <= n
    for a in ex.annotations:
        if a.long_answer.start_token >= 0:
            assert 0 <= a.long_answer.start_token < a.long_answer.end_token <= n
        for s in a.short_answers:
            assert 0 <= s.start_token < s.end_token <= n


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=mutated_line())
def test_every_mutated_line_parses_or_names_its_field(line, tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(line + b"\n")
    try:
        examples = list(read_examples(path, require_annotations=True))
    except NQFormatError as e:
        assert e.path == str(path) and e.line == 1 and e.field, str(e)
        assert str(e).startswith(f"{path}:1: field '{e.field}'")
    else:
        assert len(examples) == 1
        check_consistent(examples[0])
    stats = ReadStats()
    try:
        kept = list(read_examples(path, on_error="skip", stats=stats, require_annotations=True))
    except NQFormatError as e:  # only a file with nothing in it at all may still raise
        assert e.field == "<file>" and not line.strip(), str(e)
        return
    assert len(kept) + stats.num_skipped == 1  # no silent drop

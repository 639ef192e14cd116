"""The package's modules import one another without a circle, and each imports on its own.

A circle works only while a function-local import breaks it, and breaks when someone moves that
import to the top or imports the modules in another order; so function-local imports count here too.
"""

from __future__ import annotations

import ast
import subprocess
import sys

from conftest import ROOT

PACKAGES = ("solution", "submission")


def modules() -> dict:
    """Module name -> its source file, for every module of PACKAGES."""
    return {f"{pkg}.{path.stem}": path for pkg in PACKAGES for path in sorted((ROOT / pkg).glob("*.py"))
            if path.stem != "__init__"}


def imported(name: str, path, known: dict) -> set:
    """The modules of `known` that `path` (module `name`) imports, anywhere in it (function-local too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package
                base = ".".join(name.split(".")[:-node.level] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from solution import cli`
    return {m for m in found if m in known and m != name}


def find_circle(graph: dict):
    """One import circle as [a, b, ..., a], or None."""
    state = {}  # 1: on the current path, 2: done

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (circle := visit(nxt, path + [nxt])):
                return circle
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (circle := visit(start, [start])):
            return circle
    return None


def test_find_circle_finds_one():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None


def test_the_import_graph_has_no_circle():
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert graph["solution.train"], "the parser found none of train's imports"
    circle = find_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_each_module_imports_first():
    """Each module imported first, the package's modules forgotten between them (torch stays loaded:
    one interpreter, seconds instead of a minute), so no module relies on another having run first."""
    names = sorted(modules())
    script = ("import importlib, sys\n"
              "for name in sys.argv[1:]:\n"
              f"    for loaded in [m for m in sys.modules if m.split('.')[0] in {PACKAGES!r}]:\n"
              "        del sys.modules[loaded]\n"
              "    importlib.import_module(name)\n")
    proc = subprocess.run([sys.executable, "-c", script, *names], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

"""The package's modules import one another without a circle, in the stages' order, and each imports on its own.

A circle works only while a function-local import breaks it, and breaks when someone moves that
import to the top or imports the modules in another order; so function-local imports count here too.
The stages are solution/'s folders; a stage imports only itself and the stages before it, so the
folders tell the pipeline's order and the offline kernel can ship the first stages without the rest.
"""

from __future__ import annotations

import ast
import subprocess
import sys

from conftest import ROOT

PACKAGES = ("solution", "submission")


# solution/'s stage folders in pipeline order. answers/ comes before model/: post-processing is numpy on
# logits and needs no model, while the model directory carries post-processing's settings.
STAGES = ("common", "data", "windows", "answers", "model", "scoring", "checkpoints", "distributed", "training")
# What inference (submission/ and the offline kernel) may reach: nothing of training.
INFERENCE_STAGES = ("common", "data", "windows", "answers", "model")


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict:
    """Module name -> its source file, for every module of PACKAGES (a package's __init__ under its own name)."""
    return {module_name(path): path for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
            if module_name(path) not in PACKAGES}


def stage(name: str):
    """The stage folder a module of solution/ lives in, or None (a command at the root, or submission/)."""
    parts = name.split(".")
    return parts[1] if parts[0] == "solution" and len(parts) > 1 and parts[1] in STAGES else None


def stage_violations(graph: dict) -> list:
    """Every import that climbs to a later stage, and every import of training from inference's code."""
    bad = []
    for name, targets in sorted(graph.items()):
        mine = stage(name)
        for target in sorted(targets):
            theirs = stage(target)
            if theirs is None:
                if mine is not None:
                    bad.append(f"{name} imports the command {target}")
                continue
            if mine is not None and STAGES.index(theirs) > STAGES.index(mine):
                bad.append(f"{name} ({mine}) imports the later stage {target} ({theirs})")
            if name.startswith("submission") and theirs not in INFERENCE_STAGES:
                bad.append(f"{name} (inference) imports {target} ({theirs})")
    return bad


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


def test_stage_violations_finds_a_climb_a_command_and_training_in_inference():
    graph = {"solution.data.nq": {"solution.training.config"}, "solution.windows.featurizer": {"solution.data.nq"},
             "solution.model.qa_model": {"solution.train"}, "submission.predict": {"solution.distributed.ports"}}
    assert stage_violations(graph) == [
        "solution.data.nq (data) imports the later stage solution.training.config (training)",
        "solution.model.qa_model imports the command solution.train",
        "submission.predict (inference) imports solution.distributed.ports (distributed)",
    ]


def test_every_stage_imports_only_itself_and_earlier_stages():
    known = modules()
    assert {stage(n) for n in known} - {None} == set(STAGES), "a stage folder is missing or unknown"
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert graph["solution.training.trainer"], "the parser found none of the trainer's imports"
    assert stage_violations(graph) == []


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

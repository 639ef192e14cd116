"""The package's modules import one another without a circle, in the stages' order, and each imports on its own.

A circle works only while a function-local import breaks it, and breaks when someone moves that
import to the top or imports the modules in another order; so function-local imports count here too.
The stages are solution/'s folders; a stage imports only itself and the stages before it, so the
folders tell the pipeline's order and the offline kernel can ship the first stages without the rest.
experiments/ is the last stage: the benchmarks' code, which nothing else may come to depend on.

Across the packages: solution/ never imports submission/ (the library does not depend on the entry point
built on it), submission/ imports no command (solution/*.py parse arguments and print; the kernel ships
without them), and scripts/ are commands over everything that nothing imports. No module takes another's
private name (`from m import _x` or `m._x`): what another module needs is public where it lives.
Each rule is shown to fail on a small hand-made graph.
"""

from __future__ import annotations

import ast
import subprocess
import sys

from conftest import ROOT

PACKAGES = ("solution", "submission")
# scripts/ are thin commands over the packages: in the graph (they may import any stage, any command and
# submission/), never imported by the packages; not a package, so not imported one by one below.
SCRIPTS = "scripts"


# solution/'s stage folders in pipeline order. answers/ comes before model/: post-processing is numpy on
# logits and needs no model, while the model directory carries post-processing's settings.
STAGES = ("common", "data", "windows", "answers", "model", "scoring", "checkpoints", "distributed", "training",
          "experiments")
# What inference (submission/ and the offline kernel) may reach: nothing of training.
INFERENCE_STAGES = ("common", "data", "windows", "answers", "model")


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(with_scripts: bool = False) -> dict:
    """Module name -> its source file, for every module of PACKAGES (a package's __init__ under its own name),
    and with `with_scripts` every script of scripts/ as `scripts.<name>`."""
    found = {module_name(path): path for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py"))
             if module_name(path) not in PACKAGES}
    if with_scripts:
        found.update({module_name(path): path for path in sorted((ROOT / SCRIPTS).glob("*.py"))})
    return found


def import_graph(known: dict) -> dict:
    """Module -> the modules of `known` it imports (function-local imports too)."""
    return {name: imported(name, path, known) for name, path in known.items()}


def is_command(name: str) -> bool:
    """A module at solution/'s root (solution/lexical.py, solution/evaluate.py, ...): a command."""
    parts = name.split(".")
    return parts[0] == "solution" and len(parts) == 2 and parts[1] not in STAGES


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


def boundary_violations(graph: dict) -> list:
    """solution/ never imports submission/; submission/ imports no command; nothing in the packages imports
    scripts/ (scripts are commands over the packages, and may import all of them)."""
    bad = []
    for name, targets in sorted(graph.items()):
        top = name.split(".")[0]
        for target in sorted(targets):
            theirs = target.split(".")[0]
            if top == "solution" and theirs == "submission":
                bad.append(f"{name} imports submission's {target}")
            if top == "submission" and is_command(target):
                bad.append(f"{name} (submission) imports the command {target}")
            if top in PACKAGES and theirs == SCRIPTS:
                bad.append(f"{name} imports the script {target}")
    return bad


def private_names(name: str, path, known: dict) -> set:
    """(module, name) for each private name `path` (module `name`) takes from another module of `known`:
    `from m import _x`, or `m._x` where `m` names a module it imported. Dunders are public."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found, aliases = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known and alias.asname:
                    aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(name.split(".")[:-node.level] + ([base] if base else []))
            for alias in node.names:
                if f"{base}.{alias.name}" in known:  # `from solution.scoring import tuning`: a module
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
                elif base in known and is_private(alias.name):
                    found.add((base, alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            target = aliases.get(dotted(node.value))
            if target is None and dotted(node.value) in known:  # `import solution.x` then `solution.x._y`
                target = dotted(node.value)
            if target is not None:
                found.add((target, node.attr))
    return {(target, attr) for target, attr in found if target != name}


def is_private(attr: str) -> bool:
    return attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__"))


def dotted(node) -> str:
    """`a.b.c` for a chain of names and attributes, else ''."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := dotted(node.value)):
        return f"{base}.{node.attr}"
    return ""


def private_violations(uses: dict) -> list:
    """Module -> the (module, name) pairs it takes: one line for each private name taken across modules."""
    return [f"{name} imports the private {attr} of {target}" for name in sorted(uses)
            for target, attr in sorted(uses[name]) if is_private(attr) and target != name]


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


def test_experiments_is_the_last_stage():
    graph = {"solution.training.trainer": {"solution.experiments.answers.runs"},
             "solution.experiments.answers.runs": {"solution.training.config", "solution.model.qa_model"}}
    assert stage_violations(graph) == [
        "solution.training.trainer (training) imports the later stage solution.experiments.answers.runs (experiments)"]


def test_boundary_violations_finds_submission_in_solution_a_command_in_submission_and_a_script():
    graph = {"solution.hard_negatives": {"submission.predict", "solution.model.qa_model"},
             "solution.model.qa_model": {"submission"},
             "submission.predict": {"solution.lexical", "solution.model.qa_model", "solution.experiments"},
             "submission.validate": {"scripts.chaos"},
             "scripts.benchmark_answers": {"solution.evaluate", "submission.predict", "solution.experiments.answers.runs"}}
    assert boundary_violations(graph) == [
        "solution.hard_negatives imports submission's submission.predict",
        "solution.model.qa_model imports submission's submission",
        "submission.predict (submission) imports the command solution.lexical",
        "submission.validate imports the script scripts.chaos",
    ]


def test_private_names_are_found_imported_or_reached_through_a_module(tmp_path):
    known = {"solution.scoring.tuning": None, "solution.scoring": None, "solution.windows.easy": None,
             "solution.scoring.metric": None, "solution.lexical": None}
    path = tmp_path / "lexical.py"
    path.write_text("from solution.scoring.tuning import _dinkelbach, tune\n"
                    "from solution.scoring import metric\n"
                    "import solution.windows.easy as easy\n"
                    "def f():\n"
                    "    from .scoring.tuning import __all__\n"
                    "    return metric._figures(easy._Doc, metric.score, metric.__name__, _local)\n"
                    "_local = 1\n")
    uses = private_names("solution.lexical", path, known)
    assert uses == {("solution.scoring.tuning", "_dinkelbach"), ("solution.scoring.metric", "_figures"),
                    ("solution.windows.easy", "_Doc")}
    assert private_violations({"solution.lexical": uses, "solution.windows.easy": {("solution.windows.easy", "_Doc")}}) == [
        "solution.lexical imports the private _figures of solution.scoring.metric",
        "solution.lexical imports the private _dinkelbach of solution.scoring.tuning",
        "solution.lexical imports the private _Doc of solution.windows.easy",
    ]


def test_the_packages_and_scripts_keep_their_boundaries():
    graph = import_graph(modules(with_scripts=True))
    assert graph["scripts.benchmark_answers"], "the parser found none of the answers benchmark's imports"
    assert boundary_violations(graph) == []


def test_no_module_takes_another_modules_private_name():
    known = modules(with_scripts=True)
    uses = {name: private_names(name, path, known) for name, path in known.items()}
    assert private_violations(uses) == []


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

"""The layout's one rule: folders import only folders below them, and no circle between any two
folders (subfolders counted apart) nor between any two files.

    core -> lm -> judgments -> metrics -> scoring -> stages (each stage its own folder) -> checks -> report
    -> testing -> flows -> flows/cli

The package root (tasks/__init__.py) counts as core: it runs before any folder is imported.

Test doubles (tasks/testing) rank above every production folder: the flows register the demo's
servers with the layers below (tasks/testing/demo.py), and no production module imports them.

Every import counts, also one made inside a function. Run it alone to see the graph:
`python -m pytest tests/test_layers.py -q`.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RANKS = {"tasks/core": 0, "tasks/lm": 1, "tasks/judgments": 2, "tasks/metrics": 3, "tasks/scoring": 4,
         "tasks/stages": 5, "tasks/checks": 6, "tasks/report": 7, "tasks/testing": 8, "flows": 9, "flows/cli": 10}
PRODUCTION = ("tasks/core", "tasks/lm", "tasks/judgments", "tasks/metrics", "tasks/scoring", "tasks/stages",
              "tasks/checks", "tasks/report")


def unit(module: str) -> str:
    """The folder a dotted module belongs to: tasks.stages.<stage>, tasks.core, flows.cli, ..."""
    parts = module.split(".")
    if parts == ["tasks"]:           # the package root runs before every folder: it counts as core
        return "tasks/core"
    if parts[:2] == ["tasks", "stages"] and len(parts) > 2:
        return "/".join(parts[:3])
    if parts[:2] == ["flows", "cli"]:
        return "flows/cli"
    if parts[0] == "flows":
        return "flows"
    return "/".join(parts[:2])


def rank(folder: str) -> int:
    return RANKS["tasks/stages"] if folder.startswith("tasks/stages/") else RANKS[folder]


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module `path` imports, anywhere in the file (functions included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in ("tasks", "flows") and name.count(".") >= 1}


def folder_graph() -> dict[str, dict[str, list[str]]]:
    """folder -> folder it imports -> the files that do."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted([*ROOT.glob("tasks/**/*.py"), *ROOT.glob("flows/**/*.py")]):
        source = unit(module_of(path))
        for name in imports(path):
            target = unit(name)
            if target != source and (target in RANKS or target.startswith("tasks/stages/")):
                graph[source][target].append(str(path.relative_to(ROOT)))
    return graph


def test_every_file_belongs_to_a_layer():
    for path in [*ROOT.glob("tasks/**/*.py"), *ROOT.glob("flows/**/*.py")]:
        if path.name == "__init__.py" and path.parent.name in ("tasks", "stages"):
            continue
        rank(unit(module_of(path)))   # KeyError names a file outside every layer


def test_no_folder_imports_a_folder_above_it_or_a_sibling_stage():
    upward = [f"{files[0]} ({source} -> {target})"
              for source, targets in folder_graph().items() for target, files in targets.items()
              if rank(target) > rank(source) or (rank(target) == rank(source) == RANKS["tasks/stages"])]
    assert upward == [], "imports that point up the layers:\n" + "\n".join(sorted(upward))


def test_no_production_module_imports_a_test_double():
    """Local servers and synthetic venues are tools for tests, the demo and benches: the flows
    register them (tasks/testing/demo.py); the code below the flows never imports them."""
    doubles = [f"{path.relative_to(ROOT)} imports {name}"
               for folder in PRODUCTION for path in sorted(ROOT.glob(f"{folder}/**/*.py")) + sorted(ROOT.glob(f"{folder}.py"))
               for name in imports(path) if name == "tasks.testing" or name.startswith("tasks.testing.")]
    assert doubles == [], "\n".join(doubles)


def directory_graph() -> dict[str, set[str]]:
    """Every folder of tasks/ and flows/ (subfolders apart: tasks/metrics/review_quality is not
    tasks/metrics) -> the folders its files import."""
    files = {module_of(p): p for p in [*ROOT.glob("tasks/**/*.py"), *ROOT.glob("flows/**/*.py")]}
    graph: dict[str, set[str]] = defaultdict(set)
    for path in files.values():
        source = str(path.parent.relative_to(ROOT))
        for name in imports(path):
            target = files.get(name) or files.get(name.rsplit(".", 1)[0])   # a module, or a name in one
            if target is not None and str(target.parent.relative_to(ROOT)) != source:
                graph[source].add(str(target.parent.relative_to(ROOT)))
    return graph


def test_no_circle_between_folders():
    graph = directory_graph()
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*trail, node, nxt]
            if nxt not in state and (circle := visit(nxt, [*trail, node])):
                return circle
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            assert (circle := visit(start, [])) is None, " -> ".join(circle)


def test_a_stage_flow_imports_only_its_stage_steps_and_core():
    from tasks.core.config import STAGES

    strays = []
    for stage in STAGES:
        path = ROOT / "flows" / f"{stage}.py"
        allowed = {f"tasks.stages.{stage}.steps"}
        if stage == "ingest":   # the curate rules name the papers whose PDFs ingest fetches (the sample)
            allowed.add("tasks.stages.curate.steps")
        for name in imports(path):
            if name.startswith("tasks.") and not name.startswith("tasks.core") and \
                    not any(name == a or name.startswith(a + ".") for a in allowed):
                strays.append(f"flows/{stage}.py imports {name}")
    assert strays == [], "\n".join(sorted(strays))


def test_scoring_and_validation_reach_the_metrics_through_the_one_door():
    """The scoring layer, the score and validate stages and the flows name no metric family: they score
    through the registry (a family's side tables come back named, what it needs as a Need record) and get
    their Resources from tasks/metrics/resources.py."""
    door = {"tasks.metrics", "tasks.metrics.registry", "tasks.metrics.resources", "tasks.metrics.llm_log",
            "tasks.metrics.negatives"}
    families = {module_of(p) for p in ROOT.glob("tasks/metrics/*.py")} | {"tasks.metrics.review_quality"}
    strays = [f"{path.relative_to(ROOT)} imports {name}"
              for folder in ("tasks/scoring", "tasks/stages/score", "tasks/stages/validate", "flows")
              for path in sorted(ROOT.glob(f"{folder}/**/*.py"))
              for name in imports(path) for family in families - door
              if name == family or name.startswith(family + ".")]
    assert strays == [], "\n".join(strays)


def module_graph() -> dict[str, set[str]]:
    """Every module of tasks/ and flows/ -> the modules of tasks/ and flows/ it imports, anywhere in the
    file. `from a.b import c` imports the module a.b.c where there is one, else a name of a.b (a package's
    __init__ is a module too); the parents Python runs first are not counted."""
    files = {module_of(p): p for p in [*ROOT.glob("tasks/**/*.py"), *ROOT.glob("flows/**/*.py")]}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name in files)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    targets.update({name} if name in files else {node.module} & files.keys())
        graph[module] = targets - {module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_circles_finds_a_circle_of_two_and_of_three():
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"e"}, "e": {"f"}, "f": {"d", "c"}}
    assert sorted(circles(graph)) == [["a", "b"], ["d", "e", "f"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_circle_between_files():
    """A circle of files (each reaching the other through imports, those inside functions and under
    TYPE_CHECKING counted) means none of them can be read, tested or moved alone."""
    found = circles(module_graph())
    assert found == [], "files that import each other:\n" + "\n".join(" <-> ".join(c) for c in found)

"""What may import what: no import circle among the modules of components/, policies/ and worker/, and the pure rooms
(the catalogue, spec/, planning/) load no Pulumi provider SDK. docs/CONVENTIONS.md draws the same rules."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("components", "policies", "worker")
PROVIDERS = ("pulumi_aws", "pulumi_kubernetes", "pulumi_eks", "pulumi_docker_build")
PURE_ROOMS = ("components.catalogue", "components.spec", "components.planning", "components.rehearse")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if "__pycache__" not in p.parts}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports, wherever the import stands: at the top, inside a function (a lazy import
    is still a dependency) or under `if TYPE_CHECKING:` (a type-only import is one for every type checker)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = {f"{target}.{a.name}" for a in node.names}
            found.update(names)
            if not names & known:  # `from pkg import module` depends on the module, not on pkg's __init__
                found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(g):
        if v not in index:
            strong(v)
    return out


def test_the_graph_sees_the_rooms():
    g = graph()
    assert {"components.catalogue.support", "components.planning.stack", "policies.capacity"} <= set(g)
    assert "components.catalogue.releases" in g["components.catalogue.support"]
    assert "components.spec.validation" in g["components.planning.stages"]


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_among_the_modules():
    """Every edge counts: a package's __init__ to the modules it re-exports, a function-level import, a type-only
    one. A lazy or type-only import that would close a circle is a fact in the wrong room: move it to a leaf."""
    found = cycles(graph())
    assert found == [], "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_type_only_and_function_level_imports_are_edges(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (pkg / "b.py").write_text("def f():\n    from .c import C\n")
    (pkg / "__init__.py").write_text("from .a import *\n")
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c"}
    assert imports_of("pkg.a", pkg / "a.py", known) == {"pkg.b"}
    assert imports_of("pkg.b", pkg / "b.py", known) == {"pkg.c"}
    assert imports_of("pkg", pkg / "__init__.py", known) == {"pkg.a"}


def test_the_worker_imports_neither_the_components_nor_the_pack():
    g = graph()
    leaks = sorted((v, w) for v, ws in g.items() if v.startswith("worker") for w in ws
                   if w.startswith(("components", "policies")))
    assert leaks == [], f"the worker image ships worker/ alone: {leaks}"


@pytest.mark.parametrize("room", PURE_ROOMS)
def test_the_pure_rooms_load_no_provider_sdk(room):
    mods = sorted(m for m in modules() if m == room or m.startswith(room + "."))
    code = ("import importlib, sys\n"
            f"for m in {mods!r}:\n    importlib.import_module(m)\n"
            f"print(sorted(p for p in {PROVIDERS!r} if p in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", f"importing {room} loaded {out.stdout.strip()}"


ALLOWED = {
    # room (a prefix of module names) -> the project modules it may import (prefixes); its own room always.
    "components.catalogue": (),
    "components.spec": ("components.catalogue",),
    # The planner reads the configured stack (`StackConfig`, `WorkloadConfig`: type-only imports); config imports
    # the chooser, so the chooser and what it runs on (simulation, stages, jobs) never import config (the circle test).
    "components.planning": ("components.catalogue", "components.spec", "components.config"),
    "components.config": ("components.catalogue", "components.spec", "components.planning.chooser"),
    # The rehearsal's judging half (the evaluator, the plan model, the scenarios) is pure too: the pack runs it.
    "components.rehearse.evaluate": ("components.spec", "components.rehearse.conditions"),
    "components.rehearse.conditions": ("components.spec",),
    "components.rehearse.plan_model": ("components.catalogue", "components.spec"),
    "components.rehearse.scenarios": ("components.catalogue", "components.spec", "components.rehearse.evaluate",
                                      "components.rehearse.plan_model"),
    "policies": ("components.catalogue", "components.spec", "components.synth.mocks",
                 "components.rehearse.plan_model", "components.rehearse.scenarios"),
}
"""The import rules docs/CONVENTIONS.md states, type-only and function-level imports included."""


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_each_room_imports_only_what_it_may(room):
    g = graph()
    allowed = (room, *ALLOWED[room])
    wrong = sorted((v, w) for v, ws in g.items() if v == room or v.startswith(room + ".") for w in ws
                   if not any(w == a or w.startswith(a + ".") for a in allowed))
    assert wrong == [], f"{room} may import only {allowed}: {wrong}"


def test_the_planner_imports_config_for_type_hints_only():
    """docs/CONVENTIONS.md: `planning` imports `config` only under `if TYPE_CHECKING:` (config imports the chooser)."""
    wrong = []
    for name, path in modules().items():
        if not name.startswith("components.planning"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                     and "TYPE_CHECKING" in ast.unparse(block.test) for n in ast.walk(block)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in type_only and (
                    (node.level == 2 and (node.module or "").split(".")[0] == "config")
                    or (node.module or "").startswith("components.config")):
                wrong.append(f"{name}:{node.lineno}")
    assert wrong == [], f"run-time imports of config in the planner: {wrong}"

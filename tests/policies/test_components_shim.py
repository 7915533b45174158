"""policies/_components.py: both branches (installed as gpuburst.policy, or beside components/) import the same names,
and in this repository the pack reads the very modules of `components`."""
from __future__ import annotations

import ast
from pathlib import Path

import components
from components.spec import names
from policies import _components

SHIM = Path(_components.__file__)


def _branch_imports(branch: list[ast.stmt]) -> set[tuple[str, str, str | None]]:
    out = set()
    for node in branch:
        assert isinstance(node, ast.ImportFrom), ast.unparse(node)
        module = (node.module or "").removeprefix("components").lstrip(".")
        out.update((module, a.name, a.asname) for a in node.names)
    return out


def test_both_branches_import_the_same_names():
    tree = ast.parse(SHIM.read_text(encoding="utf-8"))
    branches = [n for n in tree.body if isinstance(n, ast.If)]
    assert len(branches) == 1
    installed, here = _branch_imports(branches[0].body), _branch_imports(branches[0].orelse)
    assert installed and installed == here
    exported = {asname or name for _, name, asname in here}
    assert set(_components.__all__) == exported


def test_in_this_repository_the_pack_reads_the_components_modules():
    assert _components.catalogue is components.catalogue
    assert _components.names is names
    assert _components.GPU_RESOURCE == names.GPU_RESOURCE

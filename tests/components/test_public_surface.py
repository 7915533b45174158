"""The public surface: every name in `gpuburst.__all__` resolves lazily at run time AND is imported eagerly for type
checkers (the `if TYPE_CHECKING:` block), so `from gpuburst import WorkQueueArgs` is typed, not `Any`."""
from __future__ import annotations

import ast
from pathlib import Path

import components

ROOT = Path(__file__).resolve().parents[2]


def _type_checking_names() -> set[str]:
    tree = ast.parse((ROOT / "components" / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))
    return {a.asname or a.name for n in block.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}


def test_every_public_name_is_visible_to_type_checkers():
    assert _type_checking_names() == set(components.__all__)


def test_each_name_comes_from_where_the_type_checker_is_told():
    tree = ast.parse((ROOT / "components" / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))
    for node in block.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            module = __import__(f"components.{node.module}", fromlist=["_"])
            for a in node.names:
                assert getattr(components, a.name) is getattr(module, a.name), a.name


def test_the_adopters_names_are_exported():
    for name in ("current_config", "parse_config", "WarmGpuFloor", "WarmGpuFloorArgs", "KedaScalerAuth",
                 "KedaScalerAuthArgs", "WarmGpus", "BurstBudget"):
        assert name in components.__all__ and getattr(components, name) is not None


def test_the_package_says_it_is_typed():
    assert (ROOT / "components" / "py.typed").is_file()

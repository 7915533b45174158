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


def test_all_is_written_out_and_names_the_lazy_table():
    """A checker reads `__all__` only when it is a literal list of strings (a computed one re-exports nothing for
    mypy --strict); the run-time table `_EXPORTS` must name the same things."""
    tree = ast.parse((ROOT / "components" / "__init__.py").read_text(encoding="utf-8"))
    assigned = [n.value for n in tree.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)]
    assert len(assigned) == 1 and isinstance(assigned[0], ast.List), "__all__ must be one literal list"
    literal = [e.value for e in assigned[0].elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    assert len(literal) == len(assigned[0].elts) == len(set(literal)), "__all__: strings only, each once"
    assert set(literal) == set(components._EXPORTS) == set(components.__all__)


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

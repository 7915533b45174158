"""A copy of the files a gpuburst build reads (the sdist's inputs), for tests that build or install it elsewhere."""
from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "components", "policies", "worker")
"""What `pip wheel` / `pip install` of the project reads: the package sources and the build configuration."""


def copy_build_inputs(dest: Path) -> Path:
    """Copy BUILD_INPUTS (without bytecode) into `dest`, created if needed; return `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]"))
        else:
            shutil.copy2(ROOT / name, dest / name)
    return dest

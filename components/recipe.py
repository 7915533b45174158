"""Where the worker image's recipe (the build context holding `worker/` and `worker/Dockerfile`) is: installed, or here.

Installed (`pip install gpuburst`), the wheel carries the whole `worker/` tree as package data under
`gpuburst/recipe/worker/` (setup.py copies it at build time), so `gpuburst/recipe` is a Docker build context. In
this repository (and its editable install) the context is the repository root, which holds `worker/`. Either way the
paths under the context, the contents and the executable bits are the same, so `image.source_digest` and the derived
tag are the same too. This module imports nothing of the project: setup.py loads it by path for the copy filter.
"""
from __future__ import annotations

import os
from pathlib import Path

RECIPE_DIR = "recipe"
"""The recipe's folder inside the installed package: `gpuburst/recipe`."""
WORKER_DIR = "worker"
"""The worker's folder under the build context."""
DOCKERFILE = "worker/Dockerfile"
"""The worker's Dockerfile, relative to the build context."""

SKIP_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git", ".venv",
                       "node_modules"})
"""Folders neither hashed into the image tag nor copied into the wheel (caches, VCS, virtualenvs)."""
SKIP_SUFFIXES = (".pyc", ".pyo")
"""Files neither hashed nor copied: bytecode."""


def recipe_candidates(package_dir: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    """(the installed recipe `<package>/recipe`, the repository root `<package>/..`) for the package folder
    `package_dir` (default: the folder of this module, i.e. `gpuburst/` installed or `components/` here)."""
    package = Path(package_dir) if package_dir is not None else Path(__file__).resolve().parent
    return package / RECIPE_DIR, package.parent


def worker_recipe_dir(package_dir: str | os.PathLike[str] | None = None) -> Path:
    """The build context of the worker image: the installed `gpuburst/recipe` when it holds `worker/Dockerfile`,
    else the repository root when it does; else the installed path, so that the image's validation names the folder
    where the recipe was expected (a broken install)."""
    installed, repository = recipe_candidates(package_dir)
    for candidate in (installed, repository):
        if (candidate / DOCKERFILE).is_file():
            return candidate
    return installed


def default_context(package_dir: str | os.PathLike[str] | None = None) -> str:
    """`worker_recipe_dir()` as `WorkerImageArgs.context` writes it: relative to the working folder when it is that
    folder or below it (`.` when a program runs from this repository's root, so the plan holds no machine path and
    the Dockerfile reads `worker/Dockerfile` as before), else absolute (the installed recipe in site-packages)."""
    recipe = worker_recipe_dir(package_dir).resolve()
    try:
        return recipe.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(recipe)


def is_copied(name: str, is_dir: bool) -> bool:
    """Whether a file or folder named `name` under `worker/` is part of the recipe (what `source_digest` hashes and
    what the wheel carries)."""
    return name not in SKIP_DIRS if is_dir else not name.endswith(SKIP_SUFFIXES)

"""Build hook of the gpuburst distribution: the wheel carries the worker image recipe and the installed policy pack.

setuptools reads pyproject.toml (metadata, packages, the `policy` extra, the `gpuburst` console script) together with
this file, which only replaces `build_py`. After the packages are built it

1. copies the whole `worker/` tree (sources, Dockerfile, Dockerfile.dockerignore, requirements, image lock files,
   weights; caches and bytecode left out by the filter `image.source_digest` uses, components/recipe.py) to
   `gpuburst/recipe/worker/`, executable bits kept, so that `gpuburst/recipe` is a Docker build context whose
   derived image tag equals the one built from this repository;
2. rewrites the `virtualenv` of the installed pack's PulumiPolicy.yaml (`gpuburst/policy/`): see
   `installed_policy_yaml` for why it points five folders up.

Nothing an earlier build left is read: pip builds a checkout in place, so a second `pip install .` (an upgrade from
the same checkout) finds the first build's `build/lib`, whose PulumiPolicy.yaml is already rewritten and whose
modules may be ones since deleted. So the package's folder in build/lib is emptied before each build, and the
rewrite always starts from the repository's own policies/PulumiPolicy.yaml (`write_installed_policy_yaml`).

The editable install (`pip install -e .`, the Makefile's) copies nothing: it reads `worker/` and `policies/` in
place, and `recipe.worker_recipe_dir()` falls back to the repository root.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent

INSTALLED_VIRTUALENV = "../../../../.."
"""The installed pack's `virtualenv`, relative to its folder `<prefix>/lib/pythonX.Y/site-packages/gpuburst/policy`:
the environment's prefix (what `sys.prefix` is in that environment)."""

_REPO_VIRTUALENV = re.compile(r"^(?P<indent>[ \t]*)virtualenv:[ \t]*\.\./\.venv[ \t]*$", re.M)


def _recipe():
    # components/recipe.py imports nothing of the project, so it loads without the package (and without pulumi).
    spec = importlib.util.spec_from_file_location("_gpuburst_build_recipe", HERE / "components" / "recipe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copy_recipe(source: Path, destination: Path) -> list[str]:
    """Copy the worker tree `source` to `destination` (replaced whole, so no stale file survives a reused build
    folder) with the digest's filter; return the files written."""
    is_copied = _recipe().is_copied
    if destination.exists():
        shutil.rmtree(destination)
    written = []
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if is_copied(d, is_dir=True))
        target = destination / Path(dirpath).relative_to(source)
        target.mkdir(parents=True, exist_ok=True)
        for name in sorted(filenames):
            if is_copied(name, is_dir=False):
                shutil.copy2(Path(dirpath) / name, target / name)  # copy2 keeps the mode, so the exec bits too
                written.append(str(target / name))
    return written


def installed_policy_yaml(text: str) -> str:
    """The repository's PulumiPolicy.yaml (`virtualenv: ../.venv`) as the installed pack needs it.

    The Pulumi CLI runs a Python pack through its `pulumi-analyzer-policy-python` script, from the pack's folder,
    with each runtime option as a flag: with `-virtualenv=DIR` it makes DIR absolute against the pack's folder and
    runs `DIR/bin/python -u -m pulumi.policy` (failing if DIR has no bin/python); without it, `python3` from PATH
    (or `$PULUMI_PYTHON_CMD` on newer CLIs), which is the wrong interpreter unless that environment is activated.
    So the installed copy keeps `virtualenv` and points it at the environment it is installed in: in a virtualenv
    the pack lives at `<prefix>/lib/pythonX.Y/site-packages/gpuburst/policy`, five folders below the prefix,
    wherever the environment is and even if the wheel was built elsewhere (an absolute path written at build time
    would be the build machine's). `gpuburst policy-pack path` warns when this does not land on `sys.prefix`
    (a --user or system install, or Windows' `Lib/site-packages` layout).
    """
    new, count = _REPO_VIRTUALENV.subn(lambda m: f"{m['indent']}virtualenv: {INSTALLED_VIRTUALENV}", text)
    if count != 1:
        raise ValueError("policies/PulumiPolicy.yaml has no single `virtualenv: ../.venv` line for setup.py to "
                         "rewrite for the installed pack")
    note = ("# Installed copy, written by gpuburst's setup.py: `virtualenv` is the environment this package is\n"
            "# installed in (<prefix>/lib/pythonX.Y/site-packages/gpuburst/policy is five folders below <prefix>).\n")
    return note + new


def write_installed_policy_yaml(source: Path, target: Path) -> None:
    """Write the installed pack's PulumiPolicy.yaml to `target`, rewritten from the repository's file `source`
    (never from `target`, which an earlier build may have rewritten already)."""
    text = installed_policy_yaml(source.read_text(encoding="utf-8"))
    if target.exists() or target.is_symlink():
        target.unlink()  # never write through a hard link to the source file
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


class BuildWithRecipe(build_py):
    """`build_py`, then the worker recipe and the installed pack's PulumiPolicy.yaml (see the module docstring)."""

    def run(self) -> None:
        editable = getattr(self, "editable_mode", False)
        package = Path(self.build_lib) / "gpuburst"
        if not editable and package.exists():
            shutil.rmtree(package)  # what an earlier build left (a rewritten yaml, deleted modules) never lingers
        super().run()
        if editable:
            return  # an editable install reads worker/ and policies/ in place
        copy_recipe(HERE / "worker", package / _recipe().RECIPE_DIR / "worker")
        write_installed_policy_yaml(HERE / "policies" / "PulumiPolicy.yaml", package / "policy" / "PulumiPolicy.yaml")


if __name__ == "__main__":
    setup(cmdclass={"build_py": BuildWithRecipe})

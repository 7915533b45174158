"""Where a stack's config comes from: a `Pulumi.<stack>.yaml` file read as the engine would pass it, or the config
map the engine handed the running program."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

PROJECT_DIR = Path(__file__).resolve().parents[2]
"""Where this copy of gpuburst lives (in a checkout, the folder holding its Pulumi.yaml); the shared chart cache is
looked for beside it (`../shared/charts`). A stack's own project is `project_dir` (default: the working folder)."""


@dataclass(frozen=True)
class Project:
    """What a Pulumi project's `Pulumi.yaml` says about running it."""

    name: str
    """The project's name (`name:`): the second part of every URN."""
    main: Path
    """The program to run: `main:` (a file, or a folder holding `__main__.py`), default `__main__.py`."""


def read_project(project_dir: Path | None = None) -> Project:
    """`Pulumi.yaml` of `project_dir` (default: the working folder); StackFileError in one line when it is missing
    or says no name."""
    folder = Path(project_dir) if project_dir is not None else Path.cwd()
    path = folder / "Pulumi.yaml"
    if not path.is_file():
        raise StackFileError(f"--project-dir {str(folder)!r}: no Pulumi.yaml there (a Pulumi project folder holds one)")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise StackFileError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    name = doc.get("name") if isinstance(doc, dict) else None
    if not isinstance(name, str) or not name.strip():
        raise StackFileError(f"{path}: 'name' is {name!r}: a Pulumi project needs a name")
    main = folder / str(doc.get("main") or "__main__.py")
    if main.is_dir():
        main = main / "__main__.py"
    if not main.is_file():
        raise StackFileError(f"{path}: the program {str(main)!r} does not exist (Pulumi.yaml 'main', default "
                             "__main__.py)")
    return Project(name.strip(), main)


class StackFileError(Exception):
    """A stack file is missing, is not valid YAML, has no `config:` mapping, or holds a secret (one line)."""


def read_stack_config(stack: str, project_dir: Path | None = None, stack_file: Path | None = None) -> dict[str, Any]:
    """The `config:` map of Pulumi.<stack>.yaml in `project_dir` (default: the working folder), or of `stack_file`,
    as the engine would pass it (non-strings JSON-encoded)."""
    project_dir = Path(project_dir) if project_dir is not None else Path.cwd()
    path = stack_file or project_dir / f"Pulumi.{stack}.yaml"
    if stack_file is not None and not path.is_file():
        raise StackFileError(f"--stack-file {str(path)!r}: no such file")
    if not path.is_file():
        known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in project_dir.glob("Pulumi.*.yaml"))
        raise StackFileError(f"--stack {stack!r}: no {path.name} in {project_dir} "
                             f"(stacks: {', '.join(known) or 'none'})")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise StackFileError(f"{path.name}: not valid YAML: {str(e).splitlines()[0]}") from None
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise StackFileError(f"{path.name}: 'config' must be a mapping, got {type(config).__name__}")
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            raise StackFileError(f"{path.name}: {key} is a secret; the offline synth cannot decrypt it — "
                                 "leave secrets out of the example stacks")
        out[str(key)] = value if isinstance(value, str) else json.dumps(value)
    return out


def current_config() -> dict[str, Any]:
    """The whole config map the engine handed this program (environment first, explicit settings over it)."""
    from pulumi.runtime import config as runtime_config

    merged = dict(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    return merged

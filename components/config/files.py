"""Where a stack's config comes from: a `Pulumi.<stack>.yaml` file read as the engine would pass it, or the config
map the engine handed the running program."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

PROJECT_DIR = Path(__file__).resolve().parents[2]
"""The project directory holding Pulumi.yaml, __main__.py and the Pulumi.<stack>.yaml files."""


class StackFileError(Exception):
    """A stack file is missing, is not valid YAML, has no `config:` mapping, or holds a secret (one line)."""


def read_stack_config(stack: str, project_dir: Path = PROJECT_DIR, stack_file: Path | None = None) -> dict[str, Any]:
    """The `config:` map of Pulumi.<stack>.yaml (or `stack_file`), as the engine would pass it (non-strings
    JSON-encoded)."""
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

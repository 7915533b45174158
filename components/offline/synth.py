"""Offline synth: run the stack's Pulumi program under recording mocks and write the plan, like `cdk synth`."""
from __future__ import annotations

import json
import re
import runpy
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import catalogue
from .mocks import RunResult, run_under_mocks

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The project directory holding Pulumi.yaml, __main__.py and the Pulumi.<stack>.yaml files."""


class SynthError(Exception):
    """The synth could not run: a missing stack file, unreadable YAML, or a bad stack config (one line)."""


def read_stack_config(stack: str, project_dir: Path = REPO_ROOT, stack_file: Path | None = None) -> dict[str, Any]:
    """The `config:` map of Pulumi.<stack>.yaml (or `stack_file`), as the engine would pass it (non-strings
    JSON-encoded)."""
    path = stack_file or project_dir / f"Pulumi.{stack}.yaml"
    if stack_file is not None and not path.is_file():
        raise SynthError(f"--stack-file {str(path)!r}: no such file")
    if not path.is_file():
        known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in project_dir.glob("Pulumi.*.yaml"))
        raise SynthError(f"--stack {stack!r}: no {path.name} in {project_dir} (stacks: {', '.join(known) or 'none'})")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise SynthError(f"{path.name}: not valid YAML: {str(e).splitlines()[0]}") from None
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise SynthError(f"{path.name}: 'config' must be a mapping, got {type(config).__name__}")
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            raise SynthError(f"{path.name}: {key} is a secret; the offline synth cannot decrypt it — "
                             "leave secrets out of the example stacks")
        out[str(key)] = value if isinstance(value, str) else json.dumps(value)
    return out


def run_program(stack: str, config: dict[str, Any], project_dir: Path = REPO_ROOT, preview: bool = False) -> RunResult:
    """Run the project's `__main__.py` under recording mocks with `config` and return what it registered."""
    region = config.get("aws:region", "us-east-1")
    main = project_dir / "__main__.py"
    if str(project_dir) not in sys.path:
        sys.path.insert(0, str(project_dir))
    return run_under_mocks(lambda: runpy.run_path(str(main), run_name="__main__"), stack=stack, region=region,
                           config=config, preview=preview)


def plan_document(stack: str, result: RunResult) -> dict:
    """The plan as written to plan.json: resources sorted by URN, properties as the engine sees the inputs."""
    resources = sorted((r.as_plan_entry() for r in result.registrations), key=lambda r: r["urn"])
    return {"stack": stack, "pins": catalogue.describe_pins(), "outputs": _redact(result.outputs),
            "resources": resources}


def _redact(outputs: dict) -> dict:
    return {k: ("[secret]" if isinstance(v, dict) and v.get("secret") else v) for k, v in outputs.items()}


def kubernetes_manifests(plan: dict) -> dict[str, dict]:
    """File name -> Kubernetes object, for every registration whose inputs are a Kubernetes manifest."""
    out: dict[str, dict] = {}
    for res in plan["resources"]:
        props = res["properties"]
        if not res["type"].startswith("kubernetes:") or "kind" not in props or "apiVersion" not in props:
            continue
        meta = props.get("metadata") or {}
        ns = meta.get("namespace") or "cluster"
        name = meta.get("name") or res["name"]
        fname = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{props['kind']}-{ns}-{name}".lower()) + ".yaml"
        # apiVersion, kind, metadata first, as people write manifests; the rest in the order the engine saw.
        head = {k: props[k] for k in ("apiVersion", "kind", "metadata") if k in props}
        out[fname] = {**head, **{k: v for k, v in props.items() if k not in head}}
    return out


@dataclass
class SynthOutput:
    """Where a synth wrote its files, and the plan itself."""

    plan: dict
    plan_path: Path
    manifest_dir: Path
    manifests: list[str]


def synth(stack: str = "dev", out_dir: Path = Path("out"), project_dir: Path = REPO_ROOT,
          stack_file: Path | None = None) -> SynthOutput:
    """Run the program for `stack` under mocks and write out/plan.json and out/manifests/*.yaml."""
    config = read_stack_config(stack, project_dir, stack_file)
    result = run_program(stack, config, project_dir)
    plan = plan_document(stack, result)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan_path = out_dir / "plan.json"
    plan_path.write_text(json.dumps(plan, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    manifest_dir = out_dir / "manifests"
    if manifest_dir.exists():
        shutil.rmtree(manifest_dir)
    manifest_dir.mkdir()
    manifests = kubernetes_manifests(plan)
    for fname, obj in manifests.items():
        (manifest_dir / fname).write_text(yaml.safe_dump(obj, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return SynthOutput(plan, plan_path, manifest_dir, sorted(manifests))


def summary(out: SynthOutput) -> str:
    """A short human summary: resources by type, the pins, the exports, and where the files are."""
    counts = Counter(r["type"] for r in out.plan["resources"])
    lines = [f"gpuburst synth — stack {out.plan['stack']}: {len(out.plan['resources'])} resources "
             f"(offline, under Pulumi mocks; nothing was deployed)", "", "Resources by type:"]
    width = max((len(t) for t in counts), default=0)
    for t, n in sorted(counts.items()):
        lines.append(f"  {t.ljust(width)}  {n}")
    lines += ["", "Pinned versions (components/catalogue.py):"]
    for k, v in out.plan["pins"].items():
        lines.append(f"  {k:<22} {v}")
    if out.plan["outputs"]:
        lines += ["", "Stack outputs:"]
        for k, v in out.plan["outputs"].items():
            text = v if isinstance(v, str) else json.dumps(v)
            lines.append(f"  {k:<22} {text if len(text) < 100 else text[:97] + '...'}")
    lines += ["", f"Plan:      {out.plan_path}", f"Manifests: {out.manifest_dir}/ ({len(out.manifests)} files)"]
    return "\n".join(lines)

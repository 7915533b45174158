"""Offline synth: run the stack's Pulumi program under recording mocks and write the plan, like `cdk synth`."""
from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import catalogue
from ..catalogue.chart_findings import object_of, unexplained
from ..config.files import StackFileError, read_project, read_stack_config
from .charts import DUMPER, Expansion, expand, resolve_cache, search_path
from .mocks import RunResult, run_under_mocks


class SynthError(Exception):
    """The synth could not run: a missing stack file, unreadable YAML, or a bad stack config (one line)."""


def run_program(stack: str, config: dict[str, Any], project_dir: Path | None = None,
                preview: bool = False) -> RunResult:
    """Run the project's program (its Pulumi.yaml `main`, default `__main__.py`) under recording mocks with `config`,
    under the project's own name, and return what it registered. `project_dir` defaults to the working folder."""
    project = read_project(project_dir)
    region = config.get("aws:region", "us-east-1")
    folder = str(project.main.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return run_under_mocks(lambda: runpy.run_path(str(project.main), run_name="__main__"), project=project.name,
                           stack=stack, region=region, config=config, preview=preview)


def plan_document(stack: str, result: RunResult, expansion: Expansion | None = None) -> dict:
    """The plan as written to plan.json: resources (with the charts' rendered objects) sorted by URN, properties as
    the engine sees the inputs, and `shallow`: the Charts that could not be rendered (empty when the plan is whole)."""
    resources = [r.as_plan_entry() for r in result.registrations]
    if expansion is not None:
        resources += expansion.children
    resources.sort(key=lambda r: r["urn"])
    plan = {"stack": stack, "pins": catalogue.describe_pins(), "outputs": _redact(result.outputs),
            "resources": resources}
    if expansion is not None:
        plan["shallow"] = expansion.shallow
    return plan


def _redact(outputs: dict) -> dict:
    return {k: ("[secret]" if isinstance(v, dict) and v.get("secret") else v) for k, v in outputs.items()}


def kubernetes_manifests(plan: dict, chart: str | None = None) -> dict[str, dict]:
    """File name -> Kubernetes object, for every registration whose inputs are a Kubernetes manifest: the stack's own
    (`chart` None) or the objects rendered from one chart (`chart` its name)."""
    out: dict[str, dict] = {}
    for res in plan["resources"]:
        props = res["properties"]
        if not res["type"].startswith("kubernetes:") or "kind" not in props or "apiVersion" not in props:
            continue
        if (res.get("source") or {}).get("chart") != chart:
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
    chart_manifests: dict[str, list[str]] = field(default_factory=dict)
    """Chart name -> files written under manifests/<chart>/."""
    charts_cache: Path | None = None
    render_s: float = 0.0
    """Seconds spent rendering the charts."""
    total_s: float = 0.0
    """Seconds the whole synth took (program, rendering, files; checkov not included)."""
    checkov: dict[str, dict[str, int]] | None = None
    """Chart name -> {checkov check id: objects failing it} on its rendered objects; None when not run."""
    checkov_findings: list[tuple[str, str, str]] = field(default_factory=list)
    """Every (chart, check id, `Kind/name`) checkov failed on the charts' objects (see
    components/catalogue/chart_findings.py)."""
    checkov_note: str = ""


def synth(stack: str = "dev", out_dir: Path = Path("out"), project_dir: Path | None = None,
          stack_file: Path | None = None, charts: Path | None = None) -> SynthOutput:
    """Run the program for `stack` under mocks, render its Helm charts from the chart cache (`charts`, see
    `charts.resolve_cache`), and write out/plan.json, out/manifests/*.yaml and out/manifests/<chart>/*.yaml."""
    start = time.perf_counter()
    try:
        config = read_stack_config(stack, project_dir, stack_file)
        read_project(project_dir)  # a folder without Pulumi.yaml or its program is refused before anything runs
    except StackFileError as e:
        raise SynthError(str(e)) from None
    result = run_program(stack, config, project_dir)
    cache, source = resolve_cache(charts)
    expansion = expand([r.as_plan_entry() for r in result.registrations], search_path(charts), source)
    plan = plan_document(stack, result, expansion)
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
    chart_files: dict[str, list[str]] = {}
    for chart in sorted({r["source"]["chart"] for r in expansion.children}):
        folder = manifest_dir / chart
        folder.mkdir()
        files = kubernetes_manifests(plan, chart)
        for fname, obj in files.items():
            (folder / fname).write_text(yaml.dump(obj, Dumper=DUMPER, sort_keys=False, allow_unicode=True),
                                        encoding="utf-8")
        chart_files[chart] = sorted(files)
    out = SynthOutput(plan, plan_path, manifest_dir, sorted(manifests), chart_files, cache, expansion.seconds)
    out.total_s = time.perf_counter() - start
    return out


CHECKOV_TIMEOUT_S = 300
"""How long checkov may take over the charts' manifests."""


def checkov_charts(out: SynthOutput, exe: str | None = None) -> None:
    """Run checkov (`$CHECKOV`, opt-in: it takes seconds) over each chart's rendered objects and keep its failed
    checks per chart in `out.checkov`, for the summary. Informational: the stack's own manifests are what is gated."""
    exe = exe if exe is not None else os.environ.get("CHECKOV")
    if not exe or not out.chart_manifests:
        out.checkov_note = "not run (set CHECKOV to a checkov binary, as `make test` does, to list its findings)"
        return
    if not Path(exe).is_file():
        out.checkov_note = f"not run: CHECKOV={exe!r} is not a file"
        return
    try:
        proc = subprocess.run([exe, "-d", str(out.manifest_dir), "--framework", "kubernetes", "--quiet", "--compact",
                               "--skip-download", "-o", "json"], capture_output=True, text=True,
                              timeout=CHECKOV_TIMEOUT_S)
        reports = json.loads(proc.stdout or "{}")
    except subprocess.TimeoutExpired:
        out.checkov_note = f"not run: checkov took over {CHECKOV_TIMEOUT_S} s"
        return
    except json.JSONDecodeError:
        out.checkov_note = f"not run: checkov printed no JSON (exit {proc.returncode})"
        return
    reports = reports if isinstance(reports, list) else [reports]
    found: dict[str, Counter] = {chart: Counter() for chart in out.chart_manifests}
    triples = set()
    for report in reports:
        for check in report.get("results", {}).get("failed_checks", []):
            parts = Path(str(check.get("file_path", "")).lstrip("/")).parts
            if len(parts) >= 2 and parts[-2] in found:
                found[parts[-2]][check["check_id"]] += 1
                triples.add((parts[-2], check["check_id"], object_of(str(check.get("resource", "")))))
    out.checkov = {chart: dict(sorted(c.items())) for chart, c in found.items()}
    out.checkov_findings = sorted(triples)


def summary(out: SynthOutput) -> str:
    """A short human summary: resources by type, the pins, the exports, and where the files are."""
    counts = Counter(r["type"] for r in out.plan["resources"])
    lines = [f"gpuburst synth — stack {out.plan['stack']}: {len(out.plan['resources'])} resources "
             f"(offline, under Pulumi mocks; nothing was deployed)", "", "Resources by type:"]
    width = max((len(t) for t in counts), default=0)
    for t, n in sorted(counts.items()):
        lines.append(f"  {t.ljust(width)}  {n}")
    lines += ["", "Pinned versions (components/catalogue/pins.py):"]
    for k, v in out.plan["pins"].items():
        lines.append(f"  {k:<22} {v}")
    if out.plan["outputs"]:
        lines += ["", "Stack outputs:"]
        for k, v in out.plan["outputs"].items():
            text = v if isinstance(v, str) else json.dumps(v)
            lines.append(f"  {k:<22} {text if len(text) < 100 else text[:97] + '...'}")
    children = [r for r in out.plan["resources"] if r.get("source")]
    charts = sorted({(r["source"]["chart"], r["source"]["version"]) for r in children})
    lines += ["", f"Helm charts (rendered from {out.charts_cache}):"]
    for chart, version in charts:
        kinds = Counter(r["properties"]["kind"] for r in children if r["source"]["chart"] == chart)
        lines.append(f"  {chart} {version}: {sum(kinds.values())} objects "
                     f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})")
    for entry in out.plan.get("shallow") or []:
        lines.append(f"  {entry['chart']} {entry['version']}: NOT RENDERED ({entry['reason']}); the plan is shallow")
    lines.append(f"  rendered {len(charts)} charts ({len(children)} objects) in {out.render_s:.2f} s; "
                 f"synth total {out.total_s:.2f} s")
    if out.checkov is not None:
        lines += ["", "checkov on the charts' objects (each accepted finding has its reason in "
                      "components/catalogue/chart_findings.py):"]
        for chart, failed in out.checkov.items():
            lines.append(f"  {chart}: {sum(failed.values())} failed check(s)"
                         + (f": {', '.join(f'{k} x{n}' for k, n in failed.items())}" if failed else ""))
        new = unexplained(out.checkov_findings)
        lines.append(f"  {len(out.checkov_findings) - len(new)} finding(s) explained, {len(new)} unexplained"
                     + (": " + "; ".join(f"{c} {k} on {o}" for c, k, o in new) if new else ""))
    elif out.checkov_note:
        lines += ["", f"checkov on the charts' objects: {out.checkov_note}"]
    lines += ["", f"Plan:      {out.plan_path}", f"Manifests: {out.manifest_dir}/ ({len(out.manifests)} files; "
              f"the charts' objects under {', '.join(f'{c}/' for c in out.chart_manifests or {}) or 'none'})"]
    return "\n".join(lines)

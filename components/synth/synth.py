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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pulumi.config import ConfigMissingError, ConfigTypeError

from .. import catalogue
from ..catalogue.chart_findings import object_of, unexplained
from ..config.files import StackFileError, read_project, read_stack_config
from ..config.parse import did_you_mean
from ..spec.extras import EXTRA_OF, missing_message
from .charts import DUMPER, Expansion, charts_of, expand, resolve_cache, search_path
from .declared import release_line_versions, version_lines
from .mocks import LogLine, RunResult, close_event_loops, run_under_mocks


class SynthError(Exception):
    """The synth could not run: a missing stack file, unreadable YAML, or a bad stack config (one line)."""


def run_program(stack: str, config: dict[str, Any], project_dir: Path | None = None,
                preview: bool = False, stack_file: Path | None = None,
                on_log: Callable[[LogLine], None] | None = None) -> RunResult:
    """Run the project's program (its Pulumi.yaml `main`, default `__main__.py`) under recording mocks with `config`,
    under the project's own name, and return what it registered. `project_dir` defaults to the working folder.

    A key the program requires (`pulumi.Config().require(...)`, `require_int`, ...) that `config` lacks or holds in
    the wrong type is a SynthError in one line naming the key and the stack file (`stack_file`, default
    `Pulumi.<stack>.yaml`), with the stack file's key of that namespace it most likely misspells. A package of an
    extra the program needs and this environment lacks (pulumi-eks for a platform stack) is a SynthError naming the
    extra. `on_log` gets each `pulumi.log` line of the program as it comes."""
    project = read_project(project_dir)
    region = config.get("aws:region", "us-east-1")
    folder = str(project.main.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        return run_under_mocks(lambda: runpy.run_path(str(project.main), run_name="__main__"), project=project.name,
                               stack=stack, region=region, config=config, preview=preview, on_log=on_log)
    except ModuleNotFoundError as e:
        if e.name not in EXTRA_OF:
            raise
        told = str(e) if "gpuburst[" in str(e) else missing_message(e.name, f"{project.main}")
        raise SynthError(told) from None
    except (ConfigMissingError, ConfigTypeError) as e:
        where = Path(stack_file) if stack_file is not None else Path(project_dir or ".") / f"Pulumi.{stack}.yaml"
        raise SynthError(program_config_problem(e, config, str(where))) from None
    except ValueError as e:
        # A program that imports `gpuburst` raises gpuburst's ConfigError, another class than this package's when
        # both names are loaded (`python -m components` in the repository): the same one line either way.
        if type(e).__name__ == "ConfigError" and type(e).__module__.endswith(".spec.validation"):
            raise SynthError(str(e)) from None
        raise


def stack_charts(stack: str, project_dir: Path | None = None,
                 stack_file: Path | None = None) -> list[catalogue.ChartPin]:
    """The Helm charts the stack renders (`charts.charts_of` its registrations): its program run under mocks, as the
    synth runs it, without rendering anything. SynthError (one line) when the stack or its program cannot run."""
    try:
        config = read_stack_config(stack, project_dir, stack_file)
        read_project(project_dir)
    except StackFileError as e:
        raise SynthError(str(e)) from None
    result = run_program(stack, config, project_dir, stack_file=stack_file)
    close_event_loops()  # the command ends soon after: an open loop would print ~25 lines at interpreter exit
    return charts_of([r.as_plan_entry() for r in result.registrations])


def program_config_problem(error: ConfigMissingError | ConfigTypeError, config: dict[str, Any],
                           stack_file: str) -> str:
    """One line for a config key the program itself requires and the stack file lacks (or holds in the wrong type):
    the key, the file, and the file's key of the same namespace it most likely misspells."""
    key = error.key
    namespace, _, name = key.rpartition(":")
    if isinstance(error, ConfigTypeError):
        return (f"{stack_file}: config key {key!r} = {error.value!r} is not valid: the program reads it as "
                f"{error.expect_type}")
    same = [k.split(":", 1)[1] for k in config if namespace and k.startswith(namespace + ":")]
    guess = did_you_mean(name, same)
    if guess is not None:
        hint = f"did you mean {namespace + ':' + guess!r}?"
    elif same:
        shown = ", ".join(sorted(same)[:12]) + (", ..." if len(same) > 12 else "")
        hint = f"its {namespace} keys are {shown}"
    else:
        hint = f"it has no {namespace}: key at all"
    return f"{stack_file} has no config key {key!r}, which the program requires; {hint}"


def plan_document(stack: str, result: RunResult, expansion: Expansion | None = None) -> dict[str, Any]:
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


def kubernetes_manifests(plan: dict[str, Any], chart: str | None = None) -> dict[str, dict[str, Any]]:
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

    plan: dict[str, Any]
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
    chart_archives: list[Path] = field(default_factory=list)
    """The archives the charts were rendered from (empty when the stack renders none)."""
    logs: list[LogLine] = field(default_factory=list)
    """What the program logged with `pulumi.log` (info, warning, error), in order."""


def synth(stack: str = "dev", out_dir: Path = Path("out"), project_dir: Path | None = None,
          stack_file: Path | None = None, charts: Path | None = None,
          on_log: Callable[[LogLine], None] | None = None) -> SynthOutput:
    """Run the program for `stack` under mocks, render its Helm charts from the chart cache (`charts`, see
    `charts.resolve_cache`), and write out/plan.json, out/manifests/*.yaml and out/manifests/<chart>/*.yaml.
    `on_log` gets each line the program logs with `pulumi.log` as it comes (they are also in the result's `logs`)."""
    start = time.perf_counter()
    try:
        config = read_stack_config(stack, project_dir, stack_file)
        read_project(project_dir)  # a folder without Pulumi.yaml or its program is refused before anything runs
    except StackFileError as e:
        raise SynthError(str(e)) from None
    result = run_program(stack, config, project_dir, stack_file=stack_file, on_log=on_log)
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
    out = SynthOutput(plan, plan_path, manifest_dir, sorted(manifests), chart_files, cache, expansion.seconds,
                      chart_archives=sorted(set(expansion.archives.values())), logs=list(result.logs))
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


def release_line_lines(charts: set[tuple[str, str]]) -> list[str]:
    """The summary's release-line section: for each Karpenter and KEDA chart, its line's support, the newest patch
    and what each newer one fixes or requires (ACTION REQUIRED first-class), and the newer lines
    (`catalogue.lines`)."""
    out: list[str] = []
    for chart, version in sorted(charts):
        if chart not in ("karpenter", "keda"):
            continue  # karpenter-crd shares karpenter's line
        newest = catalogue.newest_patch(chart, version)
        newer = catalogue.newer_patches(chart, version)
        out.append(f"  {chart} {version}: {catalogue.line_support(chart, version)}"
                   + (f"; newest patch {newest.version}" + (" (behind it)" if newer else "")
                      if newest else ""))
        for p in newer:
            out.append(f"    {p.version}: {'; '.join(p.changes) or 'changes unknown here'}")
            if p.action_required:
                out.append(f"      ACTION REQUIRED: {p.action_required}")
        out += [f"    newer line {catalogue.line_label(r)}" for r in catalogue.lines_to_tell(chart, version)]
    return (["", "Release lines (gpuburst.catalogue.lines; the Upgrading guide (docs/upgrading.md) moves a pin):"]
            + out) if out else []


def summary(out: SynthOutput) -> str:
    """A short human summary: resources by type, the pins, the exports, and where the files are."""
    counts = Counter(r["type"] for r in out.plan["resources"])
    lines = [f"gpuburst synth — stack {out.plan['stack']}: {len(out.plan['resources'])} resources "
             f"(offline, under Pulumi mocks; nothing was deployed)", "", "Resources by type:"]
    width = max((len(t) for t in counts), default=0)
    for t, n in sorted(counts.items()):
        lines.append(f"  {t.ljust(width)}  {n}")
    lines += ["", *version_lines(out.plan)]
    if out.plan["outputs"]:
        lines += ["", "Stack outputs:"]
        for k, v in out.plan["outputs"].items():
            text = v if isinstance(v, str) else json.dumps(v)
            lines.append(f"  {k:<22} {text if len(text) < 100 else text[:97] + '...'}")
    children = [r for r in out.plan["resources"] if r.get("source")]
    charts = sorted({(r["source"]["chart"], r["source"]["version"]) for r in children})
    shallow = out.plan.get("shallow") or []
    if not charts and not shallow:
        lines += ["", "Helm charts: none (this stack renders no chart, so it needs no chart cache)"]
    else:
        folders = sorted({str(a.parent) for a in out.chart_archives})
        lines += ["", f"Helm charts (rendered from {', '.join(folders)}):" if folders else "Helm charts:"]
    for chart, version in charts:
        kinds = Counter(r["properties"]["kind"] for r in children if r["source"]["chart"] == chart)
        lines.append(f"  {chart} {version}: {sum(kinds.values())} objects "
                     f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})")
    for entry in shallow:
        lines.append(f"  {entry['chart']} {entry['version']}: NOT RENDERED ({entry['reason']}); the plan is shallow")
    lines.append(f"  rendered {len(charts)} charts ({len(children)} objects) in {out.render_s:.2f} s; "
                 f"synth total {out.total_s:.2f} s" if charts or shallow else f"  synth total {out.total_s:.2f} s")
    lines += release_line_lines(set(charts) | {(e["chart"], e["version"]) for e in shallow}
                                | release_line_versions(out.plan))
    if out.checkov is not None:
        lines += ["", "checkov on the charts' objects (each accepted finding has its reason in "
                      "gpuburst.catalogue.chart_findings):"]
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

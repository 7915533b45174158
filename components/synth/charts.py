"""Render a plan's Helm charts into child resources, as pulumi-kubernetes' helm.v4.Chart does in a preview."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .. import catalogue
from ..config.files import PROJECT_DIR
from ..spec.extras import missing_message
from .mocks import UNKNOWN

CHART_TYPE = "kubernetes:helm.sh/v4:Chart"
"""The type token of a `helm.v4.Chart` registration (a remote component: offline it registers alone)."""


SHARED_CHARTS = PROJECT_DIR.parent / "shared" / "charts"
"""The pinned chart archives beside the checkout, when present (see its README)."""

ENV_VAR = "GPUBURST_CHARTS"
"""Environment variable naming the chart cache (after `--charts`, before `../shared/charts`)."""

PULL_TIMEOUT_S = 120.0
"""How long `charts pull` waits for one chart to download before giving up on it."""

SECRET = "[secret]"
"""What a Secret's `data`/`stringData` values become in the plan (the provider marks them secret)."""

HOOK_ANNOTATION = "helm.sh/hook"
"""Objects carrying it are Helm hooks; helm.v4.Chart renders with hooks disabled, so they are never registered."""

# Kinds Kubernetes serves cluster-scoped (group "" is core). The provider asks discovery; offline we know them.
# Every other built-in kind is namespaced; a custom kind takes its scope from a rendered CRD, else counts as namespaced.
CLUSTER_SCOPED = frozenset({
    ("", "Namespace"), ("", "Node"), ("", "PersistentVolume"), ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"), ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"), ("apiregistration.k8s.io", "APIService"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
    ("scheduling.k8s.io", "PriorityClass"), ("node.k8s.io", "RuntimeClass"),
    ("storage.k8s.io", "StorageClass"), ("storage.k8s.io", "CSIDriver"), ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"), ("storage.k8s.io", "VolumeAttributesClass"),
    ("networking.k8s.io", "IngressClass"), ("networking.k8s.io", "IPAddress"), ("networking.k8s.io", "ServiceCIDR"),
    ("certificates.k8s.io", "CertificateSigningRequest"), ("certificates.k8s.io", "ClusterTrustBundle"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"), ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("resource.k8s.io", "DeviceClass"), ("resource.k8s.io", "ResourceSlice"),
})


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the CRDs are ~1 MB of YAML; pure Python takes 3 s
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""The YAML dumper for the charts' manifests (libyaml when PyYAML has it)."""


class ChartError(Exception):
    """A chart could not be pulled or rendered (one line naming the chart, the version and why)."""


# --------------------------------------------------------------------------------------------------------------------
# The chart cache.
# --------------------------------------------------------------------------------------------------------------------

def user_cache_dir(env: dict[str, str] | None = None) -> Path:
    """`$XDG_CACHE_HOME/gpuburst/charts`, else `~/.cache/gpuburst/charts`."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuburst" / "charts"


def resolve_cache(explicit: Path | None = None, env: dict[str, str] | None = None,
                  shared: Path = SHARED_CHARTS) -> tuple[Path, str]:
    """The chart cache and how it was chosen: `--charts`, else `$GPUBURST_CHARTS`, else `../shared/charts` when it
    exists, else the user cache dir."""
    env = os.environ if env is None else env
    if explicit is not None:
        return Path(explicit), "--charts"
    if env.get(ENV_VAR):
        return Path(env[ENV_VAR]), f"${ENV_VAR}"
    if shared.is_dir():
        return shared, "../shared/charts"
    return user_cache_dir(env), "user cache"


def search_path(explicit: Path | None = None, env: dict[str, str] | None = None,
                shared: Path = SHARED_CHARTS) -> list[Path]:
    """Where the synth looks for an archive: the cache of `resolve_cache`, then, when that is the read-only
    `../shared/charts`, the user cache too (where `charts pull` writes a chart the shared folder lacks)."""
    cache, source = resolve_cache(explicit, env, shared)
    return [cache, user_cache_dir(env)] if source == "../shared/charts" else [cache]


def pull_destination(explicit: Path | None = None, env: dict[str, str] | None = None) -> tuple[Path, str]:
    """Where `charts pull` writes: `--charts`, else `$GPUBURST_CHARTS`, else the user cache (never the shared
    folder, which is data from elsewhere)."""
    env = os.environ if env is None else env
    if explicit is not None:
        return Path(explicit), "--charts"
    if env.get(ENV_VAR):
        return Path(env[ENV_VAR]), f"${ENV_VAR}"
    return user_cache_dir(env), "user cache"


def archive_name(chart: str, version: str) -> str:
    """`keda`, `2.20.2` -> `keda-2.20.2.tgz` (what `helm pull` writes)."""
    return f"{chart}-{version}.tgz"


def charts_of(resources: Iterable[dict[str, Any]]) -> list[catalogue.ChartPin]:
    """The charts a plan's `helm.v4.Chart` registrations render (what `charts pull` fetches for a stack), each once,
    sorted: name and version from the Chart's `chart` and `version` inputs, the repository from an `oci://` chart
    reference or its `repositoryOpts.repo`, else the catalogue's. A Chart whose inputs are unknown is left out (it
    renders nothing in a preview either)."""
    found: dict[tuple[str, str], catalogue.ChartPin] = {}
    for res in resources:
        if res["type"] != CHART_TYPE:
            continue
        props = res["properties"]
        ref, version = props.get("chart"), props.get("version")
        if not isinstance(ref, str) or not isinstance(version, str) or _contains_unknown(props):
            continue
        name = chart_name(ref)
        pinned = catalogue.CHARTS.get(name)
        if ref.startswith("oci://"):
            repository = ref.rstrip("/").rsplit("/", 1)[0]
        else:
            repository = str((props.get("repositoryOpts") or {}).get("repo") or (pinned.repository if pinned else ""))
        namespace = str(props.get("namespace") or (pinned.namespace if pinned else "default"))
        found[(name, version)] = catalogue.ChartPin(name, repository, version, namespace)
    return [found[k] for k in sorted(found)]


def shallow_fix(entry: dict[str, Any], prog: str) -> str:
    """What to do about a shallow entry of the plan (`Expansion.shallow`), for the synth's one-line warning: pull
    the chart when its archive is missing, nothing more to say otherwise (the reason says it)."""
    if "not in the chart cache" in str(entry.get("reason", "")):
        return f"fill the cache with `{prog} charts pull --if-missing`"
    return ""


def chart_name(chart_input: Any) -> str:
    """The chart's name from a Chart's `chart` input: `oci://public.ecr.aws/karpenter/karpenter` -> `karpenter`."""
    return str(chart_input or "").rstrip("/").rsplit("/", 1)[-1]


def pull(cache: Path, timeout_s: float = PULL_TIMEOUT_S, charts: Iterable[catalogue.ChartPin] | None = None,
         runner: Callable[..., Any] = subprocess.run) -> list[str]:
    """Download every catalogue chart at its pinned version into `cache` (skipping archives already there).

    Each pull runs in a subprocess so that a stalled download ends at `timeout_s`. Returns one line per chart;
    raises ChartError with one line for the first chart that could not be fetched.
    """
    cache.mkdir(parents=True, exist_ok=True)
    lines = []
    for pin in (charts if charts is not None else catalogue.CHARTS.values()):
        target = cache / archive_name(pin.chart, pin.version)
        if target.is_file():
            lines.append(f"{pin.chart} {pin.version}: already in {cache}")
            continue
        if pin.repository.startswith("oci://"):
            kwargs = {"chart_ref": f"{pin.repository.rstrip('/')}/{pin.chart}"}
        else:
            kwargs = {"chart_ref": pin.chart, "repo_url": pin.repository}
        kwargs.update(version=pin.version, destination=str(cache))
        code = ("import json, sys, helm_python\n"
                "helm_python.pull(**json.loads(sys.argv[1]))\n")
        where = f"{pin.repository} ({pin.chart} {pin.version})"
        try:
            proc = runner([sys.executable, "-c", code, json.dumps(kwargs)], capture_output=True, text=True,
                          timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ChartError(f"chart {pin.chart} {pin.version}: no answer from {pin.repository} within "
                             f"{timeout_s:g} s (offline? copy the archive into {cache} instead)") from None
        if proc.returncode != 0 or not target.is_file():
            detail = (proc.stderr or proc.stdout or "").strip().splitlines()
            raise ChartError(f"chart {pin.chart} {pin.version}: cannot pull from {where}: "
                             f"{detail[-1] if detail else f'exit {proc.returncode}, no {target.name} written'}")
        lines.append(f"{pin.chart} {pin.version}: pulled into {target}")
    return lines


# --------------------------------------------------------------------------------------------------------------------
# Rendering.
# --------------------------------------------------------------------------------------------------------------------

def type_token(api_version: str, kind: str) -> str:
    """`apps/v1`, `Deployment` -> `kubernetes:apps/v1:Deployment`; the core group is written `core`."""
    group, _, version = api_version.rpartition("/")
    return f"kubernetes:{group or 'core'}/{version}:{kind}"


def child_name(prefix: str, obj: dict[str, Any]) -> str:
    """The resource name helm.v4.Chart gives a rendered object: `<prefix>:<namespace>/<name>`, or `<prefix>:<name>`
    for a cluster-scoped object (pulumi-kubernetes provider/pkg/provider/yaml/v2 `register`)."""
    meta = obj.get("metadata") or {}
    name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])
    return f"{prefix}:{name}" if prefix else name


def child_urn(parent_urn: str, type_: str, name: str) -> str:
    """A child's URN as the engine builds it: the parent's qualified type, `$`, the child's type, `::`, its name."""
    head, _, rest = parent_urn.partition("::")  # urn:pulumi:<stack> :: <project>::<qualified type>::<name>
    project, qualified = rest.split("::")[:2]
    return f"{head}::{project}::{qualified}${type_}::{name}"


def _contains_unknown(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_contains_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(_contains_unknown(v) for v in value)
    return value == UNKNOWN


def _documents(path: str, text: str) -> list[dict]:
    try:
        docs = list(yaml.load_all(text, Loader=_LOADER))
    except yaml.YAMLError as e:
        raise ChartError(f"{path}: rendered YAML does not parse: {str(e).splitlines()[0]}") from None
    out = []
    for doc in docs:
        if not doc:
            continue  # empty documents (a template whose `if` was false)
        if not isinstance(doc, dict):
            raise ChartError(f"{path}: a rendered document is a {type(doc).__name__}, not an object")
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            out += [item for item in doc["items"] if item]  # the provider expands List kinds
        else:
            out.append(doc)
    return out


def render_objects(archive: Path, values: dict[str, Any], release: str, namespace: str,
                   skip_crds: bool) -> list[tuple[str, dict[str, Any]]]:
    """(template path, object) for every object `helm template` prints for the chart as helm.v4.Chart runs it:
    install mode, hooks disabled, CRDs from `crds/` first unless `skip_crds`, NOTES.txt and empty documents left out."""
    try:
        import helm_python  # imported here: loading the Go library costs ~0.1 s, only a synth with charts pays it
    except ModuleNotFoundError as e:  # the `platform` extra: a workload stack renders no chart and never needs it
        if e.name != "helm_python":
            raise
        raise ChartError(missing_message("helm_python", "rendering a Helm chart offline")) from None

    try:
        chart = helm_python.Chart.load(str(archive))
        rendered = chart.render(values or {}, name=release, namespace=namespace, is_install=True)
        crds = [] if skip_crds else chart.crds
    except helm_python.HelmError as e:
        raise ChartError(f"{archive.name}: {' '.join(str(e).split())}") from None
    objects: list[tuple[str, dict]] = []
    for crd in crds:
        objects += [(crd.get("filename") or crd.get("name", "crds"), d) for d in _documents(crd["name"], crd["data"])]
    for path in sorted(rendered):
        if not path.endswith((".yaml", ".yml", ".json")):
            continue  # NOTES.txt and other text Helm prints but never applies
        for doc in _documents(path, rendered[path]):
            if HOOK_ANNOTATION in ((doc.get("metadata") or {}).get("annotations") or {}):
                continue
            objects.append((path, doc))
    return objects


def _is_namespaced(obj: dict, crd_scopes: dict[tuple[str, str], str]) -> bool:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    key = ("" if group == "core" else group, str(obj.get("kind")))
    if key in crd_scopes:
        return crd_scopes[key] == "Namespaced"
    return key not in CLUSTER_SCOPED


def _crd_scopes(objects: Iterable[dict]) -> dict[tuple[str, str], str]:
    scopes = {}
    for o in objects:
        if o.get("kind") == "CustomResourceDefinition" and isinstance(o.get("spec"), dict):
            spec = o["spec"]
            scopes[(spec.get("group", ""), (spec.get("names") or {}).get("kind", ""))] = spec.get("scope", "Namespaced")
    return scopes


def _normalise(obj: dict, namespace: str, crd_scopes: dict) -> dict:
    """What the provider registers: core group canonical, default namespace on namespaced kinds, Secrets hidden."""
    obj = copy.deepcopy(obj)
    if str(obj.get("apiVersion", "")).startswith("core/"):
        obj["apiVersion"] = obj["apiVersion"][len("core/"):]
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict) or not meta.get("name"):
        raise ChartError(f"a rendered {obj.get('kind')} has no metadata.name")
    if _is_namespaced(obj, crd_scopes) and not meta.get("namespace"):
        meta["namespace"] = namespace
    if obj.get("apiVersion") == "v1" and obj.get("kind") == "Secret":
        for key in ("data", "stringData"):
            if isinstance(obj.get(key), dict):
                obj[key] = {k: SECRET for k in obj[key]}
    return obj


@dataclass
class Expansion:
    """What rendering a plan's Charts produced."""

    children: list[dict[str, Any]] = field(default_factory=list)
    """Plan entries of the rendered objects (each a child of its Chart)."""
    shallow: list[dict[str, Any]] = field(default_factory=list)
    """`{"chart", "version", "urn", "reason"}` for every Chart that could not be rendered."""
    rendered: dict[str, int] = field(default_factory=dict)
    """Chart resource URN -> number of objects rendered."""
    seconds: float = 0.0
    """Wall time spent loading and rendering the charts."""
    archives: dict[str, Path] = field(default_factory=dict)
    """Chart resource URN -> the archive it was rendered from (so the summary names folders that exist)."""


def expand(resources: list[dict[str, Any]], cache: Path | list[Path], cache_source: str = "") -> Expansion:
    """Render every `helm.v4.Chart` among the plan entries `resources` from the archives in `cache` (a folder, or
    folders searched in order).

    The inputs are the registration's own: `chart` (its last path component names the archive), `version`, `values`,
    `name` (release name; default the resource name), `namespace`, `skipCrds`, `resourcePrefix` (default the resource
    name). A Chart whose archive is absent, whose inputs are unknown, or that fails to render becomes a shallow entry.
    """
    start = time.perf_counter()
    out = Expansion()
    pending: list[tuple[dict, list[tuple[str, dict]]]] = []
    for res in resources:
        if res["type"] != CHART_TYPE:
            continue
        props = res["properties"]
        chart, version = chart_name(props.get("chart")), str(props.get("version") or "")
        shallow = {"chart": chart, "version": version, "urn": res["urn"]}
        if _contains_unknown(props):
            out.shallow.append({**shallow, "reason": "inputs unknown during preview (the Chart renders nothing)"})
            continue
        folders = [cache] if isinstance(cache, Path) else list(cache)
        archive = next((f / archive_name(chart, version) for f in folders
                        if (f / archive_name(chart, version)).is_file()), None)
        if archive is None:
            where = " nor ".join(str(f) for f in folders)
            out.shallow.append({**shallow, "reason": f"{archive_name(chart, version)} not in the chart cache {where}"
                                                     f"{f' ({cache_source})' if cache_source else ''}"})
            continue
        try:
            objects = render_objects(archive, props.get("values") or {}, str(props.get("name") or res["name"]),
                                     str(props.get("namespace") or "default"), bool(props.get("skipCrds")))
        except ChartError as e:
            out.shallow.append({**shallow, "reason": f"render failed: {e}"})
            continue
        pending.append((res, objects))
        out.archives[res["urn"]] = archive
    scopes = _crd_scopes(o for _, objs in pending for _, o in objs)
    for res, objects in pending:
        props = res["properties"]
        prefix = str(props["resourcePrefix"]) if props.get("resourcePrefix") is not None else res["name"]
        namespace = str(props.get("namespace") or "default")
        chart = chart_name(props.get("chart"))
        for template, raw in objects:
            obj = _normalise(raw, namespace, scopes)
            type_ = type_token(obj["apiVersion"], obj["kind"])
            name = child_name(prefix, obj)
            out.children.append({"urn": child_urn(res["urn"], type_, name), "type": type_, "name": name,
                                 "parent": res["urn"], "dependencies": [], "properties": obj,
                                 "source": {"chart": chart, "version": str(props.get("version")),
                                            "template": template}})
        out.rendered[res["urn"]] = len(objects)
    out.seconds = time.perf_counter() - start
    return out

"""The synth renders each Helm Chart as helm.v4.Chart would: cache, names, URNs, namespaces, hooks, CRDs, oracles."""
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from synth_run import run_synth

from components import catalogue
from components.synth import charts
from components.synth.mocks import UNKNOWN
from tests.components.crd_oracle import check_against_crd

ROOT = Path(__file__).resolve().parents[3]

needs_charts = pytest.mark.skipif(not charts.SHARED_CHARTS.is_dir(), reason=f"the pinned chart archives are not at "
                                  f"{charts.SHARED_CHARTS} (../shared/charts is absent)")


def children(plan):
    return [r for r in plan["resources"] if r.get("source")]


# -- the cache --------------------------------------------------------------------------------------------------------

def test_cache_order_flag_then_env_then_shared_then_user_cache(tmp_path):
    shared = tmp_path / "shared"
    env = {"GPUBURST_CHARTS": str(tmp_path / "env"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert charts.resolve_cache(tmp_path / "flag", env, shared) == (tmp_path / "flag", "--charts")
    assert charts.resolve_cache(None, env, shared) == (tmp_path / "env", "$GPUBURST_CHARTS")
    env.pop("GPUBURST_CHARTS")
    assert charts.resolve_cache(None, env, shared)[0] == tmp_path / "xdg" / "gpuburst" / "charts"
    shared.mkdir()
    assert charts.resolve_cache(None, env, shared) == (shared, "../shared/charts")
    assert charts.user_cache_dir({"HOME": "/nowhere"}) == Path.home() / ".cache" / "gpuburst" / "charts"


def test_pull_never_writes_into_the_shared_folder_and_the_synth_also_reads_the_user_cache(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    user = tmp_path / "xdg" / "gpuburst" / "charts"
    assert charts.pull_destination(None, env) == (user, "user cache")
    assert charts.pull_destination(tmp_path / "flag", env) == (tmp_path / "flag", "--charts")
    assert charts.search_path(None, env, shared) == [shared, user]
    assert charts.search_path(tmp_path / "flag", env, shared) == [tmp_path / "flag"]
    _tiny_chart(user)
    out = charts.expand([_chart_entry()], charts.search_path(None, env, shared))
    assert out.shallow == [] and out.children


def test_pull_skips_archives_already_there_and_fails_in_one_line(tmp_path):
    pin = catalogue.CHARTS["keda"]
    (tmp_path / charts.archive_name(pin.chart, pin.version)).write_bytes(b"")
    assert charts.pull(tmp_path, charts=[pin], runner=None) == [f"keda {pin.version}: already in {tmp_path}"]

    calls = []

    def stalled(cmd, **kwargs):
        calls.append((json.loads(cmd[-1]), kwargs["timeout"]))
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])

    oci = catalogue.CHARTS["karpenter"]
    with pytest.raises(charts.ChartError) as e:
        charts.pull(tmp_path / "new", timeout_s=3, charts=[oci], runner=stalled)
    assert "\n" not in str(e.value) and "karpenter" in str(e.value) and oci.version in str(e.value)
    assert calls == [({"chart_ref": f"{oci.repository}/karpenter", "version": oci.version,
                       "destination": str(tmp_path / "new")}, 3)]


def test_charts_pull_offline_exits_2_with_one_line(tmp_path):
    # No network here (or a repository that refuses): one line on stderr, exit 2, within the timeout.
    proc = subprocess.run([sys.executable, "-m", "components", "charts", "pull", "--charts", str(tmp_path),
                           "--timeout", "20"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    if proc.returncode == 0:
        pytest.skip("this machine is online: every chart was pulled")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("charts pull: chart "), proc.stderr


def test_makefile_has_a_charts_target():
    text = (ROOT / "Makefile").read_text()
    assert "\ncharts:" in text and "-m components charts pull" in text


# -- naming, typing, normalising ---------------------------------------------------------------------------------------

def test_type_tokens_name_the_core_group():
    assert charts.type_token("v1", "ServiceAccount") == "kubernetes:core/v1:ServiceAccount"
    assert charts.type_token("apps/v1", "Deployment") == "kubernetes:apps/v1:Deployment"
    assert charts.type_token("rbac.authorization.k8s.io/v1", "ClusterRole") == \
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"


def test_child_names_and_urns_follow_pulumi_kubernetes():
    assert charts.child_name("gpuburst-keda", {"metadata": {"name": "keda-operator", "namespace": "keda"}}) == \
        "gpuburst-keda:keda/keda-operator"
    assert charts.child_name("p", {"metadata": {"name": "cr"}}) == "p:cr"
    assert charts.child_name("", {"metadata": {"name": "cr"}}) == "cr"
    parent = "urn:pulumi:dev::gpuburst::a:b:C$kubernetes:helm.sh/v4:Chart::ch"
    assert charts.child_urn(parent, "kubernetes:core/v1:Service", "ch:ns/s") == \
        "urn:pulumi:dev::gpuburst::a:b:C$kubernetes:helm.sh/v4:Chart$kubernetes:core/v1:Service::ch:ns/s"


def _tiny_chart(folder: Path, version: str = "0.1.0") -> Path:
    """A chart archive with a namespaced object, a cluster-scoped one, a Secret, a hook, a List, a CRD, NOTES.txt."""
    src = folder / "tiny"
    (src / "templates").mkdir(parents=True)
    (src / "crds").mkdir()
    (src / "Chart.yaml").write_text(f"apiVersion: v2\nname: tiny\nversion: {version}\n")
    (src / "values.yaml").write_text("greeting: hello\n")
    (src / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n"
        "data:\n  greeting: {{ .Values.greeting }}\n---\n"
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: tiny-role\nrules: []\n")
    (src / "templates" / "secret.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  password: hunter2\n")
    (src / "templates" / "hook.yaml").write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: hook\n  annotations:\n    helm.sh/hook: pre-install\n"
        "spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: x, image: busybox}]\n")
    (src / "templates" / "list.yaml").write_text(
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Widget\n  metadata:\n    name: w\n")
    (src / "templates" / "NOTES.txt").write_text("thanks for installing {{ .Release.Name }}\n")
    (src / "crds" / "widgets.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gadgets.example.com\n"
        "spec:\n  group: example.com\n  scope: Cluster\n  names: {kind: Gadget, plural: gadgets}\n  versions: []\n")
    (src / "templates" / "gadget.yaml").write_text(
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: g\n")
    archive = folder / charts.archive_name("tiny", version)
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src, arcname="tiny")
    shutil.rmtree(src)
    return archive


def _chart_entry(**props):
    return {"urn": "urn:pulumi:dev::gpuburst::gpuburst:index:X$kubernetes:helm.sh/v4:Chart::my-tiny",
            "type": charts.CHART_TYPE, "name": "my-tiny", "parent": None, "dependencies": [],
            "properties": {"chart": "oci://example.invalid/charts/tiny", "version": "0.1.0", "name": "rel",
                           "namespace": "apps", "values": {"greeting": "hi"}, **props}}


def test_render_is_what_helm_v4_chart_registers(tmp_path):
    _tiny_chart(tmp_path)
    out = charts.expand([_chart_entry()], tmp_path)
    assert out.shallow == []
    by_kind = {r["properties"]["kind"]: r for r in out.children}
    assert "Job" not in by_kind, "a hook was registered (helm.v4.Chart renders with hooks disabled)"
    assert set(by_kind) == {"ConfigMap", "ClusterRole", "Secret", "Widget", "CustomResourceDefinition", "Gadget"}
    cm = by_kind["ConfigMap"]
    assert cm["properties"]["metadata"] == {"name": "rel-cm", "namespace": "apps"}
    assert cm["properties"]["data"] == {"greeting": "hi"}
    assert cm["name"] == "my-tiny:apps/rel-cm" and cm["parent"] == _chart_entry()["urn"]
    assert cm["urn"] == ("urn:pulumi:dev::gpuburst::gpuburst:index:X$kubernetes:helm.sh/v4:Chart"
                         "$kubernetes:core/v1:ConfigMap::my-tiny:apps/rel-cm")
    assert "namespace" not in by_kind["ClusterRole"]["properties"]["metadata"]
    assert "namespace" not in by_kind["Gadget"]["properties"]["metadata"], "the rendered CRD says Cluster scope"
    assert by_kind["Widget"]["properties"]["metadata"]["namespace"] == "apps"
    assert by_kind["Secret"]["properties"]["stringData"] == {"password": charts.SECRET}
    assert cm["source"] == {"chart": "tiny", "version": "0.1.0", "template": "tiny/templates/cm.yaml"}
    assert out.rendered == {_chart_entry()["urn"]: 6}


def test_skip_crds_and_resource_prefix_are_honoured(tmp_path):
    _tiny_chart(tmp_path)
    out = charts.expand([_chart_entry(skipCrds=True, resourcePrefix="pre")], tmp_path)
    kinds = {r["properties"]["kind"] for r in out.children}
    assert "CustomResourceDefinition" not in kinds and "Gadget" in kinds
    assert all(r["name"].startswith("pre:") for r in out.children)


def test_missing_archive_unknown_inputs_and_render_errors_are_shallow(tmp_path):
    out = charts.expand([_chart_entry()], tmp_path, "--charts")
    assert out.children == [] and len(out.shallow) == 1
    entry = out.shallow[0]
    assert (entry["chart"], entry["version"]) == ("tiny", "0.1.0")
    assert "tiny-0.1.0.tgz" in entry["reason"] and str(tmp_path) in entry["reason"]
    _tiny_chart(tmp_path)
    out = charts.expand([_chart_entry(values={"greeting": UNKNOWN})], tmp_path)
    assert out.children == [] and "unknown" in out.shallow[0]["reason"]
    (tmp_path / "tiny-0.1.0.tgz").write_bytes(b"not a chart")
    out = charts.expand([_chart_entry()], tmp_path)
    assert out.children == [] and out.shallow[0]["reason"].startswith("render failed: ")


# -- the dev plan's rendered objects against oracles -------------------------------------------------------------------

@needs_charts
def test_every_chart_of_the_dev_plan_has_children(dev):
    plan = dev["plan"]
    chart_urns = {r["urn"] for r in plan["resources"] if r["type"] == charts.CHART_TYPE}
    assert len(chart_urns) == 4
    assert {r["parent"] for r in children(plan)} == chart_urns
    urns = [r["urn"] for r in plan["resources"]]
    assert len(urns) == len(set(urns))


@needs_charts
def test_rendered_built_in_objects_validate_strictly_for_the_pinned_kubernetes(dev):
    seen = set()
    for res in children(dev["plan"]):
        obj = res["properties"]
        try:
            kubernetes_validate.validate(obj, catalogue.KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{res['urn']}: {e.message} at {'.'.join(map(str, e.path))}")
        seen.add(obj["kind"])
    assert {"Deployment", "DaemonSet", "ServiceAccount", "ClusterRole", "CustomResourceDefinition"} <= seen


@needs_charts
def test_karpenter_crd_chart_installs_exactly_the_upstream_crds(dev, upstream_crds):
    rendered = {r["properties"]["metadata"]["name"]: r["properties"] for r in children(dev["plan"])
                if r["source"]["chart"] == "karpenter-crd"}
    version = catalogue.CHARTS["karpenter-crd"].version
    files = sorted(upstream_crds.glob(f"karpenter-v{version}-*.yaml"))
    assert files, f"no upstream CRDs for karpenter {version} in {upstream_crds}"
    for f in files:
        upstream = next(d for d in yaml.safe_load_all(f.read_text()) if d)
        name = upstream["metadata"]["name"]
        assert name in rendered, f"karpenter-crd {version} renders no {name} ({f.name})"
        assert rendered[name] == upstream, f"{name}: the chart's CRD differs from {f.name}"


@needs_charts
def test_the_stacks_custom_resources_fit_the_crds_the_charts_install(dev):
    # The upstream CRD files are one oracle (test_plan_oracles.py); this is the other: the CRDs the cluster gets.
    crds = {}
    for r in children(dev["plan"]):
        obj = r["properties"]
        if obj["kind"] == "CustomResourceDefinition":
            crds[(obj["spec"]["group"], obj["spec"]["names"]["kind"])] = \
                dev["out"] / "manifests" / r["source"]["chart"] / (
                    f"customresourcedefinition-cluster-{obj['metadata']['name']}.yaml")
    checked = set()
    for r in dev["plan"]["resources"]:
        obj = r["properties"]
        if r.get("source") or not r["type"].startswith("kubernetes:") or "apiVersion" not in obj:
            continue
        key = (obj["apiVersion"].rpartition("/")[0], obj.get("kind"))
        if key not in crds:
            continue
        assert crds[key].is_file(), crds[key]
        report = check_against_crd(obj, crds[key])
        assert report.errors == [], f"{r['urn']} against the chart's {crds[key].name}: {report.errors}"
        checked.add(obj["kind"])
    assert {"NodePool", "EC2NodeClass", "TriggerAuthentication", "ScaledJob"} <= checked


@needs_charts
def test_checkov_findings_on_chart_objects_are_listed_per_chart(dev):
    exe = os.environ.get("CHECKOV")
    if not exe or not Path(exe).is_file():
        pytest.skip("CHECKOV is not set to a checkov binary (as `make test` sets it): the synth did not run checkov")
    text = dev["stdout"].split("checkov on the charts' objects (each accepted finding has its reason", 1)[1]
    for chart in ("karpenter", "karpenter-crd", "keda", "nvidia-device-plugin"):
        assert f"\n  {chart}: " in text and "failed check(s)" in text


# -- a shallow plan ------------------------------------------------------------------------------------------------

@needs_charts
def test_a_chart_missing_from_the_cache_gives_one_line_a_shallow_plan_and_a_mandatory_violation(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    missing = catalogue.CHARTS["nvidia-device-plugin"]
    for pin in catalogue.CHARTS.values():
        if pin is not missing:
            name = charts.archive_name(pin.chart, pin.version)
            shutil.copy(charts.SHARED_CHARTS / name, cache / name)
    proc = run_synth(tmp_path / "out", "--stack", "dev", "--charts", str(cache))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert missing.chart in lines[0] and missing.version in lines[0] and str(cache) in lines[0]
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert [(s["chart"], s["version"]) for s in plan["shallow"]] == [(missing.chart, missing.version)]
    assert {r["source"]["chart"] for r in children(plan)} == {"karpenter", "karpenter-crd", "keda"}
    check = subprocess.run([sys.executable, "-m", "policies", "check", str(tmp_path / "out" / "plan.json")],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert check.returncode == 1, check.stdout + check.stderr
    found = [ln for ln in check.stdout.splitlines() if ln.startswith("MANDATORY plan-complete ")]
    assert len(found) == 1 and f"chart {missing.chart} {missing.version}" in found[0], check.stdout


@needs_charts
def test_pull_if_missing_touches_no_network_when_every_chart_is_cached(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    env.pop("GPUBURST_CHARTS", None)
    for extra, said in (([], "charts the stack renders"), (["--all"], "pinned charts")):
        r = subprocess.run([sys.executable, "-m", "components", "charts", "pull", "--if-missing", *extra], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"charts: all {len(catalogue.CHARTS)} {said} are in the chart cache"), r.stdout
        assert r.stderr == "", r.stderr
    assert not (tmp_path / "xdg" / "gpuburst" / "charts").exists()  # nothing pulled, nothing written


def test_pull_for_a_stack_that_renders_no_chart_needs_nothing_and_no_network(tmp_path):
    # A workload stack (Existing* references): its program runs offline, and an empty cache is enough.
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"), GPUBURST_CHARTS=str(tmp_path / "empty"))
    for extra in ([], ["--if-missing"]):
        r = subprocess.run([sys.executable, "-m", "components", "charts", "pull", "--stack", "lab", "--project-dir",
                            str(ROOT / "examples" / "another-team"), *extra], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "charts: stack lab renders no Helm chart: nothing to pull", r.stdout
        assert r.stderr == "", r.stderr
    assert not (tmp_path / "empty").exists() and not (tmp_path / "xdg").exists()


def test_pull_for_a_stack_that_cannot_run_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "components", "charts", "pull", "--stack", "nope", "--project-dir",
                        str(ROOT / "examples" / "another-team")], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("charts pull: ") and "Pulumi.nope.yaml" in r.stderr


def test_the_charts_a_plan_renders_are_its_charts_at_their_versions_and_repositories(dev):
    pins = charts.charts_of(dev["plan"]["resources"])
    assert [(p.chart, p.version) for p in pins] == sorted((p.chart, p.version) for p in catalogue.CHARTS.values())
    assert {p.chart: p.repository for p in pins} == {p.chart: p.repository for p in catalogue.CHARTS.values()}
    # Another version than the catalogue's is pulled at that version; an unknown input is left out; no Chart, none.
    (keda,) = [r for r in dev["plan"]["resources"] if r["type"] == charts.CHART_TYPE and r["properties"]["chart"]
               == "keda"]
    older = {**keda, "properties": {**keda["properties"], "version": "2.19.0"}}
    unknown = {**keda, "properties": {**keda["properties"], "values": {"x": UNKNOWN}}}
    assert [(p.chart, p.version, p.repository) for p in charts.charts_of([older, unknown])] == \
        [("keda", "2.19.0", catalogue.CHARTS["keda"].repository)]
    assert charts.charts_of([r for r in dev["plan"]["resources"] if r["type"] != charts.CHART_TYPE]) == []


@needs_charts
def test_rendering_without_helm_python_sdk_is_one_line_naming_the_platform_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "helm_python", None)  # as in an install without the platform extra
    pin = catalogue.CHARTS["keda"]
    with pytest.raises(charts.ChartError) as e:
        charts.render_objects(charts.SHARED_CHARTS / charts.archive_name(pin.chart, pin.version), {}, "keda", "keda",
                              skip_crds=False)
    assert str(e.value) == ('rendering a Helm chart offline needs helm-python-sdk, which is not installed here: '
                            'pip install "gpuburst[platform]"')
    assert charts.shallow_fix({"reason": f"render failed: {e.value}"}, "gpuburst") == ""
    assert "charts pull --if-missing" in charts.shallow_fix({"reason": "keda-2.20.2.tgz not in the chart cache x"},
                                                            "gpuburst")

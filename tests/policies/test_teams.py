"""Teams side by side: `keda-watches-namespace` (a ScaledJob in a namespace KEDA does not watch is refused, naming
both), the advisory `worker-nodepool`, and the plans themselves: in the dev plan and in examples/another-team each
workload's pods run only on the NodePool it names, and each of the issue's silent mistakes, put into the example's
plan, now fails the pack in one line naming the field and the value."""
from __future__ import annotations

import copy
import json

import pytest

from policies import pod_identity, teams, worker_contract
from policies.facts import WHOLE, scope_of
from policies.outside import Outside
from policies.plan import Res
from policies.unknowns import UNKNOWN
from tests.synth_run import ROOT, run_synth

T_SJ = "kubernetes:keda.sh/v1alpha1:ScaledJob"
T_CHART = "kubernetes:helm.sh/v4:Chart"
T_KEDA = "gpuburst:index:ExistingKeda"
T_NODEPOOL = "kubernetes:karpenter.sh/v1:NodePool"
T_ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
WORKER = {"app.kubernetes.io/name": "gpuburst-worker"}


def res(rtype: str, name: str, props: dict, urn: str | None = None) -> Res:
    return Res(rtype, urn or f"urn:pulumi:lab::tils-lab::{rtype}::{name}", name, None, props)


def scaled_job(ns="lab-tils", selector: dict | None = None) -> Res:
    pod = {"containers": [{"name": "worker", "image": "i"}],
           "nodeSelector": selector if selector is not None else {"nvidia.com/gpu.present": "true"}}
    return res(T_SJ, "tils", {"metadata": {"name": "tils", "namespace": ns},
                              "spec": {"jobTargetRef": {"template": {"metadata": {"labels": dict(WORKER)},
                                                                     "spec": pod}}}})


def keda_chart(watch: object = "gpuburst") -> Res:
    values = {} if watch is None else {"watchNamespace": watch}
    return res(T_CHART, "keda", {"chart": "keda", "version": "2.20.2", "namespace": "keda", "values": values})


def existing_keda(watch: list | None) -> Res:
    return res(T_KEDA, "keda", {"version": "2.20.2", "namespace": "keda", "watchNamespaces": watch})


def watch(resources: list[Res], config: dict | None = None) -> list:
    return teams.watch_findings(resources, scope_of(resources, config))


# -- keda-watches-namespace ------------------------------------------------------------------------------------------

def test_a_scaledjob_outside_the_charts_watch_list_is_refused_naming_both():
    (urn, message), = watch([keda_chart("gpuburst,lab-a"), scaled_job("lab-tils")])
    assert urn.endswith("::tils") and "namespace lab-tils" in message
    assert "'gpuburst,lab-a'" in message and "watched: gpuburst, keda, lab-a" in message  # its own is added
    assert "KedaArgs.watch_namespaces" not in message or "lab-tils" in message


@pytest.mark.parametrize("chart_watch", ["gpuburst,lab-tils", "", None])
def test_a_watched_namespace_or_a_chart_that_watches_all_passes(chart_watch):
    assert watch([keda_chart(chart_watch), scaled_job("lab-tils")]) == []


def test_in_a_partial_plan_the_existing_keda_fact_decides():
    (urn, message), = watch([existing_keda(["gpuburst"]), scaled_job("lab-tils")])
    assert "namespace lab-tils" in message and "ExistingKeda 'keda' watchNamespaces: gpuburst" in message
    assert "ExistingKedaArgs.watch_namespaces" in message  # the fix a component stack can make
    assert watch([existing_keda(["gpuburst", "lab-tils"]), scaled_job("lab-tils")]) == []
    assert watch([existing_keda(["*"]), scaled_job("lab-tils")]) == []
    assert watch([existing_keda(["gpuburst"]), scaled_job("keda")]) == []  # KEDA's own namespace is always watched


def test_policy_config_gives_the_fact_too():
    config = {"kedaWatchNamespaces": ["gpuburst"]}
    (_urn, message), = watch([scaled_job("lab-tils")], config)
    assert "policy config kedaWatchNamespaces: gpuburst" in message
    with pytest.raises(ValueError, match="policy config kedaWatchNamespaces: "):
        watch([scaled_job("lab-tils")], {"kedaWatchNamespaces": "gpuburst"})


def test_without_the_fact_a_partial_plan_says_it_could_not_check():
    (found,) = watch([existing_keda(None), scaled_job("lab-tils")])
    assert isinstance(found, Outside) and found.keys == ("kedaWatchNamespaces",)
    assert teams.watch_findings([scaled_job("lab-tils")], WHOLE) == []  # a whole plan without KEDA: other rules


def test_an_unknown_watch_list_is_said_to_be_unknown():
    (_urn, message), = watch([keda_chart(UNKNOWN), scaled_job("lab-tils")])
    assert "unknown during preview" in message and "watchNamespace" in message


# -- worker-nodepool -------------------------------------------------------------------------------------------------

def test_a_worker_that_names_no_nodepool_is_named_with_the_component_fix():
    urn = f"urn:pulumi:lab::tils-lab::gpuburst:index:GpuScaledJob${T_SJ}::tils-scaledjob"
    (message,) = teams.nodepool_findings(scaled_job()._replace(urn=urn))
    assert "karpenter.sh/nodepool" in message and "WorkerAccessArgs.nodepool" in message


@pytest.mark.parametrize("pod_extra", [
    {"nodeSelector": {"nvidia.com/gpu.present": "true", "karpenter.sh/nodepool": "tils-lab"}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["tils-lab"]}]}]}}}},
])
def test_a_worker_tied_by_selector_or_affinity_passes(pod_extra):
    sj = scaled_job()
    sj.props["spec"]["jobTargetRef"]["template"]["spec"].update(pod_extra)
    if "affinity" in pod_extra:
        sj.props["spec"]["jobTargetRef"]["template"]["spec"]["nodeSelector"] = {}
    assert teams.nodepool_findings(sj) == []


# -- the plans ---------------------------------------------------------------------------------------------------------

def _pods(plan: dict) -> list[tuple[dict, dict]]:
    """(resource, pod spec) of every worker ScaledJob and Deployment."""
    out = []
    for r in plan["resources"]:
        props = r["properties"]
        if r["type"] == T_SJ:
            out.append((r, props["spec"]["jobTargetRef"]["template"]["spec"]))
        elif r["type"] == "kubernetes:apps/v1:Deployment" and \
                props.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/name") == "gpuburst-worker":
            out.append((r, props["spec"]["template"]["spec"]))
    return out


def test_in_the_dev_plan_every_workload_runs_only_on_the_platform_gpu_nodepool(dev_plan):
    (pool,) = [r for r in dev_plan["resources"] if r["type"] == T_NODEPOOL
               and "nvidia.com/gpu" in r["properties"]["spec"]["limits"]]
    name = pool["properties"]["metadata"]["name"]
    pods = _pods(dev_plan)
    assert len(pods) == 2  # slides (ScaledJob) and studies (consumer)
    for r, pod in pods:
        assert pod["nodeSelector"]["karpenter.sh/nodepool"] == name, r["urn"]
        assert pool["urn"] in r["dependencies"], r["urn"]  # created after the pool


@pytest.fixture(scope="module")
def lab_plan(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("another-team")
    proc = run_synth(out, "--project-dir", str(ROOT / "examples" / "another-team"), "--stack", "lab")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads((out / "plan.json").read_text(encoding="utf-8"))


def _of(plan: dict, rtype: str) -> list[dict]:
    return [r for r in plan["resources"] if r["type"] == rtype]


@pytest.mark.slow
def test_the_example_team_runs_only_on_its_own_pool_in_its_own_namespace(lab_plan, analyze):
    ((_r, pod),) = _pods(lab_plan)
    (pool,) = _of(lab_plan, T_NODEPOOL)
    assert pod["nodeSelector"]["karpenter.sh/nodepool"] == pool["properties"]["metadata"]["name"] == "tils-lab"
    (ns,) = _of(lab_plan, "kubernetes:core/v1:Namespace")
    assert ns["properties"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert _of(lab_plan, "kubernetes:core/v1:ResourceQuota")
    report = analyze(lab_plan)
    assert report.mandatory == [], "\n".join(d.line() for d in report.mandatory)
    assert not report.by_policy(teams.NODEPOOL_NAME) and not report.by_policy(teams.WATCH_NAME)


def _mandatory(report, policy: str) -> str:
    lines = [d.line() for d in report.mandatory if d.policy == policy]
    assert len(lines) == 1, [d.line() for d in report.diagnostics]
    assert lines[0].startswith(f"MANDATORY {policy} ") and "\n" not in lines[0]
    return lines[0]


@pytest.mark.slow
def test_the_issue_mistakes_in_the_example_each_fail_the_pack_in_one_line(lab_plan, analyze):
    # KEDA of the platform does not watch the lab's namespace.
    plan = copy.deepcopy(lab_plan)
    (keda,) = _of(plan, T_KEDA)
    keda["properties"]["watchNamespaces"] = ["gpuburst"]
    line = _mandatory(analyze(plan), teams.WATCH_NAME)
    assert "namespace lab-tils" in line and "watchNamespaces: gpuburst" in line

    # The queue's visibility timeout (240 s) apart from the pod's (600 s).
    plan = copy.deepcopy(lab_plan)
    (queue,) = [q for q in _of(plan, "aws:sqs/queue:Queue") if q["properties"]["name"] == "tils-lab-slides"]
    queue["properties"]["visibilityTimeoutSeconds"] = 240
    line = _mandatory(analyze(plan), worker_contract.VISIBILITY_NAME)
    assert "'600' s" in line and "visibilityTimeoutSeconds 240" in line

    # A second Pod Identity association for the worker's ServiceAccount.
    plan = copy.deepcopy(lab_plan)
    (assoc,) = _of(plan, T_ASSOCIATION)
    twin = copy.deepcopy(assoc)
    twin["urn"], twin["name"] = assoc["urn"] + "-twin", assoc["name"] + "-twin"
    plan["resources"].append(twin)
    line = _mandatory(analyze(plan), pod_identity.NAME)
    assert assoc["properties"]["serviceAccount"] in line and "already does" in line

    # A worker NetworkPolicy with no HTTPS out.
    plan = copy.deepcopy(lab_plan)
    (netpol,) = [n for n in _of(plan, "kubernetes:networking.k8s.io/v1:NetworkPolicy")
                 if n["properties"]["metadata"]["name"] == "tils-worker"]
    netpol["properties"]["spec"]["egress"] = [e for e in netpol["properties"]["spec"]["egress"]
                                              if all(p["port"] != 443 for p in e["ports"])]
    line = _mandatory(analyze(plan), worker_contract.EGRESS_NAME)
    assert "TCP 443" in line and "egress_cidrs" in line


@pytest.mark.slow
def test_the_example_without_its_nodepool_gets_the_advisory(lab_plan, analyze):
    plan = copy.deepcopy(lab_plan)
    ((_r, pod),) = _pods(plan)
    del pod["nodeSelector"]["karpenter.sh/nodepool"]
    report = analyze(plan)
    (found,) = report.by_policy(teams.NODEPOOL_NAME)
    assert found.level == "ADVISORY" and "WorkerAccessArgs.nodepool" in found.message

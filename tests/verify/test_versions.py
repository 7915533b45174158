"""versions: what the cluster runs, through the catalogue's functions (never a version written here)."""
from __future__ import annotations

import copy

from verify_fakes import FakeKube, at_pin, load, pinned_server

from components import catalogue
from components.verify import versions
from components.verify.checks import Context
from components.verify.model import VerifySettings


def _crd(chart_version=None):
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "nodepools.karpenter.sh",
                        "annotations": {"controller-gen.kubebuilder.io/version": "v0.20.1"}},
           "spec": {"group": "karpenter.sh", "versions": [{"name": "v1", "served": True, "storage": True}]}}
    if chart_version:
        crd["metadata"]["labels"] = {"helm.sh/chart": f"karpenter-crd-{chart_version}",
                                     "app.kubernetes.io/version": chart_version}
    return crd


def judge(karpenter=None, crd_version=catalogue.CHARTS["karpenter-crd"].version, server=None, keda=None):
    karpenter = load(karpenter) if karpenter else at_pin(load("deployment_karpenter_1.14.1.json"), "karpenter",
                                                         "1.14.1")
    return versions.judge_versions(
        [karpenter], [keda or at_pin(load("deployment_keda_2.20.2.json"), "keda", "2.20.2")],
        [at_pin(load("daemonset_nvidia_device_plugin.json"), "nvidia-device-plugin", "0.18.0")], _crd(crd_version),
        server or pinned_server())


def test_pinned_cluster_passes():
    r = judge()
    assert r.status == "pass", r
    assert f"karpenter {catalogue.CHARTS['karpenter'].version}," in r.summary


def test_karpenter_1_0_1_found_in_the_cluster_fails_with_the_catalogue_reason():
    r = judge(karpenter="deployment_karpenter_1.0.1.json")
    assert r.status == "fail"
    assert r.summary.startswith(catalogue.karpenter_version_problem("1.0.1"))
    assert any("Deployment kube-system/karpenter" in e and "1.0.1" in e for e in r.evidence)


def test_karpenter_crd_stamp_differing_from_the_controller_fails():
    controller = catalogue.CHARTS["karpenter"].version
    r = judge(crd_version="1.13.0")
    assert r.status == "fail"
    assert any(f"karpenter-crd 1.13.0 differs from karpenter {controller}" in p for p in r.evidence)


def test_unstamped_crd_is_reported_not_guessed():
    r = judge(crd_version=None)
    assert r.status == "pass"
    assert any("no chart version stamp" in e and "serves v1" in e for e in r.evidence)


def test_kubernetes_outside_the_supported_ranges_fails():
    server = copy.deepcopy(load("version_1.34.json"))
    server.update({"minor": "28", "gitVersion": "v1.28.15-eks-aeac579"})
    r = judge(server=server)
    assert r.status == "fail"
    problems = catalogue.kubernetes_problems("1.28", catalogue.CHARTS["karpenter"].version,
                                             catalogue.CHARTS["keda"].version)
    assert problems
    for p in problems:
        assert p in r.evidence


def test_image_override_that_disagrees_with_the_chart_label_fails():
    dep = load("deployment_karpenter_1.14.1.json")
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = "public.ecr.aws/karpenter/controller:1.0.2"
    r = versions.judge_versions(
        [dep], [load("deployment_keda_2.20.2.json")], [load("daemonset_nvidia_device_plugin.json")], _crd("1.14.1"),
        load("version_1.34.json"))
    assert r.status == "fail"
    assert any("states several versions (1.14.1, 1.0.2)" in p for p in r.evidence)
    assert catalogue.karpenter_version_problem("1.0.2") in r.evidence


def test_missing_controllers_fail():
    r = versions.judge_versions([], [], [], None, load("version_1.34.json"))
    assert r.status == "fail"
    assert "karpenter: no Deployment found in the cluster" in r.evidence


def test_server_version_parsing():
    assert versions.server_version({"gitVersion": "v1.34.2-eks-113cf36"}) == "1.34.2"
    assert versions.server_version({"gitVersion": "weird", "major": "1", "minor": "33+"}) == "1.33"


def test_run_reads_the_cluster():
    kube = FakeKube(deployments=[at_pin(load("deployment_karpenter_1.14.1.json"), "karpenter", "1.14.1"),
                                 at_pin(load("deployment_keda_2.20.2.json"), "keda", "2.20.2")],
                    daemonsets=[at_pin(load("daemonset_nvidia_device_plugin.json"), "nvidia-device-plugin", "0.18.0")],
                    crds=[_crd(catalogue.CHARTS["karpenter-crd"].version)], version=pinned_server())
    r = versions.run(Context(settings=VerifySettings(), kube=kube))
    assert r.status == "pass", r

"""The synth summary's versions: what the stack declares (cluster, charts, Existing* facts, base image), with the
catalogue's pin beside a version that differs, and the pins it does not declare apart."""
from __future__ import annotations

import json
from pathlib import Path

import yaml
from synth_run import run_synth

from components import catalogue
from components.synth.declared import (
    CHART_TYPE,
    DeclaredVersion,
    declared_versions,
    release_line_versions,
    used_pins,
    version_lines,
)

ROOT = Path(__file__).resolve().parents[3]
WORKLOAD = ROOT / "examples" / "another-team"


def _res(type_: str, resource_name: str, **props) -> dict:
    return {"urn": f"urn:pulumi:lab::lab::{type_}::{resource_name}", "type": type_, "name": resource_name,
            "properties": props}


def test_a_workload_plan_declares_the_existing_versions_and_is_told_where_they_differ_from_the_pins():
    plan = {"resources": [
        _res("gpuburst:index:ExistingKarpenter", "karpenter", version="1.13.2", namespace="kube-system"),
        _res("gpuburst:index:ExistingKeda", "keda", version=catalogue.KEDA_VERSION),
        _res("aws:sqs/queue:Queue", "q", name="q"),
    ]}
    assert declared_versions(plan) == [
        DeclaredVersion("karpenter", "1.13.2", "ExistingKarpenter 'karpenter'", catalogue.KARPENTER_VERSION),
        DeclaredVersion("keda", catalogue.KEDA_VERSION, "ExistingKeda 'keda'", catalogue.KEDA_VERSION)]
    lines = version_lines(plan)
    assert lines[1] == (f"  karpenter              1.13.2  from ExistingKarpenter 'karpenter' "
                        f"(catalogue pin {catalogue.KARPENTER_VERSION})")
    assert lines[2] == f"  keda                   {catalogue.KEDA_VERSION}  from ExistingKeda 'keda'"
    assert lines[lines.index("") + 1] == ("Catalogue pins of what this stack uses but does not declare "
                                          "(gpuburst.catalogue.pins; a component's default):")
    rest = lines[lines.index("") + 2:]
    # No GPU workload, no image build: neither the device plugin nor the worker base image is this plan's.
    assert [ln.split()[0] for ln in rest] == ["kubernetes", "karpenter-crd"]
    assert release_line_versions(plan) == {("karpenter", "1.13.2"), ("keda", catalogue.KEDA_VERSION)}


def test_only_the_pins_of_what_the_stack_uses_are_listed():
    consumer = {"resources": [
        _res("gpuburst:index:ExistingCluster", "platform", clusterName="c"),
        _res("gpuburst:index:ExistingKarpenter", "karpenter", version=catalogue.KARPENTER_VERSION),
        _res("gpuburst:index:GpuNodePool", "studies"),
        _res("kubernetes:karpenter.sh/v1:NodePool", "studies-nodepool"),
        _res("gpuburst:index:GpuConsumer", "studies"),
        _res("kubernetes:apps/v1:Deployment", "studies-deployment"),
    ]}
    assert set(used_pins(consumer)) == {"kubernetes", "karpenter", "karpenter-crd", "nvidia-device-plugin"}
    assert "keda" not in "\n".join(version_lines(consumer))  # a consumer-only stack uses no KEDA
    scaledjob = {"resources": [*consumer["resources"], _res("gpuburst:index:ExistingKeda", "keda", version="2.20.2")]}
    assert "keda" in used_pins(scaledjob)
    bare_scaledjob = {"resources": [_res("kubernetes:keda.sh/v1alpha1:ScaledJob", "sj")]}  # KEDA's own kind
    assert "keda" in used_pins(bare_scaledjob)
    builds = {"resources": [_res("gpuburst:index:WorkerImage", "img"), _res("docker-build:index:Image", "img-image")]}
    assert "worker-base-image" in used_pins(builds) and "worker-base-image" not in used_pins(consumer)
    chart = {"resources": [_res(CHART_TYPE, "keda", chart="kedacore/keda", version="2.20.2")]}
    assert "keda" in used_pins(chart)
    assert used_pins({"resources": []}) == {}


def test_the_dev_plan_declares_every_pin_from_its_own_resources(dev):
    declared = declared_versions(dev["plan"])
    assert {d.name: d.version for d in declared} == catalogue.describe_pins()
    assert not [d for d in declared if d.differs]
    assert "Catalogue pins of what this stack uses but does not declare" not in dev["stdout"]
    assert "components/catalogue/" not in dev["stdout"]  # a wheel user has modules, not the repository's paths
    assert f"  kubernetes             {catalogue.KUBERNETES_VERSION}  from Cluster " in dev["stdout"]


def test_the_workload_synth_summary_shows_its_declared_versions_and_names_no_chart_folder(tmp_path):
    config = yaml.safe_load((WORKLOAD / "Pulumi.lab.yaml").read_text())["config"]
    karpenter = next(v for k, v in config.items() if k.endswith(":karpenterVersion"))
    proc = run_synth(tmp_path / "out", "--project-dir", str(WORKLOAD), "--stack", "lab",
                     "--charts", str(tmp_path / "absent"))
    assert proc.returncode == 0, proc.stderr
    note = f" (catalogue pin {catalogue.KARPENTER_VERSION})" if karpenter != catalogue.KARPENTER_VERSION else ""
    assert f"  karpenter              {karpenter}  from ExistingKarpenter 'karpenter'{note}\n" in proc.stdout
    assert "Helm charts: none (this stack renders no chart, so it needs no chart cache)" in proc.stdout
    assert str(tmp_path / "absent") not in proc.stdout and "rendered from" not in proc.stdout
    assert f"  karpenter {karpenter}: " in proc.stdout.split("Release lines", 1)[1]  # the line it runs, not the pin's
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["shallow"] == []

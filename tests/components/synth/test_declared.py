"""The synth summary's versions: what the stack declares (cluster, charts, Existing* facts, base image), with the
catalogue's pin beside a version that differs, and the pins it does not declare apart."""
from __future__ import annotations

import json
from pathlib import Path

import yaml
from synth_run import run_synth

from components import catalogue
from components.synth.declared import DeclaredVersion, declared_versions, release_line_versions, version_lines

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
    rest = lines[lines.index("") + 2:]
    assert [ln.split()[0] for ln in rest] == [k for k in catalogue.describe_pins() if k not in ("karpenter", "keda")]
    assert release_line_versions(plan) == {("karpenter", "1.13.2"), ("keda", catalogue.KEDA_VERSION)}


def test_the_dev_plan_declares_every_pin_from_its_own_resources(dev):
    declared = declared_versions(dev["plan"])
    assert {d.name: d.version for d in declared} == catalogue.describe_pins()
    assert not [d for d in declared if d.differs]
    assert "Catalogue pins this stack does not declare" not in dev["stdout"]
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

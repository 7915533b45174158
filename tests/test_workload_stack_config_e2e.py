"""The platform's `workloadStackConfig` output is all a lab needs: the dev platform synthesised with
`gpuburst:kedaExtraWatchNamespaces: [cyto-slides]`, its output pasted (keys prefixed `cyto-slides:`, `region` as
`aws:region`) into a copy of
examples/lab-scaledjob beside the lab's own keys, synthesises and passes the pack; pasted from the plain dev platform
(KEDA watching `gpuburst` only), the pack's keda-watches-namespace refuses the lab's ScaledJob."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.harness import Report, check, normalise_plan
from tests.synth_run import ROOT, run_synth

pytestmark = pytest.mark.slow

LAB = ROOT / "examples" / "lab-scaledjob"
PROJECT = "cyto-slides"
LAB_OWN = {"namespace", "alarmEmails", "deploy", "model"}
"""The lab's own keys in examples/lab-scaledjob/Pulumi.lab.yaml; every other key (`aws:region` included) is the
platform's."""


def lab_config() -> dict[str, Any]:
    return yaml.safe_load((LAB / "Pulumi.lab.yaml").read_text(encoding="utf-8"))["config"]


def of_type(plan: dict, type_: str) -> list[dict]:
    return [r for r in plan["resources"] if r["type"] == type_]


@pytest.fixture(scope="module")
def platform(tmp_path_factory) -> dict:
    """The dev platform's plan with cyto-slides added to KEDA's watch list (a stack file of its own; Pulumi.dev.yaml
    is left as it is)."""
    folder = tmp_path_factory.mktemp("platform")
    doc = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8"))
    doc["config"]["gpuburst:kedaExtraWatchNamespaces"] = [PROJECT]
    stack_file = folder / "Pulumi.dev.yaml"
    stack_file.write_text(yaml.safe_dump(doc), encoding="utf-8")
    proc = run_synth(folder / "out", "--stack", "dev", "--stack-file", str(stack_file))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads((folder / "out" / "plan.json").read_text(encoding="utf-8"))


def synth_lab(folder: Path, platform_output: dict[str, Any]) -> Report:
    """Copy examples/lab-scaledjob to `folder`, give it a Pulumi.lab.yaml of the platform's output and the lab's own
    keys, synthesise it and run the pack on its plan."""
    shutil.copytree(LAB, folder, ignore=shutil.ignore_patterns("venv", "__pycache__", "Pulumi.lab.yaml"))
    original = lab_config()
    own = {k: v for k, v in original.items() if k.startswith(f"{PROJECT}:") and k.split(":", 1)[1] in LAB_OWN}
    config = {**{stack_key(k): v for k, v in platform_output.items()}, **own}
    (folder / "Pulumi.lab.yaml").write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    proc = run_synth(folder / "out", "--project-dir", str(folder), "--stack", "lab")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return check(normalise_plan(json.loads((folder / "out" / "plan.json").read_text(encoding="utf-8"))))


def stack_key(key: str) -> str:
    """The lab's stack file key of an output key: `region` is `aws:region`, every other `<project>:<key>`."""
    return "aws:region" if key == "region" else f"{PROJECT}:{key}"


def test_the_output_holds_every_platform_key_the_example_reads_under_its_name(platform):
    output = platform["outputs"]["workloadStackConfig"]
    platform_keys = {k for k in lab_config() if not (k.startswith(f"{PROJECT}:") and k.split(":", 1)[1] in LAB_OWN)}
    assert {stack_key(k) for k in output} == platform_keys
    assert output["region"] == yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8"))[
        "config"]["aws:region"]
    assert output["kedaWatchNamespaces"] == ["gpuburst", PROJECT]
    assert output["imageCuda"] == "13.0" and output["nodeClassModelCacheFolder"] is True


def test_the_output_says_what_the_platform_plan_declares(platform):
    output = platform["outputs"]["workloadStackConfig"]
    (keda,) = [r for r in of_type(platform, "kubernetes:helm.sh/v4:Chart") if r["properties"].get("chart") == "keda"]
    assert keda["properties"]["values"]["watchNamespace"] == ",".join(output["kedaWatchNamespaces"])
    (cluster,) = of_type(platform, "eks:index:Cluster")
    assert cluster["properties"]["vpcCniOptions"]["enableNetworkPolicy"] is output["networkPolicyEnforced"] is True
    (nodeclass,) = of_type(platform, "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    assert nodeclass["properties"]["metadata"]["name"] == output["nodeClass"]
    (root,) = [m for m in nodeclass["properties"]["spec"]["blockDeviceMappings"] if m.get("rootVolume")]
    assert root["ebs"]["volumeSize"] == f"{output['nodeClassRootVolumeGiB']}Gi"
    # the folder the output promises is made by the node class's user data (dev declares no workload model)
    from components.model_cache import cache_folder_script
    made = cache_folder_script() in nodeclass["properties"]["spec"]["userData"].replace("\r\n", "\n")
    assert made is output["nodeClassModelCacheFolder"]
    assert output["image"] == platform["outputs"]["imageRef"] and output["clusterName"] == "gpuburst-dev"


def test_a_lab_stack_of_the_output_passes_the_pack(platform, tmp_path):
    report = synth_lab(tmp_path / "lab", platform["outputs"]["workloadStackConfig"])
    assert report.mandatory == [], "\n".join(d.line() for d in report.mandatory)
    assert report.resources > 0


def test_without_the_extra_watch_namespace_keda_would_never_scale_the_lab(dev, tmp_path):
    output = dev["plan"]["outputs"]["workloadStackConfig"]
    assert output["kedaWatchNamespaces"] == ["gpuburst"]
    report = synth_lab(tmp_path / "lab", output)
    assert {d.policy for d in report.mandatory} == {"keda-watches-namespace"}, \
        "\n".join(d.line() for d in report.mandatory)
    assert any(f"'{PROJECT}'" in d.message for d in report.mandatory)

"""The offline synth of the dev stack: the plan holds what the issue promises, and bad config fails in one line."""
import json
from pathlib import Path

import pytest
import yaml

from components import catalogue

from tests.components.conftest import run_synth

ROOT = Path(__file__).resolve().parents[2]


def of_type(plan, t):
    return [r for r in plan["resources"] if r["type"] == t]


def test_summary_is_printed(dev):
    assert "Resources by type" in dev["stdout"] and catalogue.KARPENTER_VERSION in dev["stdout"]


def test_resources_sorted_by_urn_with_required_fields(dev):
    urns = [r["urn"] for r in dev["plan"]["resources"]]
    assert urns == sorted(urns)
    for r in dev["plan"]["resources"]:
        assert set(r) >= {"urn", "type", "name", "parent", "dependencies", "properties"}


def test_cluster(dev):
    clusters = of_type(dev["plan"], "eks:index:Cluster")
    assert len(clusters) == 1
    assert clusters[0]["properties"]["version"] == catalogue.KUBERNETES_VERSION


def test_work_queue_has_redrive_and_alarms(dev):
    queues = of_type(dev["plan"], "aws:sqs/queue:Queue")
    assert len(queues) >= 2
    work = [q for q in queues if q["properties"].get("redrivePolicy")]
    assert work, "no work queue with a redrive policy"
    redrive = json.loads(work[0]["properties"]["redrivePolicy"])
    assert redrive["maxReceiveCount"] == 3 and redrive["deadLetterTargetArn"].startswith("arn:aws:sqs:")
    alarms = of_type(dev["plan"], "aws:cloudwatch/metricAlarm:MetricAlarm")
    metrics = {a["properties"]["metricName"] for a in alarms}
    assert {"ApproximateAgeOfOldestMessage", "ApproximateNumberOfMessagesVisible"} <= metrics


def test_nodepool_allows_a_family(dev):
    pools = of_type(dev["plan"], "kubernetes:karpenter.sh/v1:NodePool")
    assert len(pools) == 1
    reqs = pools[0]["properties"]["spec"]["template"]["spec"]["requirements"]
    types = [r for r in reqs if r["key"] == "node.kubernetes.io/instance-type"]
    assert types and len(set(types[0]["values"])) >= 2


def test_nodeclass_alias(dev):
    ncs = of_type(dev["plan"], "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    assert [t["alias"] for t in ncs[0]["properties"]["spec"]["amiSelectorTerms"]] == ["al2023@latest"]


def test_keda_objects(dev):
    auths = of_type(dev["plan"], "kubernetes:keda.sh/v1alpha1:TriggerAuthentication")
    assert auths and all(a["properties"]["spec"]["podIdentity"]["provider"] == "aws" for a in auths)
    assert of_type(dev["plan"], "kubernetes:keda.sh/v1alpha1:ScaledJob")
    deployments = of_type(dev["plan"], "kubernetes:apps/v1:Deployment")
    assert any("consume" in json.dumps(d["properties"]) for d in deployments)


def test_charts_pinned(dev):
    charts = of_type(dev["plan"], "kubernetes:helm.sh/v4:Chart") + of_type(dev["plan"], "kubernetes:helm.sh/v3:Release")
    found = {}
    for c in charts:
        name = str(c["properties"]["chart"]).rstrip("/").split("/")[-1]
        found[name] = c["properties"]["version"]
    for name in ("karpenter-crd", "karpenter", "keda", "nvidia-device-plugin"):
        assert found.get(name) == catalogue.CHARTS[name].version, (name, found)


def test_image_and_registry(dev):
    assert of_type(dev["plan"], "aws:ecr/repository:Repository")
    images = of_type(dev["plan"], "docker-build:index:Image")
    assert images and images[0]["properties"]["buildArgs"]["BASE_IMAGE"] == catalogue.WORKER_BASE_IMAGE
    assert of_type(dev["plan"], "aws:iam/role:Role")
    assert "@sha256:" in dev["plan"]["outputs"]["imageRef"]


def test_custom_resources_depend_on_their_crd_chart(dev):
    plan = dev["plan"]
    charts = {c["urn"]: str(c["properties"]["chart"]).split("/")[-1] for c in of_type(plan, "kubernetes:helm.sh/v4:Chart")}
    wanted = {"karpenter.sh": "karpenter-crd", "karpenter.k8s.aws": "karpenter-crd", "keda.sh": "keda"}
    for r in plan["resources"]:
        group = r["type"].split(":")[1].split("/")[0]
        if group in wanted:
            deps = {charts.get(d) for d in r["dependencies"]}
            assert wanted[group] in deps, (r["urn"], r["dependencies"])


def test_every_child_is_parented_to_a_component(dev):
    plan = dev["plan"]
    top = [r for r in plan["resources"] if r["parent"] and r["parent"].endswith("::pulumi:pulumi:Stack::gpuburst-dev")]
    assert [r["type"] for r in top] == ["gpuburst:index:GpuBurstPlatform"]


def test_nothing_renders_as_none(dev):
    text = (dev["out"] / "plan.json").read_text()
    assert "None:" not in text and "\"None\"" not in text and "<unknown" not in text
    for key, value in dev["plan"]["outputs"].items():
        assert value not in (None, "", [], {}), key


def test_manifests_written(dev):
    files = sorted((dev["out"] / "manifests").glob("*.yaml"))
    kinds = {yaml.safe_load(f.read_text())["kind"] for f in files}
    assert {"NodePool", "EC2NodeClass", "TriggerAuthentication", "ScaledJob", "Deployment"} <= kinds


def write_stack(tmp_path, config):
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def test_aws_kiam_fails_in_one_line(tmp_path):
    stack = write_stack(tmp_path, {"aws:region": "us-east-1", "gpuburst:kedaProvider": "aws-kiam",
                                   "gpuburst:kedaVersion": "2.20.2"})
    proc = run_synth(tmp_path / "out", "--stack", "bad", "--stack-file", str(stack))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "gpuburst:kedaProvider" in lines[0] and "'aws-kiam'" in lines[0] and "aws, aws-eks, none" in lines[0]
    assert not (tmp_path / "out" / "plan.json").exists()


def test_unknown_key_fails_in_one_line(tmp_path):
    stack = write_stack(tmp_path, {"gpuburst:gpuInstanceType": "g5.xlarge"})
    proc = run_synth(tmp_path / "out", "--stack", "bad", "--stack-file", str(stack))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "gpuburst:gpuInstanceType" in lines[0] and "unknown config key" in lines[0]


def test_missing_stack_is_named(tmp_path):
    proc = run_synth(tmp_path / "out", "--stack", "nosuch")
    assert proc.returncode == 2 and "Pulumi.nosuch.yaml" in proc.stderr

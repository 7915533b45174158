"""The two workload stacks of docs/workload-stack.md (examples/lab-scaledjob, examples/ordered-consumer), run as a
newcomer runs them: `python -m components synth --project-dir examples/X --stack lab` then `python -m policies check`
on the plan, each in a subprocess with a timeout; 0 mandatory violations, and the pattern each one shows is really in
its plan. The guide shows these files verbatim (tests/test_docs.py checks the snippet lines)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.synth_run import ROOT, run_synth

pytestmark = pytest.mark.slow

EXAMPLES = {"lab-scaledjob": "lab", "ordered-consumer": "lab"}
"""Example folder -> the stack its Pulumi.<stack>.yaml holds."""

CHECK_TIMEOUT_S = 120
"""Seconds one policy check may take (it takes about one)."""


def synth_and_check(example: str, out: Path) -> tuple[dict, str]:
    """(the plan, the checker's output) of one example; fails the test on a synth error or a mandatory violation."""
    proc = run_synth(out, "--project-dir", str(ROOT / "examples" / example), "--stack", EXAMPLES[example])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check = subprocess.run([sys.executable, "-m", "policies", "check", str(out / "plan.json")], cwd=ROOT,
                           capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
    report = check.stdout + check.stderr
    assert check.returncode == 0, report[-3000:]
    assert "policy check passed: 0 mandatory" in report, report[-3000:]
    return json.loads((out / "plan.json").read_text(encoding="utf-8")), report


def of_type(plan: dict, type_: str) -> list[dict]:
    return [r for r in plan["resources"] if r["type"] == type_]


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict[str, dict]:
    """Each example's plan, synthesised and checked once for the module."""
    return {name: synth_and_check(name, tmp_path_factory.mktemp(name))[0] for name in sorted(EXAMPLES)}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_example_synthesizes_and_passes_the_pack(plans, name):
    plan = plans[name]
    project = (ROOT / "examples" / name / "Pulumi.yaml").read_text(encoding="utf-8").split("\nname: ", 1)[1].split()[0]
    urns = [r["urn"] for r in plan["resources"]]
    assert urns and all(u.startswith(f"urn:pulumi:lab::{project}::") for u in urns)
    types = {r["type"] for r in plan["resources"]}
    # A workload stack references the platform's controllers: nothing is installed twice.
    assert not {t for t in types if t.startswith("kubernetes:helm.sh/")}
    assert "gpuburst:index:GpuBurstPlatform" not in types
    assert {"gpuburst:index:ExistingCluster", "gpuburst:index:ExistingKarpenter", "gpuburst:index:GpuNodePool",
            "gpuburst:index:WorkQueue", "gpuburst:index:DeployAccess"} <= types


def test_the_scaledjob_example_runs_the_labs_model_in_jobs_of_five(plans):
    plan = plans["lab-scaledjob"]
    (job,) = of_type(plan, "kubernetes:keda.sh/v1alpha1:ScaledJob")
    spec = job["properties"]["spec"]
    container = spec["jobTargetRef"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MODEL_URI"].startswith("s3://") and len(env["MODEL_SHA256"]) == 64
    assert spec["triggers"][0]["metadata"]["queueLength"] == "5"
    # On the lab's own pool only, in the lab's own namespace, which KEDA watches.
    assert spec["jobTargetRef"]["template"]["spec"]["nodeSelector"]["karpenter.sh/nodepool"] == "cyto-slides"
    (namespace,) = of_type(plan, "kubernetes:core/v1:Namespace")
    assert namespace["properties"]["metadata"]["name"] == job["properties"]["metadata"]["namespace"] == "cyto-slides"
    assert namespace["properties"]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert container["command"][container["command"].index("--max-messages") + 1] == "5"
    # The worker's role may read the model object and nothing else of its bucket.
    policies = json.dumps([r["properties"] for r in of_type(plan, "aws:iam/rolePolicy:RolePolicy")])
    assert "arn:aws:s3:::cyto-lab-models-example/mitosis/v2.pt2" in policies


def test_the_consumer_example_reads_a_fifo_queue_with_one_on_demand_replica(plans):
    plan = plans["ordered-consumer"]
    queues = of_type(plan, "aws:sqs/queue:Queue")
    assert queues and all(q["properties"]["fifoQueue"] for q in queues)
    assert {q["properties"]["name"] for q in queues} == {"cyto-studies.fifo", "cyto-studies-dlq.fifo"}
    (deployment,) = of_type(plan, "kubernetes:apps/v1:Deployment")
    spec = deployment["properties"]["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    assert spec["template"]["spec"]["nodeSelector"]["karpenter.sh/capacity-type"] == "on-demand"
    assert spec["template"]["spec"]["nodeSelector"]["karpenter.sh/nodepool"] == "cyto-studies"
    assert not of_type(plan, "kubernetes:keda.sh/v1alpha1:ScaledJob")


def test_the_summary_lists_only_the_pins_of_what_each_example_uses(plans):
    """The consumer uses no KEDA (no ExistingKeda, no ScaledJob), so the summary does not hold KEDA's pin up to it;
    the ScaledJob example declares KEDA's version (ExistingKeda). Neither builds an image: no base-image pin."""
    from components.synth.declared import used_pins, version_lines

    consumer = "\n".join(version_lines(plans["ordered-consumer"]))
    assert "keda" not in consumer and "keda" not in used_pins(plans["ordered-consumer"])
    assert "  nvidia-device-plugin " in consumer and "worker-base-image" not in consumer
    scaledjob = version_lines(plans["lab-scaledjob"])
    assert any(line.startswith("  keda ") and "from ExistingKeda 'keda'" in line for line in scaledjob)
    assert "keda" in used_pins(plans["lab-scaledjob"]) and "worker-base-image" not in "\n".join(scaledjob)

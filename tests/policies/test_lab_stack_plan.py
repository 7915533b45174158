"""A lab's stack (its own model by digest, Jobs of 25 messages, fp32, a prebuilt image by digest with its CUDA) as the
offline synth writes it: its pods carry the model and the node cache, its worker roles read their own model object
only, the pack passes it, and fails it once queueLength and --max-messages part; checkov passes the cache's objects.

The stack file is written in a temporary folder (the dev stack's keys plus the lab's), so the dev plan other tests
judge is unchanged.
"""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.synth_run import ROOT, run_synth

pytestmark = pytest.mark.slow

DIGEST = "ab" * 32
IMAGE = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/tils-lab-worker@sha256:{'ef' * 32}"
MODEL = "s3://tils-lab-models/tils/v3.pt2"
SJ = "kubernetes:keda.sh/v1alpha1:ScaledJob"


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("lab-stack")
    doc = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8"))
    config = doc["config"]
    config["gpuburst:workloads"]["slides"].update(
        model={"uri": MODEL, "sha256": DIGEST}, messagesPerJob=25, precision="fp32")
    config["gpuburst:workloads"]["studies"].update(model={"uri": "s3://tils-lab-models/studies/v1.pt2",
                                                          "sha256": "cd" * 32})
    config.update({"gpuburst:workerImage": IMAGE, "gpuburst:workerImageCuda": "13.0"})
    stack_file = folder / "Pulumi.lab.yaml"
    stack_file.write_text(yaml.safe_dump(doc), encoding="utf-8")
    out = folder / "out"
    proc = run_synth(out, "--stack", "dev", "--stack-file", str(stack_file))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return {"out": out, "plan": json.loads((out / "plan.json").read_text(encoding="utf-8"))}


def _of(plan: dict, rtype: str) -> list[dict]:
    return [r for r in plan["resources"] if r["type"] == rtype]


def test_the_lab_plan_runs_the_lab_image_and_model_in_batches_of_25(lab):
    plan = lab["plan"]
    assert not _of(plan, "docker-build:index:Image")
    (sj,) = _of(plan, SJ)
    spec = sj["properties"]["spec"]
    container = spec["jobTargetRef"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert container["image"] == IMAGE
    assert (env["MODEL_URI"], env["MODEL_SHA256"], env["MODEL_CACHE_DIR"], env["PRECISION"]) == (
        MODEL, DIGEST, "/model-cache", "fp32")
    assert spec["triggers"][0]["metadata"]["queueLength"] == "25"
    assert container["command"][container["command"].index("--max-messages") + 1] == "25"
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "gpuburst-model-cache"}} in \
        spec["jobTargetRef"]["template"]["spec"]["volumes"]
    policy = next(json.loads(r["properties"]["policy"]) for r in _of(plan, "aws:iam/rolePolicy:RolePolicy")
                  if r["name"] == "slides-worker-policy")
    reads = [st["Resource"] for st in policy["Statement"] if "s3:GetObject" in st["Action"]
             and "tils-lab-models" in json.dumps(st["Resource"])]
    assert reads == ["arn:aws:s3:::tils-lab-models/tils/v3.pt2"]


def test_the_pack_passes_the_lab_plan(lab, analyze):
    report = analyze(lab["plan"])
    assert report.mandatory == [], "\n".join(d.line() for d in report.mandatory)
    assert not report.by_policy("worker-image-unchecked")  # its CUDA is declared: judged, not merely named


def test_a_queue_length_apart_from_max_messages_fails_the_pack(lab, analyze):
    plan = copy.deepcopy(lab["plan"])
    (sj,) = _of(plan, SJ)
    sj["properties"]["spec"]["triggers"][0]["metadata"]["queueLength"] = "1"
    found = analyze(plan).by_policy("scaledjob-messages-per-job")
    assert len(found) == 1 and found[0].level == "MANDATORY" and found[0].urn == sj["urn"]
    assert "queueLength = '1'" in found[0].message and "= '25'" in found[0].message


def test_without_its_declared_cuda_the_lab_image_is_named_once_as_not_checked(lab, analyze):
    plan = copy.deepcopy(lab["plan"])
    for r in plan["resources"]:
        spec = r["properties"].get("spec") if isinstance(r["properties"], dict) else None
        spec = spec if isinstance(spec, dict) else {}
        template = (spec.get("jobTargetRef") or {}).get("template") or spec.get("template")
        annotations = ((template or {}).get("metadata") or {}).get("annotations") if isinstance(template, dict) \
            else None
        if isinstance(annotations, dict):
            annotations.pop("gpuburst.io/worker-image-cuda", None)
    report = analyze(plan)
    found = report.by_policy("worker-image-unchecked")
    assert len(found) == 1 and found[0].level == "ADVISORY" and IMAGE in found[0].message
    assert report.mandatory == []


def test_checkov_passes_the_model_cache_and_the_pods_that_mount_it(lab, tmp_path):
    from tests.components.synth.test_plan_oracles import checkov_binary, checkov_reports, not_applicable_checks

    exe = checkov_binary()
    if not exe or not Path(exe).exists():
        pytest.skip("checkov not installed: `make test` installs it into .venv-checkov and sets CHECKOV")
    picked = [f for f in (lab["out"] / "manifests").glob("*.yaml")  # with the policies that select the pods
              if f.name.startswith(("persistentvolume", "scaledjob-", "deployment-gpuburst-studies", "networkpolicy-"))]
    assert len([f for f in picked if not f.name.startswith("networkpolicy-")]) == 4, [f.name for f in picked]
    for f in picked:
        shutil.copy(f, tmp_path / f.name)
    reports = checkov_reports(exe, tmp_path, sorted(not_applicable_checks()))
    failed = [f"{c['check_id']} {c['resource']}"
              for r in reports for c in r.get("results", {}).get("failed_checks", [])]
    assert failed == []
    assert sum(r.get("summary", {}).get("passed", 0) for r in reports) > 20

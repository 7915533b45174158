"""Every Kubernetes object the stack itself declares against an independent oracle: upstream CRDs, Kubernetes schemas,
checkov. The charts' rendered objects have their own oracles in test_charts.py."""
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import kubernetes_validate
import pytest

from components import catalogue
from tests.components.crd_oracle import check_against_crd

ROOT = Path(__file__).resolve().parents[3]

# (group, kind) -> (project whose pin applies, CRD file stem)
CRD_FILES = {
    ("karpenter.sh", "NodePool"): ("karpenter", "nodepools"),
    ("karpenter.k8s.aws", "EC2NodeClass"): ("karpenter", "ec2nodeclasses"),
    ("keda.sh", "TriggerAuthentication"): ("keda", "triggerauthentications"),
    ("keda.sh", "ClusterTriggerAuthentication"): ("keda", "clustertriggerauthentications"),
    ("keda.sh", "ScaledJob"): ("keda", "scaledjobs"),
    ("keda.sh", "ScaledObject"): ("keda", "scaledobjects"),
}
PINS = {"karpenter": catalogue.KARPENTER_VERSION, "keda": catalogue.KEDA_VERSION}


def is_built_in(api_version: str) -> bool:
    """Core and `*.k8s.io` groups are Kubernetes' own kinds; anything else here comes from a CRD."""
    group = api_version.rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def manifests(plan, charts: bool = False):
    """(resource, manifest) for the stack's own Kubernetes objects, or (`charts`) for the objects charts rendered."""
    for r in plan["resources"]:
        p = r["properties"]
        is_manifest = r["type"].startswith("kubernetes:") and "apiVersion" in p and "kind" in p
        if is_manifest and bool(r.get("source")) == charts:
            yield r, p


def test_custom_resources_validate_against_the_pinned_upstream_crds(dev, upstream_crds):
    checked = set()
    for res, obj in manifests(dev["plan"]):
        if is_built_in(obj["apiVersion"]):
            continue  # see the next test
        group = obj["apiVersion"].rpartition("/")[0]
        key = (group, obj["kind"])
        assert key in CRD_FILES, f"{res['urn']}: no oracle known for {key}"
        project, stem = CRD_FILES[key]
        crd = upstream_crds / f"{project}-v{PINS[project]}-{stem}.yaml"
        assert crd.is_file(), f"no upstream CRD for the pinned {project} {PINS[project]}: {crd.name} is missing"
        report = check_against_crd(obj, crd)
        assert report.errors == [], f"{res['urn']} against {crd.name}: {report.errors}"
        checked.add(obj["kind"])
    assert {"NodePool", "EC2NodeClass", "TriggerAuthentication", "ScaledJob"} <= checked


def test_built_in_kinds_validate_strictly_for_the_pinned_kubernetes(dev):
    seen = set()
    for res, obj in manifests(dev["plan"]):
        if not is_built_in(obj["apiVersion"]):
            continue
        try:
            kubernetes_validate.validate(obj, catalogue.KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{res['urn']}: {e.message} at {'.'.join(map(str, e.path))}")
        seen.add(obj["kind"])
    assert {"Deployment", "Namespace", "ServiceAccount", "NetworkPolicy"} <= seen


def not_applicable_checks() -> dict[str, str]:
    """Check id -> reason, from the table of checkov checks that do not apply (docs/platform.md, "Security posture of
    the rendered manifests")."""
    text = (ROOT / "docs" / "platform.md").read_text(encoding="utf-8")
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\|\s*`(CKV2?_K8S_\d+)`\s*\|[^|]*\|([^|]+)\|",
                                                               text, re.M)}


def checkov_binary() -> str | None:
    return os.environ.get("CHECKOV") or shutil.which("checkov")


def checkov_reports(exe: str, folder: Path, skip: Sequence[str] = ()) -> list[dict]:
    """checkov's JSON reports (one per framework run) on the Kubernetes manifests under `folder`, `skip` skipped."""
    proc = subprocess.run([exe, "-d", str(folder), "--framework", "kubernetes", "--quiet", "--compact",
                           "--skip-download", "-o", "json", *(["--skip-check", ",".join(skip)] if skip else [])],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    reports = json.loads(proc.stdout or "{}")
    return reports if isinstance(reports, list) else [reports]


def test_the_docs_give_a_reason_for_every_skipped_check():
    skips = not_applicable_checks()
    assert skips, "docs/platform.md lists no checkov checks as not applicable (or the table is not found)"
    for check, reason in skips.items():
        assert len(reason) > 20, f"{check}: docs/platform.md's reason is too short to be a reason: {reason!r}"


def test_rendered_manifests_pass_checkov(dev, tmp_path):
    exe = checkov_binary()
    if not exe or not Path(exe).exists():
        pytest.skip("checkov not installed: `make test` installs it into .venv-checkov and sets CHECKOV")
    skips = sorted(not_applicable_checks())
    own = tmp_path / "own"  # the stack's own manifests only: checkov -d also walks the charts' folders below
    own.mkdir()
    for f in (dev["out"] / "manifests").glob("*.yaml"):
        shutil.copy(f, own / f.name)
    reports = checkov_reports(exe, own, skips)
    failed = [f"{c['check_id']} {c['resource']} ({c['check_name']})"
              for r in reports for c in r.get("results", {}).get("failed_checks", [])]
    passed = sum(r.get("summary", {}).get("passed", 0) for r in reports)
    assert failed == [], "checkov failures:\n" + "\n".join(failed)
    assert passed > 50, f"checkov passed only {passed} checks: did it read the manifests?"

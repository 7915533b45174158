"""The charts' rendered objects under checkov: every finding is explained in components/catalogue/chart_findings.py,
none is stale, and the requests/limits and seccomp checks pass on every chart container."""
import os
import shutil
from pathlib import Path

import pytest

from components import catalogue
from components.catalogue import chart_findings
from components.catalogue.chart_findings import CHART_FINDINGS, NEVER_EXCUSED, object_of, stale, unexplained
from components.synth import charts
from tests.components.synth.test_plan_oracles import checkov_reports

needs_charts = pytest.mark.skipif(not charts.SHARED_CHARTS.is_dir(), reason=f"the pinned chart archives are not at "
                                  f"{charts.SHARED_CHARTS} (../shared/charts is absent)")


def checkov_binary() -> str | None:
    exe = os.environ.get("CHECKOV") or shutil.which("checkov")
    return exe if exe and Path(exe).is_file() else None


@pytest.fixture(scope="module")
def found(dev):
    """(chart, check, Kind/name) of every checkov failure on the dev plan's rendered chart objects."""
    exe = checkov_binary()
    if exe is None:
        pytest.skip("checkov not installed: `make test` installs it into .venv-checkov and sets CHECKOV")
    folder = dev["out"] / "manifests"
    for chart in catalogue.CHARTS:
        assert (folder / chart).is_dir(), f"the dev plan rendered no objects of chart {chart}"
    reports = checkov_reports(exe, folder)
    passed = sum(r.get("summary", {}).get("passed", 0) for r in reports)
    assert passed > 50, f"checkov passed only {passed} checks on {folder}: did it read the manifests?"
    out = set()
    for r in reports:
        for c in r.get("results", {}).get("failed_checks", []):
            parts = Path(str(c.get("file_path", "")).lstrip("/")).parts
            if len(parts) >= 2 and parts[-2] in catalogue.CHARTS:  # the stack's own objects: test_plan_oracles
                out.add((parts[-2], c["check_id"], object_of(c["resource"])))
    return out


@needs_charts
def test_every_checkov_finding_on_a_chart_object_is_explained(found):
    new = unexplained(found)
    assert new == [], ("checkov findings on chart objects with no reason in components/catalogue/chart_findings.py: "
                       + "; ".join(f"{c} {k} on {o}" for c, k, o in new))


@needs_charts
def test_no_explanation_is_stale(found):
    assert stale(found) == [], ("components/catalogue/chart_findings.py explains findings checkov no longer makes: "
                                "remove them")


@needs_charts
def test_requests_limits_and_seccomp_pass_on_every_chart_container(found):
    failing = sorted(t for t in found if t[1] in NEVER_EXCUSED)
    assert failing == [], f"requests/limits or seccomp missing on chart objects: {failing}"


@needs_charts
def test_the_synth_summary_counts_explained_and_unexplained_findings(dev):
    if checkov_binary() is None or not os.environ.get("CHECKOV"):
        pytest.skip("CHECKOV is not set to a checkov binary (as `make test` sets it): the synth did not run checkov")
    assert " finding(s) explained, 0 unexplained" in dev["stdout"], dev["stdout"][-1500:]


def test_a_new_finding_is_unexplained_and_a_known_one_is_not():
    known = CHART_FINDINGS[0]
    assert unexplained([(known.chart, known.check, known.objects[0])]) == []
    assert unexplained([("keda", "CKV_K8S_16", "Deployment/keda-operator")]) == [
        ("keda", "CKV_K8S_16", "Deployment/keda-operator")]
    # The same check on another object of the chart is not covered by the entry.
    assert unexplained([(known.chart, known.check, "Pod/something-else")])


def test_requests_limits_and_seccomp_are_never_excused():
    assert not [f for f in CHART_FINDINGS if f.check in NEVER_EXCUSED]
    assert unexplained([("nvidia-device-plugin", "CKV_K8S_10", "DaemonSet/nvidia-device-plugin")])


def test_every_entry_names_a_pinned_chart_and_a_real_reason():
    for f in CHART_FINDINGS:
        assert f.chart in catalogue.CHARTS, f
        assert f.check.startswith(("CKV_K8S_", "CKV2_K8S_")), f
        assert f.objects and all("/" in o for o in f.objects), f
        assert len(f.reason) > 40, f"{f.chart} {f.check}: too short to be a reason: {f.reason!r}"
    assert chart_findings.reason_for("keda", "CKV_K8S_40")


def test_object_of_reads_checkov_resource_ids():
    assert object_of("DaemonSet.nvidia-device-plugin.nvidia-device-plugin") == "DaemonSet/nvidia-device-plugin"
    assert object_of("Pod.keda.keda-operator.app-keda-operator.name-keda-operator") == "Pod/keda-operator"

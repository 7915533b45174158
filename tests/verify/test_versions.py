"""versions: what the cluster runs, through the catalogue's functions (never a version written here)."""
from __future__ import annotations

import copy
import re
from datetime import date, datetime, timedelta, timezone

import boto3
import pytest
from verify_fakes import NOW, FakeClock, FakeKube, karpenter_101_swap_cluster, load, pinned, pinned_server, server_at

from components import catalogue
from components.verify import versions
from components.verify.aws import Aws, AwsError
from components.verify.context import Context
from components.verify.model import SUMMARY_MAX_CHARS, VerifySettings

CLUSTER = "gpuburst-dev"
TODAY = NOW.date()
"""The day the pinned scenarios are judged on (the fake clock's): never the real date."""


def _crd(chart_version=None):
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "nodepools.karpenter.sh",
                        "annotations": {"controller-gen.kubebuilder.io/version": "v0.20.1"}},
           "spec": {"group": "karpenter.sh", "versions": [{"name": "v1", "served": True, "storage": True}]}}
    if chart_version:
        crd["metadata"]["labels"] = {"helm.sh/chart": f"karpenter-crd-{chart_version}",
                                     "app.kubernetes.io/version": chart_version}
    return crd


def assert_summary(r, text: str) -> None:
    """The summary is `text`, or (over SUMMARY_MAX_CHARS) its start cut with "…", the whole text in the evidence."""
    assert len(r.summary) <= SUMMARY_MAX_CHARS, r.summary
    if len(text) <= SUMMARY_MAX_CHARS:
        assert r.summary == text
    else:
        assert r.summary.endswith("…") and text.startswith(r.summary[:-1]), r.summary
        assert any(text in e for e in r.evidence)


def judge(karpenter=None, crd_version=catalogue.CHARTS["karpenter-crd"].version, server=None, keda=None,
          today=TODAY, **eks):
    return versions.judge_versions(
        [load(karpenter) if karpenter else pinned("karpenter")], [keda or pinned("keda")],
        [pinned("nvidia-device-plugin")], _crd(crd_version), server or pinned_server(), today=today, **eks)


def test_pinned_cluster_passes():
    pin = catalogue.CHARTS["karpenter"].version
    r = judge()
    assert r.status == "pass", r
    assert r.evidence[0].startswith(f"karpenter {pin}, ") and r.evidence[0].endswith("match its pins"), r.evidence
    newer = catalogue.newer_patches("karpenter", pin)
    if newer:  # the pin is behind its line: the pass says so first (informational)
        assert r.summary.startswith(f"all pass and match the pins; karpenter {pin} is behind {newer[-1].version}, ")
    else:
        assert r.summary.startswith(f"karpenter {pin}, "), r.summary


def test_a_karpenter_behind_its_lts_lines_newest_patch_is_news_not_a_failure():
    """Issue 28: 1.14.4 is the newest patch of the 1.14 LTS line; it carries an Action Required (empty selector terms
    are ignored). Judged through the catalogue's release lines, on the fake clock's day."""
    evidence: list[str] = []
    news = versions.release_line_news((("karpenter", "1.14.1"), ("keda", None)), TODAY, evidence)
    assert news == ["karpenter 1.14.1 is behind 1.14.4, its line's newest patch (the karpenter 1.14 LTS line is "
                    "supported until Jul 2027); ACTION REQUIRED in 1.14.4"]
    assert evidence[0] == "karpenter 1.14.1: the karpenter 1.14 LTS line is supported until Jul 2027"
    assert evidence[1] == f"upgrade: {catalogue.upgrade_note('karpenter', '1.14.1', TODAY)}"
    assert evidence[2].startswith(f"karpenter 1.14.4 ACTION REQUIRED before upgrading: "
                                  f"{catalogue.KARPENTER_EMPTY_SELECTOR_TERMS} (source: ")
    assert len(evidence) == 3  # one ACTION REQUIRED (1.14.2 and 1.14.3 have none); no KEDA version, no KEDA line


def test_the_newest_patch_of_a_supported_lts_line_has_no_news_and_an_ended_line_says_so():
    evidence: list[str] = []
    assert versions.release_line_news((("karpenter", "1.14.4"),), TODAY, evidence) == []
    assert evidence == ["karpenter 1.14.4: the karpenter 1.14 LTS line is supported until Jul 2027"]
    later = date(2027, 8, 1)
    assert versions.release_line_news((("karpenter", "1.14.4"),), later, []) == [
        "karpenter 1.14.4: the karpenter 1.14 LTS line left support after Jul 2027"]


def test_karpenter_1_0_1_found_in_the_cluster_fails_with_the_catalogue_reason():
    r = judge(karpenter="deployment_karpenter_1.0.1.json")
    assert r.status == "fail"
    # the count first, then the cause; without a live look at status.amis it claims nothing about this cluster's image
    assert re.match(r"\d+ problems, first: karpenter 1\.0\.1 is a refused release \(the catalogue's reason in the "
                    r"evidence; the live image was not read\)$", r.summary), r.summary
    assert "Neuron" not in r.summary and len(r.summary) <= 200
    assert (f"why the catalogue refuses karpenter 1.0.1 (a fact about the release, not an observation of this "
            f"cluster): {catalogue.karpenter_version_problem('1.0.1')}") in r.evidence
    assert any("Deployment kube-system/karpenter" in e and "1.0.1" in e for e in r.evidence)


def test_a_refused_karpenter_says_what_the_cluster_resolves_live_not_the_releases_claim(clock):
    """The drill: Karpenter 1.0.1 runs, but status.amis gives the GPU types the *standard* image. The versions line
    must say standard (as ami-canary does), never the release note's "Neuron"; and it stops the gpu-job."""
    from components.verify import checks

    nodeclass = load("ec2nodeclass_gpu_swapped.json")
    for ami in nodeclass["status"]["amis"]:
        ami["name"] = ami["name"].replace("neuron", "standard")
        ami["id"] = ami["id"].replace("neuron", "0std00")
    kube = karpenter_101_swap_cluster(nodeclasses=[nodeclass], version=pinned_server(),
                                      deployments=[load("deployment_karpenter_1.0.1.json"), pinned("keda")],
                                      daemonsets=[pinned("nvidia-device-plugin")])
    for only in (("versions",), ("ami-canary", "versions")):  # read by versions itself, or shared by ami-canary
        ctx = Context(settings=VerifySettings(nodepool="gpu", worker_image="img"), kube=kube, clock=clock,
                      aws_factory=lambda region: NoEc2())
        results = {r.name: r for r in checks.run_checks(ctx, only=only + ("gpu-job",))}
        r = results["versions"]
        assert r.status == "fail", r
        assert "karpenter 1.0.1 is a refused release; live, EC2NodeClass gpu gives the GPU types" in r.summary
        assert "(al2023/standard)" in r.summary and "neuron" not in r.summary.lower(), r.summary
        if "ami-canary" in results:
            assert "standard" in results["ami-canary"].summary
        gpu = results["gpu-job"]
        assert gpu.status == "skipped" and gpu.summary.startswith("not run: ") and kube.created == []
        assert clock.t == 0  # nothing waited


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
    r = judge(server=server_at("1.28", patch=15))
    assert r.status == "fail"
    problems = catalogue.kubernetes_problems("1.28", catalogue.CHARTS["karpenter"].version,
                                             catalogue.CHARTS["keda"].version)
    assert problems
    for p in problems:
        assert p in r.evidence


def test_image_override_that_disagrees_with_the_chart_label_fails():
    pin = catalogue.CHARTS["karpenter"].version
    dep = pinned("karpenter")
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = "public.ecr.aws/karpenter/controller:1.0.2"
    r = versions.judge_versions([dep], [pinned("keda")], [pinned("nvidia-device-plugin")], _crd(pin),
                                pinned_server(), today=TODAY)
    assert r.status == "fail"
    assert any(f"states several versions ({pin}, 1.0.2)" in p for p in r.evidence)
    assert "karpenter 1.0.2 is a refused release (the catalogue's reason in the evidence; the live image was not " \
           "read)" in r.evidence
    assert any(e.startswith("why the catalogue refuses karpenter 1.0.2") and
               e.endswith(catalogue.karpenter_version_problem("1.0.2")) for e in r.evidence)


def test_missing_controllers_fail():
    r = versions.judge_versions([], [], [], None, pinned_server(), today=TODAY)
    assert r.status == "fail"
    assert "karpenter: no Deployment found in the cluster" in r.evidence


def test_server_version_parsing():
    assert versions.server_version({"gitVersion": "v1.34.2-eks-113cf36"}) == "1.34.2"
    assert versions.server_version({"gitVersion": "weird", "major": "1", "minor": "33+"}) == "1.33"


def _kube(server=None) -> FakeKube:
    return FakeKube(deployments=[pinned("karpenter"), pinned("keda")], daemonsets=[pinned("nvidia-device-plugin")],
                    crds=[_crd(catalogue.CHARTS["karpenter-crd"].version)], version=server or pinned_server())


class NoAws:
    """An aws_factory that fails the test if the check talks to AWS at all."""

    def __call__(self, region):
        raise AssertionError(f"the versions check called AWS (region {region}) without a cluster name")


class NoEc2:
    """An Aws whose ec2:DescribeImages is refused (ami-canary then judges the names in status.amis)."""

    def describe_images(self, ids):
        raise AwsError("ec2:DescribeImages", ",".join(ids), "UnauthorizedOperation")


class FakeEks:
    """A stand-in for aws.Aws's two EKS calls: answers (or raises) what the test says and records the calls."""

    def __init__(self, cluster: dict | None = None, cluster_versions: list[dict] | None = None, *,
                 cluster_error: AwsError | None = None, versions_error: AwsError | None = None) -> None:
        self.cluster, self.cluster_versions = cluster, cluster_versions
        self.cluster_error, self.versions_error = cluster_error, versions_error
        self.calls: list[tuple[str, object]] = []
        self.regions: list[str | None] = []

    def factory(self, region):
        self.regions.append(region)
        return self

    def describe_cluster(self, name: str) -> dict:
        self.calls.append(("describe_cluster", name))
        if self.cluster_error:
            raise self.cluster_error
        return copy.deepcopy(self.cluster)

    def describe_cluster_versions(self, versions: list[str]) -> list[dict]:
        self.calls.append(("describe_cluster_versions", list(versions)))
        if self.versions_error is not None or self.cluster_versions is None:
            raise self.versions_error or AwsError("eks:DescribeClusterVersions", ",".join(versions), "404",
                                                  "the endpoint does not offer the operation")
        return copy.deepcopy(self.cluster_versions)


def eks_cluster(version: str, support_type: str | None = "STANDARD", platform: str = "eks.7") -> dict:
    """eks:DescribeCluster's `cluster`, as boto3 returns it (no upgradePolicy when support_type is None)."""
    c = {"name": CLUSTER, "arn": f"arn:aws:eks:us-east-1:123456789012:cluster/{CLUSTER}", "version": version,
         "platformVersion": platform, "status": "ACTIVE",
         "endpoint": "https://0123456789ABCDEF0123456789ABCDEF.gr7.us-east-1.eks.amazonaws.com"}
    if support_type is not None:
        c["upgradePolicy"] = {"supportType": support_type}
    return c


def calendar_row(minor: str, **override) -> dict:
    """eks:DescribeClusterVersions' entry for `minor`, with the catalogue's dates as midnight UTC datetimes."""
    row = catalogue.EKS_SUPPORT[minor]
    entry = {"clusterVersion": minor, "clusterType": "eks", "releaseDate": _midnight(row.eks_release),
             "endOfStandardSupportDate": _midnight(row.standard_end),
             "endOfExtendedSupportDate": _midnight(row.extended_end), "status": "STANDARD_SUPPORT",
             "versionStatus": "STANDARD_SUPPORT"}
    entry.update(override)
    return entry


def _midnight(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=timezone.utc)


def run_at(day: date, *, server=None, eks: FakeEks | None = None, cluster_name: str | None = CLUSTER):
    """versions.run against a FakeKube and the given EKS stand-in, on `day` (the fake clock's date)."""
    clock = FakeClock(datetime(day.year, day.month, day.day, 10, 0, tzinfo=timezone.utc))
    ctx = Context(settings=VerifySettings(cluster_name=cluster_name), kube=_kube(server),
                  aws_factory=eks.factory if eks else NoAws(), clock=clock)
    return versions.run(ctx)


@pytest.fixture
def pinned_at_1_34(monkeypatch):
    """A stack still on Kubernetes 1.34: the catalogue's pin set back, so only the support rule judges."""
    monkeypatch.setattr(catalogue, "KUBERNETES_VERSION", "1.34")
    return server_at("1.34")


def test_run_reads_the_cluster():
    kube = _kube()
    r = versions.run(Context(settings=VerifySettings(), kube=kube, aws_factory=NoAws(), clock=FakeClock()))
    assert r.status == "pass", r
    assert "EKS upgrade policy not read (no cluster name: pass --cluster-name or --stack)" in r.evidence
    assert (f"EKS support rule on {TODAY}: Kubernetes {catalogue.KUBERNETES_VERSION} with upgradePolicy.supportType "
            f"{catalogue.DEFAULT_SUPPORT_TYPE} (unknown: the stack's default assumed)") in r.evidence


def test_k8s_1_34_with_standard_before_its_end_of_standard_support_passes_with_the_advisory(pinned_at_1_34):
    eks = FakeEks(eks_cluster("1.34", "STANDARD"), [calendar_row("1.34")])
    r = run_at(date(2026, 11, 15), server=pinned_at_1_34, eks=eks)
    assert r.status == "pass", r
    advisory = catalogue.kubernetes_support_finding("1.34", "STANDARD", date(2026, 11, 15))
    assert advisory is not None and advisory.level == "advisory"
    assert_summary(r, f"all pass, with a warning: {advisory.message}")
    assert "2026-12-02" in r.summary.split("with a warning: ", 1)[1]
    assert f"warning: {advisory.message}" in r.evidence
    assert any(e.startswith(f"karpenter {catalogue.CHARTS['karpenter'].version}, ") for e in r.evidence)
    assert f"EKS cluster {CLUSTER}: version 1.34, platform eks.7, upgradePolicy.supportType STANDARD" in r.evidence
    assert eks.calls == [("describe_cluster", CLUSTER), ("describe_cluster_versions", ["1.34"])]


def test_k8s_1_34_with_standard_on_its_end_of_standard_support_fails_naming_the_date(pinned_at_1_34):
    r = run_at(date(2026, 12, 2), server=pinned_at_1_34, eks=FakeEks(eks_cluster("1.34", "STANDARD"),
                                                                      [calendar_row("1.34")]))
    assert r.status == "fail", r
    mandatory = catalogue.kubernetes_support_finding("1.34", "STANDARD", date(2026, 12, 2))
    assert mandatory is not None and mandatory.level == "mandatory"
    assert_summary(r, mandatory.message)
    assert "left EKS standard support on 2026-12-02" in r.summary
    assert "upgradePolicy.supportType STANDARD" in r.summary


def test_k8s_1_34_with_extended_on_its_end_of_standard_support_passes_naming_the_extended_price(pinned_at_1_34):
    r = run_at(date(2026, 12, 2), server=pinned_at_1_34, eks=FakeEks(eks_cluster("1.34", "EXTENDED"),
                                                                      [calendar_row("1.34")]))
    assert r.status == "pass", r
    warning = next(e for e in r.evidence if e.startswith("warning: "))
    assert "$0.60 per cluster-hour" in warning and "2026-12-02" in warning and "2027-12-02" in warning
    assert_summary(r, f"all pass, with a warning: {warning.removeprefix('warning: ')}")
    assert f"EKS cluster {CLUSTER}: version 1.34, platform eks.7, upgradePolicy.supportType EXTENDED" in r.evidence


def test_an_unset_upgrade_policy_is_eks_default_extended(pinned_at_1_34):
    r = run_at(date(2026, 12, 2), server=pinned_at_1_34, eks=FakeEks(eks_cluster("1.34", None),
                                                                      [calendar_row("1.34")]))
    assert r.status == "pass", r
    assert (f"EKS cluster {CLUSTER}: version 1.34, platform eks.7, upgradePolicy.supportType EXTENDED (not set: "
            "EKS's default EXTENDED)") in r.evidence
    assert r.summary.startswith("all pass, with a warning: ")
    assert any(e.startswith("warning: ") and "$0.60 per cluster-hour" in e for e in r.evidence)


def test_without_a_cluster_name_the_stack_default_is_judged(pinned_at_1_34):
    r = run_at(date(2026, 12, 2), server=pinned_at_1_34, cluster_name=None)
    assert r.status == "fail"  # the stack's default STANDARD: EKS auto-upgrades from 2026-12-02
    assert_summary(r, catalogue.kubernetes_support_finding("1.34", catalogue.DEFAULT_SUPPORT_TYPE,
                                                           date(2026, 12, 2)).message)
    assert "EKS upgrade policy not read (no cluster name: pass --cluster-name or --stack)" in r.evidence


def test_eks_version_differing_from_the_api_server_fails():
    pin = catalogue.KUBERNETES_VERSION
    other = "%d.%d" % (catalogue.minor(pin)[0], catalogue.minor(pin)[1] - 1)
    r = run_at(TODAY, eks=FakeEks(eks_cluster(other), [calendar_row(pin)]))
    assert r.status == "fail", r
    assert r.summary.startswith(f"EKS cluster {CLUSTER} reports version {other} but the API server reports {pin}")


def test_describe_cluster_error_is_evidence_and_the_cluster_is_judged_without_it():
    err = AwsError("eks:DescribeCluster", CLUSTER, "AccessDeniedException",
                   "User is not authorized to perform: eks:DescribeCluster")
    r = run_at(TODAY, eks=FakeEks(cluster_error=err, cluster_versions=[calendar_row(catalogue.KUBERNETES_VERSION)]))
    assert r.status == "pass", r
    assert (f"{err}: the EKS upgrade policy was not read; judged as without a cluster name") in r.evidence
    assert any(f"with upgradePolicy.supportType {catalogue.DEFAULT_SUPPORT_TYPE} (unknown" in e for e in r.evidence)


def test_describe_cluster_error_then_judges_the_stack_default(pinned_at_1_34):
    err = AwsError("eks:DescribeCluster", CLUSTER, "ResourceNotFoundException",
                   f"No cluster found for name: {CLUSTER}.")
    r = run_at(date(2026, 12, 2), server=pinned_at_1_34, eks=FakeEks(cluster_error=err))
    assert r.status == "fail"
    assert r.summary.startswith("Kubernetes 1.34 left EKS standard support on 2026-12-02: with upgradePolicy."
                                f"supportType {catalogue.DEFAULT_SUPPORT_TYPE}")
    assert any(e.startswith(f"eks:DescribeCluster on {CLUSTER}: ResourceNotFoundException") for e in r.evidence)


def test_a_stale_calendar_fails_naming_both_dates():
    pin = catalogue.KUBERNETES_VERSION
    row = catalogue.EKS_SUPPORT[pin]
    live = row.standard_end + timedelta(days=31)
    r = run_at(TODAY, eks=FakeEks(eks_cluster(pin), [calendar_row(pin, endOfStandardSupportDate=_midnight(live))]))
    assert r.status == "fail", r
    assert_summary(r, f"EKS reports Kubernetes {pin} endOfStandardSupportDate {live} but catalogue.EKS_SUPPORT"
                      f"['{pin}'].standard_end is {row.standard_end}: the catalogue's calendar is stale (update it "
                      "in components/catalogue/support.py)")


def test_a_matching_calendar_in_another_time_zone_passes_and_is_quoted():
    pin = catalogue.KUBERNETES_VERSION
    row = catalogue.EKS_SUPPORT[pin]
    pacific = timezone(timedelta(hours=-8))  # midnight UTC is the afternoon before in Seattle
    entry = calendar_row(pin, endOfStandardSupportDate=_midnight(row.standard_end).astimezone(pacific),
                         endOfExtendedSupportDate=row.extended_end.isoformat() + "T00:00:00Z")
    r = run_at(TODAY, eks=FakeEks(eks_cluster(pin), [entry]))
    assert r.status == "pass", r
    assert any(e.startswith(f"eks:DescribeClusterVersions for Kubernetes {pin}: endOfStandardSupportDate "
                            f"{row.standard_end}, endOfExtendedSupportDate {row.extended_end}") for e in r.evidence)


def test_describe_cluster_versions_failing_is_only_evidence():
    pin = catalogue.KUBERNETES_VERSION
    r = run_at(TODAY, eks=FakeEks(eks_cluster(pin)))
    assert r.status == "pass", r
    assert (f"eks:DescribeClusterVersions on {pin}: 404 (the endpoint does not offer the operation): the catalogue's "
            "EKS calendar was not compared with EKS's") in r.evidence


def test_the_pin_near_its_end_of_standard_support_warns():
    """Follows the pin: 30 days before its own end of standard support, a STANDARD cluster passes with a warning."""
    pin = catalogue.KUBERNETES_VERSION
    row = catalogue.EKS_SUPPORT[pin]
    r = run_at(row.standard_end - timedelta(days=30), eks=FakeEks(eks_cluster(pin), [calendar_row(pin)]))
    assert r.status == "pass", r
    assert f"with a warning: Kubernetes {pin}'s EKS standard support ends {row.standard_end} (in 30 days)" \
        in r.summary


def test_the_region_comes_from_the_eks_endpoint_of_the_api_server():
    kube = _kube()
    kube.host = "https://0123456789ABCDEF0123456789ABCDEF.gr7.eu-west-1.eks.amazonaws.com"
    eks = FakeEks(eks_cluster(catalogue.KUBERNETES_VERSION), [calendar_row(catalogue.KUBERNETES_VERSION)])
    versions.run(Context(settings=VerifySettings(cluster_name=CLUSTER), kube=kube, aws_factory=eks.factory,
                         clock=FakeClock()))
    assert eks.regions == ["eu-west-1"]


@pytest.mark.parametrize("value,day", [
    (datetime(2027, 3, 27, tzinfo=timezone.utc), date(2027, 3, 27)),
    (datetime(2027, 3, 26, 17, 0, tzinfo=timezone(timedelta(hours=-7))), date(2027, 3, 27)),
    ("2027-03-27T00:00:00Z", date(2027, 3, 27)),
    ("2027-03-27", date(2027, 3, 27)),
    (date(2027, 3, 27), date(2027, 3, 27)),
    ("soon", None),
    (None, None),
])
def test_utc_date(value, day):
    assert versions.utc_date(value) == day


def test_run_against_eks_on_moto(aws):
    """moto's EKS answers DescribeCluster (no upgradePolicy: EKS's default) but not DescribeClusterVersions."""
    pin = catalogue.KUBERNETES_VERSION
    boto3.client("eks").create_cluster(name=CLUSTER, version=pin, roleArn="arn:aws:iam::123456789012:role/eks",
                                       resourcesVpcConfig={"subnetIds": []})
    ctx = Context(settings=VerifySettings(cluster_name=CLUSTER), kube=_kube(), aws_factory=lambda region: Aws(region),
                  clock=FakeClock())
    r = versions.run(ctx)
    assert r.status == "pass", r
    assert (f"EKS cluster {CLUSTER}: version {pin}, platform eks.4, upgradePolicy.supportType EXTENDED (not set: "
            "EKS's default EXTENDED)") in r.evidence
    assert any(e.startswith(f"eks:DescribeClusterVersions on {pin}: 404") for e in r.evidence)

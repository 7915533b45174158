"""Tests for `pod-identity-unique`: a second Pod Identity association for one cluster, namespace and ServiceAccount
is refused before EKS refuses it at apply time."""
from __future__ import annotations

from policies import pod_identity as rule
from policies.plan import Res
from policies.unknowns import UNKNOWN

T = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


def assoc(name: str, ns="lab-tils", sa="tils-worker", cluster="gpuburst-dev",
          role="arn:aws:iam::123456789012:role/tils-worker") -> Res:
    return Res(T, f"urn:pulumi:lab::tils-lab::{T}::{name}", name, None,
               {"clusterName": cluster, "namespace": ns, "serviceAccount": sa, "roleArn": role})


def test_a_second_association_for_one_service_account_is_refused_naming_both():
    first, second = assoc("tils-worker-association"), assoc("extra", role="arn:aws:iam::123456789012:role/extra")
    (urn, message), = rule.unique_findings([first, second])
    assert urn == second.urn
    assert "lab-tils/tils-worker" in message and "'gpuburst-dev'" in message
    assert "tils-worker-association" in message and "role/extra" in message and "ResourceInUseException" in message
    assert "\n" not in message


def test_other_service_accounts_namespaces_or_clusters_pass():
    assert rule.unique_findings([assoc("a"), assoc("b", sa="other"), assoc("c", ns="other"),
                                 assoc("d", cluster="other")]) == []


def test_an_unknown_cluster_with_the_same_service_account_is_said_to_be_unknown():
    (_urn, message), = rule.unique_findings([assoc("a"), assoc("b", cluster=UNKNOWN)])
    assert "unknown during preview" in message and "lab-tils/tils-worker" in message


def test_three_are_two_findings():
    assert len(rule.unique_findings([assoc("a"), assoc("b"), assoc("c")])) == 2


# -- the fix names the attribute that holds the worker's role, for the stack kind -----------------------------------

JOB = "urn:pulumi:prod::cyto-burst::pulumi:pulumi:Stack$gpuburst:index:GpuScaledJob::cyto"
WI = "gpuburst:index:WorkloadIdentity"


def _identity(name: str, parent: str | None) -> Res:
    return Res(WI, f"urn:pulumi:prod::cyto-burst::{WI}::{name}", name, parent, {})


def _assoc_under(identity: Res, name: str, role: str) -> Res:
    # The offline synth's URNs name only the nearest parent's type: the parent links say the rest.
    return assoc(name, role=role)._replace(urn=f"urn:pulumi:prod::cyto-burst::{WI}${T}::{name}", parent=identity.urn)


def test_the_fix_names_the_workloads_role_attribute_in_a_workload_stack():
    """The trial's stack: a GpuScaledJob's worker association and a hand-made WorkloadIdentity for the same
    ServiceAccount (to grant extra S3 reads)."""
    from components import GpuConsumer, GpuScaledJob
    from components.identity import WorkloadIdentity

    job = Res("gpuburst:index:GpuScaledJob", JOB, "cyto", None, {})
    worker_identity = _identity("cyto-worker", JOB)
    extra_identity = _identity("cyto-extra", None)
    worker = _assoc_under(worker_identity, "cyto-worker-association", "arn:aws:iam::123456789012:role/cyto-worker")
    extra = _assoc_under(extra_identity, "cyto-extra-association", "arn:aws:iam::123456789012:role/cyto-extra")
    for order in ([worker, extra], [extra, worker]):
        (_urn, message), = rule.unique_findings([job, worker_identity, extra_identity, *order])
        assert ("keep the association of GpuScaledJob 'cyto' (cyto-worker-association) and attach the permissions of "
                "cyto-extra-association's role to the worker's role: "
                "aws.iam.RolePolicy(role=<GpuScaledJob 'cyto'>.identity.role.name, policy=...), then remove "
                "cyto-extra-association") in message
        assert "gpuburst:" not in message and "\n" not in message
    # The attribute path is the components' own.
    for component in (GpuScaledJob, GpuConsumer):
        assert component.__annotations__["identity"] in (WorkloadIdentity, "WorkloadIdentity")
    assert "role" in WorkloadIdentity.__annotations__


def test_the_platform_fix_names_the_platforms_workloads():
    platform_job = "urn:pulumi:dev::gpuburst::gpuburst:index:GpuBurstPlatform$gpuburst:index:GpuScaledJob::slides"
    job = Res("gpuburst:index:GpuScaledJob", platform_job, "slides", None, {})
    worker_identity = _identity("slides-worker", platform_job)
    worker = _assoc_under(worker_identity, "slides-worker-association", "arn:aws:iam::123456789012:role/slides")
    extra = assoc("extra", role="arn:aws:iam::123456789012:role/extra")
    (_urn, message), = rule.unique_findings([job, worker_identity, worker, extra])
    assert "aws.iam.RolePolicy(role=<GpuBurstPlatform>.workloads['slides'].identity.role.name, policy=...)" in message
    assert "then remove extra" in message


def test_without_parent_links_the_urn_chain_finds_the_workload():
    chain = f"gpuburst:index:GpuConsumer${WI}${T}"
    worker = assoc("studies-worker-association")._replace(urn=f"urn:pulumi:lab::tils-lab::{chain}::"
                                                              "studies-worker-association")
    (_urn, message), = rule.unique_findings([worker, assoc("extra")])
    assert "aws.iam.RolePolicy(role=<GpuConsumer 'studies'>.identity.role.name" in message


def test_two_hand_made_associations_get_the_generic_merge():
    (_urn, message), = rule.unique_findings([assoc("a"), assoc("b", role="arn:aws:iam::123456789012:role/b")])
    assert "keep one and attach the other's permissions to its role" in message and ".identity.role" not in message

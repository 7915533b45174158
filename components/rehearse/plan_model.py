"""What rehearse reads from a plan: the deploy model, every resource policy with the resource it governs, the VPC
endpoints (and the policies requests through them meet), the roles' own policies, the cluster's API endpoint and
the deploy runner's network path to it.

A plan is the synth's `plan.json` (`resources`: type, name, urn, properties as the engine sees the inputs) or the
pack's resources turned into the same dicts. Ids and ARNs are the synth's mocked ones (components/synth/mocks.py:
a resource's id is its physical name + `-id`, the account is FAKE_ACCOUNT), which is why rehearse judges a synth's
plan: in a live preview the ids a policy names are unknown until apply.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..spec.deploy_model import DeployModel, parse_deploy_model

DEPLOY_ACCESS = "gpuburst:index:DeployAccess"
BUCKET = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
KEY = "aws:kms/key:Key"
QUEUE = "aws:sqs/queue:Queue"
QUEUE_POLICY = "aws:sqs/queuePolicy:QueuePolicy"
TOPIC = "aws:sns/topic:Topic"
TOPIC_POLICY = "aws:sns/topicPolicy:TopicPolicy"
REPOSITORY = "aws:ecr/repository:Repository"
REPOSITORY_POLICY = "aws:ecr/repositoryPolicy:RepositoryPolicy"
ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
CLUSTER = "eks:index:Cluster"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
CODEBUILD_PROJECT = "aws:codebuild/project:Project"
CLUSTER_SECURITY_GROUP = "sg-0a1b2c3d4e5f60001"
"""The cluster security group id the synth's mocks give every EKS cluster (components/synth/mocks.py)."""

_REGION = re.compile(r"com\.amazonaws\.([a-z]{2}(?:-[a-z]+)+-\d)\.")
_ARN = re.compile(r"arn:(aws[a-z-]*):[a-z0-9-]+:([a-z0-9-]*):(\d{12}):")


@dataclass(frozen=True)
class PlanResource:
    """One registration of the plan."""

    type: str
    name: str
    urn: str
    props: Mapping[str, Any]
    dependencies: tuple[str, ...] = ()

    @property
    def physical(self) -> str:
        """The physical name the mocks give it (its `name` input, else its resource name)."""
        name = self.props.get("name")
        return name if isinstance(name, str) and name else self.name.replace("_", "-")[:63]

    @property
    def mock_id(self) -> str:
        """The id the synth's mocks give a resource of no special kind: `<physical>-id`."""
        return f"{self.physical}-id"


@dataclass(frozen=True)
class Governed:
    """A resource that has a resource policy, with that policy (None when the plan declares none)."""

    resource: PlanResource
    arn: str
    policy: dict[str, Any] | None
    policy_name: str | None
    """The resource name of the policy resource (`...-tls-only`), or of the resource itself when inline."""
    clinical: bool = False
    unknown: bool = False
    """True when the plan holds the policy but not its document (unknown during a preview): not judged."""


@dataclass(frozen=True)
class Endpoint:
    """A VPC endpoint of the plan."""

    id: str
    service: str
    """The service after `com.amazonaws.<region>.` (`s3`, `sqs`, ...)."""
    kind: str
    policy: dict[str, Any] | None
    private_dns: bool


@dataclass
class StackFacts:
    """Everything rehearse judges, read from one plan."""

    account: str
    region: str
    partition: str
    model: DeployModel | None
    model_error: str | None
    resources: list[PlanResource]
    governed: list[Governed] = field(default_factory=list)
    endpoints: list[Endpoint] = field(default_factory=list)
    roles: dict[str, tuple[str, list[dict[str, Any]]]] = field(default_factory=dict)
    """Role ARN -> (its resource name, its inline policy documents)."""

    def endpoint_for(self, service: str) -> Endpoint | None:
        """The endpoint an in-VPC caller of `service` reaches: the interface endpoint with private DNS, else a
        gateway (S3's interface endpoint answers every in-VPC resolver when its private DNS is on for all)."""
        interface = [e for e in self.endpoints if e.service == service and e.kind == "Interface" and e.private_dns]
        gateway = [e for e in self.endpoints if e.service == service and e.kind == "Gateway"]
        return (interface or gateway or [None])[0]

    def of_type(self, *types: str) -> list[PlanResource]:
        """The plan's resources of these types."""
        return [r for r in self.resources if r.type in types]


def as_resources(plan: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> list[PlanResource]:
    """The plan's registrations (a plan.json dict, or a list of `{type, name, urn, properties}`)."""
    entries = plan["resources"] if isinstance(plan, Mapping) else plan
    return [PlanResource(e["type"], e["name"], e.get("urn", e["name"]), e.get("properties") or {},
                         tuple(e.get("dependencies") or ())) for e in entries]


def _doc(value: Any) -> dict | None:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            doc = json.loads(value)
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None
    return None


def _where(resources: list[PlanResource]) -> tuple[str, str, str]:
    region = account = partition = None
    for r in resources:
        text = json.dumps(r.props)
        m = _REGION.search(text)
        region = region or (m.group(1) if m else None)
        for a in _ARN.finditer(text):
            partition, account = partition or a.group(1), account or a.group(3)
            region = region or (a.group(2) or None)
        if region and account:
            break
    return account or "123456789012", region or "us-east-1", partition or "aws"


def read_facts(plan: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> StackFacts:
    """The StackFacts of a plan."""
    resources = as_resources(plan)
    account, region, partition = _where(resources)
    model, error = None, None
    access = [r for r in resources if r.type == DEPLOY_ACCESS]
    if access:
        try:
            model = parse_deploy_model({k: v for k, v in access[0].props.items() if v is not None
                                        and not (k == "bootstrap" and v is False)})
        except ValueError as e:
            error = str(e)
    facts = StackFacts(account, region, partition, model, error, resources)
    facts.governed = _governed(facts)
    facts.endpoints = [Endpoint(r.mock_id, _service(r.props.get("serviceName")), str(r.props.get("vpcEndpointType")),
                                _doc(r.props.get("policy")), bool(r.props.get("privateDnsEnabled")))
                       for r in resources if r.type == ENDPOINT]
    facts.roles = _roles(facts)
    return facts


def _unknown(pol: PlanResource | None) -> bool:
    """A policy resource whose document is not a JSON object (the preview's unknown marker)."""
    return pol is not None and pol.props.get("policy") is not None and _doc(pol.props.get("policy")) is None


def _service(name: Any) -> str:
    return str(name).split(".", 3)[-1] if isinstance(name, str) and name.count(".") >= 3 else str(name)


def _governed(f: StackFacts) -> list[Governed]:
    out: list[Governed] = []
    rs = f.resources
    bucket_policies = {str(p.props.get("bucket")): p for p in rs if p.type == BUCKET_POLICY}
    for b in f.of_type(*BUCKET):
        name = str(b.props.get("bucket") or b.physical)
        pol = bucket_policies.get(name)
        tags = b.props.get("tags") or {}
        out.append(Governed(b, f"arn:{f.partition}:s3:::{name}", _doc(pol.props.get("policy")) if pol else None,
                            pol.name if pol else None, clinical="clinical" in json.dumps(tags), unknown=_unknown(pol)))
    for k in f.of_type(KEY):
        out.append(Governed(k, f"arn:{f.partition}:kms:{f.region}:{f.account}:key/{k.physical}",
                            _doc(k.props.get("policy")), k.name, unknown=_unknown(k)))
    queue_policies = {str(p.props.get("queueUrl")).rsplit("/", 1)[-1]: p for p in rs if p.type == QUEUE_POLICY}
    for q in f.of_type(QUEUE):
        name = str(q.props.get("name") or q.physical)
        pol = queue_policies.get(name)
        out.append(Governed(q, f"arn:{f.partition}:sqs:{f.region}:{f.account}:{name}",
                            _doc(pol.props.get("policy")) if pol else None, pol.name if pol else None,
                            unknown=_unknown(pol)))
    topic_policies = {str(p.props.get("arn")): p for p in rs if p.type == TOPIC_POLICY}
    for t in f.of_type(TOPIC):
        arn = f"arn:{f.partition}:sns:{f.region}:{f.account}:{t.physical}"
        pol = topic_policies.get(arn)
        inline = _doc(t.props.get("policy"))
        out.append(Governed(t, arn, _doc(pol.props.get("policy")) if pol else inline,
                            pol.name if pol else (t.name if inline else None)))
    repo_policies = {str(p.props.get("repository")): p for p in rs if p.type == REPOSITORY_POLICY}
    for r in f.of_type(REPOSITORY):
        pol = repo_policies.get(r.physical)
        out.append(Governed(r, f"arn:{f.partition}:ecr:{f.region}:{f.account}:repository/{r.physical}",
                            _doc(pol.props.get("policy")) if pol else None, pol.name if pol else None,
                            unknown=_unknown(pol)))
    return out


def _roles(f: StackFacts) -> dict[str, tuple[str, list[dict]]]:
    roles: dict[str, tuple[str, list[dict]]] = {}
    by_physical: dict[str, str] = {}
    for r in f.of_type(ROLE):
        path = r.props.get("path") if isinstance(r.props.get("path"), str) else "/"
        arn = f"arn:{f.partition}:iam::{f.account}:role{path}{r.physical}"
        roles[arn] = (r.name, [])
        by_physical[r.physical] = arn
    for p in f.of_type(ROLE_POLICY):
        arn = by_physical.get(str(p.props.get("role")))
        doc = _doc(p.props.get("policy"))
        if arn is not None and doc is not None:
            roles[arn][1].append(doc)
    return roles


def cluster_props(f: StackFacts) -> Mapping[str, Any] | None:
    """The EKS cluster's inputs (endpointPublicAccess, publicAccessCidrs, endpointPrivateAccess), or None."""
    clusters = f.of_type(CLUSTER)
    return clusters[0].props if clusters else None


def runner_security_groups(f: StackFacts) -> list[str]:
    """The security group ids of the plan's CodeBuild projects' VPC config (the deploy runner's)."""
    out: list[str] = []
    for p in f.of_type(CODEBUILD_PROJECT):
        vpc = p.props.get("vpcConfig") or {}
        out += [str(s) for s in (vpc.get("securityGroupIds") or [])]
    return out


def admits_https(f: StackFacts, target_group: str, source_group: str) -> bool:
    """True when an ingress rule of the plan lets `source_group` reach `target_group` on TCP 443."""
    for r in f.of_type(INGRESS_RULE):
        p = r.props
        if (p.get("securityGroupId") == target_group and p.get("referencedSecurityGroupId") == source_group
                and str(p.get("ipProtocol")) in ("tcp", "-1")
                and float(p.get("fromPort", 0)) <= 443 <= float(p.get("toPort", 65535))):
            return True
    return False

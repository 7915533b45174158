"""The rehearsal: what AWS will decide at apply time for the people and roles of the deploy model, from where each
of them stands — the deployers' create/read/update/delete of every governed resource, the uploaders' and readers'
data actions, the workers' through the VPC endpoint, the boundary against everyone else, and whether `pulumi up`
reaches the Kubernetes API.

Assumptions, said once in the report: a deployer's own IAM policy allows everything (rehearse judges the resource
policies, which are what lock a deployer out); an uploader's or reader's own IAM policy allows nothing for the
allowed cases (the bucket and key policies must suffice) and everything for the refused ones (the bucket policy
must refuse even a role whose IAM policy is `s3:*`); a request from the in-VPC runner to a service with an interface
endpoint goes through it (private DNS), to one without leaves through the NAT.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..catalogue.provider_actions import PROVIDER_ACTIONS, PROVIDER_PHASES, ProviderAction, actions_for, resource_arn
from .evaluate import Decision, Policy, Request, evaluate
from .plan_model import (
    CLUSTER_SECURITY_GROUP,
    Governed,
    StackFacts,
    admits_https,
    cluster_props,
    runner_security_groups,
)

ADMIN = Policy("identity:assumed-administrator", {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": "*", "Resource": "*"}]})
"""The deployer's assumed IAM policy (see the module docstring)."""
S3_STAR = Policy("identity:s3-and-kms-star", {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": ["s3:*", "kms:*"], "Resource": "*"}]})
"""The IAM policy of a principal the boundary must refuse all the same."""
OUTSIDE_IP = "198.18.0.1"
"""A source address outside every declared place (RFC 2544's benchmarking range): the NAT's, or an intruder's."""
INTRUDER = "role/rehearse-any-role-with-s3-star"
"""A same-account role that is not in the deploy model (its ARN is built with the plan's account)."""


@dataclass(frozen=True)
class Place:
    """Where a request comes from."""

    label: str
    inside: bool
    """True: from inside the stack's VPC (the deploy runner, a worker)."""
    source_ip: str | None = None
    """The public address of a request from outside (a host of a declared CIDR)."""
    vpc_endpoint_id: str | None = None
    """An endpoint a request from outside comes through (VPN / Direct Connect)."""


@dataclass(frozen=True)
class Finding:
    """One thing AWS would decide otherwise than the deploy model needs."""

    check: str
    resource: str
    action: str
    principal: str
    place: str
    sid: str | None
    fix: str

    def line(self) -> str:
        """One line: resource, action, principal, place, the deciding statement, the fix."""
        sid = (f"statement {self.sid}" if self.sid else "unreachable" if self.check == "kubernetes-api"
               else "allowed" if self.check == "boundary" else "no statement allows it")
        who = self.principal.split(":", 5)[-1] if self.principal.startswith("arn:") else self.principal
        return f"{self.check}: {self.resource}: {self.action} by {who} from {self.place}: {sid}; fix: {self.fix}"


def _host(cidr: str) -> str:
    net = ipaddress.ip_network(cidr)
    return str(next(net.hosts())) if net.num_addresses > 1 else str(net.network_address)


def places(cidrs: Sequence[str], endpoints: Sequence[str] = (), runner: bool = False) -> list[Place]:
    """The places of a set of CIDRs, outside endpoints and the in-VPC runner."""
    out = [Place(c, False, source_ip=_host(c)) for c in cidrs]
    out += [Place(e, False, vpc_endpoint_id=e) for e in endpoints]
    if runner:
        out.append(Place("the deploy runner (in the VPC)", True))
    return out


def _service(action: str) -> str:
    return action.split(":", 1)[0].lower()


def request_for(f: StackFacts, principal: str, action: str, resource: str, place: Place, *,
                identity: Sequence[Policy], resource_policy: dict[str, Any] | None, label: str,
                extra: dict[str, Any] | None = None) -> tuple[Request, dict[str, Any]]:
    """The request `principal` makes from `place` (the context keys AWS sets there) and the policies it meets (the
    endpoint's when it goes through one): `evaluate(request, **policies)`."""
    context: dict = {"aws:SecureTransport": True, "aws:ResourceAccount": f.account, **(extra or {})}
    service = _service(action)
    if service == "s3":
        context["s3:TlsVersion"] = "1.3"
    endpoint_policy, gateway = None, False
    if place.inside:
        endpoint = f.endpoint_for(service)
        if endpoint is not None:
            context["aws:SourceVpce"] = endpoint.id
            endpoint_policy = Policy(f"endpoint:{endpoint.service}", endpoint.policy) if endpoint.policy else None
            gateway = endpoint.kind == "Gateway"
        else:
            context["aws:SourceIp"] = OUTSIDE_IP
    elif place.vpc_endpoint_id:
        context["aws:SourceVpce"] = place.vpc_endpoint_id
    else:
        context["aws:SourceIp"] = place.source_ip or OUTSIDE_IP
    request = Request(principal, action, resource, context, resource_account=f.account)
    policies = {"identity_policies": list(identity),
                "resource_policy": Policy(label, resource_policy) if resource_policy is not None else None,
                "endpoint_policy": endpoint_policy, "endpoint_gateway": gateway}
    return request, policies


def decide(f: StackFacts, principal: str, action: str, resource: str, place: Place, *,
           identity: Sequence[Policy], resource_policy: dict[str, Any] | None, label: str,
           extra: dict[str, Any] | None = None) -> Decision:
    """Evaluate the request of `request_for`."""
    request, policies = request_for(f, principal, action, resource, place, identity=identity,
                                    resource_policy=resource_policy, label=label, extra=extra)
    return evaluate(request, **policies)


def _sid(d: Decision) -> str | None:
    return next((s.sid or f"#{s.index}" for s in d.statements), None) if not d.allowed else None


def _denial_fix(d: Decision, check: str) -> str:
    if d.verdict == "explicit-deny":
        return {"deployer": "exempt the deployer from this statement where it deploys (gpuburst:deploy "
                            "deployerRoleArns + deployCidrs or runner; components/spec/bucket_access.py)",
                "uploader": "let the uploader's role and place through (gpuburst:deploy.slideUploaders)",
                "reader": "let the reader's role and place through (gpuburst:deploy.resultReaders)",
                "worker": "admit the worker's requests through the VPC's S3 endpoint"}.get(check, "narrow the deny")
    if "key-policy" in d.missing:
        return "the key policy must allow the account (the AccountAdministersKeyThroughIam statement) or the role"
    if "endpoint" in d.missing:
        return "the VPC endpoint's policy must allow this account's callers"
    return "grant it in the resource policy or the role's IAM policy"


def deployer_findings(f: StackFacts) -> Iterator[Finding]:
    """Each deployer, from each of its places, may create, read back, update and delete every governed resource."""
    model = f.model
    if model is None:
        return
    governing = [(res, own, g) for res, own, g in _governing(f) if g is None or not g.unknown]
    for res, own_arn, g in governing:
        for phase in PROVIDER_PHASES:
            for pa in _called(res, phase):
                target = resource_arn(pa, own_arn, target_key_arn=g.arn if g is not None else own_arn)
                for role in model.deployer_role_arns:
                    runner = model.runner is not None and model.runner.role_arn == role
                    for place in places(model.deploy_cidrs, runner=runner):
                        d = decide(f, role, pa.action, target, place, identity=[ADMIN],
                                   resource_policy=g.policy if g else None, label=g.policy_name if g else "none",
                                   extra={"kms:CallerAccount": f.account} if pa.action.startswith("kms:") else None)
                        if not d.allowed:
                            yield Finding("deployer", f"{res.name} ({phase})", pa.action, role, place.label,
                                          _sid(d), _denial_fix(d, "deployer"))


def _called(res, phase: str) -> tuple[ProviderAction, ...]:
    """The provider's calls for one phase of `res`, less those that need `force_destroy` (the platform never sets
    it: a bucket of clinical data is emptied by a person, not by `pulumi destroy`)."""
    if res.type not in PROVIDER_ACTIONS:
        return ()
    forced = res.props.get("forceDestroy") is True
    return tuple(a for a in actions_for(res.type, phase) if forced or "force_destroy" not in a.when)


def _governing(f: StackFacts) -> list[tuple]:
    """(resource, its own ARN for the provider table, the Governed whose policy decides) for every resource the
    provider table knows, sub-resources (a bucket's policy, versioning, ...) judged by their parent's policy."""
    by_bucket = {g.arn.rsplit(":", 1)[-1]: g for g in f.governed if g.resource.type.startswith("aws:s3/bucket")}
    by_queue = {g.arn.rsplit(":", 1)[-1]: g for g in f.governed if g.resource.type == "aws:sqs/queue:Queue"}
    by_name = {g.resource.name: g for g in f.governed}
    out = []
    for r in f.resources:
        if r.type not in PROVIDER_ACTIONS:
            continue
        g = by_name.get(r.name)
        if g is None and isinstance(r.props.get("bucket"), str):
            g = by_bucket.get(r.props["bucket"])
        if g is None and isinstance(r.props.get("queueUrl"), str):
            g = by_queue.get(r.props["queueUrl"].rsplit("/", 1)[-1])
        if g is None and r.type == "aws:kms/alias:Alias":
            keys = [x for x in f.governed if x.resource.type == "aws:kms/key:Key"]
            g = keys[0] if len(keys) == 1 else None
        own = g.arn if g is not None else f"arn:{f.partition}:{r.type.split(':')[1].split('/')[0]}:{f.region}:" \
                                          f"{f.account}:{r.physical}"
        out.append((r, own, g))
    return out


def _clinical(f: StackFacts, kind: str) -> list[Governed]:
    return [g for g in f.governed if g.clinical and kind in g.arn and not g.unknown]


def _data_key(f: StackFacts) -> Governed | None:
    keys = [g for g in f.governed if g.resource.type == "aws:kms/key:Key" and "data-key" in g.resource.name
            and not g.unknown]
    return keys[0] if keys else None


def data_findings(f: StackFacts) -> Iterator[Finding]:
    """The uploaders may put slides and the readers get results from their places (bucket and key policies alone
    suffice); neither may do anything else; the deployers and any other same-account role with `s3:*` get, put,
    delete and list no clinical object from outside."""
    model = f.model
    if model is None:
        return
    key = _data_key(f)
    slides, results = _clinical(f, "slides"), _clinical(f, "results")
    via_s3 = {"kms:ViaService": f"s3.{f.region}.amazonaws.com", "kms:CallerAccount": f.account}
    for check, roles, own, allowed in (("uploader", model.slide_uploaders, slides, [("s3:PutObject", "slides/")]),
                                       ("reader", model.result_readers, results, [("s3:GetObject", "results/")])):
        for role in roles:
            for place in places(role.place.cidrs, role.place.vpc_endpoint_ids):
                for g in own:
                    for action, prefix in allowed:
                        d = decide(f, role.role_arn, action, f"{g.arn}/{prefix}rehearse-probe", place, identity=[],
                                   resource_policy=g.policy, label=g.policy_name or g.resource.name)
                        if not d.allowed:
                            yield Finding(check, g.resource.name, action, role.role_arn, place.label, _sid(d),
                                          _denial_fix(d, check))
                if key is not None:
                    kms = "kms:GenerateDataKey" if check == "uploader" else "kms:Decrypt"
                    d = decide(f, role.role_arn, kms, key.arn, Place("S3, on its behalf", False, OUTSIDE_IP),
                               identity=[], resource_policy=key.policy, label=key.policy_name or key.resource.name,
                               extra=via_s3)
                    if not d.allowed:
                        yield Finding(check, key.resource.name, kms, role.role_arn, "S3, on its behalf", _sid(d),
                                      _denial_fix(d, check))
                for g, action in _forbidden(check, slides, results):
                    d = decide(f, role.role_arn, action, _target(g, action), place, identity=[S3_STAR],
                               resource_policy=g.policy, label=g.policy_name or g.resource.name)
                    if d.allowed:
                        yield Finding("boundary", g.resource.name, action, role.role_arn, place.label, None,
                                      f"the {check} must be refused {action}: deny what is not its part "
                                      "(spec/bucket_access.py)")
    # A stranger lists nothing either; a deployer lists keys (HeadBucket needs s3:ListBucket) but reads no object.
    data = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")
    outsiders = [(f"arn:{f.partition}:iam::{f.account}:{INTRUDER}", Place(OUTSIDE_IP, False, OUTSIDE_IP),
                  (*data, "s3:ListBucket"))]
    outsiders += [(role, p, data) for role in model.deployer_role_arns for p in places(model.deploy_cidrs)]
    for principal, place, actions in outsiders:
        for g in [*slides, *results]:
            for action in actions:
                d = decide(f, principal, action, _target(g, action), place, identity=[S3_STAR],
                           resource_policy=g.policy, label=g.policy_name or g.resource.name)
                if d.allowed:
                    yield Finding("boundary", g.resource.name, action, principal, place.label, None,
                                  "clinical objects answer no one outside the VPC but the uploaders and readers: "
                                  "the bucket policy must deny it (DenyOutsideVpce / DenyDeployersObjectData)")


def _target(g: Governed, action: str) -> str:
    return g.arn if action == "s3:ListBucket" else f"{g.arn}/slides/rehearse-probe" if "slides" in g.arn \
        else f"{g.arn}/results/rehearse-probe"


def _forbidden(check: str, slides: list[Governed], results: list[Governed]) -> Iterator[tuple[Governed, str]]:
    own, other = (slides, results) if check == "uploader" else (results, slides)
    mine_not = ("s3:GetObject", "s3:DeleteObject") if check == "uploader" else ("s3:PutObject", "s3:DeleteObject")
    for g in own:
        for action in mine_not:
            yield g, action
    for g in other:
        for action in ("s3:GetObject", "s3:PutObject", "s3:ListBucket"):
            yield g, action


def worker_findings(f: StackFacts) -> Iterator[Finding]:
    """Each role whose IAM policy reads or writes clinical objects may do so through the VPC's S3 endpoint (the
    bucket policy, the endpoint policy and, for SSE-KMS, the key policy through S3)."""
    clinical = [g for g in f.governed if g.clinical and not g.unknown]
    key = _data_key(f)
    inside = Place("the VPC (S3 endpoint)", True)
    for arn, (name, docs) in sorted(f.roles.items()):
        for g, action, target in _clinical_grants(docs, clinical):
            d = decide(f, arn, action, target, inside, identity=[Policy(f"identity:{name}", doc) for doc in docs],
                       resource_policy=g.policy, label=g.policy_name or g.resource.name)
            if not d.allowed:
                yield Finding("worker", g.resource.name, action, arn, inside.label, _sid(d), _denial_fix(d, "worker"))
            if key is not None:
                kms = "kms:Decrypt" if action == "s3:GetObject" else "kms:GenerateDataKey"
                via = {"kms:ViaService": f"s3.{f.region}.amazonaws.com", "kms:CallerAccount": f.account}
                d = decide(f, arn, kms, key.arn, Place("S3, on its behalf", False, OUTSIDE_IP),
                           identity=[Policy(f"identity:{name}", doc) for doc in docs], resource_policy=key.policy,
                           label=key.policy_name or key.resource.name, extra=via)
                if not d.allowed:
                    yield Finding("worker", key.resource.name, kms, arn, "S3, on its behalf", _sid(d),
                                  _denial_fix(d, "worker"))


def _clinical_grants(docs: list[dict], clinical: list[Governed]) -> Iterator[tuple[Governed, str, str]]:
    seen = set()
    for doc in docs:
        statements = doc.get("Statement") or []
        for st in statements if isinstance(statements, list) else [statements]:
            if st.get("Effect") != "Allow":
                continue
            actions = st.get("Action") or []
            resources = st.get("Resource") or []
            for action in [actions] if isinstance(actions, str) else actions:
                if action not in ("s3:GetObject", "s3:PutObject"):
                    continue
                for res in [resources] if isinstance(resources, str) else resources:
                    for g in clinical:
                        if isinstance(res, str) and res.startswith(g.arn + "/") and (g.arn, action, res) not in seen:
                            seen.add((g.arn, action, res))
                            # A concrete object the grant's pattern matches (`*` and `?` anywhere in it).
                            yield g, action, res.replace("*", "rehearse-probe").replace("?", "x")


def kubernetes_findings(f: StackFacts) -> Iterator[Finding]:
    """`pulumi up` reaches the cluster's API endpoint from where it runs: the runner through the private endpoint
    (the cluster security group admits the runner's on 443), or the deploy CIDRs through the public one."""
    model = f.model
    cluster = cluster_props(f)
    if model is None or cluster is None:
        return
    if model.runner is not None:
        place = "the deploy runner (in the VPC)"
        groups = runner_security_groups(f)
        if cluster.get("endpointPrivateAccess") is not True:
            yield Finding("kubernetes-api", "eks cluster", "HTTPS 443", model.runner.role_arn, place, None,
                          "turn the private endpoint on (ClusterArgs.endpoint_private_access)")
        elif not groups:
            yield Finding("kubernetes-api", "eks cluster", "HTTPS 443", model.runner.role_arn, place, None,
                          "the plan declares no deploy runner (a CodeBuild project in the VPC): declare it "
                          "(gpuburst:deploy.runner) or deploy from CIDRs the public endpoint admits")
        elif not any(admits_https(f, CLUSTER_SECURITY_GROUP, g) for g in groups):
            yield Finding("kubernetes-api", "eks cluster", "HTTPS 443", model.runner.role_arn, place, None,
                          "add an ingress rule on the cluster security group from the runner's on TCP 443")
        return
    public = cluster.get("endpointPublicAccess") is True
    opened = [ipaddress.ip_network(c) for c in (cluster.get("publicAccessCidrs") or []) if isinstance(c, str)]
    for role in model.deployer_role_arns:
        for cidr in model.deploy_cidrs:
            net = ipaddress.ip_network(cidr)
            if not public or not any(net.subnet_of(o) for o in opened):  # type: ignore[arg-type]
                yield Finding("kubernetes-api", "eks cluster", "HTTPS 443", role, cidr, None,
                              "the API endpoint is private (or closed to this CIDR) and no in-VPC runner deploys: "
                              "declare gpuburst:deploy.runner, or open the public endpoint to the deploy CIDRs")


def rehearse(f: StackFacts) -> list[Finding]:
    """Every finding of every check, in a stable order, each once."""
    found = [*kubernetes_findings(f), *deployer_findings(f), *data_findings(f), *worker_findings(f)]
    return list(dict.fromkeys(found))

"""Stack rule `customer-managed-keys`: the queues that carry slide messages, and the cluster's control-plane log group,
are encrypted with rotated customer KMS keys of this plan, and the log group expires.

The threat: a message names a slide (its bucket and key, often a case or accession number), and a dead-letter
queue keeps the messages that failed, the crafted slide's too; the control-plane log records who read what in the
cluster. SQS-managed encryption (`sqsManagedSseEnabled`) and the AWS-managed `alias/aws/sqs` key let every
principal of the account that may read the queue decrypt it; a customer key's policy can limit decryption to the
worker roles through SQS (`kms:ViaService`), CloudTrail names each use, and the key can be disabled at once. Every
`aws:sqs/queue:Queue` of the plan (DLQs included; only a queue tagged `gpuburst.io/role: events`, Karpenter's
interruption queue, carries no slide) names such a key in `kmsMasterKeyId`; when the plan holds an EKS
cluster it holds its log group (`/aws/eks/<cluster>/cluster`, `components.spec.names.control_plane_log_group`, which
EKS would otherwise create unencrypted and kept forever) with `retentionInDays` and `kmsKeyId`; every
`aws:kms/key:Key` of the plan (symmetric) has `enableKeyRotation: true`.

A key field naming a key of another stack is an `Outside` in a partial plan (its rotation and policy live there),
a violation in a whole plan.
"""
from __future__ import annotations

from typing import Any

from ._components import control_plane_log_group
from .declare import scoped_policy
from .facts import WHOLE, Scope
from .kms import KMS_KEY, OUTSIDE, UNTRACED, key_problem, key_ref
from .outside import Finding, Outside
from .plan import Res
from .queues import TAG_ROLE
from .resources import CLUSTER_TYPES, SQS_QUEUE, as_int, dig, fmt, is_true_string
from .unknowns import UNKNOWN, unknown_message

NAME = "customer-managed-keys"
NO_SLIDE_ROLES = ("events",)
"""Values of the queue role tag (`policies.queues.TAG_ROLE`) of queues that carry no slide message (Karpenter's
interruption queue: EC2 events); every other queue, untagged ones included, is judged."""
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
SYMMETRIC = "SYMMETRIC_DEFAULT"
"""The only key spec KMS rotates automatically."""


def _key_findings(resources: list[Res], res: Res, field: str, what: str, scope: Scope) -> list[Finding | Outside]:
    """The violations of one key field of `res` (`what`: what the key protects, for the message)."""
    value = res.props.get(field)
    ref = key_ref(resources, res, value)
    where = f"{res.type.rsplit(':', 1)[-1]} {res.name}"
    problem = key_problem(ref, f"{where} {field}")
    if problem:
        return [(res.urn, f"{problem}: {what}; name a customer KMS key of this plan")]
    if ref.kind == UNTRACED:
        return [(res.urn, unknown_message(f"{where} {field}", f"which key encrypts {what} (and it depends on no KMS "
                                                              "key of the plan)"))]
    if ref.kind == OUTSIDE and scope.whole:
        return [(res.urn, f"{where} {field} = {fmt(value)} names no aws:kms/key:Key of the plan: its rotation and key "
                          f"policy are not checked; {what}, so encrypt it with the plan's key")]
    if ref.kind == OUTSIDE:
        return [Outside(res.urn, f"{where} {field} = {fmt(value)} is a key from another stack: could not check that "
                                 "it is a rotated customer key")]
    return []


def _cluster_name(c: Res) -> Any:
    name = c.props.get("name")
    return name if name is not None else c.name


def _log_group(resources: list[Res], cluster: Res) -> list[Finding]:
    """The cluster's violation when the plan holds no log group for its control-plane logs."""
    name = _cluster_name(cluster)
    who = f"{cluster.type.rsplit(':', 1)[-1]} {cluster.name}"
    if name is UNKNOWN:
        return [(cluster.urn, unknown_message(f"{who} name", "which log group holds its control-plane logs"))]
    expected = control_plane_log_group(str(name))
    groups = [g for g in resources if g.type == LOG_GROUP]
    if any(g.props.get("name") == expected for g in groups):
        return []
    if any(g.props.get("name") is UNKNOWN for g in groups):
        return [(cluster.urn, unknown_message(f"{who}'s log group name", f"whether {expected!r} is in the plan"))]
    return [(cluster.urn, f"{who} has no {LOG_GROUP} named {expected!r} in the plan: EKS creates it on first use, "
                          "unencrypted by any key of yours and kept forever; declare it (before the cluster) with "
                          "retentionInDays and kmsKeyId")]


def _log_group_findings(resources: list[Res], g: Res, scope: Scope) -> list[Finding | Outside]:
    name = g.props.get("name")
    if not (isinstance(name, str) and name.startswith("/aws/eks/") and name.endswith("/cluster")):
        return []
    out: list[Finding | Outside] = []
    retention = g.props.get("retentionInDays")
    if retention is UNKNOWN:
        out.append((g.urn, unknown_message(f"LogGroup {g.name} retentionInDays", "how long the control-plane logs "
                                                                                 "are kept")))
    elif (as_int(retention) or 0) <= 0:
        shown = "is not set" if retention is None else f"= {fmt(retention)}"
        out.append((g.urn, f"LogGroup {g.name} retentionInDays {shown}: the control-plane logs of "
                           f"{name!r} never expire; set the days the audit trail must be kept"))
    out += _key_findings(resources, g, "kmsKeyId", f"log group {name!r} holds the cluster's audit trail", scope)
    return out


def _rotation(k: Res) -> Finding | None:
    spec = k.props.get("customerMasterKeySpec", k.props.get("keySpec"))
    if isinstance(spec, str) and spec != SYMMETRIC:
        return None  # KMS rotates symmetric encryption keys only
    rotation = k.props.get("enableKeyRotation")
    if rotation is UNKNOWN:
        return (k.urn, unknown_message(f"Key {k.name} enableKeyRotation", "whether the key is rotated"))
    if rotation is True or is_true_string(rotation):
        return None
    return (k.urn, f"Key {k.name} enableKeyRotation = {fmt(rotation) if rotation is not None else 'not set'}: the "
                   "key material that encrypts slides, messages or logs never changes; set enableKeyRotation: true")


def key_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) for every queue not encrypted with a customer key of the plan, every cluster without its
    encrypted, expiring control-plane log group, and every key without rotation."""
    out: list[Finding | Outside] = []
    for q in (r for r in resources if r.type == SQS_QUEUE):
        role = dig(q.props, "tags", TAG_ROLE).value
        if isinstance(role, str) and role.strip().lower() in NO_SLIDE_ROLES:
            continue
        shown = q.props.get("name") if isinstance(q.props.get("name"), str) else q.name
        out += _key_findings(resources, q, "kmsMasterKeyId",
                             f"queue {shown!r} carries slide messages (a DLQ keeps the failed ones)", scope)
    for c in (r for r in resources if r.type in CLUSTER_TYPES):
        out += _log_group(resources, c)
    for g in (r for r in resources if r.type == LOG_GROUP):
        out += _log_group_findings(resources, g, scope)
    for k in (r for r in resources if r.type == KMS_KEY):
        found = _rotation(k)
        if found:
            out.append(found)
    return out


POLICY = scoped_policy(
    NAME, "Every SQS queue (DLQs included) and the EKS control-plane log group are encrypted with a customer KMS key "
          "of the plan (not SQS-managed SSE nor alias/aws/sqs); the log group sets retentionInDays; every KMS key is "
          "rotated.",
    key_findings)

POLICIES = [POLICY]

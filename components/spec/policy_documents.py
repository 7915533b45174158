"""Pure builders of IAM and resource-policy documents (TLS-only queue/bucket policies, least-privilege statements).

Every function returns plain dicts. ARNs may be plain strings or `pulumi.Output`s: strings are checked and joined
here; Outputs are joined with `Output.concat`, so a caller can pass the result straight to
`pulumi.Output.from_input(doc).apply(json.dumps)`. No Allow statement here ever uses a `*` action; the only `*`
actions are in the Deny statements of the bucket and queue policies (deny *everything* over plain HTTP, or from
outside the VPC endpoints) and in a key policy's account-root statement (the standard statement that keeps a KMS key
manageable through IAM).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import pulumi

from .validation import ConfigError

POLICY_VERSION = "2012-10-17"
"""The IAM policy language version every document here declares."""

QUEUE_CONSUMER_ACTIONS = (
    "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes",
    "sqs:GetQueueUrl",
)
"""What a worker needs on its queue: receive, delete when done, extend visibility (the heartbeat), look up the URL."""

QUEUE_PRODUCER_ACTIONS = ("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl")
"""What a producer needs on the queue (SendMessageBatch is authorised by sqs:SendMessage)."""

QUEUE_METRICS_ACTIONS = ("sqs:GetQueueAttributes",)
"""What a scaler (KEDA's aws-sqs-queue trigger) needs: the queue-length attributes, nothing else."""

S3_READ_ACTIONS = ("s3:GetObject",)
"""Reading objects (HeadObject is authorised by s3:GetObject)."""

S3_WRITE_ACTIONS = ("s3:PutObject", "s3:AbortMultipartUpload")
"""Writing objects, multipart included (Create/UploadPart/Complete are authorised by s3:PutObject)."""

_SQS_ARN = re.compile(r"^arn:aws[a-z-]*:sqs:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,75}(\.fifo)?$")
_S3_BUCKET_ARN = re.compile(r"^arn:aws[a-z-]*:s3:::[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_KMS_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:(key|alias)/.+$")
# A key prefix: printable ASCII, ending in '/', no leading '/', and no IAM wildcard characters ('*', '?') that would
# widen the grant beyond the prefix.
_PREFIX = re.compile(r"^[!-~](?:[ -~]{0,510})?/$")


def _is_output(value: Any) -> bool:
    return isinstance(value, pulumi.Output)


def _join(*parts: Any) -> Any:
    """Concatenate strings, or build an Output when any part is one."""
    if any(_is_output(p) for p in parts):
        return pulumi.Output.concat(*parts)
    return "".join(parts)


def _check_arn(field: str, value: Any, pattern: re.Pattern, what: str) -> None:
    """Check a plain-string ARN; Outputs are checked by the provider at deploy time."""
    if _is_output(value):
        return
    if not isinstance(value, str) or not pattern.match(value):
        raise ConfigError(field, value, what)


def _check_prefixes(field: str, prefixes: Sequence[str]) -> list[str]:
    if isinstance(prefixes, str):
        raise ConfigError(field, prefixes, "a list of key prefixes, not a single string")
    out = []
    for p in prefixes:
        if not isinstance(p, str) or not _PREFIX.match(p) or p.startswith("/") or "*" in p or "?" in p:
            raise ConfigError(field, p, "a key prefix of printable ASCII ending in '/', not starting with '/', "
                                        "without '*' or '?' (e.g. 'results/')")
        out.append(p)
    return out


def policy_document(statements: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Wrap statements in a policy document."""
    return {"Version": POLICY_VERSION, "Statement": list(statements)}


def deny_insecure_transport_statement(service: str, resources: list[Any]) -> dict[str, Any]:
    """Deny every action of `service` on `resources` to everyone when the request is not over TLS."""
    return {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": f"{service}:*",
        "Resource": resources if len(resources) > 1 else resources[0],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def queue_tls_only_policy(queue_arn: Any) -> dict[str, Any]:
    """SQS queue policy: deny all SQS actions on the queue over plain HTTP (`aws:SecureTransport` false)."""
    _check_arn("queue_arn", queue_arn, _SQS_ARN, "an SQS queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)")
    return policy_document([deny_insecure_transport_statement("sqs", [queue_arn])])


MINIMUM_TLS_VERSION = "1.2"
"""Oldest TLS version the buckets accept (S3's `s3:TlsVersion` condition key)."""


def bucket_tls_only_policy(bucket_arn: Any) -> dict[str, Any]:
    """S3 bucket policy: deny all S3 actions over plain HTTP, and over TLS older than `MINIMUM_TLS_VERSION`."""
    _check_arn("bucket_arn", bucket_arn, _S3_BUCKET_ARN, "an S3 bucket ARN (arn:aws:s3:::BUCKET)")
    resources = [bucket_arn, _join(bucket_arn, "/*")]
    return policy_document([
        deny_insecure_transport_statement("s3", resources),
        {
            "Sid": "DenyOutdatedTls",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": resources,
            "Condition": {"NumericLessThan": {"s3:TlsVersion": MINIMUM_TLS_VERSION}},
        },
    ])


def _kms_statement(kms_key_arn: Any, actions: tuple[str, ...], service: str) -> dict:
    _check_arn("kms_key_arn", kms_key_arn, _KMS_ARN, "a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID)")
    # kms:ViaService limits the grant to use through the queue/bucket: the role cannot decrypt anything else with it.
    return {
        "Effect": "Allow",
        "Action": list(actions),
        "Resource": kms_key_arn,
        "Condition": {"StringLike": {"kms:ViaService": f"{service}.*.amazonaws.com"}},
    }


def queue_consumer_statements(queue_arn: Any, *, kms_key_arn: Any = None) -> list[dict[str, Any]]:
    """IAM statements a worker needs to consume one queue (receive, delete, extend visibility, get attributes/URL).

    `kms_key_arn`: the customer-managed key the queue is encrypted with, when it is (kms:Decrypt through SQS);
    None for SQS-managed SSE, which needs no KMS permission.
    """
    _check_arn("queue_arn", queue_arn, _SQS_ARN, "an SQS queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)")
    statements = [{"Effect": "Allow", "Action": list(QUEUE_CONSUMER_ACTIONS), "Resource": queue_arn}]
    if kms_key_arn is not None:
        statements.append(_kms_statement(kms_key_arn, ("kms:Decrypt",), "sqs"))
    return statements


def queue_producer_statements(queue_arn: Any, *, kms_key_arn: Any = None) -> list[dict[str, Any]]:
    """IAM statements a producer needs to send to one queue (plus GenerateDataKey/Decrypt when CMK-encrypted)."""
    _check_arn("queue_arn", queue_arn, _SQS_ARN, "an SQS queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)")
    statements = [{"Effect": "Allow", "Action": list(QUEUE_PRODUCER_ACTIONS), "Resource": queue_arn}]
    if kms_key_arn is not None:
        statements.append(_kms_statement(kms_key_arn, ("kms:GenerateDataKey", "kms:Decrypt"), "sqs"))
    return statements


def queue_metrics_statements(queue_arn: Any) -> list[dict[str, Any]]:
    """IAM statements a queue-length scaler needs (sqs:GetQueueAttributes on the one queue)."""
    _check_arn("queue_arn", queue_arn, _SQS_ARN, "an SQS queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)")
    return [{"Effect": "Allow", "Action": list(QUEUE_METRICS_ACTIONS), "Resource": queue_arn}]


def s3_prefix_statements(bucket_arn: Any, read_prefixes: Sequence[str], write_prefixes: Sequence[str], *,
                         kms_key_arn: Any = None) -> list[dict[str, Any]]:
    """IAM statements to read objects under `read_prefixes` and write objects under `write_prefixes` of one bucket.

    Reading also gets `s3:ListBucket` limited (by the `s3:prefix` condition) to the read prefixes, so a missing
    object answers 404 rather than 403 (the worker tells "not there yet" from "not allowed" that way). A prefix
    that is both read and written (results the worker checks before writing) goes in both lists. `kms_key_arn`:
    the bucket's customer-managed key, when there is one (None for SSE-S3 or the AWS-managed `aws/s3` key, which
    in-account principals use through S3 without a KMS grant).
    """
    _check_arn("bucket_arn", bucket_arn, _S3_BUCKET_ARN, "an S3 bucket ARN (arn:aws:s3:::BUCKET)")
    reads = _check_prefixes("read_prefixes", read_prefixes)
    writes = _check_prefixes("write_prefixes", write_prefixes)
    if not reads and not writes:
        raise ConfigError("read_prefixes", list(read_prefixes), "at least one read or write prefix")
    statements: list[dict] = []
    if reads:
        statements.append({"Effect": "Allow", "Action": list(S3_READ_ACTIONS),
                           "Resource": [_join(bucket_arn, "/", p, "*") for p in reads]})
        statements.append({"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": bucket_arn,
                           "Condition": {"StringLike": {"s3:prefix": [p + "*" for p in reads]}}})
    if writes:
        statements.append({"Effect": "Allow", "Action": list(S3_WRITE_ACTIONS),
                           "Resource": [_join(bucket_arn, "/", p, "*") for p in writes]})
    if kms_key_arn is not None:
        actions = (("kms:Decrypt",) if reads else ()) + (("kms:GenerateDataKey",) if writes else ())
        if writes and "kms:Decrypt" not in actions:
            actions += ("kms:Decrypt",)  # multipart uploads decrypt the data key to complete the upload
        statements.append(_kms_statement(kms_key_arn, actions, "s3"))
    return statements


_S3_OBJECT_ARN = re.compile(r"^arn:aws[a-z-]*:s3:::[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^*?\s]+$")


def s3_object_read_statements(object_arn: Any, *, kms_key_arn: Any = None) -> list[dict[str, Any]]:
    """IAM statements to read exactly one S3 object (`arn:aws:s3:::bucket/key`, no wildcard): `s3:GetObject` on it
    and nothing else of its bucket (no listing: a missing object answers 403), plus `kms:Decrypt` through S3 on
    `kms_key_arn` when the object is encrypted with a customer-managed key."""
    _check_arn("object_arn", object_arn, _S3_OBJECT_ARN,
               "one S3 object's ARN, arn:aws:s3:::BUCKET/KEY, without '*' or '?'")
    statements = [{"Sid": "ReadModelObject", "Effect": "Allow", "Action": list(S3_READ_ACTIONS),
                   "Resource": object_arn}]
    if kms_key_arn is not None:
        statements.append(_kms_statement(kms_key_arn, ("kms:Decrypt",), "s3"))
    return statements


def dead_letter_sender_statements(dead_letter_queue_arn: Any, *, kms_key_arn: Any = None) -> list[dict[str, Any]]:
    """IAM statements to send to a dead-letter queue and nothing else (a worker setting a bad message aside).

    `kms_key_arn`: the queue's customer-managed key, when there is one: sending to an SSE-KMS queue needs
    kms:GenerateDataKey and kms:Decrypt on it (SQS Developer Guide, "Key management": producer permissions).
    """
    _check_arn("dead_letter_queue_arn", dead_letter_queue_arn, _SQS_ARN,
               "an SQS queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)")
    statements = [{"Effect": "Allow", "Action": ["sqs:SendMessage"], "Resource": dead_letter_queue_arn}]
    if kms_key_arn is not None:
        statements.append(_kms_statement(kms_key_arn, ("kms:GenerateDataKey", "kms:Decrypt"), "sqs"))
    return statements


POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
"""The service principal EKS Pod Identity assumes roles as (EKS User Guide, "Create IAM role with trust policy
required by EKS Pod Identity")."""

_ACCOUNT = re.compile(r"^\d{12}$")
_EKS_CLUSTER_ARN = re.compile(r"^arn:(aws[a-z-]*):eks:([a-z0-9-]+):(\d{12}):cluster/([0-9A-Za-z][A-Za-z0-9_-]*)$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SA_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def check_pod_identity_subject(namespace: str, service_account: str) -> None:
    """ConfigError unless `namespace` is a namespace name and `service_account` a service account name."""
    if not isinstance(namespace, str) or not _DNS_LABEL.match(namespace):
        raise ConfigError("namespace", namespace, "a Kubernetes namespace name (a DNS label)")
    if not isinstance(service_account, str) or not _SA_NAME.match(service_account):
        raise ConfigError("service_account", service_account, "a Kubernetes service account name (a DNS subdomain)")


def pod_identity_trust_policy(*, account_id: str, cluster_arn: str, namespace: str,
                              service_account: str) -> dict[str, Any]:
    """Trust policy of a Pod Identity role: only EKS Pod Identity, only for this account, this cluster, this namespace
    and this service account, may assume it and tag the session.

    The namespace and service-account conditions are the documented form (EKS User Guide, "Create IAM role with
    trust policy required by EKS Pod Identity": `StringEquals` on `aws:RequestTag/kubernetes-namespace` and
    `aws:RequestTag/kubernetes-service-account`); `aws:RequestTag/eks-cluster-arn` is the session tag EKS sets to the
    cluster's ARN (same page, and "Grant Pods access to AWS resources based on tags"). `aws:SourceAccount` and
    `aws:SourceArn` are the confused-deputy keys (EKS User Guide, "Cross-service confused deputy prevention"); AWS
    documents `aws:SourceArn` = the cluster ARN for the cluster role only, so the source ARN is also allowed to be one
    of this cluster's Pod Identity associations (`podidentityassociation/<cluster>/*`). Without the tag conditions any
    association in the account could hand the role to any pod. The tags are absent when an association disables
    session tags (`disableSessionTags`): such an association cannot use this role, by design.
    """
    if not isinstance(account_id, str) or not _ACCOUNT.match(account_id):
        raise ConfigError("account_id", account_id, "a 12-digit AWS account id as a string")
    m = _EKS_CLUSTER_ARN.match(cluster_arn) if isinstance(cluster_arn, str) else None
    if m is None or m.group(3) != account_id:
        raise ConfigError("cluster_arn", cluster_arn,
                          f"an EKS cluster ARN in account {account_id} (arn:aws:eks:REGION:ACCOUNT:cluster/NAME)")
    check_pod_identity_subject(namespace, service_account)
    partition, region, _, cluster = m.groups()
    return policy_document([{
        "Sid": "AllowEksAuthToAssumeRoleForPodIdentity",
        "Effect": "Allow",
        "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
        "Condition": {
            "StringEquals": {
                "aws:SourceAccount": account_id,
                "aws:RequestTag/eks-cluster-arn": cluster_arn,
                "aws:RequestTag/kubernetes-namespace": [namespace],
                "aws:RequestTag/kubernetes-service-account": [service_account],
            },
            "ArnLike": {"aws:SourceArn": [
                cluster_arn, f"arn:{partition}:eks:{region}:{account_id}:podidentityassociation/{cluster}/*"]},
        },
    }])


_VPCE = re.compile(r"^vpce-[0-9a-f]{8,17}$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/*-]{1,512}$")


def deny_outside_vpc_endpoints_statement(resources: list[Any], vpc_endpoint_ids: Sequence[Any],
                                         break_glass_role_arns: Sequence[str] = ()) -> dict[str, Any]:
    """Deny every S3 action on `resources` to any request that does not come through one of `vpc_endpoint_ids`
    (S3 User Guide, "Controlling access from VPC endpoints with bucket policies": `StringNotEquals` on
    `aws:SourceVpce`), except to principals matching `break_glass_role_arns` (`ArnNotLike` on `aws:PrincipalArn`;
    both conditions must hold for the deny to apply)."""
    if isinstance(vpc_endpoint_ids, str) or not vpc_endpoint_ids:
        raise ConfigError("vpc_endpoint_ids", vpc_endpoint_ids, "a non-empty list of VPC endpoint ids (vpce-...)")
    for v in vpc_endpoint_ids:
        if not _is_output(v) and not (isinstance(v, str) and _VPCE.match(v)):
            raise ConfigError("vpc_endpoint_ids", v, "a VPC endpoint id like vpce-0a1b2c3d4e5f60001")
    if isinstance(break_glass_role_arns, str):
        raise ConfigError("break_glass_role_arns", break_glass_role_arns, "a list of IAM role ARNs, not one string")
    for arn in break_glass_role_arns:
        if not isinstance(arn, str) or not _ROLE_ARN.match(arn):
            raise ConfigError("break_glass_role_arns", arn,
                              "an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME; '*' allowed in the name)")
    condition: dict[str, Any] = {"StringNotEquals": {"aws:SourceVpce": list(vpc_endpoint_ids)}}
    if break_glass_role_arns:
        condition["ArnNotLike"] = {"aws:PrincipalArn": list(break_glass_role_arns)}
    return {"Sid": "DenyOutsideVpce", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
            "Resource": resources, "Condition": condition}


def data_bucket_policy(bucket_arn: Any, *, vpc_endpoint_ids: Sequence[Any] | None = None,
                       break_glass_role_arns: Sequence[str] = ()) -> dict[str, Any]:
    """A clinical bucket's policy: `bucket_tls_only_policy`, plus, with `vpc_endpoint_ids`, the deny of every request
    from outside those endpoints (`deny_outside_vpc_endpoints_statement`)."""
    doc = bucket_tls_only_policy(bucket_arn)
    if vpc_endpoint_ids is not None:
        doc["Statement"].append(deny_outside_vpc_endpoints_statement(
            [bucket_arn, _join(bucket_arn, "/*")], vpc_endpoint_ids, break_glass_role_arns))
    return doc


S3_LOG_DELIVERY_PRINCIPAL = "logging.s3.amazonaws.com"
"""The service principal that delivers S3 server access logs (S3 User Guide, "Enabling Amazon S3 server access
logging": permissions for log delivery)."""


def access_log_bucket_policy(log_bucket_arn: Any, prefix: str, source_bucket_arns: list[Any],
                             account_id: Any) -> dict[str, Any]:
    """The access-log bucket's policy: TLS only, and S3 log delivery may put objects under `prefix`, for the named
    source buckets of this account only (the documented statement: S3 User Guide, "Enabling Amazon S3 server access
    logging", grant permissions to the logging service principal by using a bucket policy)."""
    doc = bucket_tls_only_policy(log_bucket_arn)
    prefix = _check_prefixes("prefix", [prefix])[0]
    doc["Statement"].append({
        "Sid": "S3ServerAccessLogsPolicy",
        "Effect": "Allow",
        "Principal": {"Service": S3_LOG_DELIVERY_PRINCIPAL},
        "Action": ["s3:PutObject"],
        "Resource": _join(log_bucket_arn, "/", prefix, "*"),
        "Condition": {"ArnLike": {"aws:SourceArn": list(source_bucket_arns)},
                      "StringEquals": {"aws:SourceAccount": account_id}},
    })
    return doc


def alarm_topic_key_policy(account_id: str, partition: str, region: str, alarm_names: Sequence[str]) -> dict[str, Any]:
    """Key policy of the customer-managed key that encrypts an alarm topic.

    CloudWatch publishes to an SSE topic only if the topic's key lets `cloudwatch.amazonaws.com` use it. The
    AWS-managed `alias/aws/sns` key's policy cannot be changed, so alarms publishing to a topic encrypted with it
    fail (the alarm changes state; nobody is told). The grant is pinned to this account and to the named alarms.
    """
    root = f"arn:{partition}:iam::{account_id}:root"
    alarm_arns = [f"arn:{partition}:cloudwatch:{region}:{account_id}:alarm:{n}" for n in alarm_names]
    return policy_document([
        {
            "Sid": "AccountAdministersKeyThroughIam",
            "Effect": "Allow",
            "Principal": {"AWS": root},
            "Action": "kms:*",
            "Resource": "*",
        },
        {
            "Sid": "CloudWatchAlarmsPublishToEncryptedTopic",
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
            "Resource": "*",
            "Condition": {"StringEquals": {"aws:SourceAccount": account_id},
                          "ArnLike": {"aws:SourceArn": alarm_arns}},
        },
    ])


def allow_wildcard_actions(statements: Iterable[dict[str, Any]]) -> list[str]:
    """Every action with a `*` in an Allow statement (empty for a least-privilege set of statements)."""
    found = []
    for st in statements:
        if st.get("Effect") != "Allow":
            continue
        actions = st.get("Action", [])
        for a in [actions] if isinstance(actions, str) else actions:
            if "*" in a:
                found.append(a)
    return found

"""Tests for `customer-managed-keys`: slide queues and the control-plane log group use rotated customer keys of the
plan, the log group expires; a key of another stack is outside-this-stack's in a partial plan."""
from __future__ import annotations

import pytest

from policies import boundary, keys
from policies.harness import UNKNOWN_STRING as U
from tests.policies import clinical_fragments as C
from tests.policies import fragments as F

RULE = keys.key_findings


def queue(name: str = "slides-queue", deps: list[str] | None = None, **props) -> dict:
    return F.entry(F.T_QUEUE, name, {"name": name, **props}, deps=deps)


def test_sound_fragments_pass():
    assert C.judge(RULE, C.key("slides-key"), *F.queues()) == ([], [])
    assert C.judge(RULE, *F.workload()["resources"]) == ([], [])
    assert C.judge(RULE, C.platform(), C.eks_cluster(), C.key(), C.log_group()) == ([], [])
    alias = F.entry(C.T_ALIAS, "alias", {"name": "alias/gpuburst-dev-data", "targetKeyId": "k"},
                    deps=C.key_deps())
    assert C.judge(RULE, C.key(), alias, queue(kmsMasterKeyId="alias/gpuburst-dev-data")) == ([], [])
    assert C.judge(RULE, C.key(), queue(kmsMasterKeyId=U, deps=C.key_deps())) == ([], [])


def test_fragments_without_queues_clusters_or_keys_are_not_judged():
    for fragment in (F.lone_trigger_auth(), F.chart_fragment("keda"), F.chart_fragment("karpenter")):
        assert C.judge(RULE, *fragment["resources"]) == ([], [])
    events = queue("karpenter", sqsManagedSseEnabled=True, tags={"gpuburst.io/role": "events"})
    assert C.judge(RULE, events) == ([], [])  # Karpenter's interruption queue carries no slide


@pytest.mark.parametrize("props,text", [
    ({"sqsManagedSseEnabled": True}, "Queue slides-queue kmsMasterKeyId is not set"),
    ({"kmsMasterKeyId": "alias/aws/sqs"}, "Queue slides-queue kmsMasterKeyId = 'alias/aws/sqs' is an AWS-managed key"),
    ({"kmsMasterKeyId": "arn:aws:kms:us-east-1:123456789012:alias/aws/sqs"}, "is an AWS-managed key"),
    ({"sqsManagedSseEnabled": True, "tags": {"gpuburst.io/role": "dead-letter"}}, "kmsMasterKeyId is not set"),
], ids=["sse-sqs", "aws-managed-alias", "aws-managed-alias-arn", "dead-letter"])
def test_a_queue_without_a_customer_key_of_the_plan_is_mandatory(props, text):
    (message,) = C.judge(RULE, C.key(), queue(**props))[0]
    assert message.startswith("Queue slides-queue kmsMasterKeyId ") and text in message, message
    assert "queue 'slides-queue' carries slide messages" in message


def test_a_key_of_another_stack_or_untraced():
    other = queue(kmsMasterKeyId="arn:aws:kms:us-east-1:123456789012:key/platform")
    violations, (line,) = C.judge(RULE, other)
    assert violations == [] and line == ("Queue slides-queue kmsMasterKeyId = 'arn:aws:kms:us-east-1:123456789012:"
                                         "key/platform' is a key from another stack: could not check that it is a "
                                         "rotated customer key")
    (message,) = C.judge(RULE, C.platform(), other)[0]
    assert "names no aws:kms/key:Key of the plan" in message
    (message,) = C.judge(RULE, queue(kmsMasterKeyId=U))[0]
    assert message.startswith("Queue slides-queue kmsMasterKeyId is unknown during preview")


def test_the_cluster_needs_its_control_plane_log_group():
    (message,) = C.judge(RULE, C.eks_cluster(), C.key())[0]
    assert message.startswith("Cluster gpuburst-cluster-eks has no aws:cloudwatch/logGroup:LogGroup named "
                              "'/aws/eks/gpuburst-dev/cluster' in the plan")
    wrong = C.log_group("/aws/eks/other/cluster")
    assert len(C.judge(RULE, C.eks_cluster(), C.key(), wrong)[0]) == 1
    (message,) = C.judge(RULE, C.eks_cluster(), C.key(), C.log_group(name=U))[0]
    assert "unknown during preview" in message


@pytest.mark.parametrize("over,text", [
    ({"retentionInDays": 0}, "LogGroup control-plane-logs retentionInDays = 0: the control-plane logs of "
                             "'/aws/eks/gpuburst-dev/cluster' never expire"),
    ({"retentionInDays": None}, "LogGroup control-plane-logs retentionInDays is not set: "),
    ({"kmsKeyId": None}, "LogGroup control-plane-logs kmsKeyId is not set"),
    ({"kmsKeyId": "alias/aws/logs"}, "LogGroup control-plane-logs kmsKeyId = 'alias/aws/logs' is an AWS-managed key"),
], ids=["never-expires", "no-retention", "no-key", "aws-managed"])
def test_the_log_group_expires_and_uses_the_plans_key(over, text):
    group = C.log_group(**over)
    group["properties"] = {k: v for k, v in group["properties"].items() if v is not None}
    (message,) = C.judge(RULE, C.eks_cluster(), C.key(), group)[0]
    assert message.startswith(text), message


def test_every_symmetric_key_is_rotated():
    (message,) = C.judge(RULE, C.key(enableKeyRotation=False))[0]
    assert message.startswith("Key data-key enableKeyRotation = False: the key material")
    (message,) = C.judge(RULE, F.entry(F.T_KEY, "bare", {"description": "x"}))[0]
    assert message.startswith("Key bare enableKeyRotation = not set")
    assert C.judge(RULE, F.entry(F.T_KEY, "signing", {"customerMasterKeySpec": "RSA_2048"})) == ([], [])
    (message,) = C.judge(RULE, C.key(enableKeyRotation=U))[0]
    assert message.startswith("Key data-key enableKeyRotation is unknown during preview")


def test_over_grpc_sse_sqs_queues_fail_and_another_stacks_key_is_advised(analyze):
    report = analyze(F.doc(queue("slides-dlq", sqsManagedSseEnabled=True, tags={"gpuburst.io/role": "dead-letter"}),
                           queue("slides", kmsMasterKeyId="arn:aws:kms:us-east-1:123456789012:key/platform",
                                 visibilityTimeoutSeconds=600,
                                 redrivePolicy='{"deadLetterTargetArn": "arn:aws:sqs:us-east-1:123456789012:'
                                               'slides-dlq", "maxReceiveCount": 3}')))
    (d,) = report.by_policy(keys.NAME)
    assert d.level == "MANDATORY" and d.urn == F.urn(F.T_QUEUE, "slides-dlq")
    (line,) = [a for a in report.by_policy(boundary.NAME) if "key/platform" in a.message]
    assert line.level == "ADVISORY" and "(not checked by customer-managed-keys: " in line.message

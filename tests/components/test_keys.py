"""DataKey: the stack's customer-managed key, its policy (account administration, the workers through S3 and SQS,
CloudWatch Logs for named log groups), and in the dev plan every store of clinical data encrypted with it."""
from __future__ import annotations

import json

import pytest

from components.keys import LOGS_KEY_ACTIONS, WORKER_KEY_ACTIONS, DataKey, DataKeyArgs, data_key_policy
from components.spec.names import control_plane_log_group
from components.spec.validation import ConfigError
from components.synth.mocks import FAKE_ACCOUNT, run_under_mocks

LOG_GROUP = control_plane_log_group("gpuburst-dev")


def _policy(**kw) -> dict:
    args = dict(account_id=FAKE_ACCOUNT, partition="aws", region="us-east-1", worker_role_path="/gpuburst-dev/workers/",
                log_group_names=[LOG_GROUP])
    args.update(kw)
    return data_key_policy(**args)


def _by_sid(doc: dict) -> dict[str, dict]:
    return {st["Sid"]: st for st in doc["Statement"]}


def test_the_account_administers_the_key_through_iam():
    st = _by_sid(_policy())["AccountAdministersKeyThroughIam"]
    assert st["Principal"] == {"AWS": f"arn:aws:iam::{FAKE_ACCOUNT}:root"}
    assert (st["Effect"], st["Action"], st["Resource"]) == ("Allow", "kms:*", "*")


def test_workers_use_the_key_only_through_s3_and_sqs_of_this_region_and_account():
    st = _by_sid(_policy())["WorkerRolesUseKeyOnlyThroughS3AndSqs"]
    assert st["Action"] == list(WORKER_KEY_ACTIONS) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert st["Condition"] == {
        "StringEquals": {"kms:CallerAccount": FAKE_ACCOUNT,
                         "kms:ViaService": ["s3.us-east-1.amazonaws.com", "sqs.us-east-1.amazonaws.com"]},
        "ArnLike": {"aws:PrincipalArn": f"arn:aws:iam::{FAKE_ACCOUNT}:role/gpuburst-dev/workers/*"},
    }


def test_cloudwatch_logs_uses_the_key_for_the_named_log_groups_only():
    st = _by_sid(_policy())["CloudWatchLogsEncryptsNamedLogGroups"]
    assert st["Principal"] == {"Service": "logs.us-east-1.amazonaws.com"}
    assert st["Condition"] == {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": [
        f"arn:aws:logs:us-east-1:{FAKE_ACCOUNT}:log-group:/aws/eks/gpuburst-dev/cluster"]}}
    assert "*" not in "".join(LOGS_KEY_ACTIONS) and set(st["Action"]) == set(LOGS_KEY_ACTIONS)


def test_no_worker_or_logs_statement_unless_asked():
    assert list(_by_sid(_policy(worker_role_path=None, log_group_names=[]))) == ["AccountAdministersKeyThroughIam"]


def test_china_partition_uses_its_dns_suffix():
    st = _by_sid(_policy(partition="aws-cn", region="cn-north-1"))["CloudWatchLogsEncryptsNamedLogGroups"]
    assert st["Principal"] == {"Service": "logs.cn-north-1.amazonaws.com.cn"}


@pytest.mark.parametrize("field,kw", [("account_id", {"account_id": "1"}), ("partition", {"partition": "gcp"}),
                                      ("region", {"region": "mars"}), ("worker_role_path", {"worker_role_path": "/"}),
                                      ("log_group_names", {"log_group_names": "/aws/eks/x/cluster"})])
def test_bad_policy_inputs_are_one_line_errors(field, kw):
    with pytest.raises(ConfigError) as e:
        _policy(**kw)
    assert str(e.value).startswith(f"{field}: ") and "\n" not in str(e.value)


def _run(args: DataKeyArgs | None = None):
    return run_under_mocks(lambda: DataKey("data", args))


def test_the_key_is_symmetric_rotated_and_slow_to_delete():
    res = _run(DataKeyArgs(alias="alias/gpuburst-dev-data", worker_role_path="/gpuburst-dev/workers/",
                           log_group_names=[LOG_GROUP]))
    (key,) = res.monitor.by_type("aws:kms/key:Key")
    p = key.properties
    assert (p["enableKeyRotation"], p["keyUsage"], p["customerMasterKeySpec"], p["deletionWindowInDays"]) == (
        True, "ENCRYPT_DECRYPT", "SYMMETRIC_DEFAULT", 30)
    # Account and region from the provider (the mocks' caller identity and region).
    assert json.loads(p["policy"]) == _policy()
    (alias,) = res.monitor.by_type("aws:kms/alias:Alias")
    assert alias.properties["name"] == "alias/gpuburst-dev-data" and key.urn in alias.dependencies


def test_no_alias_unless_asked_and_children_parented():
    res = _run()
    assert not res.monitor.by_type("aws:kms/alias:Alias")
    (comp,) = res.monitor.by_type("gpuburst:index:DataKey")
    assert all(r.parent == comp.urn for r in res.registrations if r is not comp)


@pytest.mark.parametrize("field,value", [("alias", "alias/aws/s3"), ("deletion_window_days", 3),
                                         ("worker_role_path", "workers"), ("region", "east")])
def test_bad_args_are_refused_before_anything_is_registered(field, value):
    with pytest.raises(ConfigError, match=f"^DataKey 'data': {field}: "):
        _run(DataKeyArgs(**{field: value}))


# --------------------------------------------------------------------------------------------------------------------
# The dev plan: one key, and everything holding clinical data at rest names it.
# --------------------------------------------------------------------------------------------------------------------

def _plan_key(plan: dict) -> dict:
    (key,) = [r for r in plan["resources"] if r["type"] == "aws:kms/key:Key" and "data-key" in r["name"]]
    return key


def test_dev_plan_has_one_rotated_data_key_with_its_policy(dev):
    key = _plan_key(dev["plan"])
    assert key["properties"]["enableKeyRotation"] is True
    sids = set(_by_sid(json.loads(key["properties"]["policy"])))
    assert sids == {"AccountAdministersKeyThroughIam", "WorkerRolesUseKeyOnlyThroughS3AndSqs",
                    "CloudWatchLogsEncryptsNamedLogGroups",
                    # Pulumi.dev.yaml's deploy model names an uploader and a reader (spec/bucket_access.py).
                    "SlideUploadersEncryptThroughS3", "ResultReadersDecryptThroughS3"}


def test_dev_plan_encrypts_buckets_queues_log_group_and_secrets_with_the_data_key(dev):
    plan = dev["plan"]
    key = _plan_key(dev["plan"])
    arn = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"
    by_type: dict[str, list[dict]] = {}
    for r in plan["resources"]:
        by_type.setdefault(r["type"], []).append(r)

    def uses_key(r: dict, value) -> None:
        assert value == arn and key["urn"] in r["dependencies"], r["name"]

    encs = by_type["aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"]
    data = [e for e in encs if "access-logs" not in e["name"] and "audit" not in e["name"]]
    assert len(data) == 2
    for e in data:
        (rule,) = e["properties"]["rules"]
        assert rule["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
        assert rule["bucketKeyEnabled"] is True
        uses_key(e, rule["applyServerSideEncryptionByDefault"]["kmsMasterKeyId"])
    work = [q for q in by_type["aws:sqs/queue:Queue"] if "karpenter" not in q["name"]]
    assert len(work) == 4   # two work queues, two DLQs
    for q in work:
        uses_key(q, q["properties"]["kmsMasterKeyId"])
        assert "sqsManagedSseEnabled" not in q["properties"]
    # The audit trail's log group is the audit key's (components/audit.py); the control plane's is the data key's.
    (logs,) = [g for g in by_type["aws:cloudwatch/logGroup:LogGroup"] if g["properties"]["name"] == LOG_GROUP]
    assert logs["properties"]["name"] == LOG_GROUP and logs["properties"]["retentionInDays"] == 90
    uses_key(logs, logs["properties"]["kmsKeyId"])
    (eks,) = by_type["eks:index:Cluster"]
    uses_key(eks, eks["properties"]["encryptionConfigKeyArn"])
    assert logs["urn"] in eks["dependencies"]   # declared before the cluster, so EKS writes into it


def test_dev_plan_worker_roles_sit_under_the_keys_worker_path(dev):
    key = _plan_key(dev["plan"])
    st = _by_sid(json.loads(key["properties"]["policy"]))["WorkerRolesUseKeyOnlyThroughS3AndSqs"]
    prefix = st["Condition"]["ArnLike"]["aws:PrincipalArn"].removesuffix("*")
    workers = [r for r in dev["plan"]["resources"] if r["type"] == "aws:iam/role:Role" and "-worker-" in r["name"]]
    assert len(workers) == 2
    for r in workers:
        assert f"arn:aws:iam::{FAKE_ACCOUNT}:role{r['properties']['path']}".startswith(prefix)


def test_dev_plan_worker_policies_use_the_key_only_through_s3_and_sqs(dev):
    arn = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"
    policies = [r for r in dev["plan"]["resources"] if r["type"] == "aws:iam/rolePolicy:RolePolicy"
                and r["name"].endswith("-worker-policy")]
    assert len(policies) == 2
    for r in policies:
        kms = [st for st in json.loads(r["properties"]["policy"])["Statement"]
               if any(a.startswith("kms:") for a in st["Action"])]
        assert kms and all(st["Resource"] == arn for st in kms), r["name"]
        via: dict[str, set[str]] = {}
        for st in kms:
            via.setdefault(st["Condition"]["StringLike"]["kms:ViaService"], set()).update(st["Action"])
        # Receiving needs Decrypt; setting a bad message aside in the DLQ (same key) needs GenerateDataKey.
        assert via == {"sqs.*.amazonaws.com": {"kms:Decrypt", "kms:GenerateDataKey"},
                       "s3.*.amazonaws.com": {"kms:Decrypt", "kms:GenerateDataKey"}}, r["name"]

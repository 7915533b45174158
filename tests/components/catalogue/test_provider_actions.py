"""The provider-actions catalogue (catalogue/provider_actions.py, provider_actions_s3.py): well-formed rows, every
governed type of the dev and prod plans covered, and facts read in the Terraform AWS provider's CRUD functions."""
from __future__ import annotations

import json
import re
from importlib import metadata

import pytest
from synth_run import run_synth

from components import catalogue as c

LISTED_TYPES = {
    "aws:s3/bucket:Bucket", "aws:s3/bucketPolicy:BucketPolicy",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "aws:s3/bucketOwnershipControls:BucketOwnershipControls",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketVersioning:BucketVersioning", "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    "aws:s3/bucketLogging:BucketLogging", "aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration",
    "aws:kms/key:Key", "aws:kms/alias:Alias", "aws:sqs/queue:Queue", "aws:sqs/queuePolicy:QueuePolicy",
    "aws:sqs/redriveAllowPolicy:RedriveAllowPolicy", "aws:sns/topic:Topic", "aws:sns/topicPolicy:TopicPolicy",
    "aws:sns/topicSubscription:TopicSubscription", "aws:ecr/repository:Repository",
    "aws:ecr/repositoryPolicy:RepositoryPolicy", "aws:ecr/lifecyclePolicy:LifecyclePolicy",
    "aws:ec2/vpcEndpoint:VpcEndpoint", "aws:cloudtrail/trail:Trail",
}
"""The types issue 27's rehearse checks (the resources with a resource policy or governed by one)."""

ACTION = re.compile(r"^[a-z0-9-]+:[A-Z][A-Za-z0-9]+$")
OPERATION = re.compile(r"^[A-Z][A-Za-z0-9]+$")
BUCKET = "aws:s3/bucket:Bucket"
KEY = "aws:kms/key:Key"


def _rows():
    for entry in c.PROVIDER_ACTIONS.values():
        for phase in c.PROVIDER_PHASES:
            for row in entry.phase(phase):
                yield entry, phase, row


def _names(rows, *, unconditional=False):
    return {r.action for r in rows if not (unconditional and r.when)}


# -- shape ----------------------------------------------------------------------------------------------------------

def test_the_catalogue_holds_exactly_the_listed_types():
    assert set(c.PROVIDER_ACTIONS) == LISTED_TYPES
    assert not set(c.UNGOVERNED_TYPES) & LISTED_TYPES
    assert all(reason.strip() for reason in c.UNGOVERNED_TYPES.values())


def test_every_row_is_well_formed():
    rows = list(_rows())
    assert len(rows) > 100
    for entry, phase, row in rows:
        where = f"{entry.type_token} {phase} {row}"
        assert ACTION.match(row.action), where
        assert OPERATION.match(row.api), where
        assert row.resource in c.RESOURCE_TEMPLATES, where
        # a row's service prefix is the service of the type token, the entries never borrow another service's call
        assert row.action.split(":")[0] == entry.type_token.split(":")[1].split("/")[0], where


def test_every_entry_names_its_source():
    for entry in c.PROVIDER_ACTIONS.values():
        assert entry.source_file.startswith("internal/service/") and entry.source_file.endswith(".go")
        assert entry.terraform_type.startswith("aws_")
        assert entry.functions[0] and entry.functions[1] and entry.functions[3], entry.type_token
        assert bool(entry.functions[2]) == bool(entry.update), entry.type_token
        assert set(entry.reads_after) <= {"create", "update"}, entry.type_token
        assert entry.read and entry.create and entry.delete, entry.type_token
        assert entry.read_at and entry.arn_of, entry.type_token


def test_the_pinned_provider_is_the_installed_one():
    assert metadata.version("pulumi_aws") == c.PULUMI_AWS_VERSION
    assert c.PROVIDER_UPSTREAM == "hashicorp/terraform-provider-aws"


# -- coverage of the plans ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prod_plan(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth-prod")
    proc = run_synth(out, "--stack", "prod")
    assert proc.returncode == 0, f"the prod synth failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return json.loads((out / "plan.json").read_text(encoding="utf-8"))


def _governed_types(plan: dict) -> set[str]:
    """The AWS types of a plan that are listed, or carry a property whose name says policy."""
    found = set()
    for res in plan["resources"]:
        if not res["type"].startswith("aws:"):
            continue
        if res["type"] in LISTED_TYPES or any("policy" in k.lower() for k in res.get("properties") or {}):
            found.add(res["type"])
    return found


@pytest.mark.slow
@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_governed_type_of_the_plans_has_an_entry(stack, request):
    plan = request.getfixturevalue("dev")["plan"] if stack == "dev" else request.getfixturevalue("prod_plan")
    governed = _governed_types(plan)
    assert {"aws:s3/bucket:Bucket", "aws:kms/key:Key", "aws:sqs/queuePolicy:QueuePolicy"} <= governed
    missing = governed - set(c.PROVIDER_ACTIONS) - set(c.UNGOVERNED_TYPES)
    assert not missing, f"{stack}: types with a policy and no provider-actions entry: {sorted(missing)}"


# -- facts read in the provider -------------------------------------------------------------------------------------

def test_bucket_read_reads_the_policy_and_heads_the_bucket():
    read = c.actions_for(BUCKET, "read")
    assert {"s3:GetBucketPolicy", "s3:ListBucket", "s3:GetEncryptionConfiguration", "s3:GetLifecycleConfiguration",
            "s3:GetBucketObjectLockConfiguration", "s3:GetBucketCORS", "s3:GetAccelerateConfiguration",
            "s3:GetReplicationConfiguration", "s3:GetBucketTagging"} <= _names(read)
    head = next(r for r in read if r.api == "HeadBucket")
    assert head.action == "s3:ListBucket" and head.resource == c.OWN_ARN


def test_bucket_delete_is_delete_bucket_on_the_bucket():
    delete = c.actions_for(BUCKET, "delete")
    assert delete[0] == c.ProviderAction("s3:DeleteBucket", "DeleteBucket", c.OWN_ARN)
    assert _names(delete, unconditional=True) == {"s3:DeleteBucket", "s3:ListBucket"}
    emptying = [r for r in delete if r.action == "s3:DeleteObjectVersion"]
    assert emptying and emptying[0].resource == c.OBJECTS_OF and "force_destroy" in emptying[0].when


def test_bucket_create_ends_with_the_read():
    create = c.actions_for(BUCKET, "create")
    assert create[0].when and "us-east-1" in create[0].when
    assert "s3:CreateBucket" in _names(create, unconditional=True)
    assert "s3:GetBucketPolicy" in _names(create)
    assert "s3:GetBucketPolicy" not in _names(c.provider_entry(BUCKET).create)


def test_s3_deletes_that_need_put_actions():
    assert _names(c.actions_for("aws:s3/bucketPolicy:BucketPolicy", "delete"), unconditional=True) == {
        "s3:DeleteBucketPolicy", "s3:GetBucketPolicy"}
    expected = {
        "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": ("DeletePublicAccessBlock",
                                                                   "s3:PutBucketPublicAccessBlock"),
        "aws:s3/bucketOwnershipControls:BucketOwnershipControls": ("DeleteBucketOwnershipControls",
                                                                   "s3:PutBucketOwnershipControls"),
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": (
            "DeleteBucketEncryption", "s3:PutEncryptionConfiguration"),
        "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": ("DeleteBucketLifecycle",
                                                                             "s3:PutLifecycleConfiguration"),
        "aws:s3/bucketLogging:BucketLogging": ("PutBucketLogging", "s3:PutBucketLogging"),
        "aws:s3/bucketVersioning:BucketVersioning": ("PutBucketVersioning", "s3:PutBucketVersioning"),
    }
    for token, (api, action) in expected.items():
        first = c.actions_for(token, "delete")[0]
        assert (first.api, first.action, first.resource) == (api, action, c.OWN_ARN), token


def test_public_access_block_update_does_not_read_back():
    update = c.actions_for("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "update")
    assert _names(update) == {"s3:PutBucketPublicAccessBlock"}
    create = c.actions_for("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "create")
    assert "s3:GetBucketPublicAccessBlock" in _names(create)


def test_kms_key_facts():
    assert _names(c.actions_for(KEY, "delete"), unconditional=True) == {"kms:ScheduleKeyDeletion", "kms:DescribeKey"}
    create = c.actions_for(KEY, "create")
    assert create[0] == c.ProviderAction("kms:CreateKey", "CreateKey", c.ANY_RESOURCE)
    assert {"kms:DescribeKey", "kms:GetKeyPolicy", "kms:ListResourceTags"} <= _names(create, unconditional=True)
    assert "kms:PutKeyPolicy" in _names(c.actions_for(KEY, "update"))


def test_alias_actions_are_authorised_on_alias_and_key():
    create = c.actions_for("aws:kms/alias:Alias", "create")
    assert {r.resource for r in create if r.action == "kms:CreateAlias"} == {c.OWN_ARN, c.TARGET_KEY_ARN}
    assert c.actions_for("aws:kms/alias:Alias", "read")[0].resource == c.ANY_RESOURCE


def test_queue_policy_is_a_queue_attribute():
    for token in ("aws:sqs/queuePolicy:QueuePolicy", "aws:sqs/redriveAllowPolicy:RedriveAllowPolicy"):
        for phase in ("create", "update", "delete"):
            assert "sqs:SetQueueAttributes" in _names(c.actions_for(token, phase)), (token, phase)
    assert "sqs:ListQueueTags" in _names(c.actions_for("aws:sqs/queue:Queue", "read"))


def test_topic_subscription_subscribes_on_the_topic():
    create = c.actions_for("aws:sns/topicSubscription:TopicSubscription", "create")
    assert create[0] == c.ProviderAction("sns:Subscribe", "Subscribe", c.OWN_ARN)
    delete = c.actions_for("aws:sns/topicSubscription:TopicSubscription", "delete")
    assert delete[0].action == "sns:Unsubscribe" and delete[0].resource == c.ANY_RESOURCE


def test_ecr_lifecycle_policy_has_no_update():
    assert c.actions_for("aws:ecr/lifecyclePolicy:LifecyclePolicy", "update") == ()
    assert c.provider_entry("aws:ecr/lifecyclePolicy:LifecyclePolicy").functions[2] == ""


# -- helpers --------------------------------------------------------------------------------------------------------

def test_actions_for_lists_each_action_once_per_resource_and_condition():
    read = c.actions_for(BUCKET, "read")
    assert len(read) == len({(r.action, r.resource, r.when) for r in read})
    assert len(c.provider_entry(BUCKET).read) > len(read)  # the raw read heads the bucket twice


def test_resource_arn_fills_the_templates():
    bucket = "arn:aws:s3:::gpuburst-prod-slides"
    delete = c.actions_for(BUCKET, "delete")
    assert c.resource_arn(delete[0], bucket) == bucket
    objects = next(r for r in delete if r.resource == c.OBJECTS_OF)
    assert c.resource_arn(objects, bucket) == bucket + "/*"
    assert c.resource_arn(c.actions_for(KEY, "create")[0], "arn:aws:kms:eu-west-1:123456789012:key/k") == "*"
    alias = next(r for r in c.actions_for("aws:kms/alias:Alias", "create") if r.resource == c.TARGET_KEY_ARN)
    key_arn = "arn:aws:kms:eu-west-1:123456789012:key/00000000-0000-0000-0000-000000000000"
    assert c.resource_arn(alias, "arn:aws:kms:eu-west-1:123456789012:alias/x", target_key_arn=key_arn) == key_arn


def test_helpers_refuse_what_they_do_not_know():
    alias = next(r for r in c.actions_for("aws:kms/alias:Alias", "create") if r.resource == c.TARGET_KEY_ARN)
    with pytest.raises(ValueError, match="target_key_arn"):
        c.resource_arn(alias, "arn:aws:kms:eu-west-1:123456789012:alias/x")
    with pytest.raises(ValueError, match="type_token"):
        c.actions_for("aws:s3/bucketV2:BucketV2", "read")
    with pytest.raises(ValueError, match="phase"):
        c.actions_for(BUCKET, "refresh")

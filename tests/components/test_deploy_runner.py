"""DeployRunner under mocks: the private source bucket, the builds' security group, the log group and the CodeBuild
project, and the one-line refusals of bad arguments."""
from __future__ import annotations

import json
from dataclasses import replace

import pulumi
import pytest
import yaml

from components.catalogue import DEPLOY_RUNNER_IMAGE
from components.deploy_runner import DeployRunner, DeployRunnerArgs
from components.spec.deploy_model import DeployRunner as RunnerModel
from components.spec.deploy_runner import buildspec_yaml
from components.spec.validation import ConfigError
from components.synth.mocks import FAKE_ACCOUNT, run_under_mocks

KEY = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"
ROLE = "arn:aws:iam::123456789012:role/gpuburst-prod-deploy"
PASSPHRASE = "arn:aws:secretsmanager:us-east-1:123456789012:secret:gpuburst-prod-passphrase-AbCdEf"
RUNNER = RunnerModel(ROLE, "s3://example-pulumi-state", secrets_provider_secret_arn=PASSPHRASE)
BUCKET = f"gpuburst-prod-deploy-{FAKE_ACCOUNT}-us-east-1"
ARGS = DeployRunnerArgs(name_prefix="gpuburst-prod", vpc_id="vpc-0123456789abcdef0",
                        subnet_ids=["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"], vpc_cidr="10.80.0.0/16",
                        runner=RUNNER, stack="prod", kms_key_arn=KEY, tags={"team": "pathology"})


def _run(args: DeployRunnerArgs = ARGS):
    def program():
        r = DeployRunner("runner", args)
        for k in ("project_name", "source_bucket_name", "security_group_id", "log_group_name"):
            pulumi.export(k, getattr(r, k))
    return run_under_mocks(program)


def _one(res, type_: str) -> dict:
    (r,) = res.monitor.by_type(type_)
    return r.properties


def test_source_bucket_is_private_encrypted_versioned_tls_only_and_expiring():
    res = _run()
    assert _one(res, "aws:s3/bucket:Bucket")["bucket"] == BUCKET
    assert _one(res, "aws:s3/bucket:Bucket")["forceDestroy"] is False
    pab = _one(res, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert pab["blockPublicAcls"] and pab["blockPublicPolicy"] and pab["ignorePublicAcls"]
    assert pab["restrictPublicBuckets"]
    assert _one(res, "aws:s3/bucketOwnershipControls:BucketOwnershipControls")["rule"] == {
        "objectOwnership": "BucketOwnerEnforced"}
    (rule,) = _one(res, "aws:s3/bucketServerSideEncryptionConfiguration:"
                        "BucketServerSideEncryptionConfiguration")["rules"]
    assert rule == {"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": KEY},
                    "bucketKeyEnabled": True}
    assert _one(res, "aws:s3/bucketVersioning:BucketVersioning")["versioningConfiguration"] == {"status": "Enabled"}
    (life,) = _one(res, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")["rules"]
    assert life["expiration"] == {"days": 30} and life["noncurrentVersionExpiration"] == {"noncurrentDays": 30}
    policy = json.loads(_one(res, "aws:s3/bucketPolicy:BucketPolicy")["policy"])
    insecure = policy["Statement"][0]
    assert insecure["Effect"] == "Deny" and insecure["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert insecure["Resource"] == [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"]


def test_bucket_policy_comes_after_the_other_controls():
    res = _run()
    urns = {r.name: r.urn for r in res.registrations}
    (pol,) = res.monitor.by_type("aws:s3/bucketPolicy:BucketPolicy")
    for control in ("public-access-block", "ownership", "encryption", "versioning", "lifecycle"):
        assert urns[f"runner-source-{control}"] in pol.dependencies, control


def test_security_group_lets_nothing_in_and_only_https_and_vpc_dns_out():
    sg = _one(_run(), "aws:ec2/securityGroup:SecurityGroup")
    assert sg["vpcId"] == ARGS.vpc_id
    assert not sg.get("ingress")
    out = {(e["protocol"], int(e["fromPort"]), int(e["toPort"]), tuple(e["cidrBlocks"])) for e in sg["egress"]}
    assert out == {("tcp", 443, 443, ("0.0.0.0/0",)), ("udp", 53, 53, ("10.80.0.0/16",)),
                   ("tcp", 53, 53, ("10.80.0.0/16",))}


def test_log_group_is_encrypted_and_kept():
    lg = _one(_run(), "aws:cloudwatch/logGroup:LogGroup")
    assert lg["name"] == "/aws/codebuild/gpuburst-prod-deploy"
    assert lg["kmsKeyId"] == KEY and int(lg["retentionInDays"]) == 365


def test_project_runs_in_the_system_subnets_as_the_deployer_from_the_stacks_bundle():
    res = _run()
    p = _one(res, "aws:codebuild/project:Project")
    assert p["name"] == "gpuburst-prod-deploy"
    assert p["serviceRole"] == ROLE
    assert p["source"]["type"] == "S3" and p["source"]["location"] == f"{BUCKET}/prod/source.zip"
    assert p["source"]["buildspec"] == buildspec_yaml(RUNNER)
    assert yaml.safe_load(p["source"]["buildspec"])["env"]["secrets-manager"] == {
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE}
    assert p["artifacts"] == {"type": "NO_ARTIFACTS"}
    assert int(p["concurrentBuildLimit"]) == 1 and int(p["buildTimeout"]) == 120
    assert p["encryptionKey"] == KEY
    env = p["environment"]
    assert env["image"] == DEPLOY_RUNNER_IMAGE and env["type"] == "LINUX_CONTAINER"
    assert env["privilegedMode"] is True and env["computeType"] == "BUILD_GENERAL1_MEDIUM"
    assert {v["name"]: (v["value"], v["type"]) for v in env["environmentVariables"]} == {
        "GPUBURST_STACK": ("prod", "PLAINTEXT"), "PULUMI_BACKEND_URL": ("s3://example-pulumi-state", "PLAINTEXT"),
        "GPUBURST_PULUMI_COMMAND": ("up", "PLAINTEXT")}
    assert p["vpcConfig"]["vpcId"] == ARGS.vpc_id
    assert p["vpcConfig"]["subnets"] == ARGS.subnet_ids
    assert p["vpcConfig"]["securityGroupIds"] == [res.outputs["security_group_id"]]
    assert p["logsConfig"]["cloudwatchLogs"] == {
        "status": "ENABLED", "groupName": "/aws/codebuild/gpuburst-prod-deploy", "streamName": "prod"}
    assert p["tags"] == {"team": "pathology"}


def test_no_secret_value_reaches_the_project():
    p = _one(_run(), "aws:codebuild/project:Project")
    for v in p["environment"]["environmentVariables"]:
        assert v["type"] == "PLAINTEXT" and "PASSPHRASE" not in v["name"] and "TOKEN" not in v["name"]


def test_outputs_and_parentage():
    res = _run()
    assert res.outputs["project_name"] == "gpuburst-prod-deploy"
    assert res.outputs["source_bucket_name"] == BUCKET
    assert res.outputs["log_group_name"] == "/aws/codebuild/gpuburst-prod-deploy"
    assert res.outputs["security_group_id"]
    (comp,) = res.monitor.by_type("gpuburst:index:DeployRunner")
    assert all(r.parent == comp.urn for r in res.registrations if r is not comp)


def test_a_named_bucket_and_given_account_and_region():
    res = _run(replace(ARGS, source_bucket_name="my-runner-bundles", stack="acme/gpuburst/prod"))
    assert _one(res, "aws:s3/bucket:Bucket")["bucket"] == "my-runner-bundles"
    assert _one(res, "aws:codebuild/project:Project")["source"]["location"] == (
        "my-runner-bundles/acme/gpuburst/prod/source.zip")
    res = _run(replace(ARGS, account_id="210987654321", region="eu-west-1"))
    assert _one(res, "aws:s3/bucket:Bucket")["bucket"] == "gpuburst-prod-deploy-210987654321-eu-west-1"


BAD = [
    ("name_prefix", "GPUBURST"),
    ("stack", "prod stack"),
    ("subnet_ids", []),
    ("vpc_cidr", "0.0.0.0/0"),
    ("runner", "arn:aws:iam::123456789012:role/gpuburst-prod-deploy"),
    ("compute_type", "BUILD_GENERAL1_2XLARGE"),
    ("build_timeout_min", 3),
    ("queued_timeout_min", 481),
    ("log_retention_days", 42),
    ("bundle_expiration_days", 0),
    ("project_dir", "../other"),
    ("policy_pack", "/abs/pack"),
]


@pytest.mark.parametrize("field,value", BAD)
def test_bad_arguments_are_refused_in_one_line_naming_the_component(field, value):
    with pytest.raises(ConfigError) as e:
        _run(replace(ARGS, **{field: value}))
    text = str(e.value)
    assert "\n" not in text
    assert text.startswith("DeployRunner 'runner': ")
    assert repr(value) in text

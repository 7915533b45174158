"""SlideStorage: bucket controls under mocks, the pure rule builders, and the validation table."""
from __future__ import annotations

import json
from dataclasses import replace

import boto3
import pulumi
import pytest

from components import storage as st
from components.spec.names import ACCESS_LOGS, CLINICAL_SLIDES, DATA_CLASS_TAG
from components.spec.validation import ConfigError
from components.storage import SlideStorage, SlideStorageArgs
from components.synth.mocks import FAKE_ACCOUNT, run_under_mocks

KEY = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"


def _run(args: SlideStorageArgs | None = None):
    def program():
        s = SlideStorage("data", args)
        for k in ("slides_bucket_name", "slides_bucket_arn", "results_bucket_name", "results_bucket_arn",
                  "slides_prefix", "results_prefix"):
            pulumi.export(k, getattr(s, k))
    return run_under_mocks(program)


def _by_bucket(res, type_: str, logs: bool = False) -> dict[str, dict]:
    """Bucket name -> properties of `type_`'s resources (the access-log bucket's only with `logs`)."""
    return {r.properties["bucket"]: r.properties for r in res.monitor.by_type(type_)
            if logs or "access-logs" not in r.name}


def test_two_private_buckets_with_every_control():
    res = _run(SlideStorageArgs(slides_bucket_name="gpuburst-dev-slides", results_bucket_name="gpuburst-dev-results",
                                access_log_bucket_name="gpuburst-dev-access-logs"))
    buckets = _by_bucket(res, "aws:s3/bucket:Bucket", logs=True)
    assert set(buckets) == {"gpuburst-dev-slides", "gpuburst-dev-results", "gpuburst-dev-access-logs"}
    assert all(b["forceDestroy"] is False for b in buckets.values())
    names = set(buckets)

    pab = _by_bucket(res, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", logs=True)
    assert set(pab) == names
    for p in pab.values():
        assert p["blockPublicAcls"] and p["blockPublicPolicy"] and p["ignorePublicAcls"] and p["restrictPublicBuckets"]

    own = _by_bucket(res, "aws:s3/bucketOwnershipControls:BucketOwnershipControls", logs=True)
    assert {n: o["rule"]["objectOwnership"] for n, o in own.items()} == {n: "BucketOwnerEnforced" for n in names}

    enc = _by_bucket(res, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
                     logs=True)
    assert set(enc) == names
    for name, e in enc.items():
        (rule,) = e["rules"]
        if name == "gpuburst-dev-access-logs":   # server access logs are delivered only into SSE-S3 buckets
            assert rule["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "AES256"}
            continue
        assert rule["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "aws:kms"}
        assert rule["bucketKeyEnabled"] is True

    ver = _by_bucket(res, "aws:s3/bucketVersioning:BucketVersioning", logs=True)
    assert {n: v["versioningConfiguration"]["status"] for n, v in ver.items()} == {n: "Enabled" for n in names}

    pol = _by_bucket(res, "aws:s3/bucketPolicy:BucketPolicy", logs=True)
    assert set(pol) == names
    for name, p in pol.items():
        insecure = json.loads(p["policy"])["Statement"][0]
        assert insecure["Effect"] == "Deny" and insecure["Action"] == "s3:*"
        assert insecure["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        assert insecure["Resource"] == [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"]


def test_bucket_policy_comes_after_every_other_control():
    """S3 refuses concurrent bucket changes, and an endpoint-only policy must not lock the deployment out of the
    bucket's other settings half-way: each policy waits for the bucket's other controls (and its access logging)."""
    res = _run()
    urns = {r.name: r.urn for r in res.registrations}
    for pol in res.monitor.by_type("aws:s3/bucketPolicy:BucketPolicy"):
        bucket = pol.name.removesuffix("-tls-only")
        for control in ("public-access-block", "ownership", "encryption", "versioning", "lifecycle"):
            assert urns[f"{bucket}-{control}"] in pol.dependencies, (bucket, control)
        if "access-logs" not in bucket:
            assert urns[f"{bucket}-access-logging"] in pol.dependencies


def test_customer_key_and_unversioned_slides_and_noncurrent_expiry():
    res = _run(SlideStorageArgs(slides_bucket_name="s-in", results_bucket_name="s-out", kms_key_arn=KEY,
                                slides_versioning=False, noncurrent_version_expiration_days=30))
    enc = _by_bucket(res, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    for e in enc.values():
        assert e["rules"][0]["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "aws:kms",
                                                                       "kmsMasterKeyId": KEY}
    ver = _by_bucket(res, "aws:s3/bucketVersioning:BucketVersioning")
    assert ver["s-in"]["versioningConfiguration"]["status"] == "Suspended"
    assert ver["s-out"]["versioningConfiguration"]["status"] == "Enabled"   # results are always versioned
    life = _by_bucket(res, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    for lc in life.values():
        ids = {r["id"]: r for r in lc["rules"]}
        assert ids["abort-incomplete-multipart-uploads"]["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": 7}
        assert ids["expire-noncurrent-versions"]["noncurrentVersionExpiration"] == {"noncurrentDays": 30}


def test_default_keeps_every_version():
    assert [r["id"] for r in st.lifecycle_rules(None)] == ["abort-incomplete-multipart-uploads"]


def test_outputs_and_parentage():
    res = _run(SlideStorageArgs(slides_bucket_name="gb-slides", results_bucket_name="gb-results",
                                results_prefix="overlays/", access_logs=False))
    assert res.outputs == {
        "slides_bucket_name": "gb-slides", "slides_bucket_arn": "arn:aws:s3:::gb-slides",
        "results_bucket_name": "gb-results", "results_bucket_arn": "arn:aws:s3:::gb-results",
        "slides_prefix": "slides/", "results_prefix": "overlays/"}
    (comp,) = res.monitor.by_type("gpuburst:index:SlideStorage")
    assert all(r.parent == comp.urn for r in res.registrations if r is not comp)


BAD = [
    ("slides_bucket_name", "Slides_Bucket"),
    ("slides_bucket_name", "ab"),
    ("results_bucket_name", "192.168.0.1"),
    ("results_bucket_name", "a..b"),
    ("results_bucket_name", "xn--bucket"),
    ("slides_prefix", "slides"),
    ("slides_prefix", "/slides/"),
    ("results_prefix", "results/*/"),
    ("results_prefix", ""),
    ("results_prefix", "a//"),
    ("kms_key_arn", "alias/aws/s3"),
    ("slides_versioning", "yes"),
    ("noncurrent_version_expiration_days", 0),
    ("tags", {"a": 1}),
    ("tags", {"gpuburst.io/data-class": "public"}),
    ("vpc_endpoint_ids", []),
    ("vpc_endpoint_ids", ["vpc-0a1b2c3d"]),
    ("break_glass_role_arns", ["arn:aws:iam::123456789012:user/admin"]),
    ("access_logs", "yes"),
    ("access_log_bucket_name", "Logs"),
]


@pytest.mark.parametrize("field,value", BAD, ids=[f"{f}={v!r}" for f, v in BAD])
def test_each_bad_field_is_a_one_line_error_naming_field_and_value(field, value):
    with pytest.raises(ConfigError) as e:
        st.validate_args(replace(SlideStorageArgs(), **{field: value}))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{field}: {value!r} is not valid: ")


def test_same_name_for_both_buckets_is_refused():
    with pytest.raises(ConfigError, match=r"^SlideStorage '[^']+': results_bucket_name: 'same' "):
        run_under_mocks(lambda: SlideStorage("d", SlideStorageArgs(slides_bucket_name="same",
                                                                  results_bucket_name="same")))


def test_prefixes_work_on_a_real_s3_server(aws):
    """The default prefixes are real S3 key prefixes: objects written under them are listed by them."""
    s3 = boto3.client("s3", endpoint_url=aws, region_name="us-east-1")
    s3.create_bucket(Bucket="gb-results")
    args = SlideStorageArgs()
    s3.put_object(Bucket="gb-results", Key=args.results_prefix + "s1.json", Body=b"{}")
    s3.put_object(Bucket="gb-results", Key="results-other/s2.json", Body=b"{}")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="gb-results", Prefix=args.results_prefix)["Contents"]]
    assert keys == ["results/s1.json"]


VPCE = "vpce-0a1b2c3d4e5f60001"
BREAK_GLASS = "arn:aws:iam::123456789012:role/gpuburst-break-glass"


def _statements(res, bucket: str) -> dict[str, dict]:
    (pol,) = [r for r in res.monitor.by_type("aws:s3/bucketPolicy:BucketPolicy") if r.properties["bucket"] == bucket]
    return {st["Sid"]: st for st in json.loads(pol.properties["policy"])["Statement"]}


def test_data_buckets_are_tagged_clinical_and_the_log_bucket_access_logs():
    res = _run(SlideStorageArgs(slides_bucket_name="s-in", results_bucket_name="s-out", access_log_bucket_name="s-log",
                                tags={"Project": "gpuburst"}))
    tags = {b: p["tags"] for b, p in _by_bucket(res, "aws:s3/bucket:Bucket", logs=True).items()}
    assert tags == {"s-in": {"Project": "gpuburst", DATA_CLASS_TAG: CLINICAL_SLIDES},
                    "s-out": {"Project": "gpuburst", DATA_CLASS_TAG: CLINICAL_SLIDES},
                    "s-log": {"Project": "gpuburst", DATA_CLASS_TAG: ACCESS_LOGS}}


def test_every_request_to_either_data_bucket_is_logged_into_the_log_bucket():
    res = _run(SlideStorageArgs(slides_bucket_name="s-in", results_bucket_name="s-out", access_log_bucket_name="s-log"))
    logging = _by_bucket(res, "aws:s3/bucketLogging:BucketLogging")
    assert {b: (p["targetBucket"], p["targetPrefix"]) for b, p in logging.items()} == {
        "s-in": ("s-log", "s3-access-logs/slides/"), "s-out": ("s-log", "s3-access-logs/results/")}
    sts = _statements(res, "s-log")
    assert set(sts) == {"DenyInsecureTransport", "DenyOutdatedTls", "S3ServerAccessLogsPolicy"}
    assert sts["S3ServerAccessLogsPolicy"] == {
        "Sid": "S3ServerAccessLogsPolicy", "Effect": "Allow", "Principal": {"Service": "logging.s3.amazonaws.com"},
        "Action": ["s3:PutObject"], "Resource": "arn:aws:s3:::s-log/s3-access-logs/*",
        "Condition": {"ArnLike": {"aws:SourceArn": ["arn:aws:s3:::s-in", "arn:aws:s3:::s-out"]},
                      "StringEquals": {"aws:SourceAccount": FAKE_ACCOUNT}}}
    # Log delivery may write before logging is switched on.
    urns = {r.name: r.urn for r in res.registrations}
    for r in res.monitor.by_type("aws:s3/bucketLogging:BucketLogging"):
        assert urns["data-access-logs-tls-only"] in r.dependencies
    pab = _by_bucket(res, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", logs=True)["s-log"]
    assert all(pab[k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"))
    own = _by_bucket(res, "aws:s3/bucketOwnershipControls:BucketOwnershipControls", logs=True)["s-log"]
    assert own["rule"]["objectOwnership"] == "BucketOwnerEnforced"   # ACLs off: the bucket policy grants delivery


def test_no_access_logs_when_turned_off():
    res = _run(SlideStorageArgs(access_logs=False))
    assert not res.monitor.by_type("aws:s3/bucketLogging:BucketLogging")
    assert len(res.monitor.by_type("aws:s3/bucket:Bucket")) == 2


def test_endpoint_restriction_denies_everything_from_elsewhere_except_break_glass():
    res = _run(SlideStorageArgs(slides_bucket_name="s-in", results_bucket_name="s-out", vpc_endpoint_ids=[VPCE],
                                break_glass_role_arns=[BREAK_GLASS]))
    for bucket in ("s-in", "s-out"):
        deny = _statements(res, bucket)["DenyOutsideVpce"]
        assert deny == {
            "Sid": "DenyOutsideVpce", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
            "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            "Condition": {"StringNotEquals": {"aws:SourceVpce": [VPCE]},
                          "ArnNotLike": {"aws:PrincipalArn": [BREAK_GLASS]}}}
    logs = [r for r in res.monitor.by_type("aws:s3/bucketPolicy:BucketPolicy") if "access-logs" in r.name]
    assert "DenyOutsideVpce" not in logs[0].properties["policy"]   # S3 log delivery comes from outside the VPC


def test_endpoint_restriction_without_break_glass_exempts_nobody():
    res = _run(SlideStorageArgs(slides_bucket_name="s-in", results_bucket_name="s-out", vpc_endpoint_ids=[VPCE]))
    assert _statements(res, "s-in")["DenyOutsideVpce"]["Condition"] == {"StringNotEquals": {"aws:SourceVpce": [VPCE]}}


def test_no_endpoint_restriction_by_default():
    res = _run(SlideStorageArgs(slides_bucket_name="s-in", results_bucket_name="s-out"))
    assert set(_statements(res, "s-in")) == {"DenyInsecureTransport", "DenyOutdatedTls"}


def test_endpoint_ids_and_key_may_be_outputs():
    def program():
        key = pulumi.Output.from_input(KEY)
        vpce = pulumi.Output.from_input(VPCE)
        SlideStorage("data", SlideStorageArgs(slides_bucket_name="s-in", results_bucket_name="s-out",
                                              kms_key_arn=key, vpc_endpoint_ids=[vpce]))
    res = run_under_mocks(program)
    assert _statements(res, "s-in")["DenyOutsideVpce"]["Condition"]["StringNotEquals"]["aws:SourceVpce"] == [VPCE]
    enc = _by_bucket(res, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    assert enc["s-in"]["rules"][0]["applyServerSideEncryptionByDefault"]["kmsMasterKeyId"] == KEY


def test_break_glass_needs_an_endpoint_restriction_and_a_distinct_log_bucket():
    with pytest.raises(ConfigError, match=r"^break_glass_role_arns: "):
        st.validate_args(SlideStorageArgs(break_glass_role_arns=[BREAK_GLASS]))
    with pytest.raises(ConfigError, match=r"^access_log_bucket_name: 'same' "):
        st.validate_args(SlideStorageArgs(slides_bucket_name="same", access_log_bucket_name="same"))


def _platform(**kw):
    from pathlib import Path

    import yaml

    from components.config import parse_config
    from components.platform import GpuBurstPlatform

    raw = yaml.safe_load((Path(__file__).resolve().parents[2] / "Pulumi.dev.yaml").read_text(encoding="utf-8"))
    return run_under_mocks(lambda: GpuBurstPlatform("p", parse_config(raw["config"], stack="dev"), **kw))


def test_the_platform_passes_its_s3_endpoints_and_the_deploy_models_roles_to_both_data_buckets():
    res = _platform(s3_vpc_endpoint_ids=[VPCE])
    pols = [r for r in res.monitor.by_type("aws:s3/bucketPolicy:BucketPolicy")
            if "access-logs" not in r.name and "audit" not in r.name]
    assert len(pols) == 2
    exempt = {}
    for r in pols:
        (deny,) = [st for st in json.loads(r.properties["policy"])["Statement"] if st["Sid"] == "DenyOutsideVpce"]
        assert deny["Condition"]["StringNotEquals"] == {"aws:SourceVpce": [VPCE]}
        exempt[r.name] = deny["Condition"]["ArnNotLike"]["aws:PrincipalArn"]
    # Pulumi.dev.yaml: the deployer (it deploys from CIDRs) and break glass on both; each bucket's own outside role.
    for name, arns in exempt.items():
        assert "arn:aws:iam::123456789012:role/gpuburst-dev-deploy" in arns and BREAK_GLASS in arns
        own = "gpuburst-dev-slide-upload" if "slides" in name else "gpuburst-dev-results-read"
        other = "gpuburst-dev-results-read" if "slides" in name else "gpuburst-dev-slide-upload"
        assert any(a.endswith(own) for a in arns) and not any(a.endswith(other) for a in arns)


def test_the_platform_refuses_break_glass_roles_beside_a_deploy_model():
    with pytest.raises(ConfigError, match="break_glass_role_arns.*None with StackConfig.deploy"):
        _platform(break_glass_role_arns=[BREAK_GLASS])


def _clinical_bucket_policies(plan: dict) -> list[dict]:
    buckets = {r["name"] for r in plan["resources"] if r["type"] == "aws:s3/bucket:Bucket"
               and (r["properties"].get("tags") or {}).get(DATA_CLASS_TAG) == CLINICAL_SLIDES}
    assert len(buckets) == 2
    return [r for r in plan["resources"]
            if r["type"] == "aws:s3/bucketPolicy:BucketPolicy" and r["name"].removesuffix("-tls-only") in buckets]


def test_dev_plan_buckets_are_clinical_tagged_tls_only_and_access_logged(dev):
    pols = _clinical_bucket_policies(dev["plan"])
    assert len(pols) == 2
    for r in pols:
        sids = {st["Sid"] for st in json.loads(r["properties"]["policy"])["Statement"]}
        assert {"DenyInsecureTransport", "DenyOutdatedTls"} <= sids
    logged = {r["properties"]["bucket"] for r in dev["plan"]["resources"]
              if r["type"] == "aws:s3/bucketLogging:BucketLogging"}
    assert len(logged) == 2 and logged == {r["properties"]["bucket"] for r in pols}


def test_dev_plan_buckets_deny_requests_from_outside_its_s3_endpoints(dev):
    """Once the platform wires the network's S3 endpoints (`s3_vpc_endpoint_ids`), the clinical buckets refuse the
    rest; until the dev stack has a VPC with one, there is nothing to wire."""
    endpoints = [r for r in dev["plan"]["resources"] if r["type"] == "aws:ec2/vpcEndpoint:VpcEndpoint"
                 and str(r["properties"].get("serviceName", "")).endswith(".s3")]
    if not endpoints:
        pytest.skip("the dev plan has no S3 VPC endpoint to restrict the buckets to")
    for r in _clinical_bucket_policies(dev["plan"]):
        denies = [st for st in json.loads(r["properties"]["policy"])["Statement"] if st["Sid"] == "DenyOutsideVpce"]
        assert len(denies) == 1, r["name"]
        assert denies[0]["Action"] == "s3:*" and "aws:SourceVpce" in denies[0]["Condition"]["StringNotEquals"]

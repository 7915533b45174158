"""SlideStorage: bucket controls under mocks, the pure rule builders, and the validation table."""
from __future__ import annotations

import json
from dataclasses import replace

import boto3
import pulumi
import pytest

from components import storage as st
from components.spec.validation import ConfigError
from components.storage import SlideStorage, SlideStorageArgs
from components.synth.mocks import run_under_mocks

KEY = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"


def _run(args: SlideStorageArgs | None = None):
    def program():
        s = SlideStorage("data", args)
        for k in ("slides_bucket_name", "slides_bucket_arn", "results_bucket_name", "results_bucket_arn",
                  "slides_prefix", "results_prefix"):
            pulumi.export(k, getattr(s, k))
    return run_under_mocks(program)


def _by_bucket(res, type_: str) -> dict[str, dict]:
    return {r.properties["bucket"]: r.properties for r in res.monitor.by_type(type_)}


def test_two_private_buckets_with_every_control():
    res = _run(SlideStorageArgs(slides_bucket_name="gpuburst-dev-slides", results_bucket_name="gpuburst-dev-results"))
    buckets = _by_bucket(res, "aws:s3/bucket:Bucket")
    assert set(buckets) == {"gpuburst-dev-slides", "gpuburst-dev-results"}
    assert all(b["forceDestroy"] is False for b in buckets.values())
    names = set(buckets)

    pab = _by_bucket(res, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert set(pab) == names
    for p in pab.values():
        assert p["blockPublicAcls"] and p["blockPublicPolicy"] and p["ignorePublicAcls"] and p["restrictPublicBuckets"]

    own = _by_bucket(res, "aws:s3/bucketOwnershipControls:BucketOwnershipControls")
    assert {n: o["rule"]["objectOwnership"] for n, o in own.items()} == {n: "BucketOwnerEnforced" for n in names}

    enc = _by_bucket(res, "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration")
    assert set(enc) == names
    for e in enc.values():
        (rule,) = e["rules"]
        assert rule["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "aws:kms"}
        assert rule["bucketKeyEnabled"] is True

    ver = _by_bucket(res, "aws:s3/bucketVersioning:BucketVersioning")
    assert {n: v["versioningConfiguration"]["status"] for n, v in ver.items()} == {n: "Enabled" for n in names}

    pol = _by_bucket(res, "aws:s3/bucketPolicy:BucketPolicy")
    assert set(pol) == names
    for name, p in pol.items():
        insecure = json.loads(p["policy"])["Statement"][0]
        assert insecure["Effect"] == "Deny" and insecure["Action"] == "s3:*"
        assert insecure["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        assert insecure["Resource"] == [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"]


def test_bucket_policy_waits_for_the_public_access_block():
    res = _run()
    urns = {r.name: r.urn for r in res.registrations}
    for pol in res.monitor.by_type("aws:s3/bucketPolicy:BucketPolicy"):
        bucket = pol.name.removesuffix("-tls-only")
        assert urns[f"{bucket}-public-access-block"] in pol.dependencies


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
                                results_prefix="overlays/"))
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

"""Tests for the KMS key reader: a key field names a key of the plan (by dependency or alias), an AWS-managed key,
none, another stack's, or an unknown no dependency traces."""
from __future__ import annotations

from policies import kms
from policies.plan import Res
from policies.unknowns import UNKNOWN


def res(rtype: str, name: str, props: dict | None = None, deps: tuple[str, ...] = ()) -> Res:
    return Res(rtype, f"urn:{rtype}::{name}", name, None, props or {}, deps)


KEY = res(kms.KMS_KEY, "data-key", {"enableKeyRotation": True})
ALIAS = res(kms.KMS_ALIAS, "alias", {"name": "alias/data"}, (KEY.urn,))


def ref(value, deps: tuple[str, ...] = ()) -> kms.KeyRef:
    user = res("aws:sqs/queue:Queue", "q", {}, deps)
    return kms.key_ref([KEY, ALIAS, user], user, value)


def test_what_a_key_field_names():
    arn = "arn:aws:kms:us-east-1:1:key/x"
    assert ref(arn, (KEY.urn,)) == kms.KeyRef(kms.PLAN, KEY, arn)
    assert ref(UNKNOWN, (ALIAS.urn,)).key is KEY  # through the alias it depends on
    assert ref("alias/data").key is KEY
    assert ref("arn:aws:kms:us-east-1:1:alias/data").kind == kms.PLAN
    assert ref("alias/aws/sqs").kind == ref("arn:aws:kms:us-east-1:1:alias/aws/s3").kind == kms.AWS_MANAGED
    assert ref(None).kind == ref("").kind == kms.ABSENT
    assert ref("arn:aws:kms:us-east-1:1:key/other").kind == kms.OUTSIDE
    assert ref(UNKNOWN).kind == kms.UNTRACED


def test_the_problem_of_a_key_that_is_not_a_customer_key():
    assert kms.key_problem(ref(None), "Queue q kmsMasterKeyId").startswith("Queue q kmsMasterKeyId is not set")
    assert "is an AWS-managed key" in kms.key_problem(ref("alias/aws/sqs"), "f")
    assert kms.key_problem(ref("alias/data"), "f") is None and kms.key_problem(ref("arn:x"), "f") is None

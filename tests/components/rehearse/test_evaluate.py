"""Hand-written expectations for the IAM evaluator: each condition operator family, absent keys under negation,
IfExists and the set prefixes, policy variables, NotPrincipal/NotAction/NotResource, KMS key policies, permissions
boundaries, endpoint policies, the Decision's statements and layers, and the refusals of malformed input."""
from __future__ import annotations

import pytest

from components.rehearse import Policy, Request, StatementRef, check_policy, request_context
from components.rehearse.conditions import conditions_hold, parse_conditions
from components.rehearse.evaluate import evaluate

ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/team/worker"
SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/worker/rehearse"
OTHER = f"arn:aws:iam::{ACCOUNT}:role/other"
USER = f"arn:aws:iam::{ACCOUNT}:user/alice"
BUCKET = "arn:aws:s3:::slides"
KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def doc(*statements: dict, version: str = "2012-10-17") -> dict:
    return {"Version": version, "Statement": list(statements)}


def holds(block: dict, context: dict) -> bool:
    return conditions_hold(parse_conditions(block), {k.lower(): v for k, v in context.items()})


def allow(principal=None, action="s3:GetObject", resource=f"{BUCKET}/*", **extra) -> dict:
    s = {"Effect": "Allow", "Action": action, "Resource": resource, **extra}
    if principal is not None:
        s["Principal"] = principal
    return s


def deny(principal=None, action="s3:GetObject", resource=f"{BUCKET}/*", **extra) -> dict:
    return {**allow(principal, action, resource, **extra), "Effect": "Deny"}


def get(principal=ROLE, context=None, action="s3:GetObject", resource=f"{BUCKET}/a") -> Request:
    return Request(principal, action, resource, context or {}, resource_account=ACCOUNT)


# --- condition operators -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("block, context, expected", [
    ({"StringEquals": {"k": "Abc"}}, {"k": "Abc"}, True),
    ({"StringEquals": {"k": "Abc"}}, {"k": "abc"}, False),
    ({"StringEqualsIgnoreCase": {"k": "Abc"}}, {"k": "aBC"}, True),
    ({"StringNotEquals": {"k": ["a", "b"]}}, {"k": "b"}, False),
    ({"StringNotEquals": {"k": ["a", "b"]}}, {"k": "c"}, True),
    ({"StringNotEqualsIgnoreCase": {"k": "A"}}, {"k": "a"}, False),
    ({"StringLike": {"k": "slides/*/x?.svs"}}, {"k": "slides/2026/07/x1.svs"}, True),
    ({"StringLike": {"k": "slides/*/x?.svs"}}, {"k": "slides/2026/x12.svs"}, False),
    ({"StringEquals": {"k": "a*"}}, {"k": "abc"}, False),
    ({"StringNotLike": {"k": ["tmp/*", "scratch/*"]}}, {"k": "tmp/a"}, False),
    ({"StringNotLike": {"k": ["tmp/*", "scratch/*"]}}, {"k": "out/a"}, True),
    ({"NumericLessThan": {"s3:TlsVersion": "1.2"}}, {"s3:TlsVersion": "1.1"}, True),
    ({"NumericLessThan": {"s3:TlsVersion": "1.2"}}, {"s3:TlsVersion": "1.2"}, False),
    ({"NumericLessThanEquals": {"n": 10}}, {"n": "10"}, True),
    ({"NumericGreaterThan": {"n": "10"}}, {"n": "10.5"}, True),
    ({"NumericGreaterThanEquals": {"n": "10"}}, {"n": "9"}, False),
    ({"NumericEquals": {"n": "3"}}, {"n": "3.0"}, True),
    ({"NumericNotEquals": {"n": ["3", "4"]}}, {"n": "4"}, False),
    ({"NumericEquals": {"n": "3"}}, {"n": "three"}, False),
    ({"DateLessThan": {"aws:CurrentTime": "2026-12-31T00:00:00Z"}}, {"aws:CurrentTime": "2026-12-01T10:00:00Z"}, True),
    ({"DateGreaterThan": {"aws:CurrentTime": "2026-12-31"}}, {"aws:CurrentTime": "2026-12-01T10:00:00Z"}, False),
    ({"DateEquals": {"aws:EpochTime": "1798761600"}}, {"aws:EpochTime": "2027-01-01T00:00:00+00:00"}, True),
    ({"DateNotEquals": {"aws:CurrentTime": "2026-12-01T12:00:00+02:00"}},
     {"aws:CurrentTime": "2026-12-01T10:00:00Z"}, False),
    ({"DateLessThanEquals": {"aws:CurrentTime": "2026-12-01T10:00:00Z"}}, {"aws:CurrentTime": "2026-12-01T10:00:00Z"},
     True),
    ({"DateGreaterThanEquals": {"aws:CurrentTime": "2026-12-01T10:00:01Z"}},
     {"aws:CurrentTime": "2026-12-01T10:00:00Z"}, False),
    ({"Bool": {"aws:SecureTransport": "false"}}, {"aws:SecureTransport": "false"}, True),
    ({"Bool": {"aws:SecureTransport": False}}, {"aws:SecureTransport": "true"}, False),
    ({"Bool": {"aws:SecureTransport": "TRUE"}}, {"aws:SecureTransport": "true"}, True),
    ({"BinaryEquals": {"k": "QmluYXJ5"}}, {"k": "QmluYXJ5"}, True),
    ({"BinaryEquals": {"k": "QmluYXJ5"}}, {"k": "QmluYXJz"}, False),
    ({"IpAddress": {"aws:SourceIp": ["203.0.113.0/24", "2001:db8::/32"]}}, {"aws:SourceIp": "203.0.113.250"}, True),
    ({"IpAddress": {"aws:SourceIp": ["203.0.113.0/24", "2001:db8::/32"]}}, {"aws:SourceIp": "2001:db8:1::9"}, True),
    ({"IpAddress": {"aws:SourceIp": ["203.0.113.0/24", "2001:db8::/32"]}}, {"aws:SourceIp": "198.51.100.1"}, False),
    ({"IpAddress": {"aws:SourceIp": "203.0.113.5"}}, {"aws:SourceIp": "203.0.113.5"}, True),
    ({"NotIpAddress": {"aws:SourceIp": "203.0.113.0/24"}}, {"aws:SourceIp": "203.0.113.9"}, False),
    ({"NotIpAddress": {"aws:SourceIp": "203.0.113.0/24"}}, {"aws:SourceIp": "2001:db8::1"}, True),
    ({"ArnLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/team/*"}}, {"aws:PrincipalArn": ROLE}, True),
    ({"ArnEquals": {"aws:PrincipalArn": "arn:aws:iam::*:role/team/*"}}, {"aws:PrincipalArn": ROLE}, True),
    ({"ArnLike": {"aws:SourceArn": "arn:aws:s3:::slides"}}, {"aws:SourceArn": "arn:aws:s3:::slides2"}, False),
    ({"ArnLike": {"aws:SourceArn": "arn:aws:sqs:*:123456789012:q"}},
     {"aws:SourceArn": "arn:aws:sqs:us-east-1:123456789012:q"}, True),
    ({"ArnLike": {"aws:SourceArn": "arn:aws:sqs:*:123456789012:q"}}, {"aws:SourceArn": "not-an-arn"}, False),
    ({"ArnLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/Team/*"}}, {"aws:PrincipalArn": ROLE}, False),
    ({"ArnNotLike": {"aws:PrincipalArn": ["arn:aws:iam::*:role/ci/*", "arn:aws:iam::*:role/team/*"]}},
     {"aws:PrincipalArn": ROLE}, False),
    ({"ArnNotEquals": {"aws:PrincipalArn": OTHER}}, {"aws:PrincipalArn": ROLE}, True),
    ({"Null": {"aws:SourceVpc": "true"}}, {}, True),
    ({"Null": {"aws:SourceVpc": "true"}}, {"aws:SourceVpc": "vpc-1"}, False),
    ({"Null": {"aws:SourceVpc": "false"}}, {"aws:SourceVpc": "vpc-1"}, True),
])
def test_each_operator_family(block, context, expected):
    assert holds(block, context) is expected


@pytest.mark.parametrize("operator, expected", [
    ("StringNotEquals", True), ("StringNotLike", True), ("NumericNotEquals", True), ("DateNotEquals", True),
    ("ArnNotLike", True), ("ArnNotEquals", True), ("StringNotEqualsIgnoreCase", True),
    ("StringEquals", False), ("StringLike", False), ("ArnLike", False),
])
def test_a_negated_operator_on_an_absent_key_holds_and_a_positive_one_does_not(operator, expected):
    value = "arn:aws:iam::123456789012:role/x" if operator.startswith("Arn") else "1"
    assert holds({operator: {"aws:SourceVpce": value}}, {"other": "x"}) is expected
    assert holds({"NotIpAddress": {"aws:SourceIp": "10.0.0.0/8"}}, {}) is True
    assert holds({"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}, {}) is False


def test_if_exists_makes_an_absent_key_true_and_still_checks_a_present_one():
    block = {"StringEqualsIfExists": {"aws:SourceVpce": "vpce-1"}}
    assert holds(block, {}) is True
    assert holds(block, {"aws:SourceVpce": "vpce-2"}) is False
    assert holds(block, {"aws:SourceVpce": "vpce-1"}) is True
    assert holds({"BoolIfExists": {"aws:SecureTransport": "false"}}, {}) is True
    assert holds({"NumericLessThanIfExists": {"s3:TlsVersion": "1.2"}}, {"s3:TlsVersion": "1.3"}) is False


def test_for_all_values_and_for_any_value():
    all_ = {"ForAllValues:StringEquals": {"aws:TagKeys": ["team", "cost"]}}
    any_ = {"ForAnyValue:StringEquals": {"aws:TagKeys": ["team", "cost"]}}
    assert holds(all_, {"aws:TagKeys": ["team"]}) is True
    assert holds(all_, {"aws:TagKeys": ["team", "owner"]}) is False
    assert holds(all_, {}) is True  # absent: ForAllValues holds
    assert holds(all_, {"aws:TagKeys": []}) is True
    assert holds(any_, {"aws:TagKeys": ["owner", "cost"]}) is True
    assert holds(any_, {"aws:TagKeys": ["owner"]}) is False
    assert holds(any_, {}) is False  # absent: ForAnyValue does not
    assert holds({"ForAnyValue:StringEqualsIfExists": {"aws:TagKeys": "x"}}, {}) is True
    assert holds({"ForAllValues:StringNotLike": {"aws:TagKeys": "tmp*"}}, {"aws:TagKeys": ["a", "tmpx"]}) is False
    assert holds({"ForAnyValue:StringLike": {"aws:TagKeys": "tm?"}}, {"aws:TagKeys": "tmp"}) is True  # one value
    # a multivalued key under a plain operator needs a set prefix: it never matches
    assert holds({"StringEquals": {"aws:TagKeys": "team"}}, {"aws:TagKeys": ["team", "cost"]}) is False
    assert holds({"StringEquals": {"aws:TagKeys": "team"}}, {"aws:TagKeys": ["team"]}) is True


def test_keys_are_case_insensitive_values_ored_keys_and_operators_anded():
    assert holds({"StringEquals": {"AWS:SourceVPCE": "vpce-1"}}, {"aws:sourcevpce": "vpce-1"}) is True
    block = {"StringEquals": {"a": ["1", "2"], "b": "x"}, "Bool": {"c": "true"}}
    assert holds(block, {"a": "2", "b": "x", "c": "true"}) is True
    assert holds(block, {"a": "3", "b": "x", "c": "true"}) is False
    assert holds(block, {"a": "1", "b": "y", "c": "true"}) is False
    assert holds(block, {"a": "1", "b": "x", "c": "false"}) is False


def test_policy_variables_are_substituted_in_resources_and_conditions():
    bucket_policy = doc(allow({"AWS": ACCOUNT}, resource=f"{BUCKET}/home/${{aws:username}}/*"))
    identity = [doc(allow(None, resource=f"{BUCKET}/home/${{aws:username}}/*"),
                    allow(None, action="s3:ListBucket", resource=BUCKET,
                          Condition={"StringLike": {"s3:prefix": "${aws:PrincipalTag/team, 'none'}/*"}}))]
    assert evaluate(get(USER, resource=f"{BUCKET}/home/alice/x"), identity_policies=identity).allowed
    assert not evaluate(get(USER, resource=f"{BUCKET}/home/bob/x"), identity_policies=identity).allowed
    assert not evaluate(get(USER, resource=f"{BUCKET}/home/bob/x"), resource_policy=bucket_policy).allowed
    # a role has no aws:username: the variable cannot resolve, so the resource never matches
    assert not evaluate(get(ROLE, resource=f"{BUCKET}/home/alice/x"), identity_policies=identity).allowed
    listing = dict(action="s3:ListBucket", resource=BUCKET)
    assert evaluate(get(ROLE, {"aws:PrincipalTag/team": "ml", "s3:prefix": "ml/x"}, **listing),
                    identity_policies=identity).allowed
    assert not evaluate(get(ROLE, {"aws:PrincipalTag/team": "ml", "s3:prefix": "ops/x"}, **listing),
                        identity_policies=identity).allowed
    assert evaluate(get(ROLE, {"s3:prefix": "none/x"}, **listing), identity_policies=identity).allowed  # default


def test_variables_special_characters_unresolved_values_and_the_2008_version():
    assert holds({"StringLike": {"k": "a${*}b"}}, {"k": "a*b"}) is True
    assert holds({"StringLike": {"k": "a${*}b"}}, {"k": "axb"}) is False
    assert holds({"StringEquals": {"k": "${$}{x}"}}, {"k": "${x}"}) is True
    # an absent variable makes a positive value miss and a negated operator false (the statement cannot match)
    assert holds({"StringEquals": {"k": "${aws:username}"}}, {"k": "alice"}) is False
    assert holds({"StringNotEquals": {"k": "${aws:username}"}}, {"k": "alice"}) is False
    assert holds({"StringNotEquals": {"k": "${aws:username}"}}, {"k": "bob", "aws:username": "alice"}) is True
    # a variable's value is literal: a * in it is no wildcard
    assert holds({"StringLike": {"k": "${x}"}}, {"k": "abc", "x": "a*"}) is False
    old = doc(allow(None, resource=f"{BUCKET}/${{aws:username}}/*"), version="2008-10-17")
    assert not evaluate(get(USER, resource=f"{BUCKET}/alice/x"), identity_policies=[old]).allowed
    assert evaluate(get(USER, resource=f"{BUCKET}/${{aws:username}}/x"), identity_policies=[old]).allowed


# --- elements ------------------------------------------------------------------------------------------------------

def test_action_wildcards_are_case_insensitive_and_resources_case_sensitive():
    policy = [doc(allow(None, action="S3:get*", resource=f"{BUCKET}/Slides/?.svs"))]
    assert evaluate(get(resource=f"{BUCKET}/Slides/a.svs"), identity_policies=policy).allowed
    assert not evaluate(get(resource=f"{BUCKET}/slides/a.svs"), identity_policies=policy).allowed
    assert not evaluate(get(resource=f"{BUCKET}/Slides/ab.svs"), identity_policies=policy).allowed
    assert not evaluate(get(action="s3:PutObject", resource=f"{BUCKET}/Slides/a.svs"), identity_policies=policy).allowed


def test_not_action_and_not_resource():
    policy = [doc({"Effect": "Allow", "NotAction": ["iam:*", "s3:Delete*"], "NotResource": f"{BUCKET}/secret/*"})]
    assert evaluate(get(), identity_policies=policy).allowed
    assert not evaluate(get(action="s3:DeleteObject"), identity_policies=policy).allowed
    assert not evaluate(get(resource=f"{BUCKET}/secret/k"), identity_policies=policy).allowed
    denial = doc({"Sid": "OnlyReads", "Effect": "Deny", "Principal": "*", "NotAction": "s3:Get*", "Resource": "*"},
                 allow("*", action="s3:*"))
    assert evaluate(get(), resource_policy=denial).verdict == "allow"
    decision = evaluate(get(action="s3:PutObject"), resource_policy=denial)
    assert decision.verdict == "explicit-deny" and decision.statements == (StatementRef("resource", 0, "OnlyReads"),)


def test_not_principal_exempts_only_a_caller_named_at_every_level():
    def policy(*names: str) -> dict:
        return doc({"Sid": "OnlyWorker", "Effect": "Deny", "NotPrincipal": {"AWS": list(names)},
                    "Action": "s3:*", "Resource": "*"}, allow({"AWS": ROLE}))
    full = policy(SESSION, ROLE, f"arn:aws:iam::{ACCOUNT}:root")
    assert evaluate(get(), resource_policy=full).verdict == "allow"
    assert evaluate(get(OTHER), resource_policy=full).verdict == "explicit-deny"
    assert evaluate(get(), resource_policy=policy(SESSION, ROLE)).verdict == "explicit-deny"  # account not named
    assert evaluate(get(), resource_policy=policy(ROLE, ACCOUNT)).verdict == "explicit-deny"  # session not named
    # NotPrincipal in a Deny always denies a principal that has a permissions boundary (boundaries page)
    boundary = doc(allow(None, action="s3:*", resource="*"))
    assert evaluate(get(), resource_policy=full, permissions_boundary=boundary).verdict == "explicit-deny"


def test_principal_forms_in_a_resource_policy():
    for principal in ("*", {"AWS": "*"}, {"AWS": ROLE}, {"AWS": [OTHER, SESSION]}):
        assert evaluate(get(), resource_policy=doc(allow(principal))).allowed, principal
    for principal in ({"AWS": OTHER}, {"AWS": ACCOUNT}, {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                      {"Service": "s3.amazonaws.com"}, {"Federated": "cognito-identity.amazonaws.com"},
                      {"AWS": f"arn:aws:sts::{ACCOUNT}:assumed-role/worker/other-session"}):
        decision = evaluate(get(), resource_policy=doc(allow(principal)))
        assert decision.verdict == "implicit-deny" and decision.missing == ("identity", "resource"), principal
    # an account principal in a Deny denies everyone of the account
    assert evaluate(get(), resource_policy=doc(allow("*"), deny({"AWS": ACCOUNT}))).verdict == "explicit-deny"


def test_same_account_identity_or_resource_policy_suffices_and_deny_wins():
    identity = [Policy("identity:worker", doc({"Sid": "Read", **allow(None)}))]
    bucket = doc({"Sid": "WorkerReads", **allow({"AWS": ROLE})})
    d = evaluate(get(), identity_policies=identity)
    assert (d.verdict, d.statements) == ("allow", (StatementRef("identity:worker", 0, "Read"),))
    d = evaluate(get(), resource_policy=bucket)
    assert (d.verdict, d.statements) == ("allow", (StatementRef("resource", 0, "WorkerReads"),))
    tls = doc({"Sid": "Tls", **deny("*", Condition={"Bool": {"aws:SecureTransport": "false"}})},
              {"Sid": "WorkerReads", **allow({"AWS": ROLE})})
    d = evaluate(get(context={"aws:SecureTransport": False}), identity_policies=identity, resource_policy=tls)
    assert (d.allowed, d.verdict, d.statements) == (False, "explicit-deny", (StatementRef("resource", 0, "Tls"),))
    assert "resource statement 0 (Tls)" in d.reason
    assert evaluate(get(context={"aws:SecureTransport": True}), resource_policy=tls).allowed
    d = evaluate(get(OTHER), identity_policies=[], resource_policy=bucket)
    assert (d.verdict, d.missing, d.statements) == ("implicit-deny", ("identity", "resource"), ())


def test_kms_key_policy_must_allow_the_principal_or_delegate_to_the_account():
    decrypt = dict(action="kms:Decrypt", resource=KEY)
    identity = [doc(allow(None, action="kms:Decrypt", resource=KEY))]
    root = doc({"Sid": "EnableIam", **allow({"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, action="kms:*", resource="*")})
    direct = doc({"Sid": "Worker", **allow({"AWS": ROLE}, action="kms:Decrypt", resource="*")})
    d = evaluate(get(**decrypt), identity_policies=identity, resource_policy=root)
    assert d.verdict == "allow" and StatementRef("key-policy", 0, "EnableIam") in d.statements
    d = evaluate(get(**decrypt), resource_policy=root)
    assert (d.verdict, d.missing) == ("implicit-deny", ("identity",))
    d = evaluate(get(**decrypt), identity_policies=identity, resource_policy=direct)
    assert d.verdict == "allow" and d.statements == (StatementRef("key-policy", 0, "Worker"),)
    d = evaluate(get(OTHER, **decrypt), identity_policies=identity, resource_policy=direct)
    assert (d.verdict, d.missing) == ("implicit-deny", ("key-policy",))  # IAM alone never opens a key
    d = evaluate(get(**decrypt), identity_policies=identity)
    assert (d.verdict, d.missing) == ("implicit-deny", ("key-policy",))
    # the account statement delegates only what it allows, under its own conditions
    scoped = doc(allow({"AWS": ACCOUNT}, action="kms:Decrypt", resource="*",
                       Condition={"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}}))
    assert evaluate(get(context={"kms:ViaService": "s3.us-east-1.amazonaws.com"}, **decrypt),
                    identity_policies=identity, resource_policy=scoped).allowed
    assert not evaluate(get(context={"kms:ViaService": "sqs.us-east-1.amazonaws.com"}, **decrypt),
                        identity_policies=identity, resource_policy=scoped).allowed
    # not a key (an alias, or "*"): the ordinary same-account rule
    assert evaluate(get(action="kms:ListKeys", resource="*"), identity_policies=[doc(allow(None, "kms:*", "*"))],
                    resource_policy=None).allowed


def test_a_permissions_boundary_limits_role_grants_but_not_session_grants():
    boundary = doc(allow(None, action="s3:ListBucket", resource="*"))
    identity = [doc(allow(None))]
    assert not evaluate(get(), identity_policies=identity, permissions_boundary=boundary).allowed
    role_grant, session_grant = doc(allow({"AWS": ROLE})), doc(allow({"AWS": SESSION}))
    d = evaluate(get(), resource_policy=role_grant, permissions_boundary=boundary)
    assert (d.verdict, d.missing) == ("implicit-deny", ("identity", "boundary"))
    assert evaluate(get(), resource_policy=session_grant, permissions_boundary=boundary).allowed
    assert evaluate(get(), resource_policy=role_grant).allowed
    wide = doc(allow(None, action="s3:*", resource="*"))
    assert evaluate(get(), identity_policies=identity, permissions_boundary=wide).allowed
    assert evaluate(get(), resource_policy=role_grant, permissions_boundary=wide).allowed
    d = evaluate(get(), identity_policies=identity, permissions_boundary=doc(deny(None, resource="*")))
    assert (d.verdict, d.statements) == ("explicit-deny", (StatementRef("boundary", 0, None),))


def test_an_endpoint_policy_must_also_allow_and_may_deny():
    identity = [doc(allow(None, action="s3:*", resource="*"))]
    through = {"aws:SourceVpce": "vpce-1"}
    endpoint = doc({"Sid": "Reads", **allow("*", action="s3:Get*", resource="*")},
                   {"Sid": "NoDeletes", **deny("*", action="s3:Delete*", resource="*")})
    d = evaluate(get(context=through), identity_policies=identity, endpoint_policy=endpoint)
    assert d.verdict == "allow" and StatementRef("endpoint", 0, "Reads") in d.statements
    d = evaluate(get(context=through, action="s3:PutObject"), identity_policies=identity, endpoint_policy=endpoint)
    assert (d.verdict, d.missing) == ("implicit-deny", ("endpoint",))
    d = evaluate(get(context=through, action="s3:DeleteObject"), identity_policies=identity, endpoint_policy=endpoint)
    assert (d.verdict, d.statements) == ("explicit-deny", (StatementRef("endpoint", 1, "NoDeletes"),))
    d = evaluate(get(OTHER, context=through), endpoint_policy=endpoint)
    assert (d.verdict, d.missing) == ("implicit-deny", ("identity",))


def test_endpoint_principals_interface_versus_gateway():
    identity = [doc(allow(None, action="s3:*", resource="*"))]
    account = doc(allow({"AWS": ACCOUNT}, action="s3:*", resource="*"))
    role = doc(allow({"AWS": ROLE}, action="s3:*", resource="*"))
    assert evaluate(get(), identity_policies=identity, endpoint_policy=account).allowed
    assert evaluate(get(), identity_policies=identity, endpoint_policy=role).allowed
    assert not evaluate(get(OTHER), identity_policies=identity, endpoint_policy=role).allowed
    # a gateway endpoint: an account principal is the root user only, a named role is not matched; "*" is
    for policy in (account, role):
        d = evaluate(get(), identity_policies=identity, endpoint_policy=policy, endpoint_gateway=True)
        assert d.missing == ("endpoint",)
    assert evaluate(get(), identity_policies=identity, endpoint_policy=doc(allow("*", "s3:*", "*")),
                    endpoint_gateway=True).allowed


def test_a_service_principal_needs_the_resource_policy():
    queue = f"arn:aws:sqs:us-east-1:{ACCOUNT}:jobs"
    policy = doc({"Sid": "S3Sends", "Effect": "Allow", "Principal": {"Service": "s3.amazonaws.com"},
                  "Action": "sqs:SendMessage", "Resource": queue,
                  "Condition": {"ArnLike": {"aws:SourceArn": BUCKET}}})
    send = Request("s3.amazonaws.com", "sqs:SendMessage", queue, {"aws:SourceArn": BUCKET})
    assert evaluate(send, resource_policy=policy).verdict == "allow"
    other = Request("sns.amazonaws.com", "sqs:SendMessage", queue, {"aws:SourceArn": BUCKET})
    assert evaluate(other, resource_policy=policy).missing == ("resource",)
    wrong = Request("s3.amazonaws.com", "sqs:SendMessage", queue, {"aws:SourceArn": "arn:aws:s3:::x"})
    assert not evaluate(wrong, resource_policy=policy).allowed
    assert request_context(send)["aws:PrincipalIsAWSService"] == "true"
    with pytest.raises(ValueError, match="service principal"):
        evaluate(send, identity_policies=[doc(allow(None))], resource_policy=policy)


def test_the_request_context_names_the_role_not_the_session():
    ctx = request_context(get(context={"aws:SourceIp": "203.0.113.1", "flag": True, "tags": ["a", "b"]}))
    assert ctx["aws:PrincipalArn"] == ROLE and ctx["aws:PrincipalAccount"] == ACCOUNT
    assert (ctx["flag"], ctx["tags"], ctx["aws:PrincipalType"]) == ("true", ["a", "b"], "AssumedRole")
    assert request_context(get(context={"AWS:PrincipalArn": "x"}))["AWS:PrincipalArn"] == "x"
    assert "aws:PrincipalArn" not in request_context(get(context={"AWS:PrincipalArn": "x"}))
    assert request_context(get(USER))["aws:username"] == "alice"
    exempt_ci = doc(deny("*", Condition={"ArnNotLike": {"aws:PrincipalArn": "arn:aws:iam::*:role/team/*"}}),
                    allow("*"))
    assert evaluate(get(), resource_policy=exempt_ci).allowed
    assert evaluate(get(OTHER), resource_policy=exempt_ci).verdict == "explicit-deny"


# --- refusals ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("statement, kind, message", [
    ({"Sid": "Bad", **allow("*", Condition={"StringEqualz": {"k": "v"}})}, "resource",
     "policy 'resource' statement 1 (Sid 'Bad'): unknown condition operator 'StringEqualz'"),
    (allow("*", Condition={"ForSomeValues:StringEquals": {"k": "v"}}), "resource", "unknown set operator"),
    (allow("*", Condition={"NullIfExists": {"k": "true"}}), "resource", "Null takes neither"),
    (allow("*", Condition={"IpAddress": {"aws:SourceIp": "300.1.1.0/24"}}), "resource", "not a valid ip value"),
    (allow("*", Condition={"NumericLessThan": {"n": "1.2.3"}}), "resource", "not a valid numeric value"),
    (allow("*", Condition={"DateLessThan": {"d": "yesterday"}}), "resource", "not a valid date value"),
    (allow("*", Condition={"Bool": {"b": "yes"}}), "resource", "not a valid bool value"),
    (allow("*", Condition={"ArnLike": {"a": "role/x"}}), "resource", "not a valid arn value"),
    (allow("*", Condition={"StringEquals": {"k": []}}), "resource", "values must be"),
    ({**allow("*"), "Principals": "*"}, "resource", "unknown element(s) 'Principals'"),
    ({**allow("*"), "Effect": "allow"}, "resource", "Effect must be Allow or Deny"),
    ({"Effect": "Allow", "Principal": "*", "Resource": "*"}, "resource", "exactly one of Action and NotAction"),
    (allow("*", action="GetObject"), "resource", "is not `service:action`"),
    (allow("*", resource="slides/*"), "resource", "is not an ARN"),
    (allow({"AWS": f"arn:aws:iam::{ACCOUNT}:role/*"}), "resource", "cannot hold a wildcard"),
    (allow({"Group": "x"}), "resource", "unknown principal type 'Group'"),
    (allow(f"arn:aws:iam::{ACCOUNT}:root"), "resource", 'Principal must be "*" or an object'),
    (allow(None), "resource", "needs Principal or NotPrincipal"),
    (allow("*"), "identity", "cannot name a Principal"),
    ({"Effect": "Allow", "Action": "s3:*"}, "identity", "needs Resource or NotResource"),
    ({**allow("*"), "NotPrincipal": "*"}, "resource", "both Principal and NotPrincipal"),
])
def test_malformed_policies_are_refused_naming_the_statement(statement, kind, message):
    with pytest.raises(ValueError) as err:
        check_policy(doc({"Sid": "Fine", **allow("*" if kind != "identity" else None)}, statement), kind)
    text = str(err.value)
    assert message in text and "statement 1" in text and "\n" not in text


def test_malformed_documents_and_requests_are_refused():
    with pytest.raises(ValueError, match="Version '2020-01-01'"):
        check_policy({"Version": "2020-01-01", "Statement": []})
    with pytest.raises(ValueError, match="no Statement"):
        check_policy({"Version": "2012-10-17"})
    with pytest.raises(ValueError, match="cross-account"):
        evaluate(Request(ROLE, "s3:GetObject", f"{BUCKET}/a", resource_account="210987654321"))
    with pytest.raises(ValueError, match="not a role ARN"):
        evaluate(Request(f"arn:aws:iam::{ACCOUNT}:group/devs", "s3:GetObject", f"{BUCKET}/a"))
    with pytest.raises(ValueError, match="action: 's3:Get\\*' is not"):
        evaluate(get(action="s3:Get*"))
    with pytest.raises(ValueError, match="resource: 'slides/a' is not an ARN"):
        evaluate(get(resource="slides/a"))
    # a malformed policy is refused even when the request never reaches it
    with pytest.raises(ValueError, match="policy 'endpoint' statement 0"):
        evaluate(get(), identity_policies=[doc(deny(None))], endpoint_policy=doc({"Effect": "Allow"}))

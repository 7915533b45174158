"""Tests for the IAM policy document readers: statements from a JSON string or an object, IAM's case rules for
actions and condition keys, qualifiers and IfExists, and unknowns during preview."""
from __future__ import annotations

from policies import documents as D
from policies.unknowns import UNKNOWN


def test_statements_from_a_string_an_object_or_one_statement():
    one = {"Effect": "Allow", "Action": "s3:GetObject"}
    assert D.statements('{"Statement": [%s]}' % '{"Effect": "Allow"}', "policy").items == [
        ("policy.Statement[0]", {"Effect": "Allow"})]
    assert D.statements({"Statement": one}, "policy").items == [("policy.Statement[0]", one)]
    assert D.statements(None, "policy") == D.Statements([])
    assert D.statements("{nope", "policy").error.startswith("policy is not JSON")
    assert D.statements(["x"], "policy").error == "policy is not a policy document (got list)"


def test_unknowns_name_their_path():
    assert D.statements(UNKNOWN, "policy").unknown == "policy"
    assert D.statements({"Statement": UNKNOWN}, "policy").unknown == "policy.Statement"
    found = D.statements({"Statement": [UNKNOWN, {"Effect": "Deny"}]}, "policy")
    assert found.unknown == "policy.Statement[0]" and len(found.items) == 1


def test_actions_match_with_iam_wildcards_in_any_case():
    assert D.action_matches({"Action": "S3:*"}, "s3:GetObject") is True
    assert D.action_matches({"Action": ["s3:Get*"]}, "s3:GetObject") is True
    assert D.action_matches({"Action": "*"}, "sts:AssumeRole") is True
    assert D.action_matches({"Action": "s3:PutObject"}, "s3:GetObject") is False
    assert D.action_matches({"NotAction": "s3:PutObject"}, "s3:GetObject") is False
    assert D.action_matches({"Action": UNKNOWN}, "s3:GetObject") is None


def test_principals():
    assert D.principals({"Principal": "*"}, "AWS") == ["*"]
    assert D.principals({"Principal": {"Service": "pods.eks.amazonaws.com"}}, "Service") == ["pods.eks.amazonaws.com"]
    assert D.principals({"Principal": {"AWS": UNKNOWN}}, "AWS") is None
    assert D.principals({"NotPrincipal": {"AWS": "x"}}, "AWS") == []


def test_conditions_split_qualifier_operator_and_ifexists():
    conds, unknown = D.conditions({"Condition": {"ForAnyValue:StringEqualsIfExists": {"AWS:SourceVpce": "v"},
                                                 "Bool": {"aws:SecureTransport": ["false"]}}})
    assert unknown is None
    first, second = conds
    assert (first.qualifier, first.base, first.if_exists, first.key, first.values) == (
        "foranyvalue", "stringequals", True, "AWS:SourceVpce", ["v"])
    assert (second.qualifier, second.base, second.if_exists) == ("", "bool", False)
    assert D.conditions({"Condition": UNKNOWN}) == ([], "Condition")
    assert D.conditions({"Condition": {"StringEquals": UNKNOWN}}) == ([], "Condition.StringEquals")
    assert D.describe_statement("p.Statement[0]", {"Sid": "S"}) == "p.Statement[0] (Sid 'S')"

"""Tests for the instance-type algebra shared by the diversity and pod-placement rules."""
from __future__ import annotations

import pytest

from policies import selection as s
from policies.unknowns import UNKNOWN


def reqs(*triples) -> list[s.Requirement]:
    return [s.Requirement(k, op, tuple(s.normalise(v) for v in vals), f"r[{i}]") for i, (k, op, vals) in
            enumerate(triples)]


IT, FAM, SIZE, CAT, GEN = (s.INSTANCE_TYPE_KEYS[0], s.FAMILY_KEY, s.SIZE_KEY, s.CATEGORY_KEY, s.GENERATION_KEY)


@pytest.mark.parametrize("requirements,expected", [
    ([], None),
    ([(IT, "In", ["g5.xlarge", "g6.xlarge"])], {"g5.xlarge", "g6.xlarge"}),
    ([(IT, "In", ["g5.xlarge", "g6.xlarge"]), (GEN, "Gt", ["5"])], {"g6.xlarge"}),
    ([(IT, "In", ["g5.xlarge", "p4d.24xlarge"]), (CAT, "In", ["p"])], {"p4d.24xlarge"}),
    ([(FAM, "In", ["g5", "g6"]), (SIZE, "In", ["xlarge"]), (IT, "NotIn", ["g6.xlarge"])], {"g5.xlarge"}),
    ([(FAM, "In", ["g5"])], None),
    ([(SIZE, "In", ["xlarge"])], None),
    ([(CAT, "In", ["g"])], None),
    ([(FAM, "DoesNotExist", [])], set()),
    ([(GEN, "Gt", ["five"])], set()),
    ([(IT, "In", ["weird-name"])], {"weird-name"}),
    ([(IT, "In", ["weird-name"]), (FAM, "In", ["g5"])], {"weird-name"}),  # cannot tell: kept, never over-reported
])
def test_admitted_types(requirements, expected):
    got = s.admitted_types(reqs(*requirements))
    assert (got if got is None else set(got)) == expected


def test_name_parsing():
    assert s.split_type("g5.xlarge") == ("g5", "xlarge")
    assert s.split_type("nonsense") is None
    assert s.family_parts("p4d") == ("p", "4") and s.family_parts("inf2") == ("inf", "2")
    assert s.normalise(" G5.XLarge ") == "g5.xlarge"


def test_parse_requirements_keeps_only_instance_type_keys_and_reports_unknowns():
    parsed = s.parse_requirements([
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [UNKNOWN]},
        {"key": IT, "operator": "In", "values": ["G5.XLARGE"]},
        {"key": UNKNOWN, "operator": "In", "values": ["x"]},
        {"key": FAM, "operator": UNKNOWN, "values": ["g5"]},
        UNKNOWN,
    ], "reqs")
    assert [r.values for r in parsed.requirements] == [("g5.xlarge",)]
    assert parsed.unknown_paths == ["reqs[2].key", "reqs[3].operator", "reqs[4]"]
    with pytest.raises(TypeError):
        s.parse_requirements([{"key": IT, "operator": "In", "values": "g5.xlarge"}], "reqs")


def test_parse_labels():
    parsed = s.parse_labels({IT: "g5.xlarge", "team": "x", FAM: UNKNOWN}, "labels")
    assert [(r.key, r.operator, r.values) for r in parsed.requirements] == [(IT, "In", ("g5.xlarge",))]
    assert parsed.unknown_paths == ['labels."karpenter.k8s.aws/instance-family"']

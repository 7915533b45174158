"""Tests for the shared readers: kinds, paths, numbers and formatting."""
from __future__ import annotations

import pytest

from policies import resources as r
from policies.unknowns import UNKNOWN


def test_kinds():
    assert r.k8s_kind("kubernetes:karpenter.sh/v1:NodePool") == r.NODEPOOL
    assert r.is_kind("kubernetes:karpenter.sh/v1beta1:NodePool", r.NODEPOOL)
    assert r.k8s_kind("kubernetes:core/v1:Pod") == ("core", "Pod")
    assert r.k8s_kind("aws:sqs/queue:Queue") is None and r.k8s_kind("kubernetes:helm.sh/v4:Chart")[1] == "Chart"


def test_dig_paths():
    props = {"spec": {"a": [{"b": 1}], "u": UNKNOWN}}
    assert r.dig(props, "spec", "a", 0, "b") == (1, "spec.a[0].b")
    missing = r.dig(props, "spec", "x", "nvidia.com/gpu")
    assert missing.missing and missing.path == 'spec.x."nvidia.com/gpu"'
    unknown = r.dig(props, "spec", "u", "deeper")
    assert unknown.unknown and unknown.path == "spec.u"
    assert r.dig(props, "spec", "a", 5).missing
    with pytest.raises(TypeError):
        r.as_list(r.dig({"x": "s"}, "x"))


def test_numbers_and_formatting():
    assert r.as_int(4.0) == 4 and r.as_int("8") == 8 and r.as_int(True) is None and r.as_int(1.5) is None
    assert r.as_number("1.5") == 1.5 and r.as_number("x") is None and r.as_number(False) is None
    assert r.fmt(["a", 1.0, UNKNOWN]) == "['a', 1, <unknown during preview>]"
    assert r.is_true_string(" True ") and not r.is_true_string(True)

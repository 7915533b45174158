"""Tests for policies/capacity.py: the quantities a pod's requests are read in, and a pod's effective requests."""
from __future__ import annotations

import pytest

from components.spec.quantity import parse_quantity
from policies import capacity as rule
from policies.unknowns import UNKNOWN

GI = 2 ** 30


@pytest.mark.parametrize("text,expected", [("4", 4.0), ("100m", 0.1), ("24Gi", 24 * GI), ("1.5G", 1.5e9),
                                           (2.0, 2.0), ("128Mi", 128 * 2 ** 20), ("abc", None), ("", None),
                                           (UNKNOWN, None)])
def test_quantities(text, expected):
    # The pack reads quantities with the components' parser (the API's grammar); an unknown value is no quantity.
    assert parse_quantity(text) == expected


def test_requests_sum_containers_take_the_largest_init_and_default_to_limits():
    spec = {"containers": [{"resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},
                           {"resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "3", "memory": "512Mi"}}}]}
    total, unknown = rule.pod_requests(spec, "spec")
    assert total["cpu"] == 3.0 and total["memory"] == GI and unknown == []

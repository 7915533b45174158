"""The one Kubernetes quantity parser (components/spec/quantity.py), as the API server and manifests write them."""
import pytest

from components.spec.quantity import fmt_cpu, fmt_mem, is_quantity, parse_quantity


@pytest.mark.parametrize("text,value", [("104845292Ki", 104845292 * 1024), ("17Gi", 17 * 2 ** 30), ("450G", 450e9),
                                        ("3920m", 3.92), ("8", 8.0), ("lots", None), (None, None), (True, None)])
def test_quantity(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text,expected", [
    ("4", 4.0), ("100m", 0.1), ("24Gi", 24 * 2 ** 30), ("1.5G", 1.5e9), (2.0, 2.0), (3, 3.0), ("1e3", 1000.0),
    ("250u", 250e-6), ("+5Mi", 5 * 2 ** 20), (".5", 0.5), ("1E", 1e18), ("-1", -1.0),
    ("4 cores", None), ("Gi", None), ("", None), ("1.2.3", None), (None, None), (False, None), ([], None)])
def test_quantities(text, expected):
    assert parse_quantity(text) == expected


def test_is_quantity_refuses_negatives_unless_asked():
    assert is_quantity("16") and is_quantity("+16Gi") and not is_quantity("-1") and is_quantity("-1", negative=True)
    assert not is_quantity(16) and not is_quantity("sixteen")


def test_formatting():
    assert fmt_mem(24 * 2 ** 30) == "24Gi" and fmt_mem(14162 * 2 ** 20) == "14162Mi"
    assert fmt_cpu(4.0) == "4" and fmt_cpu(3.92) == "3920m"

"""The release facts and version rules (catalogue/releases.py): broken releases, minimums, providers, ranges."""
import pytest

from components import catalogue
from components import catalogue as c


def test_pins_pass_their_own_rules():
    assert c.all_problems_of_pins() == []


def test_karpenter_charts_share_one_version():
    assert c.CHARTS["karpenter"].version == c.CHARTS["karpenter-crd"].version == c.KARPENTER_VERSION


@pytest.mark.parametrize("version", ["1.0.0", "1.0.1", "v1.0.2", "1.8.4"])
def test_broken_karpenter_releases_are_refused(version):
    problem = c.karpenter_version_problem(version)
    assert problem and version.lstrip("v") in problem


def test_ami_swap_reason_is_explained():
    assert "Neuron" in c.karpenter_version_problem("1.0.1")
    assert c.karpenter_version_problem("1.0.3") is None
    assert "minimum" in c.karpenter_version_problem("0.37.0")


@pytest.mark.parametrize("version,expected", [
    ("2.12.0", ("azure", "gcp", "aws-eks", "aws-kiam", "azure-workload")),
    ("2.13.0", ("azure", "gcp", "aws-eks", "aws-kiam", "azure-workload", "aws")),
    ("2.14.0", ("azure", "gcp", "aws-eks", "aws-kiam", "azure-workload", "aws", "none")),
    ("2.15.0", ("gcp", "aws-eks", "azure-workload", "aws", "none")),
])
def test_keda_provider_history(version, expected):
    assert set(c.keda_providers(version)) == set(expected)


def test_keda_provider_problems():
    assert c.keda_provider_problem("aws", "2.20.2") is None
    kiam = c.keda_provider_problem("aws-kiam", "2.20.2")
    assert "'aws-kiam'" in kiam and "2.20.2" in kiam and "aws, aws-eks" in kiam
    assert "deprecated" in c.keda_provider_problem("aws-eks", "2.20.2")
    assert c.keda_provider_problem("aws-kiam", "2.14.0") is None


def test_scaling_strategy_default_rejected_only_on_2_20_0_and_2_20_1():
    assert c.keda_scaling_strategy_problem("default", "2.20.0")
    assert c.keda_scaling_strategy_problem("default", "2.20.1")
    assert c.keda_scaling_strategy_problem("default", "2.20.2") is None
    assert c.keda_scaling_strategy_problem("default", "2.19.0") is None
    assert c.keda_scaling_strategy_problem("bogus", "2.20.2")


def test_keda_minimum():
    assert c.keda_version_problem("2.18.3")
    assert c.keda_version_problem("2.19.0") is None


@pytest.mark.parametrize("k8s,ok", [("1.34", True), ("1.33", True), ("1.35", True), ("1.32", False), ("1.36", False)])
def test_kubernetes_range_of_the_pins(k8s, ok):
    assert (c.kubernetes_problems(k8s) == []) is ok


def test_kubernetes_problem_names_the_component_and_range():
    problems = c.kubernetes_problems("1.32", "1.14.1", "2.20.2")
    assert problems == ["kubernetes 1.32 is outside what keda 2.20.2 supports (1.33 to 1.35)"]


def test_combination_flags_crd_mismatch():
    problems = c.combination_problems(karpenter="1.14.1", karpenter_crd="1.13.0")
    assert any("karpenter-crd 1.13.0" in p for p in problems)


def test_parse_version():
    assert c.parse_version("v1.0.1") == (1, 0, 1)
    assert c.parse_version("1.34") == (1, 34, 0)
    with pytest.raises(ValueError, match="not a version"):
        c.parse_version("latest")


# -- NVIDIA device plugin ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version,bad", [("0.19.0", True), ("0.19.1", True), ("0.19.2", True), ("0.19.3", False),
                                         ("0.20.0", False), ("0.18.2", False), ("0.18.1", True)])
def test_device_plugin_releases(version, bad):
    problem = catalogue.chart_version_problem("nvidia-device-plugin", version)
    assert (problem is not None) == bad, problem
    if version.startswith("0.19.") and bad:
        assert "#1550" in problem and "0.19.3" in problem

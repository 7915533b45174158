"""Tests for policies/facts.py: whole-platform detection, facts from reference components and policy config, and the
config schemas the scoped policies declare."""
from __future__ import annotations

import pytest

from policies import facts
from policies.facts import FACTS, WHOLE, config_schema, scope_of
from policies.plan import Res
from policies.unknowns import UNKNOWN
from tests.policies import fragments as F


def ref(rtype: str, props: dict, name: str = "platform") -> Res:
    return Res(rtype, F.urn(rtype, name), name, None, props)


def test_the_platform_component_declares_the_whole_platform_and_config_overrides_it():
    platform = ref(facts.PLATFORM, {}, "gpuburst")
    assert scope_of([platform]).whole and "declares gpuburst:index:GpuBurstPlatform 'gpuburst'" in \
        scope_of([platform]).why
    assert not scope_of([]).whole and scope_of([]).why == "the plan declares no gpuburst:index:GpuBurstPlatform"
    assert not scope_of([platform], {"wholePlatform": False}).whole
    claimed = scope_of([], {"wholePlatform": True})
    assert claimed.whole and claimed.why == "policy config wholePlatform: true"
    assert scope_of([], {"wholePlatform": None}).whole is False  # unset: detected
    with pytest.raises(ValueError, match="policy config wholePlatform: 'yes' is not valid: true or false"):
        scope_of([], {"wholePlatform": "yes"})
    assert WHOLE.whole and WHOLE.facts == {}


def test_references_give_facts_with_their_source():
    scope = scope_of([ref(facts.EXISTING_KEDA, F.existing_keda(), "k"), ref(facts.EXISTING_CLUSTER,
                                                                            F.existing_cluster(), "c"),
                      ref(facts.EXISTING_KARPENTER, F.existing_karpenter(), "p")])
    assert scope.value("kedaVersion") == F.existing_keda()["version"]
    assert scope.source("kedaVersion") == "ExistingKeda 'k' version"
    assert scope.value("kedaOperatorRoleArn") == F.OPERATOR_ARN and scope.value("kedaScalerRolePath") == F.SCALER_PATH
    assert scope.value("karpenterVersion") == "1.14.0" and scope.value("systemNodeLabels") == F.SYSTEM
    assert scope.value("devicePlugin") is True and scope.value("clusterName") == "platform"
    root = scope.entry("nodeClassRootVolumeGiB", "gpu")
    assert root.value == 100 and root.source == "ExistingCluster 'c' nodeClasses['gpu'].rootVolumeGiB"
    assert scope.entry("nodeClassAmiAlias", "gpu").value == "al2023@latest"
    assert scope.entry("nodeClassRootVolumeGiB", "other") is None


def test_a_whole_plan_reads_no_fact():
    scope = scope_of([ref(facts.PLATFORM, {}), ref(facts.EXISTING_CLUSTER, F.existing_cluster())],
                     {"devicePlugin": False})
    assert scope.whole and scope.facts == {} and scope.value("devicePlugin") is None


def test_an_unknown_reference_value_is_not_a_fact_and_the_hint_says_why():
    scope = scope_of([ref(facts.EXISTING_KEDA, F.existing_keda(operatorRoleArn=UNKNOWN), "k")])
    assert scope.value("kedaOperatorRoleArn") is None
    assert scope.hint("kedaOperatorRoleArn") == "ExistingKeda 'k' operatorRoleArn is unknown during preview; or set " \
                                                "policy config kedaOperatorRoleArn"
    assert scope_of([]).hint("devicePlugin", "device-plugin-placement") == \
        "declare ExistingCluster devicePlugin or set policy config devicePlugin on device-plugin-placement"
    assert scope_of([]).hint("nodeClassAmiAlias") == "declare ExistingCluster nodeClasses[name].amiAlias"


def test_policy_config_wins_over_a_reference_and_node_classes_merge_by_name():
    cluster = ref(facts.EXISTING_CLUSTER, F.existing_cluster(), "c")
    scope = scope_of([cluster], {"devicePlugin": False, "nodeClassRootVolumeGiB": {"other": 50.0},
                                 "systemNodeLabels": {"role": "system"}})
    assert scope.value("devicePlugin") is False and scope.source("devicePlugin") == "policy config devicePlugin"
    assert scope.value("systemNodeLabels") == {"role": "system"}
    assert scope.entry("nodeClassRootVolumeGiB", "other").value == 50.0
    assert scope.entry("nodeClassRootVolumeGiB", "other").source == "policy config nodeClassRootVolumeGiB['other']"
    assert scope.entry("nodeClassRootVolumeGiB", "gpu").value == 100  # the reference's entry stays


@pytest.mark.parametrize("key,value,expected", [
    ("kedaVersion", 2.2, "a non-empty string"),
    ("kedaVersion", " ", "a non-empty string"),
    ("devicePlugin", "true", "true or false"),
    ("systemNodeLabels", {"a": 1}, "an object of label to string"),
    ("systemNodeLabels", ["a"], "an object of label to string"),
    ("nodeClassRootVolumeGiB", {"gpu": 0}, "an object of EC2NodeClass name to a positive number of GiB"),
    ("nodeClassRootVolumeGiB", {"gpu": "big"}, "an object of EC2NodeClass name to a positive number of GiB"),
    ("kedaWatchNamespaces", "lab-tils", "a non-empty list of non-empty strings"),
    ("kedaWatchNamespaces", [], "a non-empty list of non-empty strings"),
])
def test_a_config_value_of_the_wrong_type_is_one_line_naming_it(key, value, expected):
    with pytest.raises(ValueError) as raised:
        scope_of([], {key: value})
    assert str(raised.value).startswith(f"policy config {key}: ") and str(raised.value).endswith(expected)


def test_the_config_keys_are_the_documented_ones():
    config_keys = {k for k, f in FACTS.items() if f.schema is not None}
    assert config_keys == {"kedaVersion", "kedaNamespace", "kedaOperatorServiceAccount", "kedaOperatorRoleArn",
                           "karpenterVersion", "systemNodeLabels", "nodeClassRootVolumeGiB", "devicePlugin",
                           "networkPolicyEnforced", "kedaWatchNamespaces"}
    schema = config_schema("devicePlugin", "nodeClassAmiAlias").properties
    assert set(schema) == {"wholePlatform", "devicePlugin"}  # a reference-only fact has no config key
    assert schema["wholePlatform"]["type"] == "boolean" and schema["devicePlugin"]["type"] == "boolean"
    for key in config_keys:
        assert FACTS[key].schema.get("description"), key


def test_every_fact_names_a_property_the_reference_components_register():
    from components import existing

    source = open(existing.__file__, encoding="utf-8").read()
    for spec in FACTS.values():
        assert f'"{spec.prop}"' in source, spec
        if spec.entry:
            assert f'"{spec.entry}"' in source, spec
    for token in facts.REFERENCES:
        assert f'"{token}"' in source, token

"""ConfigError and the rule tables (components/spec/validation.py): one line, naming the field, the value and, inside
a component, which component and resource."""
import pytest

from components.spec.validation import ConfigError, Rule, is_int_between, names_its_errors, validate


class _Component:
    def __init__(self, name: str, bad: bool) -> None:
        if bad:
            raise ConfigError("instance_types", ["g5.2xlarge"], "at least two instance types")


Pool = names_its_errors(type("GpuNodePool", (_Component,), {}))


def test_an_error_in_a_component_names_the_component_and_the_resource():
    with pytest.raises(ConfigError) as e:
        Pool("gpu", bad=True)
    assert str(e.value) == "GpuNodePool 'gpu': instance_types: ['g5.2xlarge'] is not valid: at least two instance types"
    assert e.value.field == "instance_types" and e.value.where == "GpuNodePool 'gpu'"
    assert e.value.detail == "instance_types: ['g5.2xlarge'] is not valid: at least two instance types"
    Pool("gpu", bad=False)  # no error, nothing added


def test_the_innermost_component_is_named():
    @names_its_errors
    class Platform:
        def __init__(self, name: str) -> None:
            Pool(f"{name}-gpu", bad=True)

    with pytest.raises(ConfigError) as e:
        Platform("tumour")
    assert str(e.value).startswith("GpuNodePool 'tumour-gpu': instance_types:")


def test_rules_name_the_field_and_the_value():
    with pytest.raises(ConfigError) as e:
        validate({"gpu_limit": 0}, [Rule("gpu_limit", is_int_between(1, 8), "an int from 1 to 8")], "GpuNodePoolArgs.")
    assert str(e.value) == "GpuNodePoolArgs.gpu_limit: 0 is not valid: an int from 1 to 8" and e.value.where is None

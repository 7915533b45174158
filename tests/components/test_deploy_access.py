"""DeployAccess: the deploy model as the plan's facts, parsed and checked where it is declared."""
import pytest

from components.deploy_access import DEPLOY_ACCESS_TYPE, DeployAccess
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks

RAW = {"deployerRoleArns": ["arn:aws:iam::123456789012:role/lab-deploy"], "deployCidrs": ["198.51.100.0/24"]}


def test_the_facts_are_the_components_registered_properties():
    res = run_under_mocks(lambda: DeployAccess("deploy", RAW))
    (reg,) = res.monitor.by_type(DEPLOY_ACCESS_TYPE)
    assert reg.properties["deployerRoleArns"] == RAW["deployerRoleArns"]
    assert reg.properties["deployCidrs"] == RAW["deployCidrs"] and reg.properties["slideUploaders"] == []


def test_a_bad_model_is_refused_naming_the_component_and_the_field():
    with pytest.raises(ConfigError, match=r"DeployAccess 'deploy': deploy.deployCidrs: '0.0.0.0/0'"):
        run_under_mocks(lambda: DeployAccess("deploy", {**RAW, "deployCidrs": ["0.0.0.0/0"]}))

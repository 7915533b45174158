"""The deploy model's parser: every field refused in one line naming it, the parts kept apart, the facts it writes."""
import pytest

from components.spec.deploy_model import DeployModel, parse_deploy_model, public_cidr_problem
from components.spec.validation import ConfigError

DEPLOYER = "arn:aws:iam::123456789012:role/gpuburst-deploy"
UPLOADER = "arn:aws:iam::123456789012:role/scanner-upload"
READER = "arn:aws:iam::123456789012:role/researchers"
GOOD = {"deployerRoleArns": [DEPLOYER], "deployCidrs": ["198.51.100.0/24"],
        "runner": {"roleArn": DEPLOYER, "backendUrl": "s3://example-state/prod"},
        "slideUploaders": [{"roleArn": UPLOADER, "cidrs": ["192.0.2.0/24"]}],
        "resultReaders": [{"roleArn": READER, "vpcEndpointIds": ["vpce-0123456789abcdef0"]}],
        "breakGlassRoleArns": ["arn:aws:iam::123456789012:role/break-glass-*"]}


def refusal(value) -> str:
    with pytest.raises(ConfigError) as e:
        parse_deploy_model(value)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_full_model_parses_into_its_parts():
    m = parse_deploy_model(GOOD)
    assert isinstance(m, DeployModel)
    assert m.deployer_role_arns == (DEPLOYER,) and m.deploy_cidrs == ("198.51.100.0/24",)
    assert m.runner is not None and m.runner.backend_url == "s3://example-state/prod"
    assert m.slide_uploaders[0].place.cidrs == ("192.0.2.0/24",)
    assert m.result_readers[0].place.vpc_endpoint_ids == ("vpce-0123456789abcdef0",)
    facts = m.as_facts()
    assert facts["deployerRoleArns"] == [DEPLOYER] and facts["resultReaders"][0]["roleArn"] == READER
    assert facts["runner"] == {"roleArn": DEPLOYER, "backendUrl": "s3://example-state/prod"}


@pytest.mark.parametrize("change,needle", [
    ({"deployerRoleArns": []}, "deploy.deployerRoleArns: [] is not valid: at least one role"),
    ({"deployerRoleArns": ["arn:aws:iam::123456789012:role/deploy-*"]}, "exact: no '*'"),
    ({"deployCidrs": ["0.0.0.0/0"]}, "deploy.deployCidrs: '0.0.0.0/0' is not valid"),
    ({"deployCidrs": ["10.0.0.0/8"]}, "a private range"),
    ({"deployCidrs": ["198.51.100.7/24"]}, "host bits set"),
    ({"runner": {"roleArn": UPLOADER, "backendUrl": "s3://x-state"}}, "deploy.runner.roleArn"),
    ({"runner": {"roleArn": DEPLOYER, "backendUrl": "ftp://state"}}, "deploy.runner.backendUrl: 'ftp://state'"),
    ({"runner": {"roleArn": DEPLOYER, "backendUrl": "s3://x-state", "passphrase": "hunter2"}},
     "deploy.runner.passphrase"),
    ({"bootstrap": "yes"}, "deploy.bootstrap: 'yes' is not valid"),
    ({"slideUploaders": [{"roleArn": UPLOADER}]}, "deploy.slideUploaders[0].cidrs: None is not valid: at least one"),
    ({"resultReaders": [{"roleArn": READER, "vpcEndpointIds": ["vpc-123"]}]},
     "deploy.resultReaders[0].vpcEndpointIds: 'vpc-123'"),
    ({"resultReaders": [{"roleArn": DEPLOYER, "cidrs": ["192.0.2.0/24"]}]},
     "deploy.resultReaders: 'arn:aws:iam::123456789012:role/gpuburst-deploy' is not valid: a role not also listed "
     "in deploy.deployerRoleArns"),
    ({"breakGlassRoleArns": [UPLOADER]}, "a role not also listed in deploy.slideUploaders"),
    ({"resultReaders": [{"roleArn": "arn:aws:iam::210987654321:role/r", "cidrs": ["192.0.2.0/24"]}]},
     "roles of the stack's one account"),
    ({"deployers": [DEPLOYER]}, "deploy.deployers"),
])
def test_each_bad_field_is_refused_in_one_line_naming_it(change, needle):
    assert needle in refusal({**GOOD, **change})


def test_a_model_needs_a_place_to_deploy_from():
    assert "deploy.deployCidrs: None is not valid: at least one CIDR" in refusal({"deployerRoleArns": [DEPLOYER]})


def test_bootstrap_needs_the_runner_and_the_deploy_cidrs():
    only_runner = {k: v for k, v in GOOD.items() if k != "deployCidrs"}
    assert "deploy.bootstrap: True is not valid" in refusal({**only_runner, "bootstrap": True})
    assert parse_deploy_model({**GOOD, "bootstrap": True}).bootstrap is True


@pytest.mark.parametrize("cidr,ok", [("203.0.113.0/24", True), ("8.8.8.0/24", True), ("172.16.0.0/12", False),
                                     ("::/0", False), ("0.0.0.0/0", False), ("not-a-cidr", False)])
def test_public_cidrs(cidr, ok):
    assert (public_cidr_problem(cidr) is None) is ok

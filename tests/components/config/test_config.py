"""The typed stack config: defaults, the example stacks, and one-line errors before any resource."""
import json
from pathlib import Path

import pytest
import yaml

from components import catalogue
from components.config import CONFIG_KEYS, StackConfig, parse_config
from components.spec.validation import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def stack_file(name):
    raw = yaml.safe_load((ROOT / f"Pulumi.{name}.yaml").read_text())["config"]
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}


DEPLOYER = "arn:aws:iam::123456789012:role/gpuburst-deploy"
DEPLOY = {"deployerRoleArns": [DEPLOYER], "runner": {"roleArn": DEPLOYER, "backendUrl": "s3://example-state"}}
"""The smallest deploy model: one deployer, deploying through the in-VPC runner (so the API endpoint may stay
private, the default)."""
MINIMAL = {"gpuburst:alarmEmails": json.dumps(["oncall@example.org"]), "gpuburst:deploy": json.dumps(DEPLOY)}


def test_defaults_are_the_catalogue_pins():
    cfg = parse_config(MINIMAL, stack="dev")
    assert cfg.kubernetes_version == catalogue.KUBERNETES_VERSION
    assert cfg.karpenter_version == catalogue.KARPENTER_VERSION
    assert cfg.keda_version == catalogue.KEDA_VERSION
    assert len(cfg.gpu_instance_types) >= 2
    assert cfg.environment == "dev" and cfg.name_prefix == "gpuburst-dev"


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_example_stacks_parse(stack):
    cfg = parse_config(stack_file(stack), stack=stack)
    assert isinstance(cfg, StackConfig) and cfg.environment == stack
    assert {w.name for w in cfg.workloads} == {"slides", "studies"}


def test_prod_keeps_the_endpoint_private_deploys_from_its_runner_and_pins_the_ami():
    cfg = parse_config(stack_file("prod"), stack="prod")
    assert cfg.endpoint_public_access is False and cfg.public_access_cidrs == ()
    assert cfg.deploy is not None and cfg.deploy.runner is not None
    assert cfg.deploy.runner.role_arn in cfg.deploy.deployer_role_arns
    assert cfg.ami_alias.startswith("al2023@v")
    assert cfg.region == "eu-west-1"


def one_line(err: ConfigError) -> str:
    text = str(err)
    assert "\n" not in text
    return text


def test_unknown_key_is_named():
    with pytest.raises(ConfigError) as e:
        parse_config({"gpuburst:gpuInstanceType": "g5.xlarge"})
    text = one_line(e.value)
    assert "gpuburst:gpuInstanceType" in text and "g5.xlarge" in text and "gpuInstanceTypes" in text


def test_aws_kiam_with_keda_2_20_2_names_field_value_and_allowed_values():
    with pytest.raises(ConfigError) as e:
        parse_config({"gpuburst:kedaProvider": "aws-kiam", "gpuburst:kedaVersion": "2.20.2"})
    text = one_line(e.value)
    assert text.startswith("gpuburst:kedaProvider: 'aws-kiam'")
    for allowed in catalogue.keda_providers("2.20.2"):
        assert allowed in text


def test_single_instance_type_refused():
    with pytest.raises(ConfigError, match=r"gpuburst:gpuInstanceTypes: \['g5.xlarge'\]"):
        parse_config({"gpuburst:gpuInstanceTypes": json.dumps(["g5.xlarge"])})


def test_duplicate_spelling_of_one_type_refused():
    with pytest.raises(ConfigError, match="gpuInstanceTypes"):
        parse_config({"gpuburst:gpuInstanceTypes": json.dumps(["g5.xlarge", "g5.xlarge"])})


@pytest.mark.parametrize("key,value,needle", [
    ("karpenterVersion", "1.0.1", "1.0.1"),
    ("kedaVersion", "2.18.0", "2.18.0"),
    ("amiAlias", "al2@latest", "al2@latest"),
    ("gpuLimit", "0", "0"),
    ("publicAccessCidrs", json.dumps(["10.0.0.0/33"]), "10.0.0.0/33"),
    ("publicAccessCidrs", json.dumps(["0.0.0.0/0"]), "0.0.0.0/0"),
    ("vpcCidr", "0.0.0.0/0", "0.0.0.0/0"),
    ("vpcCidr", "10.64.0.0/24", "10.64.0.0/24"),
    ("vpcCidr", "52.0.0.0/16", "52.0.0.0/16"),
    ("alarmEmails", json.dumps(["not-an-address"]), "not-an-address"),
    ("environment", "Prod_1", "Prod_1"),
    ("verifyImage", "gpuburst-verify:latest", "gpuburst-verify:latest"),
])
def test_bad_values_name_key_and_value(key, value, needle):
    with pytest.raises(ConfigError) as e:
        parse_config({f"gpuburst:{key}": value})
    text = one_line(e.value)
    assert f"gpuburst:{key}" in text and needle in text


def test_the_api_endpoint_is_private_by_default_and_never_open_to_the_world():
    cfg = parse_config(MINIMAL)
    assert cfg.endpoint_public_access is False and cfg.public_access_cidrs == () and cfg.vpc_cidr == "10.64.0.0/16"
    for stack in ("dev", "prod"):
        assert "0.0.0.0/0" not in parse_config(stack_file(stack), stack=stack).public_access_cidrs, stack
    with pytest.raises(ConfigError) as e:
        parse_config({**MINIMAL, "gpuburst:endpointPublicAccess": "true"})
    assert one_line(e.value).startswith("gpuburst:publicAccessCidrs: None is not valid: required")
    with pytest.raises(ConfigError) as e:
        parse_config({**MINIMAL, "gpuburst:publicAccessCidrs": json.dumps(["203.0.113.0/24"])})
    assert "endpointPublicAccess" in one_line(e.value)
    cfg = parse_config({**MINIMAL, "gpuburst:endpointPublicAccess": "true", "gpuburst:vpcCidr": "10.80.0.0/16",
                        "gpuburst:publicAccessCidrs": json.dumps(["203.0.113.0/24"])})
    assert cfg.public_access_cidrs == ("203.0.113.0/24",) and cfg.vpc_cidr == "10.80.0.0/16"


def test_kubernetes_outside_supported_range():
    with pytest.raises(ConfigError, match=r"gpuburst:kubernetesVersion: '1.32'.*keda"):
        parse_config({**MINIMAL, "gpuburst:kubernetesVersion": "1.32"})


def test_workload_facts_are_checked():
    bad = {**MINIMAL, "gpuburst:workloads": json.dumps({"slides": {"modelLoadSeconds": 45}})}
    with pytest.raises(ConfigError, match=r"gpuburst:workloads.slides.modelLoadSeconds"):
        parse_config(bad)
    bad = {**MINIMAL, "gpuburst:workloads": json.dumps({"slides": {"pattern": "lambda"}})}
    with pytest.raises(ConfigError, match=r"gpuburst:workloads.slides.pattern: 'lambda'"):
        parse_config(bad)


def test_alarm_emails_are_required():
    with pytest.raises(ConfigError, match="gpuburst:alarmEmails: None is not valid: required"):
        parse_config({"gpuburst:deploy": json.dumps(DEPLOY)})


def test_the_deploy_model_is_required():
    with pytest.raises(ConfigError, match="gpuburst:deploy: None is not valid: required: who deploys"):
        parse_config({"gpuburst:alarmEmails": json.dumps(["oncall@example.org"])})


def test_other_namespaces_are_ignored():
    cfg = parse_config({**MINIMAL, "aws:region": "eu-central-1", "pulumi:tags": "{}"})
    assert cfg.region == "eu-central-1"


def test_the_config_reference_documents_every_key():
    reference = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")  # the site's Config reference page
    missing = [k for k in CONFIG_KEYS if f"`gpuburst:{k}`" not in reference]
    assert missing == []


@pytest.mark.parametrize("bad,needle", [("m5.large", "in the catalogue"), ("g4ad.xlarge", "AMD"),
                                        ("g7e.2xlarge", "595"), ("p3.2xlarge", "p3dn")])
def test_an_instance_type_outside_the_catalogue_is_named(bad, needle):
    with pytest.raises(ConfigError) as e:
        parse_config({**MINIMAL, "gpuburst:gpuInstanceTypes": json.dumps(["g5.xlarge", bad])})
    text = one_line(e.value)
    assert text.startswith(f"gpuburst:gpuInstanceTypes: {bad!r} is not valid: ") and needle in text


def test_example_stacks_use_catalogued_types_only():
    for stack in ("dev", "prod"):
        cfg = parse_config(stack_file(stack), stack=stack)
        assert all(catalogue.instance_type(t) for t in cfg.gpu_instance_types), stack


def test_prod_does_not_claim_an_order_of_capacity_types():
    text = (ROOT / "Pulumi.prod.yaml").read_text()
    assert "on-demand before spot" not in text and "on-demand first" not in text
    assert "order means nothing" in text


def test_a_consumer_workload_needs_on_demand_in_the_pool():
    # The default workloads include `studies` (ordered, stateful): its consumer selects on-demand nodes.
    with pytest.raises(ConfigError) as e:
        parse_config({**MINIMAL, "gpuburst:gpuCapacityTypes": json.dumps(["spot"])})
    text = one_line(e.value)
    assert text.startswith("gpuburst:gpuCapacityTypes: ['spot']") and "studies" in text and "on-demand" in text


def test_spot_only_is_fine_when_every_workload_runs_as_jobs():
    only_jobs = {"slides": {"itemsIndependent": True, "burstItems": 200}}
    cfg = parse_config({**MINIMAL, "gpuburst:gpuCapacityTypes": json.dumps(["spot"]),
                        "gpuburst:workloads": json.dumps(only_jobs)})
    assert cfg.gpu_capacity_types == ("spot",) and not cfg.workloads[0].runs_as_consumer


@pytest.mark.parametrize("facts,consumer", [
    ({"ordered": True, "itemsIndependent": False}, True),
    ({"stateful": True, "itemsIndependent": False}, True),
    ({"itemsIndependent": True, "burstItems": 200}, False),
    ({"itemsIndependent": True, "burstItems": 200, "pattern": "consumer"}, True),
    ({"itemsIndependent": True, "burstItems": 2, "modelLoadS": 600, "maxReplicas": 1}, True),  # chooser's pick
])
def test_which_workloads_run_as_the_consumer(facts, consumer):
    cfg = parse_config({**MINIMAL, "gpuburst:workloads": json.dumps({"w": facts})})
    assert cfg.workloads[0].runs_as_consumer is consumer


# -- the levers: warm GPU floor, KEDA polling, Karpenter batching -----------------------------------------------------

WARM = {"count": 1, "start": "0 8 * * 1-5", "end": "0 13 * * 1-5", "timezone": "Europe/London"}


def with_(**keys):
    return {**MINIMAL, **{f"gpuburst:{k}": json.dumps(v) for k, v in keys.items()}}


def test_lever_defaults():
    cfg = parse_config(MINIMAL)
    assert cfg.warm_gpus is None
    assert (cfg.polling_interval_s, cfg.karpenter_batch_idle_s, cfg.karpenter_batch_max_s) == (30, 1, 10)
    for key in ("warmGpus", "pollingIntervalS", "karpenterBatchIdleS", "karpenterBatchMaxS"):
        assert key in CONFIG_KEYS


def test_warm_gpus_parse_into_the_frozen_dataclass():
    from components.config import WarmGpus
    cfg = parse_config(with_(warmGpus=WARM, pollingIntervalS=15, karpenterBatchIdleS=2, karpenterBatchMaxS=20))
    assert cfg.warm_gpus == WarmGpus(count=1, start="0 8 * * 1-5", end="0 13 * * 1-5", timezone="Europe/London")
    assert (cfg.polling_interval_s, cfg.karpenter_batch_idle_s, cfg.karpenter_batch_max_s) == (15, 2, 20)
    with pytest.raises(Exception):
        cfg.warm_gpus.count = 3  # frozen


@pytest.mark.parametrize("key,value,needle", [
    ("warmGpus.count", {**WARM, "count": 0}, "0"),
    ("warmGpus.count", {**WARM, "count": 65}, "65"),
    ("warmGpus.count", {**WARM, "count": True}, "True"),
    ("warmGpus.count", {**WARM, "count": 9}, "gpuLimit"),  # above the default gpuLimit of 8
    ("warmGpus.start", {**WARM, "start": "0 8 * *"}, "0 8 * *"),
    ("warmGpus.end", {**WARM, "end": "0 13 * * 1-5 2026"}, "0 13 * * 1-5 2026"),
    ("warmGpus.end", {**WARM, "end": WARM["start"]}, "different from start"),
    ("warmGpus.timezone", {**WARM, "timezone": "Europe/Londres"}, "Europe/Londres"),
    ("warmGpus.timezone", {**WARM, "timezone": "../etc/passwd"}, "../etc/passwd"),
    ("warmGpus.timezone", {**WARM, "timezone": "Europe"}, "Europe"),
    ("warmGpus.colour", {**WARM, "colour": "red"}, "unknown warmGpus key"),
    ("warmGpus.timezone", {k: v for k, v in WARM.items() if k != "timezone"}, "required"),
    ("warmGpus", [1, 2], "[1, 2]"),
])
def test_bad_warm_gpus_name_key_and_value(key, value, needle):
    with pytest.raises(ConfigError) as e:
        parse_config(with_(warmGpus=value))
    text = one_line(e.value)
    assert text.startswith(f"gpuburst:{key}:") and needle in text


@pytest.mark.parametrize("keys,field,needle", [
    ({"pollingIntervalS": 4}, "pollingIntervalS", "4"),
    ({"pollingIntervalS": "30s"}, "pollingIntervalS", "30s"),
    ({"karpenterBatchIdleS": 0}, "karpenterBatchIdleS", "0"),
    ({"karpenterBatchMaxS": 601}, "karpenterBatchMaxS", "601"),
    ({"karpenterBatchIdleS": 5, "karpenterBatchMaxS": 3}, "karpenterBatchMaxS", "karpenterBatchIdleS = 5"),
])
def test_bad_polling_and_batch_values(keys, field, needle):
    with pytest.raises(ConfigError) as e:
        parse_config(with_(**keys))
    text = one_line(e.value)
    assert text.startswith(f"gpuburst:{field}:") and needle in text


def test_prod_sets_a_warm_floor_with_its_cost_stated():
    cfg = parse_config(stack_file("prod"), stack="prod")
    assert cfg.warm_gpus is not None and cfg.warm_gpus.timezone == "Europe/London"
    assert "cost" in (ROOT / "Pulumi.prod.yaml").read_text().lower()


# -- burstBudget: the budget `verify --check burst` judges against ----------------------------------------------------

BUDGET = {"firstResultS": 420, "lastResultS": 600}


def test_burst_budget_is_optional_and_parses_into_the_frozen_dataclass():
    from components.config import BurstBudget
    assert parse_config(MINIMAL).burst_budget is None
    assert "burstBudget" in CONFIG_KEYS
    cfg = parse_config(with_(burstBudget={"firstResultS": 420, "lastResultS": 600.5}))
    assert cfg.burst_budget == BurstBudget(first_result_s=420.0, last_result_s=600.5)
    with pytest.raises(Exception):
        cfg.burst_budget.first_result_s = 1  # frozen


def test_equal_first_and_last_budget_is_allowed():
    cfg = parse_config(with_(burstBudget={"firstResultS": 300, "lastResultS": 300}))
    assert (cfg.burst_budget.first_result_s, cfg.burst_budget.last_result_s) == (300.0, 300.0)


@pytest.mark.parametrize("key,value,needle", [
    ("burstBudget.firstResultS", {**BUDGET, "firstResultS": 0}, "0"),
    ("burstBudget.firstResultS", {**BUDGET, "firstResultS": -5}, "-5"),
    ("burstBudget.firstResultS", {**BUDGET, "firstResultS": "7m"}, "7m"),
    ("burstBudget.firstResultS", {**BUDGET, "firstResultS": True}, "True"),
    ("burstBudget.lastResultS", {**BUDGET, "lastResultS": 86401}, "86401"),
    ("burstBudget.lastResultS", {**BUDGET, "lastResultS": 400}, "firstResultS = 420"),
    ("burstBudget.lastResultS", {"firstResultS": 420}, "required"),
    ("burstBudget.lastResultsS", {**BUDGET, "lastResultsS": 1}, "unknown burstBudget key"),
    ("burstBudget", 600, "600"),
])
def test_bad_burst_budget_names_key_and_value(key, value, needle):
    with pytest.raises(ConfigError) as e:
        parse_config(with_(burstBudget=value))
    text = one_line(e.value)
    assert text.startswith(f"gpuburst:{key}:") and needle in text
    assert "\n" not in str(e.value)


# --- faster image start: gpuInstanceStorePolicy and fastImagePull ---------------------------------------------------

def test_image_start_levers_default_to_the_nvme_raid0_and_fast_image_pull():
    cfg = parse_config(MINIMAL)
    assert (cfg.gpu_instance_store_policy, cfg.fast_image_pull) == ("RAID0", True)
    cfg = parse_config(with_(gpuInstanceStorePolicy="none", fastImagePull=False))
    assert (cfg.gpu_instance_store_policy, cfg.fast_image_pull) == ("none", False)


@pytest.mark.parametrize("keys,field,needle", [
    ({"gpuInstanceStorePolicy": "raid0"}, "gpuInstanceStorePolicy", "'raid0'"),
    ({"gpuInstanceStorePolicy": "RAID10"}, "gpuInstanceStorePolicy", "'RAID10'"),
    ({"fastImagePull": "yes"}, "fastImagePull", "'yes'"),
    ({"gpuInstanceStorePolicy": "none"}, "fastImagePull", "600 MiB/s"),  # fastImagePull's default true onto gp3
])
def test_bad_image_start_levers_name_key_and_value(keys, field, needle):
    with pytest.raises(ConfigError) as e:
        parse_config(with_(**keys))
    text = one_line(e.value)
    assert text.startswith(f"gpuburst:{field}:") and needle in text


def test_upgrade_support_type_defaults_to_standard_and_is_checked():
    assert parse_config(MINIMAL).upgrade_support_type == "STANDARD"
    assert parse_config({**MINIMAL, "gpuburst:upgradeSupportType": "EXTENDED"}).upgrade_support_type == "EXTENDED"
    with pytest.raises(ConfigError, match=r"gpuburst:upgradeSupportType: 'extended' is not valid: one of STANDARD, "
                                          r"EXTENDED"):
        parse_config({**MINIMAL, "gpuburst:upgradeSupportType": "extended"})


def test_1_34_is_refused_past_its_end_of_standard_support_unless_extended(monkeypatch):
    stack = {**MINIMAL, "gpuburst:kubernetesVersion": "1.34"}
    monkeypatch.setenv(catalogue.TODAY_ENV, "2026-11-15")
    assert parse_config(stack).kubernetes_version == "1.34"  # inside the window: told, not refused
    monkeypatch.setenv(catalogue.TODAY_ENV, "2026-12-02")
    with pytest.raises(ConfigError) as e:
        parse_config(stack)
    text = one_line(e.value)
    assert text.startswith("gpuburst:kubernetesVersion: '1.34' is not valid: Kubernetes 1.34 left EKS standard "
                           "support on 2026-12-02") and "$0.60" in text
    assert parse_config({**stack, "gpuburst:upgradeSupportType": "EXTENDED"}).upgrade_support_type == "EXTENDED"


def test_support_advisory_names_the_date(monkeypatch):
    from datetime import date

    from components.config import support_advisory

    cfg = parse_config({**MINIMAL, "gpuburst:kubernetesVersion": "1.34"})
    finding = support_advisory(cfg, date(2026, 11, 15))
    assert finding.level == "advisory" and "2026-12-02" in finding.message
    assert support_advisory(parse_config(MINIMAL), date(2026, 11, 15)) is None


def test_device_plugin_cdi_feature_flags_default_and_bad_values():
    assert parse_config(MINIMAL).device_plugin_cdi_feature_flags == ("disable-nvsandboxutils",)
    assert parse_config({**MINIMAL, "gpuburst:devicePluginCdiFeatureFlags": "[]"}).device_plugin_cdi_feature_flags \
        == ()
    for bad in (json.dumps(["Disable_NVSandbox"]), json.dumps("disable-nvsandboxutils"),
                json.dumps(["a", "a"])):
        with pytest.raises(ConfigError, match="gpuburst:devicePluginCdiFeatureFlags"):
            parse_config({**MINIMAL, "gpuburst:devicePluginCdiFeatureFlags": bad})


@pytest.mark.parametrize("key,meant", [("gpuLimits", "gpuLimit"), ("GPULIMIT", "gpuLimit"),
                                       ("karpenterVersions", "karpenterVersion"), ("alarmEmail", "alarmEmails")])
def test_a_misspelt_key_gets_a_did_you_mean(key, meant):
    with pytest.raises(ConfigError) as e:
        parse_config({**MINIMAL, f"gpuburst:{key}": "8"})
    assert f"did you mean gpuburst:{meant}?" in one_line(e.value)


def test_a_misspelt_workload_key_gets_a_did_you_mean():
    bad = {**MINIMAL, "gpuburst:workloads": json.dumps({"slides": {"expectedprocessingS": 300}})}
    with pytest.raises(ConfigError) as e:
        parse_config(bad)
    assert one_line(e.value).startswith("gpuburst:workloads.slides.expectedprocessingS: 300 is not valid: unknown "
                                        "workload key; did you mean gpuburst:workloads.slides.expectedProcessingS?")


@pytest.mark.parametrize("provider", ["gcp", "azure-workload", "none"])
def test_a_provider_the_stack_would_ignore_is_refused(provider):
    # The stack's TriggerAuthentications are always provider 'aws' (SQS through Pod Identity): any other value KEDA
    # accepts was silently ignored.
    with pytest.raises(ConfigError) as e:
        parse_config({**MINIMAL, "gpuburst:kedaProvider": provider})
    assert one_line(e.value).startswith(f"gpuburst:kedaProvider: '{provider}' is not valid") and "needs 'aws'" in \
        one_line(e.value)


@pytest.mark.parametrize("facts,key", [({"ordered": True, "itemsIndependent": False}, "ordered"),
                                       ({"stateful": True}, "stateful"),
                                       ({"itemsIndependent": False}, "itemsIndependent")])
def test_a_scaledjob_for_work_that_cannot_run_in_parallel_is_refused_in_the_stacks_words(facts, key):
    bad = {**MINIMAL, "gpuburst:workloads": json.dumps({"studies": {**facts, "pattern": "scaledjob"}})}
    with pytest.raises(ConfigError) as e:
        parse_config(bad)
    text = one_line(e.value)
    assert text.startswith("gpuburst:workloads.studies.pattern: 'scaledjob' is not valid: "
                           f"gpuburst:workloads.studies.{key} is "), text
    assert "WorkloadFacts" not in text and "set pattern: consumer" in text


def test_verify_image_is_optional_and_pinned_by_digest():
    assert StackConfig().verify_image is None and parse_config(MINIMAL).verify_image is None
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-verify@sha256:" + "f" * 64
    assert parse_config({**MINIMAL, "gpuburst:verifyImage": image}).verify_image == image
    assert "gpuburst:verifyImage" not in stack_file("prod"), "no invented image reference in the prod stack"


# --- gpuNodeSsm: SSM on the GPU node role is opt-in (issue 27) -------------------------------------------------------

def test_gpu_node_ssm_is_off_unless_the_stack_turns_it_on():
    assert parse_config(MINIMAL).gpu_node_ssm is False
    assert parse_config(with_(gpuNodeSsm=True)).gpu_node_ssm is True


@pytest.mark.parametrize("value", ["true", 1, None])
def test_a_bad_gpu_node_ssm_names_key_and_value(value):
    with pytest.raises(ConfigError) as e:
        parse_config(with_(gpuNodeSsm=value))
    text = one_line(e.value)
    assert text.startswith("gpuburst:gpuNodeSsm:") and repr(value) in text and "\n" not in str(e.value)


def test_a_private_endpoint_without_a_runner_is_refused_before_anything_exists():
    cidr_only = {"deployerRoleArns": [DEPLOYER], "deployCidrs": ["198.51.100.0/24"]}
    with pytest.raises(ConfigError, match=r"gpuburst:endpointPublicAccess: False is not valid: true \(with "
                                          r"publicAccessCidrs covering deploy.deployCidrs\), or a deploy.runner"):
        parse_config({**MINIMAL, "gpuburst:deploy": json.dumps(cidr_only)})


def test_the_public_endpoint_must_admit_every_deploy_cidr_when_there_is_no_runner():
    cidr_only = {"deployerRoleArns": [DEPLOYER], "deployCidrs": ["198.51.100.0/24", "192.0.2.0/24"]}
    raw = {**MINIMAL, "gpuburst:deploy": json.dumps(cidr_only), "gpuburst:endpointPublicAccess": "true",
           "gpuburst:publicAccessCidrs": json.dumps(["198.51.100.0/23"])}
    with pytest.raises(ConfigError, match=r"gpuburst:publicAccessCidrs: \['198.51.100.0/23'\] is not valid: a list "
                                          r"covering deploy CIDR 192.0.2.0/24"):
        parse_config(raw)
    ok = {**raw, "gpuburst:publicAccessCidrs": json.dumps(["198.51.100.0/23", "192.0.2.0/24"])}
    assert parse_config(ok).deploy.deploy_cidrs == ("198.51.100.0/24", "192.0.2.0/24")


def test_a_bad_deploy_field_is_one_line_naming_it():
    bad = {**DEPLOY, "slideUploaders": [{"roleArn": "arn:aws:iam::123456789012:role/scanner", "cidrs": ["0.0.0.0/0"]}]}
    with pytest.raises(ConfigError, match=r"^gpuburst:deploy.slideUploaders\[0\].cidrs: '0.0.0.0/0' is not valid"):
        parse_config({**MINIMAL, "gpuburst:deploy": json.dumps(bad)})


def test_keda_extra_watch_namespaces_are_parsed_and_default_to_none():
    assert parse_config(MINIMAL).keda_extra_watch_namespaces == ()
    cfg = parse_config({**MINIMAL, "gpuburst:kedaExtraWatchNamespaces": json.dumps(["cyto-slides", "lab-tils"])})
    assert cfg.keda_extra_watch_namespaces == ("cyto-slides", "lab-tils")


@pytest.mark.parametrize("bad", [["Cyto-Slides"], ["cyto-slides", "cyto-slides"], "cyto-slides", ["-lab"],
                                 ["a" * 64], [7]])
def test_a_bad_keda_extra_watch_namespace_list_is_one_line_naming_key_and_value(bad):
    with pytest.raises(ConfigError) as e:
        parse_config({**MINIMAL, "gpuburst:kedaExtraWatchNamespaces": json.dumps(bad) if not isinstance(bad, str)
                      else bad})
    assert one_line(e.value).startswith(f"gpuburst:kedaExtraWatchNamespaces: {bad!r} is not valid: a list of "
                                        "distinct namespace names")


def test_a_misspelt_keda_extra_watch_namespaces_key_gets_a_did_you_mean():
    with pytest.raises(ConfigError) as e:
        parse_config({**MINIMAL, "gpuburst:kedaExtraWatchNamespace": json.dumps(["cyto-slides"])})
    assert "did you mean gpuburst:kedaExtraWatchNamespaces?" in one_line(e.value)

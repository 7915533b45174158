"""Tests of the KEDA manifest rules: catalogue facts against the upstream CRDs (the oracle), and one-line errors that
name the field, the value and what the pinned KEDA accepts."""
from __future__ import annotations

import asyncio
import copy

import pulumi
import pytest

from components import catalogue
from components.spec.keda_schema import CREDENTIAL_METADATA_KEYS, REDACTED, check_keda_manifest, keda_manifest_problems
from components.spec.validation import ConfigError
from tests.components.crd_oracle import crd_schema, load_crd, validate_against_crd

ROLE = "arn:aws:iam::123456789012:role/gpuburst/keda-scaler/slides"
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/slides"


def trigger_auth(**pod_identity) -> dict:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication",
            "metadata": {"name": "sqs-auth", "namespace": "gpuburst"},
            "spec": {"podIdentity": pod_identity or {"provider": "aws", "roleArn": ROLE}}}


def scaled_job() -> dict:
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob",
        "metadata": {"name": "slides", "namespace": "gpuburst"},
        "spec": {
            "jobTargetRef": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "worker", "image": "r/w@sha256:" + "0" * 64}]}}},
            "pollingInterval": 30, "maxReplicaCount": 8, "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 5, "rollout": {"strategy": "gradual"},
            "triggers": [{"type": "aws-sqs-queue", "authenticationRef": {"name": "sqs-auth"},
                          "metadata": {"queueURL": QUEUE_URL, "queueLength": "1", "awsRegion": "us-east-1",
                                       "scaleOnInFlight": "true"}}],
        },
    }


def one_error(manifest: dict, version: str = catalogue.KEDA_VERSION) -> str:
    with pytest.raises(ConfigError) as e:
        check_keda_manifest(manifest, version)
    text = str(e.value)
    assert "\n" not in text, text
    return text


# --------------------------------------------------------------------------------------------------------------------
# Catalogue facts vs the upstream CRDs
# --------------------------------------------------------------------------------------------------------------------

def _crd(upstream_crds, version: str, kind: str) -> dict:
    return crd_schema(load_crd(upstream_crds / f"keda-v{version}-{kind}.yaml"))


@pytest.mark.parametrize("version", ["2.13.0", "2.19.0", "2.20.2"])
@pytest.mark.parametrize("kind", ["triggerauthentications", "clustertriggerauthentications"])
def test_catalogue_providers_equal_upstream_crd_enum(upstream_crds, version, kind):
    pod_identity = _crd(upstream_crds, version, kind)["properties"]["spec"]["properties"]["podIdentity"]
    assert list(catalogue.keda_providers(version)) == pod_identity["properties"]["provider"]["enum"]
    assert tuple(pod_identity["properties"]["identityOwner"]["enum"]) == catalogue.KEDA_IDENTITY_OWNERS


def test_catalogue_strategies_equal_upstream_scaledjob_enums(upstream_crds):
    spec = _crd(upstream_crds, catalogue.KEDA_VERSION, "scaledjobs")["properties"]["spec"]["properties"]
    assert tuple(spec["rollout"]["properties"]["strategy"]["enum"]) == catalogue.KEDA_ROLLOUT_STRATEGIES
    assert tuple(spec["scalingStrategy"]["properties"]["strategy"]["enum"]) == catalogue.KEDA_SCALING_STRATEGIES


def test_valid_manifests_pass_the_rules_and_the_upstream_crds(upstream_crds):
    for manifest, kind in ((trigger_auth(), "triggerauthentications"), (scaled_job(), "scaledjobs")):
        assert keda_manifest_problems(manifest) == []
        assert validate_against_crd(manifest, upstream_crds / f"keda-v{catalogue.KEDA_VERSION}-{kind}.yaml") == []


@pytest.mark.parametrize("provider", ["aws", "aws-eks", "aws-kiam", "azure", "azure-workload", "gcp", "none",
                                      "AWS", ""])
@pytest.mark.parametrize("version", ["2.19.0", "2.20.2"])
def test_provider_rule_agrees_with_crd_except_the_deprecated_one(upstream_crds, provider, version):
    manifest = trigger_auth(provider=provider)
    ours = [str(e) for e in keda_manifest_problems(manifest, version)]
    crd = validate_against_crd(manifest, upstream_crds / f"keda-v{version}-triggerauthentications.yaml")
    if provider in catalogue.KEDA_DEPRECATED_PROVIDERS:
        assert crd == [] and ours  # KEDA still accepts it; the stack refuses it
    else:
        assert bool(ours) == bool(crd), (ours, crd)


# --------------------------------------------------------------------------------------------------------------------
# TriggerAuthentication errors
# --------------------------------------------------------------------------------------------------------------------

def test_aws_kiam_on_2_20_2_names_field_value_and_allowed():
    text = one_error(trigger_auth(provider="aws-kiam"), "2.20.2")
    assert text.startswith("TriggerAuthentication gpuburst/sqs-auth spec.podIdentity.provider: 'aws-kiam' is not "
                           "valid: KEDA 2.20.2 accepts azure-workload, gcp, aws, aws-eks, none")
    assert "deprecated" in text  # the note on aws-eks


def test_aws_eks_refused_with_deprecation_note():
    text = one_error(trigger_auth(provider="aws-eks"))
    assert text.startswith("TriggerAuthentication gpuburst/sqs-auth spec.podIdentity.provider: 'aws-eks' is not valid")
    assert "deprecated since KEDA 2.13" in text and "roleArn" in text
    assert "allowed: azure-workload, gcp, aws, none" in text


def test_role_arn_and_identity_owner_are_exclusive():
    text = one_error(trigger_auth(provider="aws", roleArn=ROLE, identityOwner="keda"))
    assert "spec.podIdentity.roleArn" in text and "mutually exclusive" in text


def test_identity_owner_enum():
    text = one_error(trigger_auth(provider="aws", identityOwner="operator"))
    assert "spec.podIdentity.identityOwner: 'operator' is not valid: one of keda, workload" in text
    assert keda_manifest_problems(trigger_auth(provider="aws", identityOwner="keda")) == []


def test_role_arn_must_be_a_role_arn():
    text = one_error(trigger_auth(provider="aws", roleArn="arn:aws:iam::123456789012:user/bob"))
    assert "spec.podIdentity.roleArn: 'arn:aws:iam::123456789012:user/bob'" in text


@pytest.fixture
def open_loop():
    """An open event loop for an Output made outside a Pulumi program (a mocks run before this test closes its)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    loop.close()


def test_role_arn_output_is_not_judged(open_loop):
    assert keda_manifest_problems(trigger_auth(provider="aws", roleArn=pulumi.Output.from_input(ROLE))) == []


def test_pod_identity_required_and_static_keys_refused():
    m = trigger_auth()
    del m["spec"]["podIdentity"]
    m["spec"]["secretTargetRef"] = [{"parameter": "awsAccessKeyID", "name": "s", "key": "id"}]
    texts = [str(e) for e in keda_manifest_problems(m)]
    assert any(t.startswith("TriggerAuthentication gpuburst/sqs-auth spec.podIdentity: None is not valid: required")
               for t in texts)
    assert any("spec.secretTargetRef[0].parameter: 'awsAccessKeyID'" in t and "static AWS keys" in t for t in texts)


def test_cluster_trigger_authentication_has_no_namespace_in_message():
    m = trigger_auth(provider="aws-kiam")
    m["kind"] = "ClusterTriggerAuthentication"
    del m["metadata"]["namespace"]
    assert one_error(m).startswith("ClusterTriggerAuthentication sqs-auth spec.podIdentity.provider: 'aws-kiam'")


# --------------------------------------------------------------------------------------------------------------------
# ScaledJob errors
# --------------------------------------------------------------------------------------------------------------------

def test_unknown_rollout_strategy():
    m = scaled_job()
    m["spec"]["rollout"]["strategy"] = "rolling"
    assert one_error(m).startswith("ScaledJob gpuburst/slides spec.rollout.strategy: 'rolling' is not valid: one of "
                                   "gradual, immediate")


def test_scaling_strategy_default_refused_on_2_20_1_only():
    m = scaled_job()
    m["spec"]["scalingStrategy"] = {"strategy": "default"}
    text = one_error(m, "2.20.1")
    assert text.startswith("ScaledJob gpuburst/slides spec.scalingStrategy.strategy: 'default' is not valid")
    assert "2.20.2" in text and "accurate" in text
    assert keda_manifest_problems(m, "2.20.2") == []


def test_unknown_scaling_strategy():
    m = scaled_job()
    m["spec"]["scalingStrategy"] = {"strategy": "greedy"}
    text = one_error(m)
    assert "spec.scalingStrategy.strategy: 'greedy' is not valid" in text
    assert "default, custom, accurate, eager" in text


@pytest.mark.parametrize("key", CREDENTIAL_METADATA_KEYS)
def test_inline_credentials_refused_and_redacted(key):
    m = scaled_job()
    m["spec"]["triggers"][0]["metadata"][key] = "AKIAEXAMPLESECRET"
    text = one_error(m)
    assert text.startswith(f"ScaledJob gpuburst/slides spec.triggers[0].metadata.{key}: {REDACTED!r} is not valid")
    assert "AKIAEXAMPLESECRET" not in text
    assert "TriggerAuthentication" in text


@pytest.mark.parametrize("mutate,expect", [
    (lambda s: s["triggers"][0].pop("authenticationRef"),
     "spec.triggers[0].authenticationRef: None is not valid: required"),
    (lambda s: s["triggers"][0]["authenticationRef"].update(kind="Secret"),
     "authenticationRef.kind one of TriggerAuthentication, ClusterTriggerAuthentication"),
    (lambda s: s["triggers"][0]["metadata"].update(queueLength=1),
     "spec.triggers[0].metadata.queueLength: 1 is not valid: a string"),
    (lambda s: s["triggers"][0]["metadata"].update(queueLength="0"),
     "spec.triggers[0].metadata.queueLength: '0' is not valid: a whole number >= 1"),
    (lambda s: s["triggers"][0]["metadata"].update(queueUrl=QUEUE_URL),
     "spec.triggers[0].metadata.queueUrl: '" + QUEUE_URL + "' is not valid: a known aws-sqs-queue metadata key"),
    (lambda s: s["triggers"][0]["metadata"].pop("awsRegion"),
     "spec.triggers[0].metadata.awsRegion: None is not valid: aws-sqs-queue needs awsRegion"),
    (lambda s: s["triggers"][0]["metadata"].update(awsRegion="US East"),
     "spec.triggers[0].metadata.awsRegion: 'US East' is not valid"),
    (lambda s: s["triggers"][0]["metadata"].update(identityOwner="operator"),
     "spec.triggers[0].metadata.identityOwner: 'operator' is not valid: trigger metadata identityOwner is deprecated"),
    (lambda s: s["triggers"][0]["metadata"].update(scaleOnInFlight="yes"),
     "spec.triggers[0].metadata.scaleOnInFlight: 'yes' is not valid"),
    (lambda s: s.update(pollingInterval=0), "spec.pollingInterval: 0 is not valid: an integer >= 1"),
    (lambda s: s.update(pollingInterval="30"), "spec.pollingInterval: '30' is not valid: an integer >= 1"),
    (lambda s: s.update(maxReplicaCount=-1), "spec.maxReplicaCount: -1 is not valid: an integer >= 1"),
    (lambda s: s.update(successfulJobsHistoryLimit=-1), "spec.successfulJobsHistoryLimit: -1 is not valid"),
    (lambda s: s.update(rolloutStrategy="gradual"),
     "spec.rolloutStrategy: 'gradual' is not valid: spec.rolloutStrategy is deprecated"),
    (lambda s: s.update(triggers=[]), "spec.triggers: [] is not valid: a non-empty list"),
    (lambda s: s.pop("jobTargetRef"), "spec.jobTargetRef: None is not valid: required"),
])
def test_scaled_job_rules(mutate, expect):
    m = scaled_job()
    mutate(m["spec"])
    text = one_error(m)
    assert text.startswith("ScaledJob gpuburst/slides "), text
    assert expect in text, text


def test_scaled_job_rule_failures_the_crd_also_catches(upstream_crds):
    """Where the pinned CRD has a constraint, our rule and the CRD agree (ours just says it better)."""
    crd = upstream_crds / f"keda-v{catalogue.KEDA_VERSION}-scaledjobs.yaml"
    for mutate in (lambda s: s.update(pollingInterval=0), lambda s: s.update(maxReplicaCount=0),
                   lambda s: s["rollout"].update(strategy="rolling"),
                   lambda s: s.update(scalingStrategy={"strategy": "greedy"}),
                   lambda s: s["triggers"][0]["metadata"].update(queueLength=1),
                   lambda s: s["triggers"][0]["authenticationRef"].update(kind="Secret")):
        m = scaled_job()
        mutate(m["spec"])
        assert keda_manifest_problems(m) and validate_against_crd(m, crd)


def test_outputs_are_not_judged(open_loop):
    m = scaled_job()
    m["spec"]["triggers"][0]["metadata"]["queueURL"] = pulumi.Output.from_input(QUEUE_URL)
    assert keda_manifest_problems(m) == []


def test_wrong_api_version_and_kind():
    m = copy.deepcopy(scaled_job())
    m["apiVersion"] = "keda.sh/v1beta1"
    assert "apiVersion: 'keda.sh/v1beta1' is not valid: keda.sh/v1alpha1" in one_error(m)
    m = scaled_job()
    m["kind"] = "ScaledObject"
    assert "kind: 'ScaledObject' is not valid" in one_error(m)

"""Tests for the workload rules: SQS trigger auth, ScaledJob rollout, statelessness and messages per Job, GPU pod
placement."""
from __future__ import annotations

import pytest

from components import catalogue
from policies import workloads as rule

IT = "node.kubernetes.io/instance-type"


def test_compliant_workloads_pass(run_rule, samples):
    for policy in rule.POLICIES:
        assert run_rule(policy, samples.T_SCALEDJOB, samples.scaled_job()) == [], policy.name
        assert run_rule(policy, samples.T_DEPLOYMENT, samples.consumer_deployment()) == [], policy.name


# -- keda-sqs-trigger-auth ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", rule.INLINE_CREDENTIAL_KEYS)
@pytest.mark.parametrize("type_attr", ["T_SCALEDJOB", "T_SCALEDOBJECT"])
def test_inline_credentials_fail(run_rule, samples, key, type_attr):
    sj = samples.scaled_job()
    sj["spec"]["triggers"][0]["metadata"][key] = "AKIA-not-real"
    messages = run_rule(rule.AUTH_POLICY, getattr(samples, type_attr), sj)
    assert len(messages) == 1 and f"spec.triggers[0].metadata.{key} is set" in messages[0]
    assert "authenticationRef" in messages[0]


def test_missing_authentication_ref_fails(run_rule, samples):
    sj = samples.scaled_job()
    del sj["spec"]["triggers"][0]["authenticationRef"]
    messages = run_rule(rule.AUTH_POLICY, samples.T_SCALEDJOB, sj)
    assert len(messages) == 1 and "spec.triggers[0].authenticationRef is missing" in messages[0]
    sj["spec"]["triggers"][0]["authenticationRef"] = {"kind": "TriggerAuthentication"}
    assert "has no name" in run_rule(rule.AUTH_POLICY, samples.T_SCALEDJOB, sj)[0]
    other = samples.scaled_job()
    other["spec"]["triggers"] = [{"type": "cron", "metadata": {"timezone": "UTC"}}]
    assert run_rule(rule.AUTH_POLICY, samples.T_SCALEDJOB, other) == []  # not an SQS trigger


def test_auth_unknowns(run_rule, samples):
    U = samples.U
    sj = samples.scaled_job()
    sj["spec"]["triggers"][0]["authenticationRef"]["name"] = U
    sj["spec"]["triggers"][0]["metadata"]["queueURL"] = U  # computed queue URL: normal at preview
    assert run_rule(rule.AUTH_POLICY, samples.T_SCALEDJOB, sj) == []
    sj["spec"]["triggers"][0]["metadata"] = U
    assert "metadata is unknown" in run_rule(rule.AUTH_POLICY, samples.T_SCALEDJOB, sj)[0]
    sj["spec"]["triggers"] = U
    assert "spec.triggers is unknown" in run_rule(rule.AUTH_POLICY, samples.T_SCALEDJOB, sj)[0]


# -- keda-scaledjob-rollout and keda-scaledjob-stateless ------------------------------------------------------------

def test_rollout(run_rule, samples):
    assert rule.ROLLOUT_STRATEGY in catalogue.KEDA_ROLLOUT_STRATEGIES
    for spec_change, expected in (({"rollout": {"strategy": "immediate"}}, "spec.rollout.strategy = 'immediate'"),
                                  ({"rollout": None}, "spec.rollout.strategy is missing"),
                                  ({"rollout": None, "rolloutStrategy": "gradual"}, "spec.rolloutStrategy = 'gradual' "
                                                                                    "is deprecated"),
                                  ({"rollout": {"strategy": samples.U}}, "spec.rollout.strategy is unknown")):
        sj = samples.scaled_job()
        for k, v in spec_change.items():
            if v is None:
                sj["spec"].pop(k)
            else:
                sj["spec"][k] = v
        messages = run_rule(rule.ROLLOUT_POLICY, samples.T_SCALEDJOB, sj)
        assert len(messages) == 1 and expected in messages[0], messages
    assert run_rule(rule.ROLLOUT_POLICY, samples.T_DEPLOYMENT, samples.consumer_deployment()) == []


@pytest.mark.parametrize("annotation", rule.STATEFUL_ANNOTATIONS)
def test_ordered_or_stateful_scaledjob_fails(run_rule, samples, annotation):
    sj = samples.scaled_job()
    sj["metadata"]["annotations"][annotation] = "true"
    messages = run_rule(rule.STATELESS_POLICY, samples.T_SCALEDJOB, sj)
    assert len(messages) == 1
    assert f'metadata.annotations."{annotation}" = \'true\'' in messages[0]
    assert "use the persistent consumer (GpuConsumer Deployment)" in messages[0]
    sj["metadata"]["annotations"][annotation] = samples.U
    assert "unknown during preview" in run_rule(rule.STATELESS_POLICY, samples.T_SCALEDJOB, sj)[0]
    bare = samples.scaled_job()
    del bare["metadata"]["annotations"]
    assert run_rule(rule.STATELESS_POLICY, samples.T_SCALEDJOB, bare) == []


# -- gpu-pod-placement ----------------------------------------------------------------------------------------------

def with_pod(samples, type_attr, mutate):
    """A resource of the given kind around the sample GPU pod spec, after `mutate(pod_spec)`."""
    pod = samples.gpu_pod_spec()
    mutate(pod)
    if type_attr == "T_SCALEDJOB":
        sj = samples.scaled_job()
        sj["spec"]["jobTargetRef"]["template"]["spec"] = pod
        return sj, "spec.jobTargetRef.template.spec"
    if type_attr == "T_DEPLOYMENT":
        return {"spec": {"template": {"spec": pod}}}, "spec.template.spec"
    if type_attr == "T_JOB":
        return {"spec": {"template": {"spec": pod}}}, "spec.template.spec"
    return {"spec": pod}, "spec"


KINDS = ["T_SCALEDJOB", "T_DEPLOYMENT", "T_JOB", "T_POD"]


@pytest.mark.parametrize("type_attr", KINDS)
def test_gpu_pod_without_toleration_fails(run_rule, samples, type_attr):
    props, path = with_pod(samples, type_attr, lambda p: p.pop("tolerations"))
    messages = run_rule(rule.PLACEMENT_POLICY, getattr(samples, type_attr), props)
    assert len(messages) == 1 and f"{path}.tolerations has no toleration for the nvidia.com/gpu" in messages[0]


@pytest.mark.parametrize("type_attr", KINDS)
@pytest.mark.parametrize("mutate", [
    lambda p: p["nodeSelector"].update({IT: "g5.xlarge"}),
    lambda p: p["nodeSelector"].update({"beta.kubernetes.io/instance-type": "g5.xlarge"}),
    lambda p: p["nodeSelector"].update({"karpenter.k8s.aws/instance-family": "g5",
                                        "karpenter.k8s.aws/instance-size": "xlarge"}),
    lambda p: p.update(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": IT, "operator": "In", "values": ["g5.xlarge"]}]}]}}}),
    lambda p: p.update(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": IT, "operator": "In", "values": ["g5.xlarge"]}]},
            {"matchExpressions": [{"key": IT, "operator": "In", "values": ["g5.xlarge", "g5.xlarge"]}]}]}}}),
], ids=["selector", "beta-selector", "family-size-selector", "affinity", "two-terms-same-type"])
def test_gpu_pod_pinned_to_one_type_fails(run_rule, samples, type_attr, mutate):
    props, path = with_pod(samples, type_attr, mutate)
    messages = run_rule(rule.PLACEMENT_POLICY, getattr(samples, type_attr), props)
    assert len(messages) == 1 and f"{path}: nodeSelector / required nodeAffinity admit only 'g5.xlarge'" in \
        messages[0], messages


@pytest.mark.parametrize("mutate", [
    lambda p: p.update(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": IT, "operator": "In", "values": ["g5.xlarge"]}]},
                              {"matchExpressions": [{"key": IT, "operator": "In", "values": ["g6.xlarge"]}]}]}}}),
    lambda p: p.update(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": IT, "operator": "In", "values": ["g5.xlarge"]}]}}]}}),
    lambda p: p["nodeSelector"].update({"karpenter.k8s.aws/instance-family": "g5"}),
    lambda p: p.update(tolerations=[{"operator": "Exists"}]),
    lambda p: p.update(tolerations=[{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true"}]),
], ids=["two-types-ored", "preferred-only", "family-only", "tolerate-everything", "equal-no-effect"])
def test_flexible_gpu_pods_pass(run_rule, samples, mutate):
    props, _ = with_pod(samples, "T_DEPLOYMENT", mutate)
    assert run_rule(rule.PLACEMENT_POLICY, samples.T_DEPLOYMENT, props) == []


def test_pods_without_gpus_are_not_judged(run_rule, samples):
    def cpu_only(pod):
        for section in ("requests", "limits"):
            pod["containers"][0]["resources"][section].pop("nvidia.com/gpu")
        pod.pop("tolerations")
        pod["nodeSelector"] = {IT: "m7i.large"}

    props, _ = with_pod(samples, "T_DEPLOYMENT", cpu_only)
    assert run_rule(rule.PLACEMENT_POLICY, samples.T_DEPLOYMENT, props) == []
    assert run_rule(rule.PLACEMENT_POLICY, samples.T_DEPLOYMENT, {}) == []  # missing properties
    init_gpu, _ = with_pod(samples, "T_POD", lambda p: (cpu_only(p), p.update(initContainers=[
        {"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}])))
    assert len(run_rule(rule.PLACEMENT_POLICY, samples.T_POD, init_gpu)) == 2  # an init container asks for a GPU


def test_placement_unknowns(run_rule, samples):
    U = samples.U
    props, _ = with_pod(samples, "T_DEPLOYMENT", lambda p: p["containers"][0].update(image=U))
    assert run_rule(rule.PLACEMENT_POLICY, samples.T_DEPLOYMENT, props) == []  # computed image: normal
    props, _ = with_pod(samples, "T_DEPLOYMENT", lambda p: p.update(tolerations=U))
    messages = run_rule(rule.PLACEMENT_POLICY, samples.T_DEPLOYMENT, props)
    assert len(messages) == 1 and "spec.template.spec.tolerations is unknown" in messages[0]
    props, _ = with_pod(samples, "T_DEPLOYMENT", lambda p: p["nodeSelector"].update({IT: U}))
    messages = run_rule(rule.PLACEMENT_POLICY, samples.T_DEPLOYMENT, props)
    assert len(messages) == 1 and "instance-type\" is unknown" in messages[0]
    # Whether it requests a GPU is unknown and it would fail if it does: both are said.
    def unknown_gpu(pod):
        pod["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": U}}
        pod.pop("tolerations")
    props, _ = with_pod(samples, "T_DEPLOYMENT", unknown_gpu)
    messages = run_rule(rule.PLACEMENT_POLICY, samples.T_DEPLOYMENT, props)
    assert len(messages) == 2 and "whether the pod requests nvidia.com/gpu" in messages[0]


def test_over_grpc_with_config_overrides(analyze, samples):
    sj = samples.scaled_job()
    sj["metadata"]["annotations"]["gpuburst.io/ordered"] = "true"
    sj["spec"]["rollout"] = {"strategy": "immediate"}
    sj["spec"]["triggers"][0]["metadata"]["awsSecretAccessKey"] = "x"
    sj["spec"]["jobTargetRef"]["template"]["spec"]["nodeSelector"] = {IT: "g5.xlarge"}
    doc = samples.plan((samples.T_SCALEDJOB, sj))
    report = analyze(doc)
    for name in (rule.AUTH_NAME, rule.ROLLOUT_NAME, rule.STATELESS_NAME, rule.PLACEMENT_NAME):
        assert [d.level for d in report.by_policy(name)] == ["MANDATORY"], name
    report = analyze(doc, {rule.AUTH_NAME: "advisory", rule.ROLLOUT_NAME: {"enforcementLevel": "disabled"},
                           rule.STATELESS_NAME: "advisory", rule.PLACEMENT_NAME: "disabled"})
    assert [d.level for d in report.by_policy(rule.AUTH_NAME)] == ["ADVISORY"]
    assert [d.level for d in report.by_policy(rule.STATELESS_NAME)] == ["ADVISORY"]
    assert report.by_policy(rule.ROLLOUT_NAME) == [] and report.by_policy(rule.PLACEMENT_NAME) == []
    unknown = samples.scaled_job()
    unknown["spec"]["rollout"] = {"strategy": samples.U}
    assert [d.level for d in analyze(samples.plan((samples.T_SCALEDJOB, unknown))).by_policy(rule.ROLLOUT_NAME)] \
        == ["MANDATORY"]


@pytest.mark.parametrize("toleration", [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "PreferNoSchedule"},
    {"key": "nvidia.com/gpu.present", "operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Equal", "value": "true"},
], ids=["no-execute", "prefer", "other-key", "empty-key-equal"])
def test_tolerations_that_do_not_tolerate_the_gpu_taint_fail(run_rule, samples, toleration):
    props, path = with_pod(samples, "T_DEPLOYMENT", lambda p: p.update(tolerations=[toleration]))
    messages = run_rule(rule.PLACEMENT_POLICY, samples.T_DEPLOYMENT, props)
    assert len(messages) == 1 and "has no toleration for the nvidia.com/gpu:NoSchedule taint" in messages[0]


# -- scaledjob-messages-per-job ----------------------------------------------------------------------------------------

def batch_job(samples, queue_length, *argv: str) -> dict:
    sj = samples.scaled_job()
    if queue_length is None:
        del sj["spec"]["triggers"][0]["metadata"]["queueLength"]
    else:
        sj["spec"]["triggers"][0]["metadata"]["queueLength"] = queue_length
    sj["spec"]["jobTargetRef"]["template"]["spec"]["containers"][0]["command"] = [
        "python", "-m", "worker", "consume", "--mode", "job", *argv]
    return sj


@pytest.mark.parametrize("queue_length,argv", [("25", ("--max-messages", "25")), ("1", ("--max-messages", "1")),
                                               ("25", ("--max-messages=25",)), (None, ("--max-messages", "5")),
                                               ("25", ())])
def test_a_queue_length_equal_to_the_workers_max_messages_passes(run_rule, samples, queue_length, argv):
    assert run_rule(rule.BATCH_POLICY, samples.T_SCALEDJOB, batch_job(samples, queue_length, *argv)) == []


def test_a_queue_length_other_than_the_workers_max_messages_fails_naming_both(run_rule, samples):
    (message,) = run_rule(rule.BATCH_POLICY, samples.T_SCALEDJOB, batch_job(samples, "1", "--max-messages", "25"))
    assert message.startswith("spec.triggers[0].metadata.queueLength = '1' but spec.jobTargetRef.template.spec."
                              "containers[0].command[7] (--max-messages) = '25': ")
    assert message.endswith("set both to the same number (the trigger's queueLength and the worker's --max-messages)")
    platform = ("urn:pulumi:dev::gpuburst::gpuburst:index:GpuBurstPlatform$gpuburst:index:GpuScaledJob$"
                f"{samples.T_SCALEDJOB}::slides-scaledjob")
    (said,) = rule.batch_problems(batch_job(samples, "1", "--max-messages", "25"), platform)
    assert said.endswith("(gpuburst:workloads.<name>.messagesPerJob)")


def test_an_unset_queue_length_is_keda_s_default(run_rule, samples):
    (message,) = run_rule(rule.BATCH_POLICY, samples.T_SCALEDJOB, batch_job(samples, None, "--max-messages", "25"))
    assert f"queueLength is unset (KEDA's default {catalogue.KEDA_SQS_DEFAULT_QUEUE_LENGTH})" in message


def test_an_unknown_queue_length_is_said(run_rule, samples):
    (message,) = run_rule(rule.BATCH_POLICY, samples.T_SCALEDJOB, batch_job(samples, samples.U, "--max-messages", "2"))
    assert "spec.triggers[0].metadata.queueLength" in message and "unknown during preview" in message


# -- worker-host-path --------------------------------------------------------------------------------------------------

T_PV = "kubernetes:core/v1:PersistentVolume"


def cache_volume(**host) -> dict:
    from components.model_cache import model_cache_manifests

    pv, _ = model_cache_manifests(namespace="gpuburst", volume_name="gpuburst-dev-model-cache", capacity_gib=20)
    pv["spec"]["hostPath"].update(host)
    return pv


def test_the_model_caches_volume_passes_and_any_other_host_path_volume_fails(run_rule):
    assert run_rule(rule.HOST_PATH_POLICY, T_PV, cache_volume()) == []
    (message,) = run_rule(rule.HOST_PATH_POLICY, T_PV, cache_volume(path="/"))
    assert message.startswith("spec.hostPath = {path: '/', type: 'Directory'} (claimRef.name 'gpuburst-model-cache')")
    assert "'/var/lib/kubelet/gpuburst-model-cache'" in message
    assert run_rule(rule.HOST_PATH_POLICY, T_PV, cache_volume(type="DirectoryOrCreate"))
    other_claim = cache_volume()
    other_claim["spec"]["claimRef"]["name"] = "scratch"
    assert run_rule(rule.HOST_PATH_POLICY, T_PV, other_claim)
    nfs = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "n"},
           "spec": {"nfs": {"server": "10.0.0.1", "path": "/"}}}
    assert run_rule(rule.HOST_PATH_POLICY, T_PV, nfs) == []


def test_a_worker_pod_with_a_host_path_volume_fails_and_others_are_not_judged(run_rule, samples):
    sj = samples.scaled_job()
    template = sj["spec"]["jobTargetRef"]["template"]
    template["spec"]["volumes"] = [{"name": "cache", "hostPath": {"path": "/var/lib/kubelet/gpuburst-model-cache"}}]
    assert run_rule(rule.HOST_PATH_POLICY, samples.T_SCALEDJOB, sj) == []  # not labelled a worker
    template["metadata"] = {"labels": {"app.kubernetes.io/name": "gpuburst-worker"}}
    (message,) = run_rule(rule.HOST_PATH_POLICY, samples.T_SCALEDJOB, sj)
    assert message.startswith("spec.jobTargetRef.template.spec.volumes[0].hostPath = {path: ") and \
        "restricted" in message
    template["spec"]["volumes"] = [{"name": "c", "persistentVolumeClaim": {"claimName": "gpuburst-model-cache"}}]
    assert run_rule(rule.HOST_PATH_POLICY, samples.T_SCALEDJOB, sj) == []

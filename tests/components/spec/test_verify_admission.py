"""verify's admission rule, evaluated: the two probe Jobs verify builds (components/verify/gpujob.py and
identity_probe.py) are admitted, and a Job from the verify identity with another image, command, ServiceAccount, env,
volume or privilege is refused (the CEL run by cel-python through tests/components/admission_oracle.py); other callers'
Jobs are not touched, and the dev plan holds the rule with params that admit its own workloads' probes."""
from __future__ import annotations

import copy
import uuid

import pytest

from components.pod import hardened_pod_spec
from components.spec import verify_admission as va
from components.spec.worker_pod import WorkerPodSettings
from components.verify import gpujob, identity_probe
from components.verify.iam import probe_key
from tests.components.admission_oracle import decide, evaluate

NS = "gpuburst"
IMAGE = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-worker@sha256:{'b' * 64}"
BUCKET = "gpuburst-dev-results"
PREFIX = "results/"
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/gpuburst-dev-slides"
SA = "slides-worker"
GROUP_USER = dict(user="arn:aws:sts::123456789012:assumed-role/ci/verify", groups=["gpuburst:verify",
                                                                                   "system:authenticated"])
SA_USER = dict(user=va.probe_username(NS), groups=["system:serviceaccounts", f"system:serviceaccounts:{NS}",
                                                   "system:authenticated"])


def worker_pod() -> dict:
    return hardened_pod_spec(WorkerPodSettings(image=IMAGE, region="us-east-1"),
                             command=["python", "-m", "worker", "consume"], queue_url=QUEUE_URL,
                             service_account_name=SA, restart_policy="Never")


def env_names(pod: dict) -> list[str]:
    return [e["name"] for c in pod["containers"] for e in c.get("env", [])]


def rule(pod: dict | None = None) -> tuple[dict, dict, dict]:
    """(policy, binding, params) as VerifyRunner declares them for one workload with this pod."""
    pod = pod or worker_pod()
    params = va.admission_params_manifest(NS, va.admission_params_data(
        image=IMAGE, results_bucket=BUCKET, results_prefix=PREFIX, service_accounts=[SA], env_names=env_names(pod)))
    return va.admission_policy_manifest(NS), va.admission_binding_manifest(NS), params


def identity_job() -> dict:
    scaled_job = {"metadata": {"name": "slides", "namespace": NS},
                  "spec": {"jobTargetRef": {"template": {"metadata": {"labels": {"app": "w"}}, "spec": worker_pod()}}}}
    (target,) = identity_probe.live_targets([scaled_job], [])
    key = probe_key(PREFIX, f"{uuid.uuid4().hex}.identity")
    return identity_probe.build_probe_job(identity_probe.job_name(), target, bucket=BUCKET, key=key,
                                          queue_url=target.env("QUEUE_URL") or "", region="us-east-1", deadline_s=300)


def gpu_job() -> dict:
    return gpujob.build_gpu_job(gpujob.job_name(), NS, IMAGE, nodepool="gpu", deadline_s=600)


def judge(job: dict, who: dict = GROUP_USER, namespace: str = NS, params: dict | None | bool = True, **kw):
    policy, binding, own = rule()
    return decide(policy, binding, own if params is True else params, job, namespace=namespace, **who, **kw)


@pytest.mark.parametrize("who", [GROUP_USER, SA_USER], ids=["group", "service-account"])
@pytest.mark.parametrize("build", [identity_job, gpu_job], ids=["identity-probe", "gpu-job"])
def test_the_probe_jobs_verify_builds_are_admitted(build, who):
    decision = judge(build(), who)
    assert decision.matched and decision.admitted, decision.denied


def _container(job: dict) -> dict:
    return job["spec"]["template"]["spec"]["containers"][0]


def _pod(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def _env(job: dict, entry: dict) -> None:
    _container(job).setdefault("env", []).append(entry)


EXFIL = ["sh", "-c", "aws s3 cp s3://gpuburst-storage-slides/slides/patient-001.svs - | base64"]
TAMPERED = [
    ("image-by-tag", identity_job, lambda j: _container(j).update(image=IMAGE.split("@")[0] + ":latest"),
     "worker image"),
    ("other-image", gpu_job, lambda j: _container(j).update(image=f"public.ecr.aws/aws-cli/aws-cli@sha256:{'c' * 64}"),
     "worker image"),
    ("other-command", identity_job, lambda j: _container(j).update(command=EXFIL), "fixed script"),
    ("args-after-the-query", gpu_job, lambda j: _container(j).update(args=["; cat /etc/shadow"]), "fixed script"),
    ("edited-script", identity_job,
     lambda j: _container(j)["command"].__setitem__(2, va.IDENTITY_PROBE_SCRIPT + "print(open('/x').read())\n"),
     "fixed script"),
    ("key-outside-the-probe-folder", identity_job,
     lambda j: _container(j)["command"].__setitem__(4, "slides/patient-001.svs"), "fixed script"),
    ("other-bucket", identity_job, lambda j: _container(j)["command"].__setitem__(3, "gpuburst-storage-slides"),
     "fixed script"),
    ("hostpath-volume", identity_job,
     lambda j: _pod(j)["volumes"].append({"name": "host", "hostPath": {"path": "/"}}), "emptyDir"),
    ("secret-volume", gpu_job, lambda j: _pod(j).update(volumes=[{"name": "s", "secret": {"secretName": "x"}}]),
     "emptyDir"),
    ("csi-volume", identity_job, lambda j: _pod(j)["volumes"].append(
        {"name": "slides", "csi": {"driver": "s3.csi.aws.com", "volumeAttributes": {"bucketName": "slides"}}}),
     "emptyDir"),
    ("pythonpath-env", identity_job, lambda j: _env(j, {"name": "PYTHONPATH", "value": "/tmp"}), "env names"),
    ("aws-config-env", identity_job, lambda j: _env(j, {"name": "AWS_CONFIG_FILE", "value": "/proc/self/environ"}),
     "env names"),
    ("value-from-secret", identity_job, lambda j: _env(j, {"name": "HOME", "valueFrom": {
        "secretKeyRef": {"name": "x", "key": "y"}}}), "literal values"),
    ("env-from", gpu_job, lambda j: _container(j).update(envFrom=[{"secretRef": {"name": "x"}}]), "env names"),
    ("other-service-account", identity_job, lambda j: _pod(j).update(serviceAccountName="karpenter"),
     "ServiceAccount"),
    ("init-container", gpu_job, lambda j: _pod(j).update(initContainers=[dict(_container(j), name="i")]),
     "exactly one container"),
    ("second-container", gpu_job, lambda j: _pod(j)["containers"].append(dict(_container(j), name="two")),
     "exactly one container"),
    ("host-network", gpu_job, lambda j: _pod(j).update(hostNetwork=True), "host namespace"),
    ("privileged", gpu_job, lambda j: _container(j)["securityContext"].update(privileged=True), "unprivileged"),
    ("added-capability", identity_job, lambda j: _container(j)["securityContext"].update(
        capabilities={"add": ["SYS_ADMIN"]}), "unprivileged"),
    ("api-token", identity_job, lambda j: _pod(j).update(automountServiceAccountToken=True), "API token"),
    ("many-pods", gpu_job, lambda j: j["spec"].update(parallelism=20, completions=20), "one pod"),
]


@pytest.mark.parametrize("name,build,tamper,expected", TAMPERED, ids=[t[0] for t in TAMPERED])
def test_a_job_from_the_verify_identity_that_is_not_a_probe_as_built_is_refused(name, build, tamper, expected):
    job = copy.deepcopy(build())
    tamper(job)
    decision = judge(job)
    assert decision.matched and not decision.admitted, name
    assert any(expected in m for m in decision.denied), decision.denied
    assert judge(build()).admitted  # the same Job untouched passes: the refusal is the tampering's


def test_only_in_the_workload_namespace():
    decision = judge(gpu_job(), namespace="kube-system")
    assert decision.denied == ["verify may create Jobs only in the workload namespace"]


def test_an_update_is_judged_too():
    job = gpu_job()
    _container(job)["command"] = EXFIL
    assert not judge(job, operation="UPDATE").admitted


def test_other_callers_are_not_matched():
    job = gpu_job()
    _container(job)["command"] = EXFIL
    keda = dict(user="system:serviceaccount:keda:keda-operator", groups=["system:serviceaccounts"])
    assert not judge(job, keda).matched
    # A caller whose request carries no groups at all is simply not the verify identity (no error, no refusal).
    assert not judge(job, dict(user="kubernetes-admin", groups=None)).matched
    # Another ServiceAccount named gpuburst-verify in another namespace is not the runner.
    assert not judge(job, dict(user=va.probe_username("other"), groups=[])).matched


def test_without_its_params_every_verify_job_is_refused():
    decision = judge(gpu_job(), params=None)
    assert decision.matched and decision.denied == ["params not found"]


def test_the_params_list_the_workloads_env_and_service_accounts_and_the_fixed_names():
    _, _, params = rule()
    data = params["data"]
    assert data["image"] == IMAGE and data["resultsBucket"] == BUCKET
    assert f"serviceAccount.{SA}" in data and "env.QUEUE_URL" in data
    assert {f"env.{n}" for n in va.PROBE_FIXED_ENV} <= set(data)
    assert data["probeKeyPattern"] == va.probe_key_pattern(PREFIX)


@pytest.mark.parametrize("key,ok", [(f"results/gpuburst-verify/{'a' * 32}.identity.txt", True),
                                    (f"results/gpuburst-verify/{'a' * 32}.txt", False),
                                    (f"xresults/gpuburst-verify/{'a' * 32}.identity.txt", False),
                                    (f"results/gpuburst-verify/../{'a' * 32}.identity.txt", False)])
def test_the_probe_key_pattern_is_anchored(key, ok):
    assert bool(evaluate("k.matches(p)", {"k": key, "p": va.probe_key_pattern(PREFIX)})) is ok


def test_the_fixed_commands_are_the_ones_the_runtime_builds():
    # Until the runtime imports them from spec, the copies must be equal (a drift would refuse verify's own probes).
    assert tuple(gpujob.NVIDIA_SMI) == va.GPU_PROBE_COMMAND
    assert identity_probe.PROBE_SCRIPT == va.IDENTITY_PROBE_SCRIPT


def test_the_dev_plan_holds_the_rule_and_admits_its_own_workloads_probes(dev):
    resources = dev["plan"]["resources"]

    def one(kind: str) -> dict:
        (found,) = [r["properties"] for r in resources if r["type"] == f"kubernetes:{kind}"
                    and r["properties"]["metadata"]["name"] == va.ADMISSION_NAME]
        return found

    policy = one("admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
    binding = one("admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
    (params,) = [r["properties"] for r in resources if r["type"] == "kubernetes:core/v1:ConfigMap"
                 and r["properties"]["metadata"]["name"] == va.ADMISSION_NAME]
    assert policy["spec"] == va.admission_policy_manifest(NS)["spec"]
    assert binding["spec"] == va.admission_binding_manifest(NS)["spec"]
    scaled_jobs = [r["properties"] for r in resources if r["type"] == "kubernetes:keda.sh/v1alpha1:ScaledJob"]
    deployments = [r["properties"] for r in resources if r["type"] == "kubernetes:apps/v1:Deployment"
                   and r["properties"]["metadata"].get("namespace") == NS]
    targets = identity_probe.live_targets(scaled_jobs, deployments)
    assert {t.kind for t in targets} == {"ScaledJob", "Deployment"}
    bucket, image = params["data"]["resultsBucket"], params["data"]["image"]
    for t in targets:
        job = identity_probe.build_probe_job(identity_probe.job_name(), t, bucket=bucket,
                                             key=probe_key(PREFIX, f"{uuid.uuid4().hex}.identity"),
                                             queue_url=t.env("QUEUE_URL") or "", region="us-east-1", deadline_s=300)
        decision = decide(policy, binding, params, job, namespace=NS, **SA_USER)
        assert decision.matched and decision.admitted, (t.who, decision.denied)
        _container(job)["command"] = EXFIL
        assert not decide(policy, binding, params, job, namespace=NS, **SA_USER).admitted
    gpu = gpujob.build_gpu_job(gpujob.job_name(), NS, image, nodepool="gpu", deadline_s=600)
    assert decide(policy, binding, params, gpu, namespace=NS, **GROUP_USER).admitted

"""Tests of the hardened worker pod: security context, GPU placement, scratch volumes, image digest (plain and
Output), environment, and the worker's least-privilege policy."""
from __future__ import annotations

import kubernetes_validate
import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.catalogue import KUBERNETES_VERSION
from components.pod import hardened_pod_spec, hardened_pod_template, worker_network_policy, worker_policy
from components.spec.policy_documents import allow_wildcard_actions
from components.spec.validation import ConfigError
from components.spec.worker_pod import ModelMount, WorkerPodSettings, image_digest_problem
from components.synth.mocks import run_under_mocks

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-worker@sha256:" + "ab" * 32
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/slides"
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:slides"
BUCKET_ARN = "arn:aws:s3:::gpuburst-dev-data"


def spec(**kw) -> dict:
    namespace = kw.pop("namespace", "gpuburst")
    settings = WorkerPodSettings(image=kw.pop("image", IMAGE), **kw)
    return hardened_pod_spec(settings, command=["python", "-m", "worker", "consume"], queue_url=QUEUE_URL,
                             service_account_name="slides-worker", restart_policy="Never", namespace=namespace)


def env_of(pod_spec: dict) -> dict:
    return {e["name"]: e["value"] for e in pod_spec["containers"][0]["env"]}


def test_security_context_for_clinical_data():
    s = spec()
    pod_sc = s["securityContext"]
    assert pod_sc == {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
                      "seccompProfile": {"type": "RuntimeDefault"}}
    (c,) = s["containers"]
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001 and sc["runAsGroup"] == 10001
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert s["automountServiceAccountToken"] is False
    assert not (s["hostNetwork"] or s["hostPID"] or s["hostIPC"])


def test_scratch_and_tmp_are_size_limited_empty_dirs():
    s = spec(scratch_gib=80, tmp_gib=4)
    assert s["volumes"] == [{"name": "scratch", "emptyDir": {"sizeLimit": "80Gi"}},
                            {"name": "tmp", "emptyDir": {"sizeLimit": "4Gi"}}]
    mounts = {m["mountPath"]: m["name"] for m in s["containers"][0]["volumeMounts"]}
    assert mounts == {"/scratch": "scratch", "/tmp": "tmp"}
    env = env_of(s)
    assert env["SCRATCH_DIR"] == "/scratch" and env["TMPDIR"] == "/tmp" and env["HOME"] == "/tmp"
    res = s["containers"][0]["resources"]
    assert res["requests"]["ephemeral-storage"] == res["limits"]["ephemeral-storage"] == "84Gi"


def test_resources_gpu_and_placement():
    s = spec(cpu_cores=3.5, memory_gib=30, gpus=2)
    res = s["containers"][0]["resources"]
    assert res["requests"]["cpu"] == res["limits"]["cpu"] == "3500m"
    assert res["requests"]["memory"] == res["limits"]["memory"] == "30Gi"
    assert res["limits"]["nvidia.com/gpu"] == "2"
    assert s["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert s["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert "node.kubernetes.io/instance-type" not in s["nodeSelector"]


def test_no_probes_pull_policy_and_command():
    c = spec()["containers"][0]
    assert "livenessProbe" not in c and "readinessProbe" not in c and "startupProbe" not in c
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["command"] == ["python", "-m", "worker", "consume"]
    assert c["image"] == IMAGE


def test_environment_from_settings():
    env = env_of(spec(visibility_timeout_s=900, grace_period_s=60, termination_grace_period_s=90, region="eu-west-1",
                      env={"MODEL_PATH": "/models/m.pt"}))
    assert env["QUEUE_URL"] == QUEUE_URL
    assert env["VISIBILITY_TIMEOUT"] == "900" and env["VISIBILITY_EXTENSION_INTERVAL"] == "300"
    assert env["GRACE_PERIOD"] == "60" and env["AWS_REGION"] == "eu-west-1" and env["DEVICE"] == "cuda"
    assert env["MODEL_PATH"] == "/models/m.pt"
    assert spec(grace_period_s=60, termination_grace_period_s=90)["terminationGracePeriodSeconds"] == 90


@pytest.mark.parametrize("image", [
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-worker:latest",
    "gpuburst-worker",
    "repo@sha256:short",
    "repo@sha256:" + "G" * 64,
])
def test_image_without_digest_refused(image):
    assert image_digest_problem(image)
    with pytest.raises(ConfigError) as e:
        spec(image=image)
    assert str(e.value).startswith(f"WorkerPodSettings.image: {image!r} is not valid: an image reference pinned by "
                                   "digest")


def test_image_output_is_checked_when_it_resolves():
    def program(image_ref: str):
        def build():
            image = pulumi.Output.from_input(image_ref).apply(lambda s: s)  # an Output, as from the image build
            settings = WorkerPodSettings(image=image)
            template = hardened_pod_template(settings, command=["true"], queue_url=QUEUE_URL,
                                             service_account_name="w", restart_policy="Never", labels={"a": "b"})
            k8s.core.v1.Pod("p", metadata={"name": "p", **template["metadata"]}, spec=template["spec"])
        return build

    res = run_under_mocks(program(IMAGE))
    (pod,) = res.monitor.by_type("kubernetes:core/v1:Pod")
    assert pod.properties["spec"]["containers"][0]["image"] == IMAGE
    # Raised inside the apply: the engine may wrap it (a typed resource wraps it in a ValueError naming the
    # resource), but the one-line reason is there and the deployment stops.
    with pytest.raises(ValueError, match="WorkerPodSettings.image: 'repo/worker:v1' is not valid"):
        run_under_mocks(program("repo/worker:v1"))


@pytest.mark.parametrize("kw,field", [
    ({"grace_period_s": 120, "termination_grace_period_s": 125}, "termination_grace_period_s"),
    ({"visibility_timeout_s": 60, "visibility_extension_interval_s": 60}, "visibility_extension_interval_s"),
    ({"gpus": 0}, "gpus"),
    ({"memory_gib": 0}, "memory_gib"),
    ({"region": "mars"}, "region"),
    ({"env": {"QUEUE_URL": "x"}}, "env['QUEUE_URL']"),
    ({"env": {"BAD-NAME": "x"}}, "env['BAD-NAME']"),
])
def test_bad_settings_are_one_line_errors(kw, field):
    with pytest.raises(ConfigError) as e:
        spec(**kw)
    assert str(e.value).startswith(f"WorkerPodSettings.{field}: ")
    assert "\n" not in str(e.value)


def test_template_has_do_not_disrupt_and_validates_as_a_pod_strictly():
    t = hardened_pod_template(WorkerPodSettings(image=IMAGE), command=["python", "-m", "worker"], queue_url=QUEUE_URL,
                              service_account_name="w", restart_policy="Never", labels={"app": "x"})
    assert t["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "gpuburst", **t["metadata"]},
           "spec": t["spec"]}
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_worker_policy_is_least_privilege():
    doc = worker_policy(QUEUE_ARN, BUCKET_ARN, "slides/", "results/")
    assert allow_wildcard_actions(doc["Statement"]) == []
    actions = {a for st in doc["Statement"] for a in st["Action"]}
    assert "sqs:ReceiveMessage" in actions and "sqs:DeleteMessage" in actions
    assert "s3:GetObject" in actions and "s3:PutObject" in actions
    assert not any(a.startswith(("s3:Delete", "sqs:Send", "sqs:Purge")) for a in actions)
    puts = [st for st in doc["Statement"] if "s3:PutObject" in st["Action"]]
    assert puts and all(r == f"{BUCKET_ARN}/results/*" for st in puts for r in st["Resource"])
    gets = [st for st in doc["Statement"] if "s3:GetObject" in st["Action"]]
    assert {r for st in gets for r in st["Resource"]} == {f"{BUCKET_ARN}/slides/*", f"{BUCKET_ARN}/results/*"}
    assert all(st["Resource"] == QUEUE_ARN for st in doc["Statement"] if st["Action"][0].startswith("sqs:"))


@pytest.mark.parametrize("slides,results", [("slides/", "slides/"), ("slides/", "slides/results/"),
                                            ("studies/a/", "studies/"), ("slides/", "results/")])
def test_worker_policy_refuses_results_overlapping_slides(slides, results):
    if results.startswith(slides) or slides.startswith(results):
        with pytest.raises(ConfigError, match="results_prefix"):
            worker_policy(QUEUE_ARN, BUCKET_ARN, slides, results)
    else:
        worker_policy(QUEUE_ARN, BUCKET_ARN, slides, results)


def test_worker_network_policy_denies_ingress_and_limits_egress():
    labels = {"app.kubernetes.io/name": "gpuburst-worker", "app.kubernetes.io/instance": "slides"}
    np_ = worker_network_policy("slides", "gpuburst", labels, egress_cidrs=("10.64.0.0/16",))
    kubernetes_validate.validate(np_, KUBERNETES_VERSION, strict=True)
    spec = np_["spec"]
    assert spec["podSelector"] == {"matchLabels": labels}
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    ports = sorted((p["protocol"], p["port"]) for rule in spec["egress"] for p in rule["ports"])
    assert ports == [("TCP", 53), ("TCP", 80), ("TCP", 443), ("UDP", 53)]
    (agent,) = [r for r in spec["egress"] if r["ports"] == [{"protocol": "TCP", "port": 80}]]
    assert {"ipBlock": {"cidr": "169.254.170.23/32"}} in agent["to"]  # Pod Identity credentials
    (https,) = [r for r in spec["egress"] if r["ports"] == [{"protocol": "TCP", "port": 443}]]
    assert https["to"] == [{"ipBlock": {"cidr": "10.64.0.0/16"}}]  # the VPC (its endpoints), never the internet
    blocks = [t["ipBlock"]["cidr"] for r in spec["egress"] for t in r["to"] if "ipBlock" in t]
    assert "0.0.0.0/0" not in blocks and "::/0" not in blocks


def test_without_egress_cidrs_the_worker_gets_no_https_at_all():
    np_ = worker_network_policy("slides", "gpuburst", {"app": "w"}, egress_cidrs=None)
    ports = {p["port"] for rule in np_["spec"]["egress"] for p in rule["ports"]}
    assert ports == {53, 80}


@pytest.mark.parametrize("cidrs, bad", [
    (("0.0.0.0/0",), "0.0.0.0/0"), (("::/0",), "::/0"), (("10.64.0.0/16", "0.0.0.0/0"), "0.0.0.0/0"),
    (("8.8.8.0/24",), "8.8.8.0/24"), (("10.64.0.1/16",), "10.64.0.1/16"), ("10.64.0.0/16", "10.64.0.0/16"),
])
def test_world_and_public_egress_cidrs_are_refused_in_one_line(cidrs, bad):
    with pytest.raises(ConfigError) as e:
        worker_network_policy("slides", "gpuburst", {"app": "w"}, egress_cidrs=cidrs)
    text = str(e.value)
    assert e.value.field == "WorkerAccessArgs.egress_cidrs" and "\n" not in text and repr(bad) in text


def test_the_default_deny_policy_selects_every_pod_and_allows_nothing():
    from components.pod import default_deny_network_policy

    np_ = default_deny_network_policy("gpuburst")
    kubernetes_validate.validate(np_, KUBERNETES_VERSION, strict=True)
    assert np_["metadata"] == {"name": "default-deny", "namespace": "gpuburst"}
    assert np_["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []}


def test_the_worker_uses_regional_s3_and_sts_hosts():
    # The global s3.amazonaws.com (the SDKs' us-east-1 default) is not answered by the VPC's S3 interface endpoint.
    env = env_of(spec(region="us-east-1"))
    assert env["AWS_S3_US_EAST_1_REGIONAL_ENDPOINT"] == "regional" and env["AWS_STS_REGIONAL_ENDPOINTS"] == "regional"


def test_worker_policy_with_a_separate_slides_bucket():
    slides_bucket = "arn:aws:s3:::gpuburst-dev-slides"
    doc = worker_policy(QUEUE_ARN, BUCKET_ARN, "slides/", "results/", slides_bucket_arn=slides_bucket)
    assert allow_wildcard_actions(doc["Statement"]) == []
    gets = {r for st in doc["Statement"] if st["Action"] == ["s3:GetObject"] for r in st["Resource"]}
    assert gets == {f"{slides_bucket}/slides/*", f"{BUCKET_ARN}/results/*"}
    puts = {r for st in doc["Statement"] if "s3:PutObject" in st["Action"] for r in st["Resource"]}
    assert puts == {f"{BUCKET_ARN}/results/*"}  # never the slides bucket
    # Overlapping prefixes are fine in different buckets.
    worker_policy(QUEUE_ARN, BUCKET_ARN, "data/", "data/", slides_bucket_arn=slides_bucket)


def test_worker_may_send_only_to_its_dead_letter_queue():
    from components.pod import worker_policy

    q = "arn:aws:sqs:us-east-1:123456789012:work"
    dlq = "arn:aws:sqs:us-east-1:123456789012:work-dlq"
    doc = worker_policy(q, "arn:aws:s3:::results", "slides/", "results/", slides_bucket_arn="arn:aws:s3:::slides",
                        dead_letter_queue_arn=dlq)
    sends = [st for st in doc["Statement"] if "sqs:SendMessage" in st["Action"]]
    assert sends == [{"Effect": "Allow", "Action": ["sqs:SendMessage"], "Resource": dlq}]
    without = worker_policy(q, "arn:aws:s3:::results", "slides/", "results/", slides_bucket_arn="arn:aws:s3:::slides")
    assert not any("sqs:SendMessage" in st["Action"] for st in without["Statement"])


MODEL = ModelMount(uri="s3://tils-lab-models/tils/v3.pt2", sha256="ef" * 32, cache_claim="gpuburst-model-cache",
                   cache_sub_path="slides", cache_max_bytes=20 * 2**30)


def test_a_model_gives_the_pod_its_uri_digest_and_its_workloads_cache_folder():
    s = spec(model=MODEL, precision="fp32", annotations={"gpuburst.io/worker-image-cuda": "12.8"})
    env = env_of(s)
    assert (env["MODEL_URI"], env["MODEL_SHA256"]) == (MODEL.uri, MODEL.sha256)
    assert (env["MODEL_CACHE_DIR"], env["MODEL_CACHE_MAX_BYTES"], env["PRECISION"]) == (
        "/model-cache", str(20 * 2**30), "fp32")
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "gpuburst-model-cache"}} in s["volumes"]
    assert {"name": "model-cache", "mountPath": "/model-cache", "subPath": "gpuburst/slides"} in \
        s["containers"][0]["volumeMounts"]
    # The cache is a claim, never a hostPath in the pod: the namespace's Pod Security `restricted` refuses those.
    assert not any("hostPath" in v for v in s["volumes"])


def test_the_cache_folder_is_under_the_pods_namespace_and_needs_it():
    """The subPath is `<namespace>/<cache_sub_path>` (the cluster's admission rule refuses any other), so the
    namespace is required once the pod mounts the cache, and not before."""
    mount = next(m for m in spec(model=MODEL, namespace="lab-a")["containers"][0]["volumeMounts"]
                 if m["name"] == "model-cache")
    assert mount["subPath"] == "lab-a/slides"
    with pytest.raises(ConfigError, match=r"^namespace: None is not valid.*'<namespace>/<ModelMount.cache_sub_path>'"):
        spec(model=MODEL, namespace=None)
    assert "MODEL_URI" in env_of(spec(model=ModelMount(uri=MODEL.uri, sha256=MODEL.sha256), namespace=None))


def test_without_a_model_or_a_cache_no_model_env_and_no_volume():
    assert not {"MODEL_URI", "MODEL_CACHE_DIR", "PRECISION"} & set(env_of(spec()))
    s = spec(model=ModelMount(uri=MODEL.uri, sha256=MODEL.sha256))
    assert "MODEL_URI" in env_of(s) and "MODEL_CACHE_DIR" not in env_of(s)
    assert [v["name"] for v in s["volumes"]] == ["scratch", "tmp"]


def test_a_template_with_a_model_and_annotations_validates_as_a_pod_strictly():
    t = hardened_pod_template(WorkerPodSettings(image=IMAGE, model=MODEL, annotations={"a.io/b": "c"}),
                              command=["python"], queue_url=QUEUE_URL, service_account_name="w",
                              restart_policy="Never", labels={"app": "x"}, namespace="gpuburst")
    assert t["metadata"]["annotations"] == {"a.io/b": "c", "karpenter.sh/do-not-disrupt": "true"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "gpuburst", **t["metadata"]},
           "spec": t["spec"]}
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_the_worker_may_read_exactly_its_model_object_and_decrypt_with_its_key():
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    doc = worker_policy(QUEUE_ARN, BUCKET_ARN, "slides/", "results/",
                        model=ModelMount(uri=MODEL.uri, sha256=MODEL.sha256, kms_key_arn=key))
    model_bucket = [st for st in doc["Statement"] if "tils-lab-models" in str(st["Resource"])]
    assert model_bucket == [{"Sid": "ReadModelObject", "Effect": "Allow", "Action": ["s3:GetObject"],
                             "Resource": "arn:aws:s3:::tils-lab-models/tils/v3.pt2"}]
    decrypts = [st for st in doc["Statement"] if st["Resource"] == key]
    assert decrypts == [{"Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": key,
                         "Condition": {"StringLike": {"kms:ViaService": "s3.*.amazonaws.com"}}}]
    assert allow_wildcard_actions(doc["Statement"]) == []
    assert not any("tils-lab-models" in str(st["Resource"]) for st in worker_policy(
        QUEUE_ARN, BUCKET_ARN, "slides/", "results/")["Statement"])


# -- teams side by side: the pods run only on the NodePool their workload names --------------------------------------

def test_with_a_nodepool_the_pods_select_only_its_nodes_and_still_any_gpu_type():
    from components.pod import worker_node_selector

    settings = WorkerPodSettings(image=IMAGE)
    tied = hardened_pod_spec(settings, command=["true"], queue_url=QUEUE_URL, service_account_name="w",
                             restart_policy="Never", nodepool="tils-lab")
    assert tied["nodeSelector"] == {"nvidia.com/gpu.present": "true", "karpenter.sh/nodepool": "tils-lab"}
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": tied},
                                 KUBERNETES_VERSION, strict=True)
    assert spec()["nodeSelector"] == {"nvidia.com/gpu.present": "true"}  # untied: any GPU pool
    assert worker_node_selector(None) == {"nvidia.com/gpu.present": "true"}


@pytest.mark.parametrize("bad", ["Tils_Lab", "", "-pool", 3])
def test_a_nodepool_that_is_no_name_is_refused_in_one_line(bad):
    from components.pod import worker_node_selector

    with pytest.raises(ConfigError) as e:
        worker_node_selector(bad)
    assert e.value.field == "WorkerAccessArgs.nodepool" and "\n" not in str(e.value)


def test_a_gpu_nodepool_gives_its_name_and_the_resource_to_wait_for():
    from components.nodepool import GpuNodePool, GpuNodePoolArgs
    from components.pod import workload_nodepool

    found = {}

    def program():
        pool = GpuNodePool("tils", GpuNodePoolArgs(nodeclass_name="gpu", gpu_limit=4, nodepool_name="tils-lab"))
        found["pair"] = workload_nodepool(pool)
        found["resource"] = pool.resource

    run_under_mocks(program)
    name, deps = found["pair"]
    assert name == "tils-lab" and deps == [found["resource"]]
    assert workload_nodepool("gpu") == ("gpu", []) and workload_nodepool(None) == (None, [])


# -- no silent mistake: a worker that could reach no AWS API is refused, not warned about ----------------------------

def test_a_worker_without_egress_cidrs_is_refused_in_one_line():
    from components.pod import WorkerAccessArgs, check_worker_egress

    def args(**kw):
        return WorkerAccessArgs(cluster_name="c", namespace="lab", queue_url=QUEUE_URL, queue_arn=QUEUE_ARN,
                                bucket_arn=BUCKET_ARN, pod=WorkerPodSettings(image=IMAGE), **kw)

    with pytest.raises(ConfigError) as e:
        check_worker_egress(args())
    assert e.value.field == "WorkerAccessArgs.egress_cidrs" and e.value.value is None
    assert "\n" not in str(e.value) and "SQS" in str(e.value)
    check_worker_egress(args(egress_cidrs=["10.64.0.0/16"]))
    check_worker_egress(args(network_policy=False))  # the egress is then a policy of the stack's own (the pack judges)


def test_the_egress_refusal_says_where_a_workload_stack_gets_the_cidr():
    """The refusal only reaches a stack attached to another stack's cluster (the platform always passes its VPC's
    CIDR), which has no ExistingNetwork: the hint names the platform stack's key the value comes from."""
    from components.catalogue.network import DEFAULT_VPC_CIDR
    from components.pod import WorkerAccessArgs, check_worker_egress

    with pytest.raises(ConfigError) as e:
        check_worker_egress(WorkerAccessArgs(cluster_name="c", namespace="lab", queue_url=QUEUE_URL,
                                             queue_arn=QUEUE_ARN, bucket_arn=BUCKET_ARN,
                                             pod=WorkerPodSettings(image=IMAGE)))
    text = str(e.value)
    assert text.startswith("WorkerAccessArgs.egress_cidrs: None is not valid: ") and "\n" not in text
    assert "the platform's VPC CIDR" in text and "platform stack's gpuburst:vpcCidr" in text
    assert f"default {DEFAULT_VPC_CIDR}" in text and "ask the platform team" in text
    assert "(ExistingNetwork.vpc_cidr)" not in text  # a field the workload stack does not have, offered as its source

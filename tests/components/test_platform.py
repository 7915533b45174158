"""GpuBurstPlatform's arguments for what exists: an existing VPC and subnets for the cluster, and the workloads'
namespace (named, or existing and not created); bad values refused in one line before anything is registered; and
what the workers run from the stack config: a workload's model and its node cache, Jobs of N messages, a prebuilt or
lab-built worker image."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from components.config import parse_config
from components.existing import ExistingNetwork
from components.platform import GpuBurstPlatform
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks

ROOT = Path(__file__).resolve().parents[2]
DEVICE_PLUGIN_DIGEST = "sha256:a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312"


def _config():
    raw = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8"))["config"]
    return parse_config(raw, stack="dev")


def _run(**kw):
    return run_under_mocks(lambda: GpuBurstPlatform("p", _config(), **kw))


@pytest.fixture(scope="module")
def attached():
    return _run(network=ExistingNetwork("vpc-0example", ["subnet-0a", "subnet-0b"], vpc_cidr="10.0.0.0/16",
                                        gpu_subnet_ids=["subnet-0gpu"]), namespace="lab-a", create_namespace=False)


@pytest.fixture(scope="module")
def own():
    return _run()


def _policies(res):
    return {r.properties["metadata"]["name"]: r.properties
            for r in res.monitor.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")}


def test_the_cluster_goes_into_the_given_vpc_and_subnets(attached):
    (cluster,) = attached.monitor.by_type("eks:index:Cluster")
    assert cluster.properties["vpcId"] == "vpc-0example"
    assert cluster.properties["privateSubnetIds"] == ["subnet-0a", "subnet-0b"]
    (group,) = attached.monitor.by_type("aws:eks/nodeGroup:NodeGroup")
    assert group.properties["subnetIds"] == ["subnet-0a", "subnet-0b"]


def test_the_workloads_run_in_the_given_namespace_which_is_not_created(attached):
    assert not [r for r in attached.monitor.by_type("kubernetes:core/v1:Namespace")
                if r.properties["metadata"]["name"] in ("lab-a", "gpuburst")]
    (sj,) = attached.monitor.by_type("kubernetes:keda.sh/v1alpha1:ScaledJob")
    assert sj.properties["metadata"]["namespace"] == "lab-a"
    associations = attached.monitor.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert {a.properties["namespace"] for a in associations} >= {"lab-a"}


def test_a_named_namespace_is_created_restricted():
    res = _run(namespace="lab-b")
    (ns,) = [r for r in res.monitor.by_type("kubernetes:core/v1:Namespace")
             if r.properties["metadata"]["name"] == "lab-b"]
    assert ns.properties["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("kw, field", [
    ({"namespace": "Lab_A"}, "GpuBurstPlatform namespace"),
    ({"network": {"vpc_id": "vpc-1"}}, "GpuBurstPlatform network"),
    ({"network": ExistingNetwork("vpc-1", [])}, "ExistingNetwork.private_subnet_ids"),
    ({"network": ExistingNetwork("vpc-1", ["subnet-0a"])}, "ExistingNetwork.vpc_cidr"),
    ({"network": ExistingNetwork("vpc-1", ["subnet-0a"], vpc_cidr="0.0.0.0/0")}, "ExistingNetwork.vpc_cidr"),
    ({"network": ExistingNetwork("vpc-1", ["subnet-0a"], vpc_cidr="10.0.0.0/16", gpu_subnet_ids=[])},
     "ExistingNetwork.gpu_subnet_ids"),
])
def test_bad_arguments_are_refused_before_anything_is_registered(kw, field):
    with pytest.raises(ConfigError) as e:
        _run(**kw)
    assert field in str(e.value) and "\n" not in str(e.value)


# -- the network boundary ---------------------------------------------------------------------------------------------

def test_by_default_the_platform_creates_the_network_and_puts_the_cluster_in_its_system_subnets(own):
    (network,) = own.monitor.by_type("gpuburst:index:WorkloadNetwork")
    (cluster,) = own.monitor.by_type("eks:index:Cluster")
    assert cluster.properties["vpcId"] == "p-network-vpc-id"  # the mocked id of the network's Vpc
    assert cluster.properties["privateSubnetIds"] == [f"p-network-system-{i}-id" for i in range(3)]
    assert cluster.properties["vpcCniOptions"] == {
        "enableNetworkPolicy": True, "configurationValues": {"env": {"NETWORK_POLICY_ENFORCING_MODE": "strict"}}}
    # The system subnets carry their own tags: the cluster adds none to them (it tags its security group only).
    assert [t.properties["resourceId"] for t in own.monitor.by_type("aws:ec2/tag:Tag")] == ["sg-0a1b2c3d4e5f60001"]


def test_gpu_nodes_land_in_the_isolated_subnets_in_their_own_security_group(own):
    (nodeclass,) = own.monitor.by_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    spec = nodeclass.properties["spec"]
    assert spec["subnetSelectorTerms"] == [{"tags": {"gpuburst.io/gpu-subnets": "gpuburst-dev"}}]
    assert spec["securityGroupSelectorTerms"] == [{"tags": {"gpuburst.io/gpu-nodes": "gpuburst-dev"}}]
    groups = {r.properties.get("tags", {}).get("gpuburst.io/gpu-nodes"): r
              for r in own.monitor.by_type("aws:ec2/securityGroup:SecurityGroup")}
    gpu = groups["gpuburst-dev"].properties
    assert gpu["vpcId"] == "p-network-vpc-id"
    assert {c for rule in gpu["egress"] for c in rule["cidrBlocks"]} == {"10.64.0.0/16"}
    subnets = [r for r in own.monitor.by_type("aws:ec2/subnet:Subnet")
               if r.properties["tags"].get("gpuburst.io/gpu-subnets") == "gpuburst-dev"]
    assert len(subnets) == 3


def test_worker_egress_is_the_vpc_and_the_namespace_denies_by_default(own):
    policies = _policies(own)
    assert policies["default-deny"]["metadata"]["namespace"] == "gpuburst"
    assert policies["default-deny"]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                                                "ingress": [], "egress": []}
    for name in ("slides-worker", "studies-worker"):
        blocks = [t["ipBlock"]["cidr"] for r in policies[name]["spec"]["egress"] for t in r["to"] if "ipBlock" in t]
        assert "10.64.0.0/16" in blocks and not {"0.0.0.0/0", "::/0"} & set(blocks)


def test_an_existing_network_gives_its_cidr_and_gpu_subnets(attached):
    assert not attached.monitor.by_type("gpuburst:index:WorkloadNetwork")
    assert not attached.monitor.by_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    blocks = [t["ipBlock"]["cidr"] for r in _policies(attached)["slides-worker"]["spec"]["egress"]
              for t in r["to"] if "ipBlock" in t]
    assert "10.0.0.0/16" in blocks
    tags = {(r.properties["resourceId"], r.properties["key"]) for r in attached.monitor.by_type("aws:ec2/tag:Tag")}
    assert ("subnet-0gpu", "gpuburst.io/gpu-subnets") in tags
    (group,) = [r for r in attached.monitor.by_type("aws:ec2/securityGroup:SecurityGroup")]
    assert group.properties["vpcId"] == "vpc-0example"
    assert _policies(attached)["default-deny"]["metadata"]["namespace"] == "lab-a"


def test_gpu_nodes_of_the_platforms_network_run_mirrored_images_only(own):
    (chart,) = [r for r in own.monitor.by_type("kubernetes:helm.sh/v4:Chart") if "nvidia" in r.name]
    repository = chart.properties["values"]["image"]["repository"]
    assert repository == "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-dev/mirror/nvidia/k8s-device-plugin"
    mirrors = [r.properties["name"] for r in own.monitor.by_type("aws:ecr/repository:Repository")
               if "/mirror/" in r.properties.get("name", "")]
    assert repository.split("/", 1)[1] in mirrors


def test_an_existing_network_keeps_the_charts_repositories_by_digest(attached):
    (chart,) = [r for r in attached.monitor.by_type("kubernetes:helm.sh/v4:Chart") if "nvidia" in r.name]
    assert chart.properties["values"]["image"] == {"tag": "v0.20.0@" + DEVICE_PLUGIN_DIGEST}
    (keda,) = [r for r in attached.monitor.by_type("kubernetes:helm.sh/v4:Chart") if r.name == "p-keda"]
    assert {k: set(v) for k, v in keda.properties["values"]["image"].items()} == {
        "keda": {"tag"}, "metricsApiServer": {"tag"}, "webhooks": {"tag"}}  # ghcr.io, by digest


def test_keda_runs_its_mirrored_images_by_digest(own):
    (keda,) = [r for r in own.monitor.by_type("kubernetes:helm.sh/v4:Chart") if r.name == "p-keda"]
    images = keda.properties["values"]["image"]
    mirrors = {r.properties.get("name") for r in own.monitor.by_type("aws:ecr/repository:Repository")}
    for key in ("keda", "metricsApiServer", "webhooks"):
        assert images[key]["registry"] == "" and images[key]["tag"].startswith("2.20.2@sha256:")
        assert images[key]["repository"].split("/", 1)[1] in mirrors, images[key]


def test_the_gpu_node_role_gets_ssm_only_when_the_stack_asks():
    def ssm(res):
        return [r for r in res.monitor.by_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                if r.properties["policyArn"].endswith("/AmazonSSMManagedInstanceCore") and "karpenter" in r.name]
    raw = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8"))["config"]
    assert ssm(run_under_mocks(lambda: GpuBurstPlatform("p", parse_config(raw, stack="dev")))) == []
    on = parse_config({**raw, "gpuburst:gpuNodeSsm": True}, stack="dev")
    assert len(ssm(run_under_mocks(lambda: GpuBurstPlatform("p", on)))) == 1


# -- what the workers run: a lab's model, its batch, its precision, and the worker image ------------------------------

DIGEST = "ab" * 32
LAB_IMAGE = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/tils-lab-worker@sha256:{'ef' * 32}"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
SJ = "kubernetes:keda.sh/v1alpha1:ScaledJob"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def _lab_config(slides: dict | None = None, studies: dict | None = None, **top):
    raw = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8"))["config"]
    raw["gpuburst:workloads"]["slides"].update(slides or {})
    raw["gpuburst:workloads"]["studies"].update(studies or {})
    raw.update({f"gpuburst:{k}": v for k, v in top.items()})
    return parse_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}, stack="dev")


def _containers(res) -> dict[str, dict]:
    """Workload name -> its worker container (the ScaledJob's Job template, the consumer Deployment's pod)."""
    out = {}
    for r in res.monitor.by_type(SJ):
        out[r.properties["metadata"]["name"]] = r.properties["spec"]["jobTargetRef"]["template"]
    for r in res.monitor.by_type(DEPLOYMENT):
        if r.properties["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "gpuburst-worker":
            out[r.properties["metadata"]["name"]] = r.properties["spec"]["template"]
    return out


def _env(template: dict) -> dict:
    return {e["name"]: e["value"] for e in template["spec"]["containers"][0]["env"]}


@pytest.fixture(scope="module")
def with_models():
    config = _lab_config(
        {"model": {"uri": "s3://tils-lab-models/tils/v3.pt2", "sha256": DIGEST, "kmsKeyArn": KEY},
         "messagesPerJob": 25, "precision": "fp32"},
        {"model": {"uri": "s3://tils-lab-models/studies/v1.pt2", "sha256": "cd" * 32, "cacheGiB": 30}})
    return run_under_mocks(lambda: GpuBurstPlatform("p", config))


def test_a_workloads_model_reaches_its_pods_with_the_node_cache_under_its_own_name(with_models):
    pods = _containers(with_models)
    slides, studies = _env(pods["slides"]), _env(pods["studies"])
    assert (slides["MODEL_URI"], slides["MODEL_SHA256"], slides["PRECISION"]) == (
        "s3://tils-lab-models/tils/v3.pt2", DIGEST, "fp32")
    assert (slides["MODEL_CACHE_DIR"], slides["MODEL_CACHE_MAX_BYTES"]) == ("/model-cache", str(20 * 2**30))
    assert (studies["MODEL_URI"], studies["MODEL_CACHE_MAX_BYTES"], studies["PRECISION"]) == (
        "s3://tils-lab-models/studies/v1.pt2", str(30 * 2**30), "auto")
    for name, template in pods.items():
        mounts = {m["name"]: m for m in template["spec"]["containers"][0]["volumeMounts"]}
        assert mounts["model-cache"] == {"name": "model-cache", "mountPath": "/model-cache",
                                         "subPath": f"gpuburst/{name}"}
        assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "gpuburst-model-cache"}} in \
            template["spec"]["volumes"]
    (pv,) = with_models.monitor.by_type("kubernetes:core/v1:PersistentVolume")
    assert pv.properties["spec"]["hostPath"]["path"] == "/var/lib/kubelet/gpuburst-model-cache"
    assert pv.properties["spec"]["capacity"] == {"storage": "50Gi"}  # 20 (default) + 30
    (nodeclass,) = with_models.monitor.by_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    assert "chmod 2770 /var/lib/kubelet/gpuburst-model-cache" in nodeclass.properties["spec"]["userData"]


def test_each_worker_role_may_read_its_own_model_object_and_no_other(with_models):
    policies = {r.name: json.loads(r.properties["policy"])
                for r in with_models.monitor.by_type("aws:iam/rolePolicy:RolePolicy") if "-worker-" in r.name}
    for role, own, other in (("slides-worker-policy", "tils/v3.pt2", "studies/v1.pt2"),
                             ("studies-worker-policy", "studies/v1.pt2", "tils/v3.pt2")):
        model_grants = [st for st in policies[role]["Statement"] if "tils-lab-models" in json.dumps(st["Resource"])]
        assert model_grants == [{"Sid": "ReadModelObject", "Effect": "Allow", "Action": ["s3:GetObject"],
                                 "Resource": f"arn:aws:s3:::tils-lab-models/{own}"}], role
        assert other not in json.dumps(policies[role])
    assert any(st["Resource"] == KEY and st["Action"] == ["kms:Decrypt"]
               for st in policies["slides-worker-policy"]["Statement"])
    assert KEY not in json.dumps(policies["studies-worker-policy"])


def test_messages_per_job_sets_queue_length_max_messages_and_the_deadline_together(with_models):
    (sj,) = with_models.monitor.by_type(SJ)
    spec = sj.properties["spec"]
    assert spec["triggers"][0]["metadata"]["queueLength"] == "25"
    command = spec["jobTargetRef"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--max-messages") + 1] == "25"
    assert spec["jobTargetRef"]["activeDeadlineSeconds"] == 45 + 25 * 300


VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
VAP_BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"


def _cache_admission(res) -> tuple:
    from components.spec import model_cache_admission as mca

    (policy,) = [r for r in res.monitor.by_type(VAP) if r.properties["metadata"]["name"] == mca.ADMISSION_NAME]
    (binding,) = [r for r in res.monitor.by_type(VAP_BINDING)
                  if r.properties["metadata"]["name"] == mca.ADMISSION_NAME]
    return policy, binding


def test_the_model_cache_admission_rule_is_declared_before_the_workloads_that_mount_the_cache(with_models):
    _policy, binding = _cache_admission(with_models)
    workloads = [r for r in with_models.registrations
                 if r.type in ("gpuburst:index:GpuScaledJob", "gpuburst:index:GpuConsumer")]
    assert len(workloads) == 2 and all(binding.urn in w.dependencies for w in workloads)


def test_without_a_model_there_is_no_cache_but_the_node_class_still_makes_its_folder(own):
    """No model: no cache volume and no cache env; but the admission rule and the node folder are there all the same,
    for a lab's workload stack on this cluster that declares a cache of its own (workloadStackConfig says so)."""
    from components.model_cache import cache_folder_script

    assert _cache_admission(own)
    assert not own.monitor.by_type("kubernetes:core/v1:PersistentVolume")
    (nodeclass,) = own.monitor.by_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    user_data = nodeclass.properties["spec"]["userData"]
    assert "text/x-shellscript" in user_data and cache_folder_script() in user_data.replace("\r\n", "\n")
    assert not {"MODEL_URI", "MODEL_CACHE_DIR"} & set(_env(_containers(own)["slides"]))


@pytest.fixture(scope="module")
def prebuilt():
    config = _lab_config(workerImage=LAB_IMAGE, workerImageCuda="12.8",
                         warmGpus={"count": 1, "start": "0 8 * * 1-5", "end": "0 13 * * 1-5",
                                   "timezone": "Europe/London"})
    return run_under_mocks(lambda: GpuBurstPlatform("p", config, verify_image=config.verify_image))


def test_a_prebuilt_image_runs_in_every_worker_pod_and_nothing_is_built(prebuilt):
    assert not prebuilt.monitor.by_type("docker-build:index:Image")
    assert not prebuilt.monitor.by_type("gpuburst:index:WorkerImage")
    pods = _containers(prebuilt)
    assert {t["spec"]["containers"][0]["image"] for t in pods.values()} == {LAB_IMAGE}
    assert all(t["metadata"]["annotations"]["gpuburst.io/worker-image-cuda"] == "12.8" for t in pods.values())
    # The warm floor pre-pulls it and verify's probes run it: no other worker image anywhere in the plan.
    text = json.dumps([r.properties for r in prebuilt.registrations])
    assert "worker-image-repo" not in text
    floor = [r for r in prebuilt.monitor.by_type(DEPLOYMENT) if "warm" in r.name]
    assert floor and LAB_IMAGE in json.dumps(floor[0].properties)
    (job,) = prebuilt.monitor.by_type("kubernetes:batch/v1:Job")
    assert LAB_IMAGE in json.dumps(job.properties)


def test_a_prebuilt_image_outside_the_regions_ecr_is_refused_with_the_platforms_network():
    config = _lab_config(workerImage=f"ghcr.io/tils-lab/worker@sha256:{DIGEST}")
    with pytest.raises(ConfigError) as e:
        run_under_mocks(lambda: GpuBurstPlatform("p", config))
    assert str(e.value).startswith(f"GpuBurstPlatform 'p': gpuburst:workerImage: 'ghcr.io/tils-lab/worker@sha256:"
                                   f"{DIGEST}' is not valid: an image in this account's ECR in us-east-1")
    attached = run_under_mocks(lambda: GpuBurstPlatform("p", config, network=ExistingNetwork(
        "vpc-0example", ["subnet-0a"], vpc_cidr="10.0.0.0/16")))  # another network may reach it: its owner's call
    assert {t["spec"]["containers"][0]["image"] for t in _containers(attached).values()} == {
        f"ghcr.io/tils-lab/worker@sha256:{DIGEST}"}


def test_a_lab_build_extends_the_built_in_image_and_every_worker_runs_it(tmp_path, monkeypatch):
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "Dockerfile").write_text("ARG GPUBURST_WORKER_IMAGE\nFROM ${GPUBURST_WORKER_IMAGE}\n"
                                                 "COPY model.pt2 /opt/model/model.pt2\n")
    (tmp_path / "lab" / "model.pt2").write_bytes(b"weights")
    monkeypatch.chdir(tmp_path)
    config = _lab_config(workerBuild={"context": "lab"})
    res = run_under_mocks(lambda: GpuBurstPlatform("p", config))
    builds = {r.name: r.properties for r in res.monitor.by_type("docker-build:index:Image")}
    assert set(builds) == {"p-worker-image-image", "p-lab-image-image"}
    assert builds["p-lab-image-image"]["buildArgs"]["GPUBURST_WORKER_IMAGE"].split("@")[0].endswith(
        "p-worker-image-repo")
    images = {t["spec"]["containers"][0]["image"] for t in _containers(res).values()}
    assert len(images) == 1 and images.pop().split("@")[0].endswith("p-lab-image-repo")


def test_the_bootstrap_up_declares_only_the_key_the_network_and_the_runner_under_the_final_urns(prod, tmp_path):
    """Issue 27: `deploy.bootstrap: true` (the first `up` of prod, from the deploy CIDRs) creates no cluster and
    nothing in it; every resource it creates keeps its URN in the complete plan, so the runner's later `up` adds
    the rest and replaces nothing."""
    from synth_run import run_synth

    stack = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text(encoding="utf-8"))
    stack["config"]["gpuburst:deploy"]["bootstrap"] = True
    (tmp_path / "Pulumi.boot.yaml").write_text(yaml.safe_dump(stack), encoding="utf-8")
    proc = run_synth(tmp_path / "out", "--stack", "prod", "--stack-file", str(tmp_path / "Pulumi.boot.yaml"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    boot = json.loads((tmp_path / "out" / "plan.json").read_text(encoding="utf-8"))
    types = {r["type"] for r in boot["resources"]}
    assert "eks:index:Cluster" not in types and not any(t.startswith("kubernetes:") for t in types)
    assert {"gpuburst:index:DataKey", "gpuburst:index:WorkloadNetwork", "gpuburst:index:DeployRunner",
            "aws:codebuild/project:Project"} <= types
    assert {r["urn"] for r in boot["resources"]} <= {r["urn"] for r in prod["plan"]["resources"]}
    assert set(boot["outputs"]) == {"bootstrap"}


def test_the_workload_stack_config_follows_the_model_the_prebuilt_image_and_the_extra_namespaces():
    """A workload model makes the node class run cache_folder_script(), so the output says so; a prebuilt image with
    no declared CUDA has no imageCuda; KEDA's watch list is the one its chart is given."""
    import pulumi

    config = _lab_config({"model": {"uri": "s3://tils-lab-models/tils/v3.pt2", "sha256": DIGEST}},
                         workerImage=LAB_IMAGE)
    res = run_under_mocks(lambda: pulumi.export("w", GpuBurstPlatform(
        "p", config, keda_extra_watch_namespaces=["lab-tils", "gpuburst"]).workload_stack_config))
    out = res.outputs["w"]
    assert out["nodeClassModelCacheFolder"] is True and "imageCuda" not in out and out["image"] == LAB_IMAGE
    assert out["kedaWatchNamespaces"] == ["gpuburst", "lab-tils"]
    (keda,) = [r for r in res.monitor.by_type("kubernetes:helm.sh/v4:Chart") if r.properties.get("chart") == "keda"]
    assert keda.properties["values"]["watchNamespace"] == "gpuburst,lab-tils"
    (nodeclass,) = res.monitor.by_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    assert "gpuburst-model-cache" in nodeclass.properties["spec"]["userData"]

"""The offline synth of the dev stack: the plan holds what the issue promises, and bad config fails in one line."""
import json
from pathlib import Path

import pytest
import yaml
from synth_run import run_synth

from components import catalogue
from components.synth.charts import CHART_TYPE, SHARED_CHARTS

ROOT = Path(__file__).resolve().parents[3]

needs_charts = pytest.mark.skipif(not SHARED_CHARTS.is_dir(), reason=f"the pinned chart archives are not at "
                                  f"{SHARED_CHARTS} (../shared/charts is absent): the dev plan cannot hold the charts' "
                                  f"objects")


def of_type(plan, t):
    return [r for r in plan["resources"] if r["type"] == t]


def test_summary_is_printed(dev):
    assert "Resources by type" in dev["stdout"] and catalogue.KARPENTER_VERSION in dev["stdout"]


def test_summary_names_the_newest_patch_of_the_pinned_karpenter_line_and_its_action_required(dev):
    header = "Release lines (gpuburst.catalogue.lines; the Upgrading guide (docs/upgrading.md) moves a pin):"
    section = dev["stdout"].split(header, 1)[1].split("\n\n", 1)[0]
    newest = catalogue.newest_patch("karpenter", catalogue.KARPENTER_VERSION)
    assert newest.version == "1.14.4"
    assert (f"karpenter {catalogue.KARPENTER_VERSION}: "
            f"{catalogue.line_support('karpenter', catalogue.KARPENTER_VERSION)}; "
            f"newest patch {newest.version} (behind it)") in section
    assert "the karpenter 1.14 LTS line" in section and "Jul 2027" in section
    assert f"ACTION REQUIRED: {newest.action_required}" in section and "1.14.3: classify SpotMaxPriceTooLow" in section
    assert "keda 2.20.2:" in section and "newer line 2.21 (no LTS scheme, newest 2.21.1)" in section


def test_resources_sorted_by_urn_with_required_fields(dev):
    urns = [r["urn"] for r in dev["plan"]["resources"]]
    assert urns == sorted(urns)
    for r in dev["plan"]["resources"]:
        assert set(r) >= {"urn", "type", "name", "parent", "dependencies", "properties"}


def test_cluster(dev):
    clusters = of_type(dev["plan"], "eks:index:Cluster")
    assert len(clusters) == 1
    assert clusters[0]["properties"]["version"] == catalogue.KUBERNETES_VERSION


def test_work_queue_has_redrive_and_alarms(dev):
    queues = of_type(dev["plan"], "aws:sqs/queue:Queue")
    assert len(queues) >= 2
    work = [q for q in queues if q["properties"].get("redrivePolicy")]
    assert work, "no work queue with a redrive policy"
    redrive = json.loads(work[0]["properties"]["redrivePolicy"])
    assert redrive["maxReceiveCount"] == 5 and redrive["deadLetterTargetArn"].startswith("arn:aws:sqs:")
    alarms = of_type(dev["plan"], "aws:cloudwatch/metricAlarm:MetricAlarm")
    metrics = {a["properties"]["metricName"] for a in alarms}
    assert {"ApproximateAgeOfOldestMessage", "ApproximateNumberOfMessagesVisible"} <= metrics


def test_nodepool_allows_a_family(dev):
    pools = of_type(dev["plan"], "kubernetes:karpenter.sh/v1:NodePool")
    assert len(pools) == 1
    reqs = pools[0]["properties"]["spec"]["template"]["spec"]["requirements"]
    types = [r for r in reqs if r["key"] == "node.kubernetes.io/instance-type"]
    assert types and len(set(types[0]["values"])) >= 2


def test_nodeclass_alias(dev):
    ncs = of_type(dev["plan"], "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    assert [t["alias"] for t in ncs[0]["properties"]["spec"]["amiSelectorTerms"]] == ["al2023@latest"]


def test_nodeclass_puts_images_on_the_nvme_raid0_and_turns_on_fast_image_pull(dev):
    import email

    import yaml

    [nc] = of_type(dev["plan"], "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    spec = nc["properties"]["spec"]
    assert spec["instanceStorePolicy"] == "RAID0"
    # a MIME document: the NodeConfig, then the model cache folder's script (components/nodeclass.py boot_scripts)
    parts = {part.get_content_type(): part.get_payload() for part in email.message_from_string(spec["userData"]).walk()
             if not part.is_multipart()}
    assert set(parts) == {"application/node.eks.aws", "text/x-shellscript"}, set(parts)
    assert yaml.safe_load(parts["application/node.eks.aws"])["spec"] == {"featureGates": {"FastImagePull": True}}


def test_keda_objects(dev):
    auths = of_type(dev["plan"], "kubernetes:keda.sh/v1alpha1:TriggerAuthentication")
    assert auths and all(a["properties"]["spec"]["podIdentity"]["provider"] == "aws" for a in auths)
    assert of_type(dev["plan"], "kubernetes:keda.sh/v1alpha1:ScaledJob")
    deployments = of_type(dev["plan"], "kubernetes:apps/v1:Deployment")
    assert any("consume" in json.dumps(d["properties"]) for d in deployments)


def test_charts_pinned(dev):
    charts = of_type(dev["plan"], "kubernetes:helm.sh/v4:Chart") + of_type(dev["plan"], "kubernetes:helm.sh/v3:Release")
    found = {}
    for c in charts:
        name = str(c["properties"]["chart"]).rstrip("/").split("/")[-1]
        found[name] = c["properties"]["version"]
    for name in ("karpenter-crd", "karpenter", "keda", "nvidia-device-plugin"):
        assert found.get(name) == catalogue.CHARTS[name].version, (name, found)


def rendered(plan, chart, type_):
    """(namespace, name) of the objects of `type_` rendered from the Chart registration of `chart`."""
    charts = {c["urn"] for c in of_type(plan, CHART_TYPE) if str(c["properties"]["chart"]).split("/")[-1] == chart}
    assert len(charts) == 1, (chart, charts)
    return sorted(((r["properties"]["metadata"].get("namespace") or "", r["properties"]["metadata"]["name"])
                   for r in of_type(plan, type_) if r["parent"] in charts))


@needs_charts
def test_the_charts_objects_are_in_the_plan_under_their_charts(dev):
    plan = dev["plan"]
    assert plan["shallow"] == []
    assert rendered(plan, "karpenter", "kubernetes:apps/v1:Deployment") == [("kube-system", "karpenter")]
    assert rendered(plan, "karpenter", "kubernetes:core/v1:ServiceAccount") == [("kube-system", "karpenter")]
    keda_deployments = rendered(plan, "keda", "kubernetes:apps/v1:Deployment")
    assert ("keda", "keda-operator") in keda_deployments
    assert ("keda", "keda-operator") in rendered(plan, "keda", "kubernetes:core/v1:ServiceAccount")
    assert rendered(plan, "nvidia-device-plugin", "kubernetes:apps/v1:DaemonSet")[0] == (
        "nvidia-device-plugin", "nvidia-device-plugin")


@needs_charts
def test_the_service_accounts_the_pod_identities_name_are_the_ones_the_charts_render(dev):
    plan = dev["plan"]
    accounts = {(r["properties"]["metadata"]["namespace"], r["properties"]["metadata"]["name"])
                for r in of_type(plan, "kubernetes:core/v1:ServiceAccount") if r.get("source")}
    for assoc in of_type(plan, "aws:eks/podIdentityAssociation:PodIdentityAssociation"):
        props = assoc["properties"]
        if props["namespace"] in ("kube-system", "keda"):
            assert (props["namespace"], props["serviceAccount"]) in accounts, (assoc["urn"], sorted(accounts))
    runs_as = {(d["properties"]["metadata"]["namespace"], d["properties"]["metadata"]["name"]):
               d["properties"]["spec"]["template"]["spec"].get("serviceAccountName")
               for d in of_type(plan, "kubernetes:apps/v1:Deployment") if d.get("source")}
    assert runs_as[("kube-system", "karpenter")] == "karpenter"
    assert runs_as[("keda", "keda-operator")] == "keda-operator"


@needs_charts
def test_rendered_children_are_named_and_typed_as_the_engine_does(dev):
    plan = dev["plan"]
    keda = next(c for c in of_type(plan, CHART_TYPE) if c["properties"]["chart"] == "keda")
    op = next(r for r in of_type(plan, "kubernetes:apps/v1:Deployment")
              if r["parent"] == keda["urn"] and r["properties"]["metadata"]["name"] == "keda-operator")
    assert op["name"] == f"{keda['name']}:keda/keda-operator"
    chain = keda["urn"].split("::")[2]
    assert op["urn"] == f"urn:pulumi:dev::gpuburst::{chain}$kubernetes:apps/v1:Deployment::{op['name']}"
    crd = next(r for r in of_type(plan, "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition")
               if r["properties"]["metadata"]["name"] == "nodepools.karpenter.sh")
    assert crd["name"].endswith("-karpenter-crd:nodepools.karpenter.sh")
    assert "namespace" not in crd["properties"]["metadata"]
    assert any(r["type"] == "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole" for r in plan["resources"]
               if r.get("source"))


@needs_charts
def test_karpenter_chart_honours_skip_crds(dev):
    plan = dev["plan"]
    assert rendered(plan, "karpenter", "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition") == []
    crds = rendered(plan, "karpenter-crd", "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition")
    assert ("", "nodepools.karpenter.sh") in crds and ("", "ec2nodeclasses.karpenter.k8s.aws") in crds


@needs_charts
def test_summary_gives_the_render_figures(dev):
    line = next(ln for ln in dev["stdout"].splitlines() if "rendered 4 charts" in ln)
    assert "objects) in" in line and "synth total" in line


def test_image_and_registry(dev):
    assert of_type(dev["plan"], "aws:ecr/repository:Repository")
    images = of_type(dev["plan"], "docker-build:index:Image")
    assert images and images[0]["properties"]["buildArgs"]["BASE_IMAGE"] == catalogue.WORKER_BASE_IMAGE
    assert of_type(dev["plan"], "aws:iam/role:Role")
    assert "@sha256:" in dev["plan"]["outputs"]["imageRef"]


def test_custom_resources_depend_on_their_crd_chart(dev):
    plan = dev["plan"]
    charts = {c["urn"]: str(c["properties"]["chart"]).split("/")[-1]
              for c in of_type(plan, "kubernetes:helm.sh/v4:Chart")}
    wanted = {"karpenter.sh": "karpenter-crd", "karpenter.k8s.aws": "karpenter-crd", "keda.sh": "keda"}
    for r in plan["resources"]:
        group = r["type"].split(":")[1].split("/")[0]
        if group in wanted:
            deps = {charts.get(d) for d in r["dependencies"]}
            assert wanted[group] in deps, (r["urn"], r["dependencies"])


def test_every_child_is_parented_to_a_component(dev):
    plan = dev["plan"]
    top = [r for r in plan["resources"] if r["parent"] and r["parent"].endswith("::pulumi:pulumi:Stack::gpuburst-dev")]
    assert [r["type"] for r in top] == ["gpuburst:index:GpuBurstPlatform"]


def test_nothing_renders_as_none(dev):
    # The stack's own registrations: a chart may say "None" itself (a webhook's `sideEffects: None`).
    own = {**dev["plan"], "resources": [r for r in dev["plan"]["resources"] if not r.get("source")]}
    text = json.dumps(own, indent=2)
    assert "None:" not in text and "\"None\"" not in text and "<unknown" not in text
    assert "<unknown" not in (dev["out"] / "plan.json").read_text()
    for key, value in dev["plan"]["outputs"].items():
        assert value not in (None, "", [], {}), key


def test_manifests_written(dev):
    files = sorted((dev["out"] / "manifests").glob("*.yaml"))
    kinds = {yaml.safe_load(f.read_text())["kind"] for f in files}
    assert {"NodePool", "EC2NodeClass", "TriggerAuthentication", "ScaledJob", "Deployment"} <= kinds
    assert not any("CustomResourceDefinition" == k for k in kinds), "a chart's object among the stack's own manifests"


@needs_charts
def test_chart_manifests_written_per_chart(dev):
    folders = sorted(p.name for p in (dev["out"] / "manifests").iterdir() if p.is_dir())
    assert folders == ["karpenter", "karpenter-crd", "keda", "nvidia-device-plugin"]
    deployment = yaml.safe_load((dev["out"] / "manifests" / "keda" / "deployment-keda-keda-operator.yaml").read_text())
    assert deployment["metadata"]["namespace"] == "keda"


def write_stack(tmp_path, config):
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def test_aws_kiam_fails_in_one_line(tmp_path):
    stack = write_stack(tmp_path, {"aws:region": "us-east-1", "gpuburst:kedaProvider": "aws-kiam",
                                   "gpuburst:kedaVersion": "2.20.2"})
    proc = run_synth(tmp_path / "out", "--stack", "bad", "--stack-file", str(stack))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "gpuburst:kedaProvider" in lines[0] and "'aws-kiam'" in lines[0] and "aws, aws-eks, none" in lines[0]
    assert not (tmp_path / "out" / "plan.json").exists()


def test_unknown_key_fails_in_one_line(tmp_path):
    stack = write_stack(tmp_path, {"gpuburst:gpuInstanceType": "g5.xlarge"})
    proc = run_synth(tmp_path / "out", "--stack", "bad", "--stack-file", str(stack))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "gpuburst:gpuInstanceType" in lines[0] and "unknown config key" in lines[0]


def test_missing_stack_is_named(tmp_path):
    proc = run_synth(tmp_path / "out", "--stack", "nosuch")
    assert proc.returncode == 2 and "Pulumi.nosuch.yaml" in proc.stderr


def test_a_stack_pinning_1_34_is_told_its_end_of_standard_support_by_the_synth_and_the_pack(tmp_path):
    import os
    import subprocess
    import sys

    doc = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    doc["config"]["gpuburst:kubernetesVersion"] = "1.34"
    stack = tmp_path / "Pulumi.k134.yaml"
    stack.write_text(yaml.safe_dump(doc))
    env = {**os.environ, catalogue.TODAY_ENV: "2026-11-15"}
    synth = subprocess.run([sys.executable, "-m", "components", "synth", "--stack-file", str(stack), "--out",
                            str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert synth.returncode == 0, synth.stderr
    assert "standard support ends 2026-12-02 (in 17 days)" in synth.stderr and "$0.60" in synth.stderr, synth.stderr
    check = subprocess.run([sys.executable, "-m", "policies", "check", str(tmp_path / "out" / "plan.json")], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=180)
    assert check.returncode == 0, check.stdout + check.stderr
    [line] = [ln for ln in check.stdout.splitlines() if ln.startswith("ADVISORY kubernetes-support-window ")]
    assert "ends 2026-12-02" in line and "$0.60 per cluster-hour" in line
    # The day after: the config itself is refused, before any resource.
    env[catalogue.TODAY_ENV] = "2026-12-02"
    late = subprocess.run([sys.executable, "-m", "components", "synth", "--stack-file", str(stack), "--out",
                           str(tmp_path / "late")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert late.returncode == 2 and late.stderr.strip().count("\n") == 0, late.stderr
    assert "left EKS standard support on 2026-12-02" in late.stderr


def test_another_project_is_synthesised_under_its_own_name_from_its_own_folder(tmp_path):
    project = tmp_path / "lab"
    (project / "prog").mkdir(parents=True)
    (project / "Pulumi.yaml").write_text("name: tumour-platform\nruntime: python\nmain: prog\n")
    (project / "Pulumi.lab.yaml").write_text("config:\n  aws:region: eu-west-1\n")
    (project / "prog" / "__main__.py").write_text(
        "from components.queue import WorkQueue, WorkQueueArgs\n"
        "WorkQueue('slides', WorkQueueArgs(name='lab-slides', expected_processing_s=300,\n"
        "                                  alarm_emails=['oncall@example.org']))\n")
    proc = run_synth(tmp_path / "out", "--project-dir", str(project), "--stack", "lab")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    urns = [r["urn"] for r in plan["resources"]]
    assert urns and all(u.startswith("urn:pulumi:lab::tumour-platform::") for u in urns), urns[:3]
    assert any(r["type"] == "aws:sqs/queue:Queue" for r in plan["resources"])


def test_a_folder_without_a_project_is_refused_in_one_line(tmp_path):
    (tmp_path / "Pulumi.dev.yaml").write_text("config: {}\n")
    proc = run_synth(tmp_path / "out", "--project-dir", str(tmp_path), "--stack", "dev")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "no Pulumi.yaml there" in proc.stderr and str(tmp_path) in proc.stderr


def test_an_error_in_another_projects_component_names_the_component_and_nothing_else(tmp_path):
    project = tmp_path / "lab"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: lab\nruntime: python\n")
    (project / "Pulumi.dev.yaml").write_text("config:\n  aws:region: eu-west-1\n")
    (project / "__main__.py").write_text(
        "import pulumi_aws as aws\n"
        "from components.queue import WorkQueue, WorkQueueArgs\n"
        "from components.nodepool import GpuNodePool, GpuNodePoolArgs\n"
        "aws.sqs.Queue('raw')  # a plain registration before the error: the loop must still be closed quietly\n"
        "WorkQueue('q', WorkQueueArgs(name='lab-slides', expected_processing_s=300, alarm_emails=['a@example.org']))\n"
        "GpuNodePool('pool', GpuNodePoolArgs(nodeclass_name='gpu', crd_chart=None, gpu_limit=4,\n"
        "                                    instance_types=['g5.2xlarge']))\n")
    proc = run_synth(tmp_path / "out", "--project-dir", str(project), "--stack", "dev")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("synth: GpuNodePool 'pool': instance_types: ['g5.2xlarge'] is not valid: "), \
        proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr  # one line: no asyncio traceback under it


# -- the network boundary (issue 19) ----------------------------------------------------------------------------------

WORLD = {"0.0.0.0/0", "::/0"}


def test_the_plan_holds_the_vpc_endpoints(dev):
    endpoints = {(r["properties"]["serviceName"], r["properties"]["vpcEndpointType"])
                 for r in of_type(dev["plan"], "aws:ec2/vpcEndpoint:VpcEndpoint")}
    assert ("com.amazonaws.us-east-1.s3", "Gateway") in endpoints
    for service in ("s3", "sqs", "sts", "ecr.api", "ecr.dkr", "eks-auth", "logs"):
        assert (f"com.amazonaws.us-east-1.{service}", "Interface") in endpoints, service


def test_network_policy_enforcement_is_visible_in_the_plan(dev):
    # The pack's contract: eks:index:Cluster vpcCniOptions.enableNetworkPolicy, or a vpc-cni Addon saying so.
    (cluster,) = of_type(dev["plan"], "eks:index:Cluster")
    addons = [a for a in of_type(dev["plan"], "aws:eks/addon:Addon") if a["properties"]["addonName"] == "vpc-cni"]
    assert (cluster["properties"].get("vpcCniOptions", {}).get("enableNetworkPolicy") is True
            or any(json.loads(a["properties"].get("configurationValues") or "{}").get("enableNetworkPolicy") == "true"
                   for a in addons))


def test_worker_network_policies_never_egress_to_the_world_under_a_default_deny(dev):
    policies = {r["properties"]["metadata"]["name"]: r["properties"]
                for r in of_type(dev["plan"], "kubernetes:networking.k8s.io/v1:NetworkPolicy")}
    deny = policies["default-deny"]
    assert deny["metadata"]["namespace"] == "gpuburst" and deny["spec"]["podSelector"] == {}
    assert deny["spec"]["policyTypes"] == ["Ingress", "Egress"] and deny["spec"]["egress"] == []
    workers = [p for n, p in policies.items() if n.endswith("-worker")]
    assert len(workers) == 2
    for p in workers:
        blocks = {t["ipBlock"]["cidr"] for rule in p["spec"]["egress"] for t in rule["to"] if "ipBlock" in t}
        assert not blocks & WORLD and "10.64.0.0/16" in blocks


def test_gpu_subnets_route_nowhere_outside_the_vpc(dev):
    plan = dev["plan"]
    gpu_subnets = {r["name"] for r in of_type(plan, "aws:ec2/subnet:Subnet")
                   if r["properties"]["tags"].get("gpuburst.io/network-tier") == "gpu"}
    assert len(gpu_subnets) >= 2
    tables = {r["name"]: r for r in of_type(plan, "aws:ec2/routeTable:RouteTable")}
    associations = of_type(plan, "aws:ec2/routeTableAssociation:RouteTableAssociation")
    used = {a["properties"]["routeTableId"] for a in associations
            if a["properties"]["subnetId"].removesuffix("-id") in gpu_subnets}  # the mocks' ids: <name>-id
    assert len(used) == 1
    (table,) = [t for n, t in tables.items() if f"{n}-id" in used]
    assert not [r for r in table["properties"].get("routes", []) if r.get("cidrBlock") in WORLD
                or r.get("ipv6CidrBlock") in WORLD]


def test_the_api_endpoint_is_not_open_to_the_world(dev):
    (cluster,) = of_type(dev["plan"], "eks:index:Cluster")
    p = cluster["properties"]
    if p.get("endpointPublicAccess"):
        assert p["publicAccessCidrs"] and not set(p["publicAccessCidrs"]) & WORLD


def test_gpu_nodes_have_their_own_security_group_with_no_egress_to_the_world(dev):
    plan = dev["plan"]
    (nc,) = of_type(plan, "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    (term,) = nc["properties"]["spec"]["securityGroupSelectorTerms"]
    groups = [g for g in of_type(plan, "aws:ec2/securityGroup:SecurityGroup")
              if all(g["properties"].get("tags", {}).get(k) == v for k, v in term["tags"].items())]
    assert len(groups) == 1
    egress = groups[0]["properties"]["egress"]
    assert egress and not {c for rule in egress for c in rule.get("cidrBlocks", []) + rule.get("ipv6CidrBlocks", [])
                           } & WORLD
    assert all(c == "10.64.0.0/16" for rule in egress for c in rule["cidrBlocks"])


# -- trust, keys and the buckets' boundary (issue 19) -----------------------------------------------------------------

def _doc(value):
    return json.loads(value) if isinstance(value, str) else value


def test_every_pod_identity_trust_policy_names_the_account_and_the_cluster(dev):
    roles = [r for r in of_type(dev["plan"], "aws:iam/role:Role")
             if "pods.eks.amazonaws.com" in json.dumps(r["properties"]["assumeRolePolicy"])]
    assert len(roles) >= 4  # KEDA operator, Karpenter controller, both workers
    for role in roles:
        for statement in _doc(role["properties"]["assumeRolePolicy"])["Statement"]:
            keys = {k for block in statement.get("Condition", {}).values() for k in block}
            assert {"aws:SourceAccount", "aws:SourceArn"} <= keys, role["name"]


def test_the_clinical_buckets_use_a_key_of_the_plan_and_deny_outside_the_vpc_endpoints(dev):
    keys = of_type(dev["plan"], "aws:kms/key:Key")
    assert keys and all(k["properties"]["enableKeyRotation"] is True for k in keys)
    clinical = [b for b in of_type(dev["plan"], "aws:s3/bucket:Bucket")
                if (b["properties"].get("tags") or {}).get("gpuburst.io/data-class") == "clinical-slides"]
    assert len(clinical) == 2
    encryption = of_type(dev["plan"], "aws:s3/bucketServerSideEncryptionConfiguration:"
                                      "BucketServerSideEncryptionConfiguration")
    key_urns = {k["urn"] for k in keys}
    for bucket in clinical:
        (sse,) = [e for e in encryption if e["properties"]["bucket"] == bucket["name"]]
        (rule,) = sse["properties"]["rules"]
        assert rule["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
        assert key_urns & set(sse["dependencies"]), "encrypted with a key of this plan"
        (policy,) = [p for p in of_type(dev["plan"], "aws:s3/bucketPolicy:BucketPolicy")
                     if p["properties"]["bucket"] == bucket["name"]]
        denies = [s for s in _doc(policy["properties"]["policy"])["Statement"] if s["Effect"] == "Deny"
                  and "aws:SourceVpce" in s.get("Condition", {}).get("StringNotEquals", {})]
        assert denies, bucket["name"]


def test_the_stack_says_how_to_fill_the_mirror_the_gpu_nodes_pull_from(dev):
    commands = dev["plan"]["outputs"]["mirrorCopyCommands"]
    (chart,) = [r for r in of_type(dev["plan"], "kubernetes:helm.sh/v4:Chart") if "nvidia" in r["name"]]
    image = chart["properties"]["values"]["image"]
    tag, digest = image["tag"].split("@")  # the chart's tag value carries the digest the pods pull
    assert f"crane copy nvcr.io/nvidia/k8s-device-plugin@{digest} {image['repository']}:{tag}" in commands
    assert any(c.startswith("crane copy registry.k8s.io/pause@sha256:") for c in commands)
    (keda,) = [r for r in of_type(dev["plan"], "kubernetes:helm.sh/v4:Chart") if r["name"] == "gpuburst-keda"]
    for value in keda["properties"]["values"]["image"].values():
        tag, digest = value["tag"].split("@")
        source = "ghcr.io/" + value["repository"].split("/mirror/", 1)[1]
        assert f"crane copy {source}@{digest} {value['repository']}:{tag}" in commands


def test_the_dev_plan_holds_the_verify_runner_with_its_table_and_hook_job(dev):
    from components.catalogue import CHARTS
    from components.verify_runner import RBAC_RULES, RUNNER_NAME, guarded_versions_hash

    plan = dev["plan"]
    (runner,) = of_type(plan, "gpuburst:index:VerifyRunner")
    children = [r for r in plan["resources"] if r["parent"] == runner["urn"]]
    (cluster_role,) = [r for r in children if r["type"] == "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"]
    assert len(cluster_role["properties"]["rules"]) == sum(r.scope == "cluster" for r in RBAC_RULES)
    roles = [r for r in children if r["type"] == "kubernetes:rbac.authorization.k8s.io/v1:Role"]
    assert {r["properties"]["metadata"]["namespace"] for r in roles} == {
        dev["plan"]["outputs"]["namespace"], CHARTS["keda"].namespace, CHARTS["karpenter"].namespace}
    (job,) = [r for r in children if r["type"] == "kubernetes:batch/v1:Job"]
    stack = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    versions = {"kubernetes": catalogue.KUBERNETES_VERSION, "karpenter": catalogue.KARPENTER_VERSION,
                "keda": catalogue.KEDA_VERSION, "nvidia-device-plugin": CHARTS["nvidia-device-plugin"].version,
                "ami-alias": stack["gpuburst:amiAlias"]}
    assert job["properties"]["metadata"]["name"] == f"{RUNNER_NAME}-{guarded_versions_hash(versions)}" \
        == plan["outputs"]["verifyJobName"]
    (container,) = job["properties"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == stack["gpuburst:verifyImage"]
    assert container["command"][:7] == ["python", "-m", "gpuburst", "verify", "--json", "-", "--strict"]
    assert container["command"][container["command"].index("--image") + 1] == plan["outputs"]["imageRef"]
    (netpol,) = [r for r in children if r["type"] == "kubernetes:networking.k8s.io/v1:NetworkPolicy"]
    cidrs = [p["ipBlock"]["cidr"] for rule in netpol["properties"]["spec"]["egress"] for p in rule["to"]
             if "ipBlock" in p]
    assert stack["gpuburst:vpcCidr"] in cidrs and "0.0.0.0/0" not in cidrs
    assert any(r["type"] == "aws:eks/podIdentityAssociation:PodIdentityAssociation"
               and r["properties"]["serviceAccount"] == RUNNER_NAME for r in plan["resources"])


# -- what the synth prints (issue 30) ----------------------------------------------------------------------------------

def test_the_programs_log_lines_are_shown_on_stderr(tmp_path):
    project = tmp_path / "lab"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: lab\nruntime: python\n")
    (project / "Pulumi.dev.yaml").write_text("config:\n  aws:region: eu-west-1\n")
    (project / "__main__.py").write_text(
        "import pulumi\nimport pulumi_aws as aws\n"
        "q = aws.sqs.Queue('q')\n"
        "pulumi.log.info('lab: chose the consumer (ordered work)')\n"
        "pulumi.log.warn('lab: egress_cidrs left out', q)\n")
    proc = run_synth(tmp_path / "out", "--project-dir", str(project), "--stack", "dev")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["info: lab: chose the consumer (ordered work)",
                                        "warning: lab: egress_cidrs left out"], proc.stderr


def test_a_reader_that_stops_early_ends_the_synth_quietly(tmp_path):
    import os
    import subprocess
    import sys

    # The reader closes the pipe before the summary is written, as `... | head -1` does once it has its line.
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "components", "synth", "--stack", "dev", "--out",
                             str(tmp_path / "out")], cwd=ROOT, stdout=write_end, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(write_end)
    os.close(read_end)
    try:
        err = proc.communicate(timeout=300)[1].decode()
        code = proc.returncode
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert code == 141, err  # 128 + SIGPIPE, as a shell reports a tool the signal ended

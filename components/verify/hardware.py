"""The `hardware-ami` check: each GPU node is an instance type its NodePool admits, booted from the NVIDIA AMI, with
kubelet on the instance-store RAID0 when its EC2NodeClass asks for one.

The AMI is judged from two independent sources: the node's Karpenter labels (which GPU maker the instance type
has) and EC2's own description of the image the instance was launched from (providerID -> instance -> ImageId ->
image Name). The EKS AL2023 AMIs are named `amazon-eks-node-al2023-<arch>-<variant>[-<driver>]-<k8s>-v<date>`
with variant `nvidia`, `neuron` or `standard`; an NVIDIA instance on any variant but `nvidia` never gets a usable GPU.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..spec.names import INSTANCE_TYPE_LABEL, NODEPOOL_LABEL
from ..spec.quantity import parse_quantity
from .context import Context
from .model import FAIL, PASS, SKIPPED, CheckResult, labels_of, name_of

NAME = "hardware-ami"
GPU_MANUFACTURER_LABEL = "karpenter.k8s.aws/instance-gpu-manufacturer"
ACCELERATOR_MANUFACTURER_LABEL = "karpenter.k8s.aws/instance-accelerator-manufacturer"
LOCAL_NVME_LABEL = "karpenter.k8s.aws/instance-local-nvme"
RAID0_MIN_FRACTION = 0.8
"""A RAID0 node's ephemeral-storage capacity must be at least this fraction of its NVMe (the array's filesystem takes
a little); the root volume instead (100 GiB against 450 GB on a g5.2xlarge) means the array was never used."""

_AL2023 = re.compile(r"^amazon-eks-node-al2023-(?P<arch>x86_64|arm64)-(?P<variant>[a-z]+)(?:-(?P<driver>\d+))?"
                     r"-(?P<k8s>\d+\.\d+)-v(?P<date>\d{8})$")
_AL2 = re.compile(r"^amazon-eks-(?P<gpu>gpu-|arm64-)?node-(?P<k8s>\d+\.\d+)-v(?P<date>\d{8})$")
_BOTTLEROCKET = re.compile(r"^bottlerocket-aws-k8s-(?P<k8s>\d+\.\d+)(?P<nvidia>-nvidia)?(?:-fips)?-"
                           r"(?P<arch>x86_64|aarch64)-v")
_PROVIDER_ID = re.compile(r"^aws:///[^/]*/(?P<id>i-[0-9a-f]+)$")


@dataclass(frozen=True)
class AmiKind:
    """What an AMI's name says it is."""

    family: str
    """`al2023`, `al2`, `bottlerocket`, or `unknown`."""
    variant: str
    """`nvidia`, `neuron`, `standard`, or `unknown`."""
    detail: str
    """Architecture / Kubernetes minor / build, for evidence."""


def ami_kind(image: dict[str, Any]) -> AmiKind:
    """Family and variant of an EC2 image from its Name (the Description is consulted when the name is unknown)."""
    name = image.get("Name") or ""
    m = _AL2023.match(name)
    if m:
        return AmiKind("al2023", m["variant"], f"{m['arch']}, Kubernetes {m['k8s']}, build v{m['date']}"
                       + (f", driver {m['driver']}" if m["driver"] else ""))
    m = _AL2.match(name)
    if m:
        return AmiKind("al2", "nvidia" if m["gpu"] == "gpu-" else "standard", f"Kubernetes {m['k8s']}")
    m = _BOTTLEROCKET.match(name)
    if m:
        return AmiKind("bottlerocket", "nvidia" if m["nvidia"] else "standard", f"{m['arch']}, Kubernetes {m['k8s']}")
    desc = (image.get("Description") or "").lower()
    variant = "nvidia" if "nvidia" in desc else "neuron" if "neuron" in desc else "unknown"
    return AmiKind("unknown", variant, f"description {image.get('Description')!r}")


def expected_family(nodeclass: dict[str, Any] | None) -> str:
    """The AMI family the EC2NodeClass selects: the alias's family (`al2023@latest` -> al2023), else al2023."""
    spec = (nodeclass or {}).get("spec") or {}
    for term in spec.get("amiSelectorTerms") or []:
        alias = term.get("alias")
        if alias:
            return alias.split("@", 1)[0].lower()
    fam = spec.get("amiFamily")
    return fam.lower() if fam else "al2023"


def expected_variant(labels: dict[str, str]) -> str | None:
    """Which AMI variant the node's instance needs: nvidia for an NVIDIA GPU, neuron for AWS accelerators."""
    if labels.get(GPU_MANUFACTURER_LABEL, "").lower() == "nvidia":
        return "nvidia"
    if labels.get(ACCELERATOR_MANUFACTURER_LABEL, "").lower() == "aws":
        return "neuron"
    return None


def instance_id(node: dict[str, Any]) -> str | None:
    """The EC2 instance id from spec.providerID (`aws:///us-east-1a/i-0abc...`)."""
    m = _PROVIDER_ID.match((node.get("spec") or {}).get("providerID") or "")
    return m["id"] if m else None


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def requirement_problem(req: dict[str, Any], labels: dict[str, str]) -> str | None:
    """Why the node's labels break one NodePool requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte),
    or None. Like Kubernetes node affinity, NotIn and DoesNotExist hold when the label is absent."""
    key, op, values = req.get("key", ""), req.get("operator", ""), [str(v) for v in req.get("values") or []]
    present = key in labels
    value = labels.get(key)
    shown = f"{key}={value!r}" if present else f"{key} absent"
    if op == "In":
        return None if present and value in values else f"{shown}, NodePool requires In {values}"
    if op == "NotIn":
        return None if not present or value not in values else f"{shown}, NodePool requires NotIn {values}"
    if op == "Exists":
        return None if present else f"{key} absent, NodePool requires Exists"
    if op == "DoesNotExist":
        return None if not present else f"{shown}, NodePool requires DoesNotExist"
    if op in ("Gt", "Lt", "Gte", "Lte"):
        bound = _as_int(values[0]) if values else None
        have = _as_int(value) if present else None
        if bound is None or have is None:
            return f"{shown}, NodePool requires {op} {values} (not comparable as integers)"
        ok = {"Gt": have > bound, "Lt": have < bound, "Gte": have >= bound, "Lte": have <= bound}[op]
        return None if ok else f"{shown}, NodePool requires {op} {bound}"
    return f"unknown operator {op!r} on {key}"


def admission_problems(nodepool: dict[str, Any] | None, labels: dict[str, str]) -> list[str]:
    """Every NodePool requirement (spec.template.spec.requirements) the node's labels break."""
    reqs = ((((nodepool or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("requirements") or []
    return [p for p in (requirement_problem(r, labels) for r in reqs) if p]


def _broken_keys(nodepool: dict | None, labels: dict[str, str]) -> list[str]:
    """`key='value'` (or `key absent`) of each NodePool requirement the node's labels break, for the summary."""
    reqs = ((((nodepool or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("requirements") or []
    return [f"{r.get('key')}={labels[r.get('key')]!r}" if r.get("key") in labels else f"{r.get('key')} absent"
            for r in reqs if requirement_problem(r, labels)]


def instance_store_problem(nodeclass: dict[str, Any] | None, node: dict[str, Any]) -> tuple[str | None, str | None]:
    """(problem, evidence) of a node whose EC2NodeClass asks for `instanceStorePolicy: RAID0`: its ephemeral-storage
    capacity (what kubelet's filesystem really is) must be the local NVMe, not the root volume. (None, None) when the
    node class does not ask for it; no problem for a type without NVMe (Karpenter keeps the root volume there)."""
    if ((nodeclass or {}).get("spec") or {}).get("instanceStorePolicy") != "RAID0":
        return None, None
    labels = labels_of(node)
    nvme_gb = parse_quantity(labels.get(LOCAL_NVME_LABEL))
    if nvme_gb is None:
        from .. import catalogue  # the label is Karpenter's; the catalogue knows the same figure for its types

        t = catalogue.instance_type(labels.get(INSTANCE_TYPE_LABEL, ""))
        nvme_gb = float(t.local_nvme_gb) if t is not None else None
    if not nvme_gb:
        return None, "no local NVMe: ephemeral storage on the root volume"
    capacity = parse_quantity(((node.get("status") or {}).get("capacity") or {}).get("ephemeral-storage"))
    if capacity is None:
        return "no ephemeral-storage capacity in node status (kubelet's filesystem unknown)", None
    have, want = capacity / 2 ** 30, nvme_gb * 1e9 / 2 ** 30
    if capacity < RAID0_MIN_FRACTION * nvme_gb * 1e9:
        return (f"instanceStorePolicy RAID0 asked, but ephemeral-storage is {have:.0f} GiB, not the {nvme_gb:.0f} "
                f"GB ({want:.0f} GiB) NVMe: kubelet and containerd are on the root volume, so images unpack at EBS "
                "speed"), None
    return None, f"ephemeral storage {have:.0f} GiB on the NVMe RAID0 ({nvme_gb:.0f} GB)"


def judge_hardware(nodepool_name: str, nodepool: dict[str, Any] | None, nodeclass: dict[str, Any] | None,
                   nodes: list[dict[str, Any]],
                   instances: dict[str, dict[str, Any]], images: dict[str, dict[str, Any]], *,
                   lookup_errors: list[str] | None = None) -> CheckResult:
    """The check's verdict: per node, the NodePool admits its labels, and its image is the expected family and variant.

    `instances` maps instance id -> EC2 instance (describe_instances); `images` maps AMI id -> EC2 image.
    """
    evidence = list(lookup_errors or [])
    mine = [n for n in nodes if labels_of(n).get(NODEPOOL_LABEL) == nodepool_name]
    if not mine:
        return CheckResult(NAME, SKIPPED, f"no node in NodePool {nodepool_name} to judge (scale-to-zero)",
                           evidence + [f"no node carries {NODEPOOL_LABEL}={nodepool_name}"])
    if nodepool is None:
        evidence.append(f"NodePool {nodepool_name} not found: instance types cannot be checked against it")
    family = expected_family(nodeclass)
    resolved = {a.get("id"): a for a in ((nodeclass or {}).get("status") or {}).get("amis") or []}
    failures: list[str] = []
    for node in mine:
        name, labels = name_of(node), labels_of(node)
        itype = labels.get(INSTANCE_TYPE_LABEL, "unknown instance type")
        problems = admission_problems(nodepool, labels) if nodepool is not None else ["NodePool not found"]
        # The summary's words for this node, the decisive ones first (the full problems are in the evidence).
        short: list[str] = []
        if problems:
            short.append(f"not admitted by NodePool {nodepool_name} ({', '.join(_broken_keys(nodepool, labels))})"
                         if nodepool is not None else f"NodePool {nodepool_name} not found")
        want = expected_variant(labels)
        if want != "nvidia":
            problems.append(f"instance type {itype} has no NVIDIA GPU ({GPU_MANUFACTURER_LABEL} is "
                            f"{labels.get(GPU_MANUFACTURER_LABEL)!r})")
            short.insert(0, "no NVIDIA GPU")
        # The AMI must suit the instance it runs on (an Inferentia node on the Neuron AMI is consistent, just in
        # the wrong pool, which the line above reports).
        want = want or "nvidia"
        iid = instance_id(node)
        ami_id = (instances.get(iid) or {}).get("ImageId") if iid else None
        image = images.get(ami_id) if ami_id else None
        if iid is None:
            problems.append(f"providerID {(node.get('spec') or {}).get('providerID')!r} names no EC2 instance")
            short.append(problems[-1])
            ami_text = "AMI unknown"
        elif ami_id is None:
            problems.append(f"instance {iid} not found by ec2:DescribeInstances")
            short.append(problems[-1])
            ami_text = "AMI unknown"
        elif image is None:
            problems.append(f"image {ami_id} not found by ec2:DescribeImages (deregistered or not shared)")
            short.append(f"image {ami_id} not found by ec2:DescribeImages")
            ami_text = f"AMI {ami_id}"
        else:
            kind = ami_kind(image)
            ami_text = f"AMI {ami_id} {image.get('Name')!r} ({kind.family}/{kind.variant}, {kind.detail})"
            wrong = []
            if kind.family != family:
                problems.append(f"AMI family {kind.family}, the EC2NodeClass selects {family}")
                wrong.append(f"family {kind.family}, not {family}")
            if kind.variant != want:
                problems.append(f"AMI variant {kind.variant}, an {labels.get(GPU_MANUFACTURER_LABEL, want)} GPU "
                                f"instance needs the {want} variant")
                wrong.append(f"variant {kind.variant}, not {want}")
            if wrong:
                short.insert(1 if short and short[0] == "no NVIDIA GPU" else 0,
                             f"AMI {ami_id} {image.get('Name')!r}: {', '.join(wrong)}")
        store_problem, store_evidence = instance_store_problem(nodeclass, node)
        if store_problem:
            problems.append(store_problem)
            short.append(store_problem.split(":", 1)[0])
        if ami_id in resolved:
            reqs = ", ".join(f"{r.get('key')} {r.get('operator')} {r.get('values') or ''}".strip()
                             for r in resolved[ami_id].get("requirements") or [])
            ami_text += f"; EC2NodeClass status.amis maps it to [{reqs}]"
        line = f"node {name} ({itype}, instance {iid or '?'}): {ami_text}" + (
            f"; {store_evidence}" if store_evidence else "")
        if problems:
            failures.append(f"{name} ({itype}): {'; '.join(short)}")
            evidence.append(line + " — " + "; ".join(problems))
        else:
            evidence.append(line + " — admitted by the NodePool, expected AMI")
    if failures:
        more = f" (+{len(failures) - 1} more node(s))" if len(failures) > 1 else ""
        return CheckResult(NAME, FAIL, f"{len(failures)} of {len(mine)} node(s) of NodePool {nodepool_name} wrong: "
                                       f"{failures[0]}{more}", evidence)
    return CheckResult(NAME, PASS, f"all {len(mine)} node(s) of NodePool {nodepool_name} are admitted instance "
                                   f"types on the {family} NVIDIA AMI", evidence)


def run(ctx: Context) -> CheckResult:
    """Read the NodePool, its EC2NodeClass, its nodes, then their instances and images from EC2, and judge."""
    s = ctx.settings
    nodepool = ctx.kube.get_nodepool(s.nodepool)
    nodes = ctx.kube.list_nodes(label_selector=f"{NODEPOOL_LABEL}={s.nodepool}")
    if not nodes:
        return judge_hardware(s.nodepool, nodepool, None, nodes, {}, {})
    ref = ((((nodepool or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    nodeclass = ctx.kube.get_ec2nodeclass(ref["name"]) if ref.get("name") else None
    errors: list[str] = []
    ids = sorted({i for i in (instance_id(n) for n in nodes) if i})
    region = next((labels_of(n).get("topology.kubernetes.io/region") for n in nodes
                   if labels_of(n).get("topology.kubernetes.io/region")), None)
    aws = ctx.aws(region)
    instances: dict[str, dict] = {}
    images: dict[str, dict] = {}
    from .aws import AwsError  # the boto3 layer is imported only by checks that talk to AWS
    try:
        if ids:
            instances = {i["InstanceId"]: i for i in aws.describe_instances(ids)}
        amis = sorted({i.get("ImageId") for i in instances.values() if i.get("ImageId")})
        if amis:
            images = {im["ImageId"]: im for im in aws.describe_images(amis)}
    except AwsError as e:
        errors.append(str(e))
    return judge_hardware(s.nodepool, nodepool, nodeclass, nodes, instances, images, lookup_errors=errors)

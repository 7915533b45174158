"""The `ami-canary` check: the image the live EC2NodeClass resolves for the GPU NodePool's instance types is the
NVIDIA variant of the expected AMI family, judged from `status.amis` and EC2's image names with no node running; and
no selector term of that EC2NodeClass is empty (spec/selector_terms.py: Karpenter 1.14.4 ignores such a term)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .. import catalogue
from ..spec.names import INSTANCE_TYPE_LABEL
from ..spec.selector_terms import empty_selector_terms
from .context import Context
from .hardware import GPU_MANUFACTURER_LABEL, admission_problems, ami_kind, expected_family, requirement_problem
from .model import FAIL, PASS, CheckResult, headline

NAME = "ami-canary"
OBSERVED_AMIS = "ami-canary.observed"
"""Context.state key: (EC2NodeClass name, observed_images(...)) as ami-canary read them."""
GPU_COUNT_LABEL = "karpenter.k8s.aws/instance-gpu-count"
_FAMILY = re.compile(r"^(?P<category>[a-z]+)(?P<generation>\d+)")


def instance_labels(itype: catalogue.InstanceType) -> dict[str, str]:
    """The Karpenter labels an instance of this catalogue type carries (what status.amis requirements are matched
    against when Karpenter picks the image for it)."""
    m = _FAMILY.match(itype.family)
    labels = {
        INSTANCE_TYPE_LABEL: itype.name,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "karpenter.k8s.aws/instance-family": itype.family,
        "karpenter.k8s.aws/instance-cpu": str(itype.vcpu),
        "karpenter.k8s.aws/instance-memory": str(itype.memory_mib),
        GPU_COUNT_LABEL: str(itype.gpus),
        GPU_MANUFACTURER_LABEL: "nvidia",
        "karpenter.k8s.aws/instance-gpu-name": itype.gpu_name,
        "karpenter.k8s.aws/instance-gpu-memory": str(itype.gpu_memory_mib),
    }
    if m:
        labels["karpenter.k8s.aws/instance-category"] = m["category"]
        labels["karpenter.k8s.aws/instance-generation"] = m["generation"]
    if itype.local_nvme_gb:
        labels["karpenter.k8s.aws/instance-local-nvme"] = str(itype.local_nvme_gb)
    return labels


def gpu_instance_types(nodepool: dict[str, Any] | None) -> list[catalogue.InstanceType]:
    """The catalogue's GPU instance types the NodePool's requirements admit (requirements on labels an instance type
    does not determine, such as capacity type or zone, are left out: they do not change the image)."""
    reqs = ((((nodepool or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("requirements") or []
    admitted = []
    for t in catalogue.INSTANCE_TYPES.values():
        labels = instance_labels(t)
        known = [r for r in reqs if r.get("key") in labels]
        if not admission_problems({"spec": {"template": {"spec": {"requirements": known}}}}, labels):
            admitted.append(t)
    return admitted


def selected_amis(amis: list[dict[str, Any]], labels: dict[str, str]) -> list[dict[str, Any]]:
    """The status.amis entries whose requirements all hold for an instance with these labels (Karpenter launches
    the newest of them)."""
    return [a for a in amis if not any(requirement_problem(r, labels) for r in a.get("requirements") or [])]


@dataclass(frozen=True)
class Selection:
    """One image and the GPU instance types it is resolved for."""

    ami_id: str
    """The AMI id from status.amis."""
    name: str
    """Its name: EC2's (DescribeImages) when read, else status.amis's."""
    types: tuple[str, ...]
    """The admitted GPU instance types it is selected for."""


def selector_term_problems(nodeclass_name: str | None, nodeclass: dict[str, Any] | None) -> list[str]:
    """One line per selector term of the live EC2NodeClass with an empty tags map, name or ssmParameter, naming the
    term as config and the pack do (`EC2NodeClass gpu spec.subnetSelectorTerms[0] = {tags: {}}: an empty tags map;
    Karpenter 1.14.4 ignores such a term (...)`); empty when there is none."""
    if not nodeclass:
        return []
    return empty_selector_terms(nodeclass.get("spec"), base=f"EC2NodeClass {nodeclass_name or '?'} spec")


def judge_ami_canary(nodepool_name: str, nodepool: dict[str, Any] | None, nodeclass_name: str | None,
                     nodeclass: dict[str, Any] | None,
                     images: dict[str, dict[str, Any]], *, lookup_error: str | None = None,
                     selector_terms: bool = True) -> CheckResult:
    """The verdict: every image status.amis selects for an admitted GPU instance type is the NVIDIA variant of the
    family the EC2NodeClass selects; every admitted type has one; and (unless `selector_terms` is False) no selector
    term of the EC2NodeClass is empty (its first such term leads the summary, all are in the evidence). `images` maps
    AMI id -> EC2 image."""
    evidence = [lookup_error] if lookup_error else []
    if nodepool is None:
        return CheckResult(NAME, FAIL, f"NodePool {nodepool_name} does not exist (wrong --nodepool?)", evidence)
    if nodeclass is None:
        return CheckResult(NAME, FAIL, f"EC2NodeClass {nodeclass_name or '(none)'} of NodePool {nodepool_name} "
                                       "not found", evidence)
    images_verdict = _judge_images(nodepool_name, nodepool, nodeclass_name, nodeclass, images, evidence)
    terms = selector_term_problems(nodeclass_name, nodeclass) if selector_terms else []
    if not terms:
        return images_verdict
    # The empty terms lead: they are a defect of the spec as written, whatever status.amis shows today.
    problems = terms + ([images_verdict.summary] if images_verdict.status == FAIL else [])
    rest = [e for e in images_verdict.evidence if e not in problems]
    if images_verdict.status != FAIL:
        rest.insert(0, f"otherwise: {images_verdict.summary}")
    return CheckResult(NAME, FAIL, headline(problems, "empty selector terms" if len(problems) == len(terms)
                                            else "problems"), problems + rest)


def _judge_images(nodepool_name: str, nodepool: dict[str, Any], nodeclass_name: str | None,
                  nodeclass: dict[str, Any], images: dict[str, dict[str, Any]], evidence: list[str]) -> CheckResult:
    """judge_ami_canary's verdict on the images alone."""
    amis = list((nodeclass.get("status") or {}).get("amis") or [])
    family = expected_family(nodeclass)
    for a in amis:
        reqs = ", ".join(f"{r.get('key')} {r.get('operator')} {r.get('values') or ''}".strip()
                         for r in a.get("requirements") or [])
        ec2 = images.get(a.get("id")) or {}
        evidence.append(f"EC2NodeClass {nodeclass_name} status.amis: {a.get('id')} {a.get('name')!r} for [{reqs}]"
                        + (f"; EC2 names it {ec2.get('Name')!r}" if ec2.get("Name") else ""))
    if not amis:
        return CheckResult(NAME, FAIL, f"EC2NodeClass {nodeclass_name} has no status.amis: Karpenter resolved no "
                                       "image, so no GPU node can launch (see karpenter-health)", evidence)
    types = gpu_instance_types(nodepool)
    if not types:
        return CheckResult(NAME, FAIL, f"NodePool {nodepool_name} admits no GPU instance type of the catalogue",
                           evidence)
    by_ami: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    unresolved: list[str] = []
    for t in types:
        chosen = selected_amis(amis, instance_labels(t))
        if not chosen:
            unresolved.append(t.name)
        for a in chosen:
            by_ami.setdefault(a.get("id", "?"), []).append(t.name)
            names[a.get("id", "?")] = (images.get(a.get("id")) or {}).get("Name") or a.get("name") or ""
    selections = [Selection(i, names[i], tuple(ts)) for i, ts in by_ami.items()]
    wrong: list[Selection] = []
    for sel in selections:
        kind = ami_kind({"Name": sel.name})
        line = f"{_types(sel.types)} -> {sel.ami_id} {sel.name!r} ({kind.family}/{kind.variant})"
        if kind.variant != "nvidia" or kind.family != family:
            wrong.append(sel)
            evidence.append(line + f" — an NVIDIA GPU instance needs the {family} nvidia variant")
        else:
            evidence.append(line + " — NVIDIA variant, as needed")
    problems = []
    if wrong:
        first = wrong[0]
        kind = ami_kind({"Name": first.name})
        n_wrong = len({t for sel in wrong for t in sel.types})
        more = f" (+{len(wrong) - 1} more image(s))" if len(wrong) > 1 else ""
        problems.append(f"{n_wrong} of NodePool {nodepool_name}'s {len(types)} GPU type(s) get the {kind.family} "
                        f"{kind.variant} image, not {family} nvidia: {first.ami_id} {first.name!r}{more} "
                        f"(EC2NodeClass {nodeclass_name} status.amis)")
        evidence.insert(0, "wrong image for " + " | ".join(
            f"{_types(sel.types, 12)}: {sel.ami_id} {sel.name!r}" for sel in wrong) + "; GPU nodes would boot "
            "without a usable nvidia.com/gpu (the Karpenter 1.0.0-1.0.2 AMI swap, or an amiSelectorTerms matching "
            "the wrong image)")
    if unresolved:
        problems.append(f"{len(unresolved)} of NodePool {nodepool_name}'s {len(types)} GPU type(s) have no image in "
                        f"EC2NodeClass {nodeclass_name} status.amis: {_types(tuple(unresolved))}")
        evidence.insert(0, f"EC2NodeClass {nodeclass_name} status.amis has no image for "
                           f"{_types(tuple(unresolved), 50)}")
    if problems:
        return CheckResult(NAME, FAIL, headline(problems), problems[1:] + evidence)
    images_shown = ", ".join(f"{s.ami_id} {s.name!r}" for s in selections)
    return CheckResult(NAME, PASS, f"EC2NodeClass {nodeclass_name} resolves {len(types)} GPU instance type(s) of "
                                   f"NodePool {nodepool_name} to the {family} NVIDIA AMI: {images_shown}", evidence)


def observed_images(nodeclass: dict[str, Any] | None, nodepool: dict[str, Any] | None,
                    images: dict[str, dict[str, Any]]) -> list[str]:
    """What status.amis gives the NodePool's GPU instance types, live, one phrase per image: `ami-… 'NAME'
    (al2023/standard) for g5.xlarge, …` (EC2's name when read). Empty when nothing is resolved."""
    amis = list(((nodeclass or {}).get("status") or {}).get("amis") or [])
    by_ami: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for t in gpu_instance_types(nodepool):
        for a in selected_amis(amis, instance_labels(t)):
            by_ami.setdefault(a.get("id", "?"), []).append(t.name)
            names[a.get("id", "?")] = (images.get(a.get("id")) or {}).get("Name") or a.get("name") or ""
    out = []
    for ami_id, types in by_ami.items():
        kind = ami_kind({"Name": names[ami_id]})
        out.append(f"{ami_id} {names[ami_id]!r} ({kind.family}/{kind.variant}) for {_types(tuple(types))}")
    return out


def _types(types: tuple[str, ...], shown: int = 4) -> str:
    return ", ".join(types[:shown]) + (f" (+{len(types) - shown} more)" if len(types) > shown else "")


def run(ctx: Context) -> CheckResult:
    """Read the NodePool, its EC2NodeClass and (ec2:DescribeImages) the names of the images in status.amis; judge."""
    s = ctx.settings
    nodepool = ctx.kube.get_nodepool(s.nodepool)
    ref = ((((nodepool or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    nodeclass = ctx.kube.get_ec2nodeclass(ref["name"]) if ref.get("name") else None
    ids = sorted({a.get("id") for a in ((nodeclass or {}).get("status") or {}).get("amis") or [] if a.get("id")})
    images: dict[str, dict] = {}
    error = None
    if ids:
        from botocore.exceptions import BotoCoreError

        from .aws import AwsError, region_from_eks_endpoint  # boto3 loads only when a check talks to AWS

        try:
            aws = ctx.aws(s.region or region_from_eks_endpoint(getattr(ctx.kube, "host", "") or ""))
            images = {im["ImageId"]: im for im in aws.describe_images(ids)}
        except AwsError as e:
            error = f"{e}: judged from the names in status.amis alone"
        except BotoCoreError as e:  # no region configured: the client cannot even be built
            error = (f"ec2:DescribeImages on {','.join(ids)}: {type(e).__name__} ({' '.join(str(e).split())}): "
                     "judged from the names in status.amis alone")
    result = judge_ami_canary(s.nodepool, nodepool, ref.get("name"), nodeclass, images, lookup_error=error)
    # What the GPU types resolve to, live: the versions check states it instead of a release's general claim.
    ctx.state[OBSERVED_AMIS] = (ref.get("name"), observed_images(nodeclass, nodepool, images))
    if result.status == FAIL:
        images_only = judge_ami_canary(s.nodepool, nodepool, ref.get("name"), nodeclass, images, lookup_error=error,
                                       selector_terms=False)
        # The cause is known when the images are wrong: no GPU node of the pool can work, so the checks that wait
        # for one skip. An empty selector term alone does not stop them: releases before the one that ignores such
        # terms read it as "no filter", and the gpu-job then shows whether a GPU node still launches.
        if images_only.status == FAIL:
            ctx.block_gpu_nodes(NAME, images_only.summary)
    return result

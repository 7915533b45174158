"""Stack rule `worker-image-gpu-support`: the worker image's torch build supports every GPU a GPU NodePool may launch,
and the AMI's NVIDIA driver is new enough for its CUDA; advisory `worker-image-unchecked`: a worker image the plan
neither builds nor declares the CUDA of, which therefore could not be judged; advisory `worker-image-driver-unchecked`:
a pinned AMI release whose driver the catalogue does not record, which therefore could not be judged either.

The driver comes from the catalogue: `AL2023_NVIDIA_DRIVER` for `al2023@latest`, `AL2023_NVIDIA_DRIVERS_BY_RELEASE`
for a pinned `al2023@vYYYYMMDD`. A known driver older than the image needs is a violation; a pinned release the table
does not hold is not a failure but something the rule could not check (an `Unchecked`, which the advisory reports,
naming the catalogue fact that would let the rule judge it).

The built-in image (a `docker-build:index:Image` from `worker/Dockerfile`, which a lab's own build extends) is judged
by the catalogue's `TORCH_CUDA`. A lab's own image whose CUDA the stack declares (`gpuburst:workerImageCuda`, the pod
template annotation `names.WORKER_IMAGE_CUDA_ANNOTATION`) is judged by that CUDA major's floors
(`catalogue.CUDA_RUNTIME_FLOORS`); a prebuilt one that declares nothing is named once by the advisory.

In a partial plan a GPU NodePool may boot another stack's EC2NodeClass: its AMI alias then comes from the facts
(ExistingCluster nodeClasses[name].amiAlias), or the driver check yields an `Outside`.
"""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from pulumi_policy import EnforcementLevel

from ._components import catalogue, names
from .declare import plan_policy, scoped_policy
from .facts import WHOLE, Scope, config_schema, scope_of
from .fixes import fix_for
from .gpu_nodepool import gpu_evidence
from .outside import Finding, Outside
from .plan import Res, describe_res
from .resources import NODEPOOL_NODECLASS, POD_TEMPLATE_PATHS, dig, fmt, k8s_kind
from .shapes import nodeclass_index, nodepool_shapes
from .unknowns import UNKNOWN, unknown_message
from .workloads import is_worker

NAME = "worker-image-gpu-support"
UNCHECKED_NAME = "worker-image-unchecked"
DRIVER_UNCHECKED_NAME = "worker-image-driver-unchecked"
IMAGE = "docker-build:index:Image"
CUDA_ANNOTATION: str = names.WORKER_IMAGE_CUDA_ANNOTATION
WORKER_DIR: str = posixpath.dirname(catalogue.WORKER_PYTHON_REQUIREMENTS)
"""The worker's directory (`worker`): an image whose Dockerfile lives there is the worker image."""
LATEST_ALIAS = "al2023@latest"
"""The alias whose NVIDIA driver is `AL2023_NVIDIA_DRIVER`; a pinned one's is in `AL2023_NVIDIA_DRIVERS_BY_RELEASE`."""
RELEASES_FACT = "components.catalogue.AL2023_NVIDIA_DRIVERS_BY_RELEASE (components/catalogue/instances.py)"


@dataclass(frozen=True)
class Unchecked:
    """A GPU NodePool whose AMI's driver the catalogue does not record: not a violation of `worker-image-gpu-support`
    (which filters it out) but what `worker-image-driver-unchecked` reports. Not a tuple, so a policy that forgot to
    filter it out fails closed instead of reporting it as a violation."""

    urn: str | None
    message: str


def worker_images(resources: list[Res]) -> list[Res]:
    """The docker-build Images built from the worker's Dockerfile."""
    out = []
    for r in resources:
        if r.type != IMAGE:
            continue
        location = dig(r.props, "dockerfile", "location").value
        # `worker/Dockerfile` under this repository's context; `<site-packages>/gpuburst/recipe/worker/Dockerfile`
        # when the platform is declared from an installed gpuburst.
        folder = posixpath.dirname(posixpath.normpath(location)) if isinstance(location, str) else None
        if folder is not None and (folder == WORKER_DIR or folder.endswith("/" + WORKER_DIR)):
            out.append(r)
    return out


class Subject(NamedTuple):
    """A worker image the rule judges, and what it needs of the GPU and the driver."""

    what: str
    """How messages name it (`worker image <name>`)."""
    build: str
    """Its build as messages say it (`torch 2.13.0, CUDA 13.0`)."""
    facts: dict[str, Any]
    """`min_compute_capability`, `min_driver`, `sources` (the shape of catalogue.TORCH_CUDA)."""


_CUDA = re.compile(r"^(\d{1,2})\.(\d{1,2})$")


def _pod_templates(resources: list[Res]) -> list[tuple[Res, str, Any, Any]]:
    """(resource, path of its pod template's metadata, that metadata, the pod spec) of every pod-bearing resource."""
    out = []
    for r in resources:
        path = POD_TEMPLATE_PATHS.get(k8s_kind(r.type) or ("", ""))
        if path is None:
            continue
        meta = dig(r.props, *path[:-1], "metadata")
        out.append((r, meta.path, meta.value if isinstance(meta.value, dict) else {}, dig(r.props, *path).value))
    return out


def _images(pod: Any) -> list[str]:
    containers = pod.get("containers") if isinstance(pod, dict) else None
    return [c["image"] for c in containers or [] if isinstance(c, dict) and isinstance(c.get("image"), str)]


def declared_subjects(resources: list[Res]) -> tuple[list[Subject], list[Finding]]:
    """The lab images whose CUDA a pod template declares (CUDA_ANNOTATION), once per image and CUDA; a violation per
    annotation that is not a CUDA version the catalogue's floors know."""
    subjects: dict[tuple[str, str], Subject] = {}
    bad: list[Finding] = []
    floors = getattr(catalogue, "CUDA_RUNTIME_FLOORS", {})
    for r, meta_path, meta, pod in _pod_templates(resources):
        cuda = (meta.get("annotations") or {}).get(CUDA_ANNOTATION) if isinstance(meta.get("annotations"), dict) \
            else None
        if cuda is None:
            continue
        m = _CUDA.match(cuda) if isinstance(cuda, str) else None
        if m is None or m.group(1) not in floors:
            known = ", ".join(sorted(floors))
            bad.append((r.urn, f"{describe_res(r)} {meta_path}.annotations[{CUDA_ANNOTATION!r}] = {fmt(cuda)}: not a "
                               f"CUDA version MAJOR.MINOR of a major the catalogue knows ({known}); "
                               f"{declare_cuda(r.urn, 'set')}"))
            continue
        floor = floors[m.group(1)]
        for image in _images(pod) or ["<unknown image>"]:
            subjects.setdefault((image, cuda), Subject(
                f"worker image {image!r}", f"CUDA {cuda}, declared by {CUDA_ANNOTATION}",
                {"min_compute_capability": floor["min_compute_capability"], "min_driver": floor["min_driver"],
                 "sources": getattr(catalogue, "CUDA_RUNTIME_FLOORS_SOURCE", "")}))
    return list(subjects.values()), bad


def _driver_major(version: Any) -> int | None:
    try:
        return int(str(version).strip().split(".")[0])
    except ValueError:
        return None


def _cc(cc: tuple[int, int]) -> str:
    return f"sm_{cc[0]}{cc[1]}"


def hardware_findings(resources: list[Res], facts: dict[str, Any] | None = None,
                      torch_cuda: dict[str, Any] | None = None,
                      driver: str | None = None, scope: Scope = WHOLE,
                      drivers: dict[str, str] | None = None) -> list[Finding | Outside | Unchecked]:
    """(urn, message) for every GPU a judged worker image (the built-in build, by `torch_cuda`; a lab image with a
    declared CUDA, by its floors) cannot use on a GPU NodePool, and every GPU NodePool whose AMI's driver (`driver` for
    al2023@latest, `drivers` by pinned release) is older than its CUDA needs; an `Unchecked` for a pinned release
    `drivers` does not hold. Facts default to the catalogue."""
    images = worker_images(resources)
    declared, out = declared_subjects(resources)
    if not images and not declared:
        return list(out)
    torch_cuda = torch_cuda if torch_cuda is not None else getattr(catalogue, "TORCH_CUDA", None)
    driver = driver if driver is not None else getattr(catalogue, "AL2023_NVIDIA_DRIVER", None)
    drivers = drivers if drivers is not None else getattr(catalogue, "AL2023_NVIDIA_DRIVERS_BY_RELEASE", {})
    subjects = list(declared)
    if images:
        image = images[0]
        if not torch_cuda:
            return [(image.urn, f"worker image {image.name}: components.catalogue has no TORCH_CUDA facts, so this "
                                "rule cannot check the GPUs and driver it needs; add them")]
        subjects.insert(0, Subject(f"worker image {image.name}", f"torch {torch_cuda['torch']}, CUDA "
                                                                 f"{torch_cuda['cuda']}", torch_cuda))
    nodeclasses = nodeclass_index(resources)
    shapes = [shape for shape in nodepool_shapes(resources, facts, scope) if gpu_evidence(shape.res.props)[0]]
    for subject in subjects:
        out += _subject_findings(subject, shapes, nodeclasses, {LATEST_ALIAS: driver, **{
            f"al2023@{release}": d for release, d in drivers.items()}}, scope)
    return out


def _subject_findings(subject: Subject, shapes: list, nodeclasses: dict, drivers: dict[str, str | None],
                      scope: Scope) -> list[Finding | Outside | Unchecked]:
    what, build = subject.what, subject.build
    min_cc = tuple(subject.facts["min_compute_capability"])
    min_driver = subject.facts["min_driver"]
    sources = subject.facts.get("sources", "")
    out: list[Finding | Outside | Unchecked] = []
    for shape in shapes:
        excluded = getattr(catalogue, "EXCLUDED_INSTANCE_FAMILIES", {})
        for name in shape.missing_facts:
            family = name.split(".", 1)[0]
            why = (f"the catalogue excludes family {family}: {excluded[family]}" if family in excluded
                   else "components.catalogue.INSTANCE_TYPES does not describe it")
            out.append((shape.res.urn, f"{shape.what} admits {name}, but {why}; so {what} ({build}, compute "
                                       f"capability >= {min_cc[0]}.{min_cc[1]}) is not known to run on it; remove it "
                                       f"from the pool (sources: {sources})"))
        for t in shape.types:
            if t.gpus and tuple(t.compute_capability) < min_cc:
                out.append((shape.res.urn, f"{what} ({build}) cannot run on {t.name} ({t.gpu_name}, "
                                           f"{_cc(t.compute_capability)}) admitted by {shape.what}: that build needs "
                                           f"compute capability >= {min_cc[0]}.{min_cc[1]} ({_cc(min_cc)}); remove "
                                           f"{t.family} from the pool (sources: {sources})"))
        nc_name = dig(shape.res.props, *NODEPOOL_NODECLASS).value
        nodeclass = nodeclasses.get(nc_name) if isinstance(nc_name, str) else None
        if nodeclass is None:
            if scope.whole or not isinstance(nc_name, str):
                continue
            alias = scope.entry("nodeClassAmiAlias", nc_name)
            if alias is None:
                out.append(Outside(shape.res.urn, f"{shape.what} boots EC2NodeClass {nc_name!r} (spec.template.spec."
                                                  "nodeClassRef.name), which is not in this plan: could not check "
                                                  f"which NVIDIA driver its AMI gives {what} ({build})",
                                   ("nodeClassAmiAlias",)))
                continue
            aliases = [alias.value]
            terms_path, nc_label = alias.source, f"EC2NodeClass {nc_name!r} ({alias.source})"
        else:
            terms = dig(nodeclass.props, "spec", "amiSelectorTerms")
            if terms.unknown:
                out.append((shape.res.urn, unknown_message(f"EC2NodeClass {nc_name!r} {terms.path}",
                                                           "which NVIDIA driver the GPU nodes get")))
                continue
            aliases = [t.get("alias") for t in (terms.value or []) if isinstance(t, dict)]
            terms_path, nc_label = terms.path, f"EC2NodeClass {nc_name!r}"
        if UNKNOWN in aliases:
            out.append((shape.res.urn, unknown_message(f"EC2NodeClass {nc_name!r} {terms_path}",
                                                       "which NVIDIA driver the GPU nodes get")))
            continue
        for alias in aliases:
            if alias not in drivers:
                release = alias.split("@", 1)[1] if isinstance(alias, str) and "@" in alias else alias
                out.append(Unchecked(shape.res.urn, f"{shape.what} boots {nc_label} on {alias!r}, whose NVIDIA "
                                                    f"driver the catalogue does not record: {what} ({build}, driver "
                                                    f">= {min_driver}) was not checked against it; to check it, "
                                                    f"record that release's driver branch in {RELEASES_FACT} (e.g. "
                                                    f"{release!r}: '<branch>', from its awslabs/amazon-eks-ami "
                                                    f"release notes), or use {LATEST_ALIAS} (AL2023_NVIDIA_DRIVER)"))
                continue
            driver = drivers[alias]
            have, need = _driver_major(driver), _driver_major(min_driver)
            if have is None or need is None or have < need:
                out.append((shape.res.urn, f"{what} ({build}) needs NVIDIA driver >= {min_driver} but {nc_label}"
                                           f" ({alias}) of {shape.what} boots driver {driver}: CUDA fails to "
                                           f"initialise; use an older torch/CUDA build or a newer AMI (sources: "
                                           f"{sources})"))
    return out


def unchecked_findings(resources: list[Res]) -> list[tuple[str | None, str]]:
    """(urn, message) once per worker image (pods labelled app.kubernetes.io/name: WORKER_LABEL) that no image build
    of the plan pushes and whose CUDA no annotation declares: `worker-image-gpu-support` could not judge it."""
    built = {tag.rsplit(":", 1)[0] for r in resources if r.type == IMAGE
             for tag in (dig(r.props, "tags").value or []) if isinstance(tag, str)}
    seen: dict[str, list[Res]] = {}
    for r, _path, meta, pod in _pod_templates(resources):
        if not is_worker(r, k8s_kind(r.type)):
            continue
        annotations = meta.get("annotations")
        if isinstance(annotations, dict) and CUDA_ANNOTATION in annotations:
            continue
        for image in _images(pod):
            if image.split("@", 1)[0].rsplit(":", 1)[0] not in built and image.split("@", 1)[0] not in built:
                seen.setdefault(image, []).append(r)
    return [(users[0].urn, f"worker image {image!r} ({', '.join(describe_res(u) for u in users)}) is not built in this "
                           f"plan and declares no CUDA ({CUDA_ANNOTATION}): whether its torch/CUDA build runs on the "
                           "GPUs the NodePools admit and on the AMI's NVIDIA driver was not checked; "
                           f"{declare_cuda(users[0].urn, 'declare it')} for worker-image-gpu-support to check it")
            for image, users in seen.items()]


def declare_cuda(urn: str | None, verb: str) -> str:
    """How the stack that declared `urn` states its worker image's CUDA: the platform's config key, a component's pod
    annotation (`WorkerPodSettings.annotations`: a component stack reads no gpuburst: config), or the pod template's
    annotation in a hand-written manifest."""
    return fix_for(urn, platform=f"{verb}: gpuburst:workerImageCuda (e.g. \"12.8\")",
                   component=f"{verb}: WorkerPodSettings(annotations={{\"{CUDA_ANNOTATION}\": \"12.8\"}}) (the CUDA "
                             "MAJOR.MINOR the image's torch was built for)",
                   manifest=f"{verb}: the pod template annotation {CUDA_ANNOTATION}: \"12.8\" (the CUDA MAJOR.MINOR "
                            "the image's torch was built for)")


def driver_unchecked_findings(resources: list[Res],
                              config: dict[str, Any] | None = None) -> list[tuple[str | None, str]]:
    """(urn, message) for every GPU NodePool whose pinned AMI release's driver the catalogue does not record."""
    return [(f.urn, f.message) for f in hardware_findings(resources, scope=scope_of(resources, config))
            if isinstance(f, Unchecked)]


POLICY = scoped_policy(
    NAME, "The worker image's torch build must support every GPU a GPU NodePool may launch (compute capability) and "
          "the AMI's NVIDIA driver must be new enough for its CUDA.",
    lambda resources, scope: [f for f in hardware_findings(resources, scope=scope) if not isinstance(f, Unchecked)],
    ("nodeClassAmiAlias",))

UNCHECKED_POLICY = plan_policy(
    UNCHECKED_NAME, "Names once each worker image the plan neither builds nor declares the CUDA of, whose GPUs and "
                    "driver worker-image-gpu-support could therefore not check.",
    unchecked_findings, level=EnforcementLevel.ADVISORY)

DRIVER_UNCHECKED_POLICY = plan_policy(
    DRIVER_UNCHECKED_NAME, "Names each GPU NodePool whose pinned AMI release's NVIDIA driver the catalogue does not "
                           "record, so worker-image-gpu-support could not check it, and the catalogue fact that "
                           "would let it.",
    driver_unchecked_findings, level=EnforcementLevel.ADVISORY, config_schema=config_schema("nodeClassAmiAlias"))

POLICIES = [POLICY, UNCHECKED_POLICY, DRIVER_UNCHECKED_POLICY]

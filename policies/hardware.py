"""Stack rule `worker-image-gpu-support`: the worker image's torch build supports every GPU a GPU NodePool may launch,
and the AMI's NVIDIA driver is new enough for its CUDA.

In a partial plan a GPU NodePool may boot another stack's EC2NodeClass: its AMI alias then comes from the facts
(ExistingCluster nodeClasses[name].amiAlias), or the driver check yields an `Outside`.
"""
from __future__ import annotations

import posixpath
from typing import Any

from ._components import catalogue
from .declare import scoped_policy
from .facts import WHOLE, Scope
from .gpu_nodepool import gpu_evidence
from .outside import Finding, Outside
from .plan import Res
from .resources import NODEPOOL_NODECLASS, dig
from .shapes import nodeclass_index, nodepool_shapes
from .unknowns import UNKNOWN, unknown_message

NAME = "worker-image-gpu-support"
IMAGE = "docker-build:index:Image"
WORKER_DIR = posixpath.dirname(catalogue.WORKER_PYTHON_REQUIREMENTS)
"""The worker's directory (`worker`): an image whose Dockerfile lives there is the worker image."""
LATEST_ALIAS = "al2023@latest"
"""The alias whose NVIDIA driver the catalogue records (`AL2023_NVIDIA_DRIVER`)."""


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


def _driver_major(version: Any) -> int | None:
    try:
        return int(str(version).strip().split(".")[0])
    except ValueError:
        return None


def _cc(cc: tuple[int, int]) -> str:
    return f"sm_{cc[0]}{cc[1]}"


def hardware_findings(resources: list[Res], facts: dict | None = None, torch_cuda: dict | None = None,
                      driver: str | None = None, scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) for every GPU the worker image's torch build cannot use on a GPU NodePool, and every GPU
    NodePool whose AMI's driver is older than that build's CUDA needs. Facts default to the catalogue."""
    images = worker_images(resources)
    if not images:
        return []
    torch_cuda = torch_cuda if torch_cuda is not None else getattr(catalogue, "TORCH_CUDA", None)
    driver = driver if driver is not None else getattr(catalogue, "AL2023_NVIDIA_DRIVER", None)
    image = images[0]
    if not torch_cuda:
        return [(image.urn, f"worker image {image.name}: components.catalogue has no TORCH_CUDA facts, so this rule "
                            "cannot check the GPUs and driver it needs; add them")]
    build = f"torch {torch_cuda['torch']}, CUDA {torch_cuda['cuda']}"
    min_cc = tuple(torch_cuda["min_compute_capability"])
    sources = torch_cuda.get("sources", "")
    nodeclasses = nodeclass_index(resources)
    out: list[Finding | Outside] = []
    for shape in nodepool_shapes(resources, facts, scope):
        if not gpu_evidence(shape.res.props)[0]:
            continue
        excluded = getattr(catalogue, "EXCLUDED_INSTANCE_FAMILIES", {})
        for name in shape.missing_facts:
            family = name.split(".", 1)[0]
            why = (f"the catalogue excludes family {family}: {excluded[family]}" if family in excluded
                   else "components.catalogue.INSTANCE_TYPES does not describe it")
            out.append((shape.res.urn, f"{shape.what} admits {name}, but {why}; so worker image {image.name} "
                                       f"({build}, compute capability >= {min_cc[0]}.{min_cc[1]}) is not known to run "
                                       f"on it; remove it from the pool (sources: {sources})"))
        for t in shape.types:
            if t.gpus and tuple(t.compute_capability) < min_cc:
                out.append((shape.res.urn, f"worker image {image.name} ({build}) cannot run on {t.name} "
                                           f"({t.gpu_name}, {_cc(t.compute_capability)}) admitted by {shape.what}: "
                                           f"that build needs compute capability >= {min_cc[0]}.{min_cc[1]} "
                                           f"({_cc(min_cc)}); remove {t.family} from the pool (sources: {sources})"))
        nc_name = dig(shape.res.props, *NODEPOOL_NODECLASS).value
        nodeclass = nodeclasses.get(nc_name) if isinstance(nc_name, str) else None
        if nodeclass is None:
            if scope.whole or not isinstance(nc_name, str):
                continue
            alias = scope.entry("nodeClassAmiAlias", nc_name)
            if alias is None:
                out.append(Outside(shape.res.urn, f"{shape.what} boots EC2NodeClass {nc_name!r} (spec.template.spec."
                                                  "nodeClassRef.name), which is not in this plan: could not check "
                                                  f"which NVIDIA driver its AMI gives worker image {image.name} "
                                                  f"({build})", ("nodeClassAmiAlias",)))
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
            if alias != LATEST_ALIAS:
                out.append((shape.res.urn, f"{shape.what} boots {nc_label} on {alias!r}, whose "
                                           "NVIDIA driver components.catalogue does not record (only "
                                           f"{LATEST_ALIAS}'s, AL2023_NVIDIA_DRIVER), so worker image "
                                           f"{image.name} ({build}, driver >= {torch_cuda['min_driver']}) cannot "
                                           "be checked; use al2023@latest or record that AMI's driver"))
                continue
            have, need = _driver_major(driver), _driver_major(torch_cuda["min_driver"])
            if have is None or need is None or have < need:
                out.append((shape.res.urn, f"worker image {image.name} ({build}) needs NVIDIA driver >= "
                                           f"{torch_cuda['min_driver']} but {nc_label}"
                                           f" ({alias}) of {shape.what} boots driver {driver}: CUDA fails to "
                                           f"initialise; use an older torch/CUDA build or a newer AMI (sources: "
                                           f"{sources})"))
    return out


POLICY = scoped_policy(
    NAME, "The worker image's torch build must support every GPU a GPU NodePool may launch (compute capability) and "
          "the AMI's NVIDIA driver must be new enough for its CUDA.",
    lambda resources, scope: hardware_findings(resources, scope=scope), ("nodeClassAmiAlias",))

POLICIES = [POLICY]

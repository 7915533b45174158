"""Stack rule `image-pinned-by-digest`: every container image a pod of the plan runs (chart-rendered objects included)
is named by its digest, `<repository>[:<tag>]@sha256:<64 hex>`.

A tag is a name the registry may point elsewhere tomorrow (a re-push, a compromised upstream account, a mirror copied
from the wrong source): a node that joins later pulls whatever the tag names then, so the pods of one Deployment may
run different code, none of it the code that was reviewed. A digest names the bytes. The stack pins its own images by
digest (the worker image by the digest its build pushed, KEDA and the device plugin by the catalogue's
`IMAGE_DIGESTS` through the chart's tag value, Karpenter by its chart's digest, the pause image by the catalogue).

An image reference that is unknown during preview is judged by where it comes from: a pod-bearing resource that depends
on an image build of the plan (`docker-build:index:Image`) gets the reference the stack computes from that build,
`WorkerImage.image_ref` = `<repository>@<the digest the push returned>`, by digest by construction, and passes (the
first preview of a stack, before the image exists, must not fail); any other unknown image is a violation naming the
field, as every mandatory rule's unknowns are.
"""
from __future__ import annotations

import re

from .declare import plan_policy
from .plan import Res, describe_res
from .resources import POD_TEMPLATE_PATHS, dig, fmt, k8s_kind
from .unknowns import UNKNOWN, unknown_message

NAME = "image-pinned-by-digest"
IMAGE_BUILD = "docker-build:index:Image"
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
"""How a reference by digest ends (OCI distribution spec: the sha256 algorithm, 64 lower-case hex digits)."""


def image_findings(resources: list[Res]) -> list[tuple[str | None, str]]:
    """(urn, message) for every pod template of the plan with a container image that is not pinned by digest."""
    out: list[tuple[str | None, str]] = []
    builds = {r.urn for r in resources if r.type == IMAGE_BUILD}
    for r in resources:
        path = POD_TEMPLATE_PATHS.get(k8s_kind(r.type) or ("", ""))
        if path is None:
            continue
        pod = dig(r.props, *path)
        if not isinstance(pod.value, dict):
            continue
        bad = []
        built = bool(builds & set(r.dependencies))
        for field in CONTAINER_LISTS:
            containers = pod.value.get(field)
            if containers is UNKNOWN and not built:
                out.append((r.urn, unknown_message(f"{describe_res(r)} {pod.path}.{field}", "its images' digests")))
            for i, c in enumerate(containers if isinstance(containers, list) else []):
                image = c.get("image") if isinstance(c, dict) else None
                if image is UNKNOWN and not built:
                    out.append((r.urn, unknown_message(f"{describe_res(r)} {pod.path}.{field}[{i}].image",
                                                       "that it is pinned by digest")))
                elif isinstance(image, str) and not DIGEST.search(image):
                    bad.append(f"{pod.path}.{field}[{i}].image = {fmt(image)}")
        if bad:
            out.append((r.urn, f"{describe_res(r)}: {'; '.join(bad)}: by tag only, so a node that joins later may "
                               "run other bytes; pin it by digest (<repository>:<tag>@sha256:<64 hex>; for a "
                               "catalogue image, record its digest in components.catalogue.network.IMAGE_DIGESTS "
                               "with its source)"))
    return out


POLICY = plan_policy(
    NAME, "Every container image a pod of the plan runs (chart-rendered objects included) is pinned by digest "
          "(@sha256:<64 hex>), never by tag alone.", image_findings)

POLICIES = [POLICY]

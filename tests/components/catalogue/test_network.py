"""The network facts about images: the digests the catalogue records, and the mirror built from them."""
from __future__ import annotations

import re

from components import catalogue
from components.catalogue.network import (
    GPU_NODE_MIRRORS,
    IMAGE_DIGESTS,
    KEDA_IMAGES,
    MIRRORED_IMAGES,
    SYSTEM_NODE_MIRRORS,
)

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def test_every_recorded_digest_is_a_sha256_of_a_tagged_reference():
    assert IMAGE_DIGESTS
    for ref, digest in IMAGE_DIGESTS.items():
        assert DIGEST.match(digest), (ref, digest)
        repository, _, tag = ref.rpartition(":")
        assert "/" in repository and tag and "@" not in ref, ref
    assert len(set(IMAGE_DIGESTS.values())) == len(IMAGE_DIGESTS)  # no digest copied onto a second image


def test_the_pinned_keda_and_device_plugin_images_have_their_digests():
    for source in KEDA_IMAGES.values():
        assert f"{source}:{catalogue.KEDA_VERSION}" in IMAGE_DIGESTS, source
    assert f"nvcr.io/nvidia/k8s-device-plugin:v{catalogue.NVIDIA_DEVICE_PLUGIN_VERSION}" in IMAGE_DIGESTS


def test_every_mirrored_image_is_copied_by_a_digest_at_the_pinned_tag():
    assert MIRRORED_IMAGES == GPU_NODE_MIRRORS + SYSTEM_NODE_MIRRORS
    assert len({m.source for m in MIRRORED_IMAGES}) == len({m.repository for m in MIRRORED_IMAGES}) \
        == len(MIRRORED_IMAGES)
    for image in MIRRORED_IMAGES:
        assert image.digest is not None and DIGEST.match(image.digest), image
    keda = {m.source: m for m in SYSTEM_NODE_MIRRORS}
    assert set(keda) == set(KEDA_IMAGES.values())
    for source, image in keda.items():
        assert image.tag == catalogue.KEDA_VERSION
        assert image.digest == IMAGE_DIGESTS[f"{source}:{image.tag}"]
        assert image.repository == source.removeprefix("ghcr.io/")
    (plugin,) = [m for m in GPU_NODE_MIRRORS if m.source == "nvcr.io/nvidia/k8s-device-plugin"]
    assert plugin.tag == f"v{catalogue.NVIDIA_DEVICE_PLUGIN_VERSION}"
    assert plugin.digest == IMAGE_DIGESTS[f"{plugin.source}:{plugin.tag}"]

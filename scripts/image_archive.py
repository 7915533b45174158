"""Read a saved image (a `docker save` / `podman save` tar stream) in one pass: each layer's gzip size, its packages,
any trace of a build secret."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

GZIP_LEVEL = 6
"""Compression level of a layer that is not compressed already (`docker save`'s): 6, gzip's default and the level
docker and podman push at; Python's zlib at that level comes out 1-3 % smaller than their Go gzip (measured on this
image: cuBLAS 423.1 MB against a podman push's 434.1 MB)."""

SMALL_MEMBER_BYTES = 16 << 20
"""Archive members smaller than this that are not layers (manifest.json, the image config) are kept in memory."""

DIST_INFO = re.compile(r"(?:^|/)site-packages/([^/]+)-([^/-]+)\.dist-info/")
"""A wheel's installed metadata folder: `<name>-<version>.dist-info` under site-packages."""


def normalise(name: str) -> str:
    """PEP 503 normalised project name (`nvidia_cublas` and `nvidia-cublas` are one project)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Needle:
    """A file that must be in no layer (the pip CA handed to the build as a secret)."""

    sha256: str
    """Hex SHA-256 of the file's content."""
    size_bytes: int
    """Its size in bytes (only layer files of exactly this size are hashed)."""
    mount_path: str = "run/secrets/pip-ca"
    """Where the build mounted it (no leading slash): a non-empty file there in a layer is a leak too."""


@dataclass
class LayerStats:
    """What one saved layer holds and what it costs."""

    member: str
    """Its path inside the saved archive (as manifest.json lists it)."""
    raw_bytes: int = 0
    """Size of the uncompressed layer tar, in bytes."""
    gzip_bytes: int = 0
    """Size of that tar gzipped at `GZIP_LEVEL`, in bytes: what a push uploads and a pull downloads."""
    files: int = 0
    """Regular files in the layer."""
    pyc_files: int = 0
    """Of which Python bytecode (`.pyc`)."""
    pyc_bytes: int = 0
    """Their unpacked size in bytes."""
    dists: frozenset[tuple[str, str]] = frozenset()
    """(normalised name, version) of every installed distribution whose .dist-info is in the layer."""
    markers: frozenset[str] = frozenset()
    """Which of `MARKERS` the layer holds (how a layer that installs no package is recognised)."""
    secret_hits: tuple[str, ...] = ()
    """Paths of files whose content is the needle, or non-empty files at its mount path: each one is a leak."""
    secret_placeholders: tuple[str, ...] = ()
    """Empty files at the needle's mount path (a mount point a builder left behind): no content, no leak."""


MARKERS: dict[str, str] = {
    "venv": "opt/venv/pyvenv.cfg",
    "user": "etc/passwd",
    "code": "app/worker/__main__.py",
    "bytecode": "app/worker/__pycache__/",
}
"""Marker name -> a path prefix that identifies a layer of worker/Dockerfile that installs no package."""


@dataclass
class SavedImage:
    """A saved image as read from its archive."""

    layers: list[LayerStats] = field(default_factory=list)
    """The image's layers, base first (the order of manifest.json's `Layers`)."""
    config: dict = field(default_factory=dict)
    """The image config (env, entrypoint, user, history)."""


class _Tee(io.RawIOBase):
    """`head` (bytes already read from `src`) then the rest of `src`, counted and, given a gzip level, gzipped as it
    is read, so one pass both parses and measures a layer."""

    def __init__(self, src: IO[bytes], head: bytes, level: int | None) -> None:
        self._src, self._head = src, head
        # wbits 31: a gzip stream, as a layer blob is; None: the blob is compressed already, only read it
        self._z = zlib.compressobj(level, zlib.DEFLATED, 31) if level is not None else None
        self.raw_bytes = self.gzip_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self._head:
            data, self._head = self._head[:len(buf)], self._head[len(buf):]
        else:
            data = self._src.read(len(buf))
        n = len(data)
        buf[:n] = data
        self.raw_bytes += n
        if self._z is not None:
            self.gzip_bytes += len(self._z.compress(data))
        return n

    def finish(self) -> None:
        while self.read(1 << 20):
            pass
        if self._z is not None:
            self.gzip_bytes += len(self._z.flush())


def scan_layer(member: str, src: IO[bytes], *, needle: Needle | None = None, head: bytes = b"",
               level: int | None = GZIP_LEVEL) -> LayerStats:
    """Stats of one uncompressed layer tar read from `src` (after `head`, bytes already read from it); `level` None
    leaves `gzip_bytes` 0 for the caller to fill in (a blob that is compressed already)."""
    tee = _Tee(src, head, level)
    stats = LayerStats(member)
    dists: set[tuple[str, str]] = set()
    markers: set[str] = set()
    hits: list[str] = []
    placeholders: list[str] = []
    with tarfile.open(fileobj=io.BufferedReader(tee, 1 << 20), mode="r|") as tar:
        for info in tar:
            name = info.name.removeprefix("./").lstrip("/")
            m = DIST_INFO.search(name + ("/" if info.isdir() else ""))
            if m:
                dists.add((normalise(m.group(1)), m.group(2)))
            markers.update(k for k, prefix in MARKERS.items() if name.startswith(prefix))
            if not info.isfile():
                continue
            stats.files += 1
            if name.endswith(".pyc"):
                stats.pyc_files += 1
                stats.pyc_bytes += info.size
            if needle is None:
                continue
            if name == needle.mount_path:
                (hits if info.size else placeholders).append(name)
            elif info.size == needle.size_bytes:
                f = tar.extractfile(info)
                if f is not None and hashlib.sha256(f.read()).hexdigest() == needle.sha256:
                    hits.append(name)
    tee.finish()
    stats.raw_bytes, stats.gzip_bytes = tee.raw_bytes, tee.gzip_bytes
    stats.dists, stats.markers = frozenset(dists), frozenset(markers)
    stats.secret_hits, stats.secret_placeholders = tuple(hits), tuple(placeholders)
    return stats


def read_saved_image(stream: IO[bytes], *, needle: Needle | None = None, level: int = GZIP_LEVEL) -> SavedImage:
    """Read a `docker save` / `podman save --format docker-archive` tar stream once: every layer measured, in order.

    Both formats carry a top-level manifest.json (`[{"Config": ..., "Layers": [...]}]`); docker 25+ writes its blobs
    in an OCI layout beside it, podman as `<digest>.tar`. A member is a layer when it is a tar (or a gzip of one).
    """
    scanned: dict[str, LayerStats] = {}
    small: dict[str, bytes] = {}
    with tarfile.open(fileobj=stream, mode="r|") as outer:
        for info in outer:
            if not info.isfile():
                continue
            f = outer.extractfile(info)
            assert f is not None
            head = f.read(512)
            name = info.name.removeprefix("./")
            if head[:2] == b"\x1f\x8b":  # already compressed: its blob size is its size
                unzipped = gzip.GzipFile(fileobj=io.BufferedReader(_Tee(f, head, None)))
                stats = scan_layer(name, unzipped, needle=needle, level=None)
                stats.gzip_bytes = info.size
                scanned[name] = stats
            elif len(head) == 512 and head[257:262] == b"ustar":
                scanned[name] = scan_layer(name, f, needle=needle, head=head, level=level)
            elif info.size < SMALL_MEMBER_BYTES:
                small[name] = head + f.read()
    manifest = json.loads(small["manifest.json"])[0]
    missing = [p for p in manifest["Layers"] if p not in scanned]
    if missing:
        raise ValueError(f"saved image: layers {missing} of manifest.json are not tar members of the archive")
    return SavedImage(layers=[scanned[p] for p in manifest["Layers"]],
                      config=json.loads(small[manifest["Config"].removeprefix("./")]))


def read_oci_layout(folder: Path, *, needle: Needle | None = None) -> SavedImage:
    """Read an OCI image layout folder (`podman push --compression-format gzip IMAGE oci:FOLDER`): each layer's size
    is its blob's, the bytes a registry receives; the blobs are decompressed once to scan them."""
    def blob(digest: str) -> Path:
        algorithm, _, hexdigest = digest.partition(":")
        return folder / "blobs" / algorithm / hexdigest

    index = json.loads((folder / "index.json").read_text())
    manifest = json.loads(blob(index["manifests"][0]["digest"]).read_text())
    layers = []
    for desc in manifest["layers"]:
        with blob(desc["digest"]).open("rb") as f:
            compressed = desc["mediaType"].endswith("+gzip")
            stats = scan_layer(desc["digest"], gzip.GzipFile(fileobj=f) if compressed else f, needle=needle,
                               level=None if compressed else GZIP_LEVEL)
        if compressed:
            stats.gzip_bytes = int(desc["size"])
        layers.append(stats)
    return SavedImage(layers=layers, config=json.loads(blob(manifest["config"]["digest"]).read_text()))


def lock_groups(lock_texts: dict[str, str]) -> dict[str, frozenset[tuple[str, str]]]:
    """Layer group file name -> the (normalised name, version) it pins, from worker/image/NN-*.txt contents."""
    out = {}
    for group, text in sorted(lock_texts.items()):
        pins = set()
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                name, sep, rest = line.partition("==")
                if not sep:
                    raise ValueError(f"{group}: {line!r} is not 'name==version --hash=...'")
                pins.add((normalise(name), rest.split()[0]))
        out[group] = frozenset(pins)
    return out


def label_layers(layers: list[LayerStats], groups: dict[str, frozenset[tuple[str, str]]]) -> list[str]:
    """A name per layer: the lock group whose every pin it installs, a `MARKERS` name, `base` before the venv.

    Each group must name exactly one layer, or the image is not worker/Dockerfile's one-layer-per-lock-file build.
    """
    labels = []
    for stats in layers:
        found = [g for g, pins in groups.items() if pins and pins <= stats.dists]
        if len(found) > 1:
            raise ValueError(f"layer {stats.member}: installs the pins of several groups {found}")
        labels.append(found[0] if found else next((k for k in MARKERS if k in stats.markers), "other"))
    seen = {g: labels.count(g) for g in groups}
    wrong = {g: n for g, n in seen.items() if n != 1}
    if wrong:
        raise ValueError(f"layer groups {wrong}: each of worker/image/*.txt must be exactly one layer "
                         "(buildah needs --layers)")
    if "venv" in labels:
        first = labels.index("venv")
        labels[:first] = ["base" if lab in ("other", "user") else lab for lab in labels[:first]]
    return labels

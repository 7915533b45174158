"""Maintainers' tool: re-lock the worker image's Python layers (worker/image/*.txt) from worker/requirements.txt.

Needs the network (PyPI) and pip; run it after changing a pin in worker/requirements.txt, then build and measure the
image (`make image`) and copy its measured sizes (out/image/measurement.json) into `WORKER_IMAGE_LAYER_BYTES` in
components/catalogue/pins.py; commit all of it together (the tests check that the lock, the pins and the sizes agree):

    python3 scripts/lock_worker_image.py

It resolves the pins for the image's platform (Linux x86-64, CPython 3.11, manylinux wheels only) with pip's own
resolver (`pip install --dry-run --report`, which reads wheel metadata only: nothing multi-GB is downloaded), splits
the closure into the layers of `LAYERS` (everything not named there goes into the last one) and writes one hash-pinned
requirements file per layer, each line ending in a comment with the wheel's file name and size from PyPI's simple index
(PEP 691 JSON, PEP 700 `size`); it prints each layer's wheel total, the floor of its measured compressed size.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGE_DIR = ROOT / "worker" / "image"
INDEX = "https://pypi.org/simple"
PYTHON_VERSION = "3.11"
"""The image's Python minor version (components.catalogue.WORKER_BASE_IMAGE); the wheels are chosen for it."""

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Why this split: each layer decompresses on one core, so the largest layer sets the floor of even a parallel
    # pull; torch and each big CUDA library get a layer of their own, small CUDA pieces share one.
    ("10-cublas.txt", ("nvidia-cublas",)),
    ("11-cudnn.txt", ("nvidia-cudnn-cu13",)),
    ("12-cufft-curand.txt", ("nvidia-cufft", "nvidia-curand")),
    ("13-nccl-nvshmem.txt", ("nvidia-nccl-cu13", "nvidia-nvshmem-cu13")),
    ("14-cusolver.txt", ("nvidia-cusolver",)),
    ("15-cusparse.txt", ("nvidia-cusparse", "nvidia-cusparselt-cu13")),
    ("16-cuda-small.txt", ("nvidia-cuda-nvrtc", "nvidia-nvjitlink", "nvidia-cuda-cupti", "nvidia-cuda-runtime",
                           "nvidia-cufile", "nvidia-nvtx", "cuda-bindings", "cuda-pathfinder", "cuda-toolkit")),
    ("20-triton.txt", ("triton",)),
    ("30-torch.txt", ("torch",)),
    ("40-worker.txt", ()),  # the rest: numpy, tifffile, imagecodecs, OpenSlide, wsidicom, boto3 and theirs
)


def normalise(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def resolve(requirements: Path) -> list[dict]:
    """pip's installation report for the image's platform: one dict per distribution."""
    platforms = ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    platforms += [f"manylinux_2_{m}_x86_64" for m in range(5, 37)]  # the base image is Debian 12 (glibc 2.36)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--no-cache-dir", "--dry-run",
               "--ignore-installed", "--quiet", "--report", str(report), "--index-url", INDEX,
               "--python-version", PYTHON_VERSION, "--implementation", "cp", "--abi", "cp311", "--abi", "abi3",
               "--abi", "none", "--only-binary=:all:", "--target", str(Path(tmp) / "t"), "-r", str(requirements)]
        for p in platforms:
            cmd += ["--platform", p]
        subprocess.run(cmd, check=True, timeout=900)
        return json.loads(report.read_text())["install"]


def wheel_size(name: str, filename: str) -> int:
    """Size in bytes of one file of a project, from the simple index's JSON (PEP 691/700)."""
    req = urllib.request.Request(f"{INDEX}/{normalise(name)}/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        files = json.load(r)["files"]
    return next(int(f["size"]) for f in files if f["filename"] == filename)


def main() -> int:
    installs = resolve(ROOT / "worker" / "requirements.txt")
    rows = []
    for item in installs:
        meta, info = item["metadata"], item["download_info"]
        filename = info["url"].rsplit("/", 1)[-1]
        archive = info["archive_info"]
        sha256 = (archive.get("hashes") or {}).get("sha256") or archive["hash"].split("=", 1)[1]
        rows.append((normalise(meta["name"]), meta["version"], filename, sha256, wheel_size(meta["name"], filename)))
    named = {p for _, pkgs in LAYERS for p in pkgs}
    IMAGE_DIR.mkdir(parents=True, exist_ok=True)
    for old in IMAGE_DIR.glob("[0-9][0-9]-*.txt"):
        old.unlink()
    totals: dict[str, int] = {}
    for layer, pkgs in LAYERS:
        chosen = sorted(r for r in rows if (r[0] in pkgs) or (not pkgs and r[0] not in named))
        lines = [f"# Image layer {layer}: written by scripts/lock_worker_image.py from worker/requirements.txt "
                 "(Linux x86-64, CPython 3.11). Do not edit by hand."]
        for name, version, filename, sha256, size in chosen:
            lines.append(f"{name}=={version} --hash=sha256:{sha256}  # {filename} {size} bytes")
        (IMAGE_DIR / layer).write_text("\n".join(lines) + "\n")
        totals[layer] = sum(r[4] for r in chosen)
    print("wheel bytes per layer (`make image` measures the real layers for WORKER_IMAGE_LAYER_BYTES) = {")
    for layer, size in totals.items():
        print(f"    {layer!r}: {size:_},")
    print("}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

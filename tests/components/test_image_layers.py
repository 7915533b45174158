"""The worker image's layers: the hash-pinned lock files, the catalogue's expected sizes and the image pull model."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from components import catalogue

ROOT = Path(__file__).resolve().parents[2]
IMAGE_DIR = ROOT / "worker" / "image"
LINE = re.compile(r"^(?P<name>[a-z0-9][a-z0-9.-]*)==(?P<version>[^\s]+) --hash=sha256:(?P<sha>[0-9a-f]{64})"
                  r"  # (?P<file>\S+\.whl) (?P<bytes>\d+) bytes$")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock() -> dict[str, list[dict]]:
    """Layer file name -> its pinned wheels (every non-comment line must match LINE)."""
    out = {}
    for path in sorted(IMAGE_DIR.glob("[0-9][0-9]-*.txt")):
        rows = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line or line.startswith("#"):
                continue
            m = LINE.match(line)
            assert m, f"{path.name} line {n} is not 'name==version --hash=sha256:...  # file.whl N bytes': {line}"
            rows.append(m.groupdict())
        out[path.name] = rows
    return out


def test_every_wheel_is_pinned_exactly_with_its_hash_and_in_one_layer_only():
    layers = lock()
    assert len(layers) >= 8
    seen: dict[str, str] = {}
    for layer, rows in layers.items():
        assert rows, f"{layer} is empty"
        for r in rows:
            assert r["name"] not in seen, f"{r['name']} is in {seen.get(r['name'])} and {layer}"
            seen[r["name"]] = layer
    assert {"torch", "nvidia-cublas", "nvidia-cudnn-cu13", "triton", "numpy", "tifffile"} <= set(seen)


def test_the_lock_is_for_the_base_images_python_on_linux_x86_64():
    base_python = re.match(r"^python:(\d+)\.(\d+)\.\d+-slim-bookworm@sha256:[0-9a-f]{64}$", catalogue.WORKER_BASE_IMAGE)
    assert base_python, catalogue.WORKER_BASE_IMAGE
    tag = f"cp{base_python.group(1)}{base_python.group(2)}"
    for rows in lock().values():
        for r in rows:
            py, abi, plat = r["file"][:-4].split("-")[-3:]
            assert py in (tag, "py3", "py2.py3"), r["file"]
            assert abi in (tag, "abi3", "none"), r["file"]
            assert plat == "any" or plat.endswith("x86_64"), r["file"]
    # The worker's tests run on the Python the image ships (minor version), or they prove nothing about it.
    assert sys.version_info[:2] == (int(base_python.group(1)), int(base_python.group(2))), (
        f"tests run on Python {sys.version_info[0]}.{sys.version_info[1]}, the image ships {base_python.group(0)}")


def test_every_pin_of_worker_requirements_is_locked_at_the_same_version():
    locked = {r["name"]: r["version"] for rows in lock().values() for r in rows}
    pins = {}
    for line in (ROOT / "worker" / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[normalise(name)] = version
    assert pins and {n: locked.get(n) for n in pins} == pins


def test_the_catalogues_layer_sizes_are_a_measured_build_of_this_lock():
    """WORKER_IMAGE_LAYER_BYTES holds a built image's gzip layer sizes (`make image`, scripts/build_image.py). A layer
    is its wheels unpacked plus the .pyc pip writes, gzipped: never much under its wheels' size, never 1.5 times it.
    Outside that band the lock changed and nobody rebuilt and measured the image."""
    wheels = {layer: sum(int(r["bytes"]) for r in rows) for layer, rows in lock().items()}
    assert set(catalogue.WORKER_IMAGE_LAYER_BYTES) == set(wheels)
    stale = {layer: (measured, wheels[layer]) for layer, measured in catalogue.WORKER_IMAGE_LAYER_BYTES.items()
             if not 0.98 * wheels[layer] <= measured <= 1.5 * wheels[layer]}
    assert not stale, f"re-measure with `make image` and copy its table (measured, wheels): {stale}"


def test_no_layer_dominates_the_image():
    sizes = catalogue.worker_image_bytes()
    total, largest = sum(sizes), max(sizes)
    print(f"worker image ~{total / 1e9:.2f} GB compressed in {len(sizes)} layers; largest {largest / 1e9:.2f} GB")
    assert largest == catalogue.WORKER_IMAGE_LAYER_BYTES["30-torch.txt"]  # torch, the one wheel that cannot split
    assert largest < 0.2 * total
    assert 2.5e9 < total < 3.2e9


def test_the_workers_own_code_fits_its_stated_layer_bound():
    skip = {"__pycache__", "image"}
    files = [p for p in (ROOT / "worker").rglob("*")
             if p.is_file() and not skip & set(p.relative_to(ROOT / "worker").parts) and p.suffix != ".pyc"]
    assert sum(p.stat().st_size for p in files) < catalogue.WORKER_CODE_LAYER_BYTES


def test_the_pull_model_reproduces_the_published_measurements():
    one = catalogue.PULL_ONE_STREAM_BYTES_PER_S
    assert catalogue.image_pull_seconds([11.6e9], parallel=False) == pytest.approx(121)     # data-on-eks
    assert catalogue.image_pull_seconds([3e9] * 3 + [0.35e9], parallel=True) == pytest.approx(40)  # blueprints
    # An image whose largest layer is 4.7 GB: parallel pull is held to that layer at one stream's rate.
    fat = [4.7e9, 0.5e9]
    assert catalogue.image_pull_seconds(fat, parallel=True) == pytest.approx(4.7e9 / one)
    assert catalogue.image_pull_seconds(fat, parallel=True) > 0.9 * catalogue.image_pull_seconds(fat, parallel=False)
    with pytest.raises(ValueError, match="layer_bytes"):
        catalogue.image_pull_seconds([], parallel=True)


def test_the_layered_image_pulls_faster_than_one_fat_layer():
    """The worker image as layered vs the same bytes in one Python layer (the old recipe's shape)."""
    layered = catalogue.worker_image_bytes()
    one_fat = (catalogue.WORKER_BASE_IMAGE_BYTES, sum(catalogue.WORKER_IMAGE_LAYER_BYTES.values()),
               catalogue.WORKER_CODE_LAYER_BYTES)
    fast, fat = (catalogue.image_pull_seconds(x, parallel=True) for x in (layered, one_fat))
    serial = catalogue.image_pull_seconds(layered, parallel=False)
    print(f"pull: layered+FastImagePull {fast:.1f} s, one fat layer+FastImagePull {fat:.1f} s, "
          f"one stream {serial:.1f} s")
    assert fast < 0.5 * fat and fat == pytest.approx(serial, rel=0.05)
    assert catalogue.STAGE_DURATIONS["image_pull"].seconds == round(fast)  # the stack's default: whole seconds


def test_the_locked_cuda_runtime_is_the_cuda_the_catalogue_says_torch_brings():
    """TORCH_CUDA drives the hardware policy (driver >= 580, sm_75+); the lock must really carry that CUDA."""
    locked = {r["name"]: r["version"] for rows in lock().values() for r in rows}
    assert locked["torch"] == catalogue.TORCH_CUDA["torch"]
    assert ".".join(locked["nvidia-cuda-runtime"].split(".")[:2]) == catalogue.TORCH_CUDA["cuda"]
    assert f'cuda>={catalogue.TORCH_CUDA["cuda"]}' in (ROOT / "worker" / "Dockerfile").read_text()


def test_the_lock_files_are_the_lock_tools_layers():
    """scripts/lock_worker_image.py writes worker/image; its split must be the one committed (nobody hand-edited)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("lock_worker_image", ROOT / "scripts" / "lock_worker_image.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    layers = lock()
    assert [name for name, _ in tool.LAYERS] == list(layers)
    named = {p for _, pkgs in tool.LAYERS for p in pkgs}
    for name, pkgs in tool.LAYERS:
        got = {r["name"] for r in layers[name]}
        assert got == set(pkgs) if pkgs else not (got & named), name

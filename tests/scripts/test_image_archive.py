"""scripts/image_archive.py: reading a saved image in one pass (layer gzip sizes, packages, a build secret's traces)."""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = "opt/venv/lib/python3.11/site-packages"
CA = b"-----BEGIN CERTIFICATE-----\nlocal proxy CA\n-----END CERTIFICATE-----\n" * 40


def load():
    spec = importlib.util.spec_from_file_location("image_archive", ROOT / "scripts" / "image_archive.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["image_archive"] = module
    spec.loader.exec_module(module)
    return module


ia = load()


def layer_tar(files: dict[str, bytes], dirs: tuple[str, ...] = ()) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def saved_image(layers: list[bytes], *, oci: bool, gzip_last: bool = False) -> tuple[bytes, list[str]]:
    """A `podman save` (digest.tar members) or `docker save` (OCI blobs) archive of these layer tars."""
    buf = io.BytesIO()
    names = []
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for i, data in enumerate(layers):
            if gzip_last and i == len(layers) - 1:
                data = gzip.compress(data, compresslevel=6, mtime=0)
            digest = hashlib.sha256(data).hexdigest()
            name = f"blobs/sha256/{digest}" if oci else f"{digest}.tar"
            add(name, data)
            names.append(name)
        config = json.dumps({"config": {"Env": ["PATH=/opt/venv/bin:/usr/bin"], "User": "10001:10001"}}).encode()
        add("blobs/sha256/cfg" if oci else "cfg.json", config)
        add("manifest.json", json.dumps([{"Config": "blobs/sha256/cfg" if oci else "cfg.json",
                                          "Layers": names}]).encode())
    return buf.getvalue(), names


def image_layers() -> list[bytes]:
    return [
        layer_tar({"etc/passwd": b"root:x:0:0\n", "usr/bin/python3": b"\x7fELF" * 3000}),
        layer_tar({"opt/venv/pyvenv.cfg": b"home = /usr/bin\n"},
                  dirs=(f"{SITE}/setuptools-66.1.1.dist-info",)),
        layer_tar({f"{SITE}/nvidia_cublas-13.1.1.3.dist-info/METADATA": b"Name: nvidia-cublas\n",
                   f"{SITE}/nvidia/cublas/lib/libcublas.so.13": bytes(range(256)) * 4000,
                   "run/secrets/pip-ca": b"", "tmp/layer.txt": b""}),
        layer_tar({f"{SITE}/torch-2.13.0.dist-info/RECORD": b"torch/__init__.py,,\n",
                   f"{SITE}/torch/__pycache__/__init__.cpython-311.pyc": b"\x00" * 700,
                   f"{SITE}/torch/__init__.py": b"import os\n" * 50}),
        layer_tar({"app/worker/__main__.py": b"from worker.commands import main\n"}),
    ]


@pytest.mark.parametrize("oci", [False, True], ids=["podman-docker-archive", "docker-oci-layout"])
def test_every_layer_is_measured_in_manifest_order_with_its_gzip_size(oci):
    layers = image_layers()
    archive, names = saved_image(layers, oci=oci)
    saved = ia.read_saved_image(io.BytesIO(archive))
    assert [s.member for s in saved.layers] == names
    for stats, data in zip(saved.layers, layers, strict=True):
        assert stats.raw_bytes == len(data)
        # Python's gzip module is an independent writer at the same level: the tee must have seen every byte.
        assert stats.gzip_bytes == len(gzip.compress(data, compresslevel=6, mtime=0))
    assert saved.config["config"]["User"] == "10001:10001"
    torch = saved.layers[3]
    assert (torch.files, torch.pyc_files, torch.pyc_bytes) == (3, 1, 700)
    assert saved.layers[2].dists == {("nvidia-cublas", "13.1.1.3")}
    assert saved.layers[1].dists == {("setuptools", "66.1.1")}  # from a directory entry alone
    assert saved.layers[1].markers == {"venv"} and saved.layers[4].markers == {"code"}


def test_a_layer_already_gzipped_in_the_archive_keeps_its_blob_size():
    layers = image_layers()
    archive, _ = saved_image(layers, oci=True, gzip_last=True)
    saved = ia.read_saved_image(io.BytesIO(archive))
    assert saved.layers[-1].gzip_bytes == len(gzip.compress(layers[-1], compresslevel=6, mtime=0))
    assert saved.layers[-1].raw_bytes == len(layers[-1]) and saved.layers[-1].markers == {"code"}


def needle() -> object:
    return ia.Needle(hashlib.sha256(CA).hexdigest(), len(CA))


def test_an_empty_mount_point_is_no_leak_and_no_copy_means_no_hit():
    archive, _ = saved_image(image_layers(), oci=False)
    saved = ia.read_saved_image(io.BytesIO(archive), needle=needle())
    assert [s.secret_hits for s in saved.layers] == [()] * 5
    assert saved.layers[2].secret_placeholders == ("run/secrets/pip-ca",)


def test_the_secret_is_found_by_content_anywhere_and_by_path_when_not_empty():
    same_size_other = bytes(len(CA))
    layers = image_layers() + [
        layer_tar({"etc/ssl/certs/proxy.pem": CA, "etc/other.pem": same_size_other}),
        layer_tar({"./run/secrets/pip-ca": b"x"}),
    ]
    archive, _ = saved_image(layers, oci=True)
    saved = ia.read_saved_image(io.BytesIO(archive), needle=needle())
    assert saved.layers[5].secret_hits == ("etc/ssl/certs/proxy.pem",)
    assert saved.layers[6].secret_hits == ("run/secrets/pip-ca",)
    assert sum(len(s.secret_hits) for s in saved.layers) == 2


def test_a_manifest_naming_a_missing_layer_is_refused_in_one_line():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = json.dumps([{"Config": "c.json", "Layers": ["gone.tar"]}]).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ValueError, match=r"^saved image: layers \['gone.tar'\] .*$"):
        ia.read_saved_image(io.BytesIO(buf.getvalue()))


def test_lock_groups_reads_the_real_lock_files_normalised():
    texts = {p.name: p.read_text() for p in sorted((ROOT / "worker" / "image").glob("[0-9][0-9]-*.txt"))}
    groups = ia.lock_groups(texts)
    assert list(groups) == sorted(texts) and all(groups.values())
    assert ("nvidia-cublas", "13.1.1.3") in groups["10-cublas.txt"]
    assert ("python-dateutil", "2.9.0.post0") in groups["40-worker.txt"]
    with pytest.raises(ValueError, match=r"^x.txt: 'torch>=2' is not 'name==version --hash=...'$"):
        ia.lock_groups({"x.txt": "torch>=2\n"})


def groups() -> dict:
    return {"10-cublas.txt": frozenset({("nvidia-cublas", "13.1.1.3")}),
            "30-torch.txt": frozenset({("torch", "2.13.0")})}


def test_label_layers_names_groups_markers_and_the_base():
    archive, _ = saved_image(image_layers(), oci=False)
    saved = ia.read_saved_image(io.BytesIO(archive))
    assert ia.label_layers(saved.layers, groups()) == ["base", "venv", "10-cublas.txt", "30-torch.txt", "code"]


def test_label_layers_refuses_a_build_whose_runs_collapsed_into_one_layer():
    both = ia.LayerStats("all.tar", dists=frozenset({("nvidia-cublas", "13.1.1.3"), ("torch", "2.13.0")}))
    with pytest.raises(ValueError, match=r"^layer all.tar: installs the pins of several groups"):
        ia.label_layers([both], groups())
    only = ia.LayerStats("one.tar", dists=frozenset({("torch", "2.13.0")}))
    with pytest.raises(ValueError, match=r"'10-cublas.txt': 0.*buildah needs --layers"):
        ia.label_layers([only], groups())


def test_an_oci_layout_reads_each_layers_size_from_its_gzip_blob(tmp_path):
    layers = image_layers()
    blobs = tmp_path / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    # Level 1 on purpose: the size must be the blob's, not a re-compression at level 6.
    descs = [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **put(gzip.compress(d, 1, mtime=0))}
             for d in layers]
    config = put(json.dumps({"config": {"User": "10001:10001"}}).encode())
    manifest = put(json.dumps({"config": config, "layers": descs}).encode())
    (tmp_path / "index.json").write_text(json.dumps({"manifests": [manifest]}))
    saved = ia.read_oci_layout(tmp_path, needle=needle())
    assert [s.gzip_bytes for s in saved.layers] == [len(gzip.compress(d, 1, mtime=0)) for d in layers]
    assert [s.raw_bytes for s in saved.layers] == [len(d) for d in layers]
    assert saved.layers[2].secret_placeholders == ("run/secrets/pip-ca",) and saved.config["config"]["User"]
    assert ia.label_layers(saved.layers, groups()) == ["base", "venv", "10-cublas.txt", "30-torch.txt", "code"]

"""The worker image recipe (worker/Dockerfile): base image, NVIDIA toolkit settings, user, layers, entry point."""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "worker" / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def test_dockerfile_base_image_is_a_build_arg_without_default():
    ins = instructions()
    assert ins[0] == ("ARG", "BASE_IMAGE")
    assert ins[1] == ("FROM", "${BASE_IMAGE}")
    assert not re.search(r"nvidia/cuda", DOCKERFILE), "no CUDA base image: torch's wheels bring CUDA"


def test_dockerfile_tells_the_nvidia_toolkit_what_to_mount_and_which_driver_it_needs():
    envs = " ".join(rest for op, rest in instructions() if op == "ENV")
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in envs
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=13.0"' in envs


def test_dockerfile_runs_python_m_worker_as_uid_10001_with_scratch_env():
    ins = dict((op, rest) for op, rest in instructions() if op in ("USER", "ENTRYPOINT", "CMD", "WORKDIR"))
    assert ins["USER"] == "10001:10001"
    assert json.loads(ins["ENTRYPOINT"]) == ["python", "-m", "worker"]
    assert json.loads(ins["CMD"]) == ["consume", "--mode", "job"]
    assert ins["WORKDIR"] == "/app"
    envs = " ".join(rest for op, rest in instructions() if op == "ENV")
    for var in ("HOME=/scratch", "TMPDIR=/scratch", "PYTHONDONTWRITEBYTECODE=1"):
        assert var in envs
    runs = [rest for op, rest in instructions() if op == "RUN"]
    layers = sorted(p.name for p in (ROOT / "worker" / "image").glob("[0-9][0-9]-*.txt"))
    installs = [r for r in runs if "pip install" in r]
    # One RUN (one image layer) per lock file, in order, each hash-checked, wheels only, no resolver at build time.
    assert [re.search(r"source=worker/image/([^,]+),", r).group(1) for r in installs] == layers
    for r in installs:
        assert "--require-hashes" in r and "--no-deps" in r and "--only-binary=:all:" in r
    assert "pip check" in installs[-1]  # the layers together are the whole closure
    runs = " ".join(runs)
    assert "compileall" in runs  # bytecode at build time: the root filesystem is read-only at run time


def test_dockerfile_user_comes_after_every_run():
    ops = [op for op, _ in instructions()]
    assert max(i for i, op in enumerate(ops) if op == "RUN") < ops.index("USER")

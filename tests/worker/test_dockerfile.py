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


def test_pip_gets_the_hosts_ca_as_a_build_secret_only_while_it_installs():
    installs = [rest for op, rest in instructions() if op == "RUN" and "pip install" in rest]
    for r in installs:
        assert "--mount=type=secret,id=pip-ca" in r, r
        # Only where the secret was handed in: without it pip keeps its own certifi (a missing PIP_CERT file fails).
        assert "if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi" in r, r
        assert "required=true" not in r  # a host with a public CA chain builds without the secret
    envs = " ".join(rest for op, rest in instructions() if op in ("ENV", "ARG"))
    assert "PIP_CERT" not in envs and "REQUESTS_CA_BUNDLE" not in envs and "SSL_CERT_FILE" not in envs


def test_no_instruction_copies_a_ca_or_anything_but_the_workers_code():
    copies = [(op, rest) for op, rest in instructions() if op in ("COPY", "ADD")]
    assert copies == [("COPY", "worker/ /app/worker/")]
    assert not re.search(r"\.(crt|pem)\b|ca-certificates|/run/secrets/pip-ca\s+/", " ".join(
        rest for op, rest in instructions() if op != "RUN")), "a CA file would land in a layer"


def test_scratch_is_sticky_world_writable_so_a_tmpfs_over_it_is_too():
    # runc gives a tmpfs mounted over an existing directory that directory's mode (its mode= option is dropped):
    # with a 0755 /scratch, `docker run --read-only --tmpfs /scratch` leaves the worker nowhere to write.
    runs = " ".join(rest for op, rest in instructions() if op == "RUN")
    assert "install -d -m 1777 -o 10001 -g 10001 /scratch" in runs


LAB = ROOT / "examples" / "lab-image" / "Dockerfile"


def test_the_lab_recipe_builds_on_the_worker_image_by_digest_and_loads_its_model_at_build_time():
    from components.image import lab_base_problem

    assert lab_base_problem(LAB) is None  # what gpuburst:workerBuild requires of a lab's Dockerfile
    text = re.sub(r"\\\n", " ", LAB.read_text())
    ops = [line.strip().partition(" ")[::2] for line in text.splitlines() if line.strip()[:1] not in ("", "#")]
    assert ops[:2] == [("ARG", "GPUBURST_WORKER_IMAGE"), ("FROM", "${GPUBURST_WORKER_IMAGE}")]
    assert ("COPY", "model.pt2 /models/model.pt2") in ops and ("ENV", "MODEL_PATH=/models/model.pt2") in ops
    run = next(rest for op, rest in ops if op == "RUN")
    assert "load_model('/models/model.pt2', 'cpu')" in run and "--mount=type=tmpfs,target=/scratch" in run
    assert not any(op == "USER" for op, _ in ops)  # the worker image's uid 10001 stays
    assert "@sha256:" in LAB.read_text()  # the documented build passes the worker image by digest

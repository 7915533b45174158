"""Installed from the wheel into a fresh virtualenv, another project synths the platform, checks the plan with the
pack, finds the pack's folder, and builds the worker image from the packaged recipe under the repository's own tag.

The wheel is built from a snapshot of the build inputs (pyproject.toml, setup.py, MANIFEST.in, README.md,
components/, policies/, worker/), so that setuptools' build/ and *.egg-info land in tmp_path, not in the checkout. The
virtualenv gets `<wheel>[platform,policy]` (the platform program's extra and the pack's) from PyPI through the
machine's pip configuration (about a minute; pip's cache makes it faster the second time). The wheel is compared
with the snapshot it was built from, and the snapshot with the checkout and the session's dev synth.
examples/another-team, copied out of the checkout, synthesizes and passes the installed pack with advisories only, and
fails it with a mismatch put inside its plan.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from source_copy import copy_build_inputs

ROOT = Path(__file__).resolve().parents[1]
CHARTS = ROOT.parent / "shared" / "charts"
"""The chart cache beside the checkout (the synth's `../shared/charts`); the installed project is elsewhere, so the
test hands it over as $GPUBURST_CHARTS."""
BUILD_TIMEOUT_S = 300
INSTALL_TIMEOUT_S = 900
RUN_TIMEOUT_S = 300
"""Seconds for the wheel build, the virtualenv's install (~1 min from pip's cache) and each command run in it."""

pytestmark = [pytest.mark.slow, pytest.mark.timeout(BUILD_TIMEOUT_S + INSTALL_TIMEOUT_S + 4 * RUN_TIMEOUT_S)]


def _env() -> dict[str, str]:
    """This environment minus anything that would let the virtualenv see the repository; the judged day pinned."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CHECKOV", "GPUBURST_CHARTS")}
    env["GPUBURST_TODAY"] = os.environ.get("GPUBURST_TODAY", "2026-12-01")  # tests/conftest.py sets it
    return env


def _run(command: list[str], cwd: Path, timeout: int = RUN_TIMEOUT_S, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], cwd=cwd, env={**_env(), **env}, capture_output=True, text=True,
                          timeout=timeout)


def _ok(proc: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"{what} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _extract_with_modes(wheel: Path, into: Path) -> None:
    # zipfile drops permissions; pip keeps the executable bits, and so must the comparison.
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            path = Path(archive.extract(info, into))
            mode = info.external_attr >> 16
            if mode and not info.is_dir():
                path.chmod(stat.S_IMODE(mode))


def _tag(context: Path) -> str:
    from components import image

    return image.derived_tag(image.WorkerImageArgs(context=str(context)))


@dataclass
class Installed:
    """The wheel, the snapshot it was built from and the virtualenv it went into."""

    source: Path
    """The snapshot of the build inputs."""
    snapshot_time: float
    """When the snapshot was taken (time.time())."""
    wheel: Path
    unpacked: Path
    venv: Path
    site_packages: Path

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    base = tmp_path_factory.mktemp("installed")
    source = base / "source"
    snapshot_time = time.time()
    copy_build_inputs(source)
    dist = base / "dist"
    _ok(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", dist, source], cwd=base,
             timeout=BUILD_TIMEOUT_S), "pip wheel")
    (wheel,) = dist.glob("gpuburst-*.whl")
    unpacked = base / "unpacked"
    _extract_with_modes(wheel, unpacked)
    venv = base / "venv"
    _ok(_run([sys.executable, "-m", "venv", venv], cwd=base, timeout=RUN_TIMEOUT_S), "python -m venv")
    # --no-compile: byte-compiling every provider SDK's modules is half the install's time, and nothing here needs it.
    _ok(_run([venv / "bin" / "pip", "install", "-q", "--no-compile", f"{wheel}[platform,policy]"], cwd=base,
             timeout=INSTALL_TIMEOUT_S), "pip install gpuburst[platform,policy]")
    site = _ok(_run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    cwd=base), "purelib").stdout.strip()
    return Installed(source, snapshot_time, wheel, unpacked, venv, Path(site))


def test_the_wheel_carries_the_whole_recipe_under_the_same_tag(installed):
    from components import image

    recipe = installed.unpacked / "gpuburst" / "recipe"
    assert (recipe / "worker" / "Dockerfile").is_file() and (recipe / "worker" / "Dockerfile.dockerignore").is_file()
    built_from = sorted(p.relative_to(installed.source).as_posix() for p in image._files(installed.source / "worker"))
    packed = sorted(p.relative_to(recipe).as_posix() for p in image._files(recipe / "worker"))
    assert packed == built_from
    assert {"worker/requirements.txt", "worker/weights/README.md"} <= set(packed)
    assert any(p.startswith("worker/image/") for p in packed) and any(p.startswith("worker/devtools/") for p in packed)
    assert (image.source_digest(["worker"], root=recipe)
            == image.source_digest(["worker"], root=installed.source))
    assert _tag(recipe) == _tag(installed.source)
    # The pack went in as gpuburst.policy, its PulumiPolicy.yaml rewritten for the installing environment.
    pack = installed.unpacked / "gpuburst" / "policy"
    assert (pack / "__main__.py").is_file() and (pack / "_components.py").is_file()
    assert "virtualenv: ../../../../.." in (pack / "PulumiPolicy.yaml").read_text()
    # And the snapshot is the checkout: the same tag from the repository itself.
    assert _tag(ROOT) == _tag(installed.source)


def test_installed_the_default_recipe_is_in_site_packages_with_the_snapshot_tag(installed, tmp_path):
    code = ("from gpuburst import image, recipe; print(recipe.worker_recipe_dir()); "
            "print(image.derived_tag(image.WorkerImageArgs()))")
    out = _ok(_run([installed.bin("python"), "-c", code], cwd=tmp_path), "the installed recipe").stdout.split()
    assert Path(out[0]) == installed.site_packages / "gpuburst" / "recipe"
    assert out[1] == _tag(installed.source)


def _project(where: Path) -> Path:
    where.mkdir()
    (where / "Pulumi.yaml").write_text("name: tumour-platform\nruntime: python\n")
    shutil.copy2(ROOT / "Pulumi.dev.yaml", where / "Pulumi.dev.yaml")
    (where / "__main__.py").write_text(
        "import pulumi\n"
        "from gpuburst import GpuBurstPlatform, current_config, parse_config\n"
        'GpuBurstPlatform("tumour", parse_config(current_config(), stack=pulumi.get_stack()))\n')
    return where


def _image_tags(plan: dict) -> list[str]:
    return [tag.rsplit(":", 1)[1] for r in plan["resources"] if r["type"] == "docker-build:index:Image"
            for tag in r["properties"]["tags"]]


@pytest.fixture(scope="module")
def lab_synth(installed, tmp_path_factory) -> dict:
    """Another project's dev synth with the installed console script: {"project", "plan", "proc"}."""
    if not CHARTS.is_dir():
        pytest.skip(f"chart cache not found at {CHARTS} (../shared/charts beside the checkout is absent)")
    project = _project(tmp_path_factory.mktemp("lab") / "tumour-platform")
    proc = _ok(_run([installed.bin("gpuburst"), "synth", "--stack", "dev", "--out", "out"], cwd=project,
                    GPUBURST_CHARTS=str(CHARTS)), "gpuburst synth")
    return {"project": project, "plan": json.loads((project / "out" / "plan.json").read_text()), "proc": proc}


def test_another_project_synths_the_platform_with_the_installed_package(installed, lab_synth, dev):
    plan = lab_synth["plan"]
    urns = [r["urn"] for r in plan["resources"]]
    assert urns and all(u.split("::")[1] == "tumour-platform" for u in urns)
    charts = {r["urn"] for r in plan["resources"] if r["type"] == "kubernetes:helm.sh/v4:Chart"}
    children = [r for r in plan["resources"] if r.get("parent") in charts]
    assert charts and children and not plan.get("shallow")
    (img,) = [r for r in plan["resources"] if r["type"] == "docker-build:index:Image"]
    recipe = installed.site_packages / "gpuburst" / "recipe"
    assert Path(img["properties"]["context"]["location"]) == recipe
    assert Path(img["properties"]["dockerfile"]["location"]) == recipe / "worker" / "Dockerfile"
    assert _image_tags(plan) == [_tag(installed.source)]
    # The very tag of this repository's own dev synth (the session's `dev` fixture).
    assert _image_tags(plan) == _image_tags(dev["plan"])


def test_the_installed_pack_checks_the_plan_and_says_where_it_is(installed, lab_synth):
    project = lab_synth["project"]
    checked = _ok(_run([installed.bin("gpuburst"), "check", "out/plan.json"], cwd=project), "gpuburst check")
    assert checked.stdout.strip().splitlines()[-1].startswith("policy check passed")
    found = _ok(_run([installed.bin("gpuburst"), "policy-pack", "path"], cwd=project), "gpuburst policy-pack path")
    pack = Path(found.stdout.strip())
    assert pack == installed.site_packages / "gpuburst" / "policy"
    assert (pack / "PulumiPolicy.yaml").is_file() and (pack / "__main__.py").is_file()
    assert found.stderr == ""  # its virtualenv is this environment: no warning
    same = _ok(_run([installed.bin("python"), "-m", "gpuburst", "policy-pack", "path"], cwd=project), "python -m")
    assert same.stdout == found.stdout


def test_the_installed_pack_recognises_the_worker_image(installed, lab_synth):
    code = ("import json, sys\n"
            "from gpuburst.policy import hardware\n"
            "from gpuburst.policy.plan import Res\n"
            "from gpuburst.policy.unknowns import plain\n"
            "plan = json.load(open(sys.argv[1]))\n"
            "res = [Res(r['type'], r['urn'], r.get('name', ''), r.get('parent') or None, plain(r['properties']))\n"
            "       for r in plan['resources']]\n"
            "print(len(hardware.worker_images(res)))\n")
    out = _ok(_run([installed.bin("python"), "-c", code, "out/plan.json"], cwd=lab_synth["project"]), "hardware")
    assert out.stdout.strip() == "1"


EXAMPLE = ROOT / "examples" / "another-team"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


@pytest.fixture(scope="module")
def example(installed, tmp_path_factory) -> Path:
    """examples/another-team copied out of the checkout and synthesized with the installed console script."""
    project = tmp_path_factory.mktemp("example") / "another-team"
    shutil.copytree(EXAMPLE, project)
    _ok(_run([installed.bin("gpuburst"), "synth", "--stack", "lab", "--out", "out"], cwd=project), "gpuburst synth")
    return project


def test_the_example_passes_the_installed_pack_with_advisories_only(installed, example):
    checked = _ok(_run([installed.bin("gpuburst"), "check", "out/plan.json"], cwd=example), "gpuburst check")
    lines = checked.stdout.splitlines()
    assert not [ln for ln in lines if ln.startswith("MANDATORY")]
    assert [ln for ln in lines if ln.startswith("ADVISORY outside-this-stack ")], checked.stdout
    assert lines[-1].startswith("policy check passed")


def test_the_example_with_a_mismatch_inside_fails_the_installed_pack(installed, example):
    plan = json.loads((example / "out" / "plan.json").read_text())
    (association,) = [r for r in plan["resources"] if r["type"] == ASSOCIATION]
    association["properties"]["serviceAccount"] = "someone-else"
    (example / "broken.json").write_text(json.dumps(plan))
    checked = _run([installed.bin("gpuburst"), "check", "broken.json"], cwd=example)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert [ln for ln in checked.stdout.splitlines() if ln.startswith("MANDATORY") and "someone-else" in ln]

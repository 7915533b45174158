"""Any number of builds from one checkout: `pip install .` twice in a row from a clean clone, then `make wheel`, each
succeed and install the pack's PulumiPolicy.yaml rewritten once (setup.py never reads what an earlier build left).

pip builds a local folder in place, so the first install leaves build/ in the clone; the second used to keep its
already rewritten PulumiPolicy.yaml and fail on it. The clone is `git clone` of this repository; the build's own files
(setup.py, pyproject.toml, MANIFEST.in) are then copied from the checkout, so that the test judges them before they
are committed. `--no-deps` keeps it to the build: what is installed beside gpuburst is tests/test_light_install.py's.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD_FILES = ("setup.py", "pyproject.toml", "MANIFEST.in")
RUN_TIMEOUT_S = 300
"""Seconds for each clone, build and install (a build takes ~5 s; pip fetches setuptools for its isolated build)."""
INSTALLED_LINE = "virtualenv: ../../../../.."
"""The installed pack's `virtualenv` (setup.py's INSTALLED_VIRTUALENV)."""
OFFLINE_SIGNS = ("Temporary failure in name resolution", "Failed to establish a new connection", "No matching "
                 "distribution found", "Could not find a version that satisfies", "Network is unreachable")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(8 * RUN_TIMEOUT_S)]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def _run(command: list, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)


def _ok(proc: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if proc.returncode != 0 and any(sign in proc.stderr for sign in OFFLINE_SIGNS):
        pytest.skip(f"pip cannot reach a package index from here (offline?): {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, f"{what} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _pack_yaml(site: Path) -> str:
    return (site / "gpuburst" / "policy" / "PulumiPolicy.yaml").read_text()


def test_pip_install_twice_then_make_wheel_from_one_clean_clone(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("git or this checkout's .git is missing: nothing to clone")
    clone = tmp_path / "clone"
    _ok(_run(["git", "clone", "-q", ROOT, clone], cwd=tmp_path), "git clone")
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, clone / name)
    venv = tmp_path / "venv"
    _ok(_run([sys.executable, "-m", "venv", venv], cwd=tmp_path), "python -m venv")
    site = Path(_ok(_run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         cwd=tmp_path), "purelib").stdout.strip())
    for attempt in ("first", "second"):
        _ok(_run([venv / "bin" / "pip", "install", "-q", "--no-deps", "--no-compile", "."], cwd=clone),
            f"the {attempt} pip install .")
        assert (clone / "build").is_dir()  # pip built in place: the second build found the first one's build/
        text = _pack_yaml(site)
        assert text.count(INSTALLED_LINE) == 1 and "../.venv" not in text.split("runtime:", 1)[1], text
    _ok(_run(["make", "wheel", f"PYTHON={venv / 'bin' / 'python'}"], cwd=clone), "make wheel")
    (wheel,) = (clone / ".whl").glob("gpuburst-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read("gpuburst/policy/PulumiPolicy.yaml").decode()
        assert "gpuburst/recipe/worker/Dockerfile" in archive.namelist()
    assert text.count(INSTALLED_LINE) == 1, text

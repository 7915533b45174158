"""The package surface: every public name resolves, and the runtime pins agree with requirements.txt."""
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import components

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_resolves():
    for name in components.__all__:
        assert getattr(components, name) is not None, name


def test_importing_the_catalogue_does_not_load_the_providers():
    code = "import sys, components.catalogue; print('pulumi_aws' in sys.modules, 'pulumi_eks' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_pyproject_dependencies_equal_requirements_txt():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = sorted(pyproject["project"]["dependencies"])
    reqs = sorted(line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
                  if line.strip() and not line.startswith("#"))
    assert declared == reqs


def test_program_requirements_exclude_torch():
    text = (ROOT / "requirements.txt").read_text()
    assert not re.search(r"^torch", text, re.M)


def test_installed_under_the_distinctive_name():
    # `make test` installs the repo in editable mode, so `gpuburst` is the same code as `components/`.
    code = "import gpuburst, gpuburst.catalogue as c; print(c.KEDA_VERSION, gpuburst.WorkQueue.__name__)"
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [components.catalogue.KEDA_VERSION, "WorkQueue"]

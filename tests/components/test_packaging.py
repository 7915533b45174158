"""The package surface: every public name resolves, and the runtime pins agree with requirements.txt."""
import json
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


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==")
            pins[name.split("[")[0].lower()] = version
    return pins


def test_a_package_pinned_in_several_files_has_one_version():
    files = [ROOT / "requirements.txt", ROOT / "requirements-dev.txt", ROOT / "policies" / "requirements.txt",
             ROOT / "worker" / "requirements.txt", ROOT / "requirements-checkov.txt"]
    seen: dict[str, tuple[str, Path]] = {}
    for f in files:
        for name, version in _pins(f).items():
            if name in seen:
                assert seen[name][0] == version, f"{name}: {version} in {f.name} but {seen[name][0]} in {seen[name][1]}"
            seen[name] = (version, f)
    assert {"pulumi", "torch", "boto3"} <= set(seen)


def test_every_requirement_is_pinned_exactly():
    for f in ROOT.glob("**/requirements*.txt"):
        if any(part.startswith(".venv") for part in f.parts):
            continue
        for line in f.read_text().splitlines():
            line = line.split("#")[0].strip()
            if line and not line.startswith("-r"):
                assert "==" in line, f"{f.relative_to(ROOT)}: {line!r} is not pinned with =="


def test_readme_import_example_runs_under_mocks():
    """The README's 'Using the components from another stack' snippet, run as written (with `gpuburst`)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Using the components from another stack", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = (
        "import json\n"
        "from components.synth.mocks import run_under_mocks\n"
        f"snippet = {snippet!r}\n"
        "res = run_under_mocks(lambda: exec(snippet, {}))\n"
        "print(json.dumps(res.outputs))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "sqs" in json.loads(out.stdout.strip().splitlines()[-1])["queueUrl"]


def test_every_room_of_the_components_is_in_the_wheel():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    rooms = {".".join(("gpuburst", *p.parent.relative_to(ROOT / "components").parts))
             for p in (ROOT / "components").rglob("__init__.py")}
    assert rooms == listed, f"pyproject.toml packages {sorted(listed)} != packages under components/ {sorted(rooms)}"


def test_the_command_line_names_itself_as_it_was_called(tmp_path):
    # Installed (make test installs the package), `python -m gpuburst` must not say `python -m components`.
    for package in ("gpuburst", "components"):
        cwd = tmp_path if package == "gpuburst" else ROOT
        out = subprocess.run([sys.executable, "-m", package, "synth", "--help"], cwd=cwd, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"usage: python -m {package} synth"), out.stdout[:200]
        verify = subprocess.run([sys.executable, "-m", package, "verify", "--help"], cwd=cwd, capture_output=True,
                                text=True, timeout=60)
        assert verify.stdout.startswith(f"usage: python -m {package} verify"), verify.stdout[:200]

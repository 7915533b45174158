"""The package surface: every public name resolves, the runtime pins agree with requirements.txt, and the wheel's
layout (the pack as gpuburst.policy, the `policy` extra, the console script, setup.py's recipe and pack yaml)."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import components

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_resolves():
    for name in components.__all__:
        assert getattr(components, name) is not None, name


def test_importing_the_catalogue_does_not_load_the_providers():
    code = "import sys, components.catalogue; print('pulumi_aws' in sys.modules, 'pulumi_eks' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr


PROGRAM_EXTRAS = ("platform", "verify", "planner")
"""The extras that, with the core, make requirements.txt (the platform program's file)."""


def test_pyproject_dependencies_equal_requirements_txt():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    declared = [*project["dependencies"], *(r for name in PROGRAM_EXTRAS for r in extras[name])]
    reqs = sorted(line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()
                  if line.strip() and not line.startswith("#"))
    assert len(set(declared)) == len(declared), declared  # no package in two of them
    assert sorted(declared) == reqs
    # `all` is every extra, and the core is what a workload stack needs and nothing else.
    assert sorted(extras["all"]) == sorted(r for name in (*PROGRAM_EXTRAS, "policy") for r in extras[name])
    assert sorted(_pins_of(project["dependencies"])) == ["pulumi", "pulumi-aws", "pulumi-kubernetes", "pyyaml"]


def test_every_optional_package_is_in_the_extra_that_says_it_brings_it():
    from components.spec.extras import EXTRA_OF

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for module, (distribution, extra) in EXTRA_OF.items():
        assert distribution.lower() in _pins_of(extras[extra]), (module, distribution, extra)


OPTIONAL = ("pulumi_eks", "pulumi_docker_build", "helm_python", "matplotlib", "boto3", "botocore", "kubernetes",
            "jsonschema")
PLATFORM_ONLY = {"Cluster", "ClusterArgs", "GpuBurstPlatform", "WorkerImage", "WorkerImageArgs"}
"""The public names that need the `platform` extra: every other one imports with the core alone."""


def test_the_core_imports_without_the_extras_and_a_platform_name_says_which_extra():
    # The optional packages made unimportable (None in sys.modules), as in an environment without the extras.
    code = ("import sys\n"
            f"for m in {OPTIONAL!r}: sys.modules[m] = None\n"
            "import components\n"
            "for name in components.__all__:\n"
            "    try:\n"
            "        getattr(components, name)\n"
            "    except ModuleNotFoundError as e:\n"
            "        print(name, '|', e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    failed = dict(line.split(" | ", 1) for line in out.stdout.splitlines())
    assert set(failed) == PLATFORM_ONLY, out.stdout
    assert all(message.endswith('pip install "gpuburst[platform]"') for message in failed.values()), failed


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
             ROOT / "worker" / "requirements.txt", ROOT / "requirements-checkov.txt", ROOT / "requirements-docs.txt"]
    seen: dict[str, tuple[str, Path]] = {}
    for f in files:
        for name, version in _pins(f).items():
            if name in seen:
                assert seen[name][0] == version, f"{name}: {version} in {f.name} but {seen[name][0]} in {seen[name][1]}"
            seen[name] = (version, f)
    assert {"pulumi", "torch", "boto3"} <= set(seen)


GIT_PIN = re.compile(r"^[A-Za-z0-9_.\-]+(\[[A-Za-z0-9_,\-]+\])? @ git\+\S+@[^@/\s]+$")
"""A direct reference pinned to a tag or commit, the way another repository installs gpuburst itself (README)."""


def test_every_requirement_is_pinned_exactly():
    for f in ROOT.glob("**/requirements*.txt"):
        if any(part.startswith(".venv") for part in f.parts):
            continue
        for line in f.read_text().splitlines():
            line = line.split("#")[0].strip()
            if line and not line.startswith("-r"):
                assert "==" in line or GIT_PIN.match(line), \
                    f"{f.relative_to(ROOT)}: {line!r} is not pinned with == (or to a git tag or commit)"
    assert GIT_PIN.match("gpuburst[policy] @ git+https://github.com/example-org/gpuburst@v0.1.0")
    assert not GIT_PIN.match("gpuburst[policy] @ git+https://github.com/example-org/gpuburst")


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


def test_every_room_of_the_components_and_the_pack_is_in_the_wheel():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    rooms = {".".join((name, *p.parent.relative_to(ROOT / folder).parts))
             for name, folder in (("gpuburst", "components"), ("gpuburst.policy", "policies"))
             for p in (ROOT / folder).rglob("__init__.py")}
    assert rooms == listed, (f"pyproject.toml packages {sorted(listed)} != packages under components/ and policies/ "
                             f"{sorted(rooms)}")
    assert setuptools["package-dir"] == {"gpuburst": "components", "gpuburst.policy": "policies"}
    assert {"PulumiPolicy.yaml", "requirements.txt"} <= set(setuptools["package-data"]["gpuburst.policy"])


def test_the_policy_extra_pins_what_the_pack_needs():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["policy"]
    pack = _pins(ROOT / "policies" / "requirements.txt")
    program = _pins(ROOT / "requirements.txt")
    # The extra adds what the pack needs beyond the components' own dependencies (pulumi is one of those).
    assert {name: version for name, version in pack.items() if name not in program} == _pins_of(extra)
    assert _pins_of(extra) == {"pulumi-policy": "1.21.0"}


def _pins_of(requirements: list[str]) -> dict[str, str]:
    return {r.split("==")[0].split("[")[0].lower(): r.split("==")[1] for r in requirements}


def test_the_console_script_is_the_module_entry_point():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"gpuburst": "gpuburst.__main__:main"}
    from components import __main__ as entry

    assert callable(entry.main)


def _setup_module():
    spec = importlib.util.spec_from_file_location("gpuburst_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # __name__ is not "__main__": setup() does not run
    return module


def test_the_installed_pack_yaml_points_five_folders_up_at_the_environment(tmp_path):
    import yaml

    setup = _setup_module()
    installed = setup.installed_policy_yaml((ROOT / "policies" / "PulumiPolicy.yaml").read_text())
    doc = yaml.safe_load(installed)
    assert doc["runtime"]["name"] == "python"
    virtualenv = doc["runtime"]["options"]["virtualenv"]
    pack = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "gpuburst" / "policy"
    pack.mkdir(parents=True)
    assert (pack / virtualenv).resolve() == (tmp_path / "venv").resolve()
    # Everything else of the repository's file is kept.
    repo = yaml.safe_load((ROOT / "policies" / "PulumiPolicy.yaml").read_text())
    repo["runtime"]["options"]["virtualenv"] = virtualenv
    assert doc == repo
    with pytest.raises(ValueError, match="virtualenv"):
        setup.installed_policy_yaml("runtime: python\n")


def test_the_installed_pack_yaml_is_written_from_the_source_however_often(tmp_path):
    setup = _setup_module()
    source = ROOT / "policies" / "PulumiPolicy.yaml"
    target = tmp_path / "build" / "lib" / "gpuburst" / "policy" / "PulumiPolicy.yaml"
    for _ in range(2):  # the second finds the first's rewritten copy in place, and must not read it
        setup.write_installed_policy_yaml(source, target)
        assert target.read_text() == setup.installed_policy_yaml(source.read_text())
    assert source.read_text().count("virtualenv: ../.venv") == 1  # the source is never written through


def test_build_py_twice_into_one_build_folder_leaves_nothing_of_the_first(tmp_path):
    # What pip does on a second `pip install .` from one checkout: setup.py's build_py into the same build/lib.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "components", "policies", "worker"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.py[co]"))
        else:
            shutil.copy2(ROOT / name, src / name)
    lib = tmp_path / "lib"
    for attempt in range(2):
        proc = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)], cwd=src,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"build {attempt + 1}: {proc.stderr[-2000:]}"
        text = (lib / "gpuburst" / "policy" / "PulumiPolicy.yaml").read_text()
        assert text.count("virtualenv: ../../../../..") == 1 and "virtualenv: ../.venv" not in text
        assert not (lib / "gpuburst" / "deleted_since.py").exists()
        (lib / "gpuburst" / "deleted_since.py").write_text("")  # a module the next build's sources no longer have
    assert (lib / "gpuburst" / "recipe" / "worker" / "Dockerfile").is_file()


def test_the_recipe_copy_keeps_what_the_digest_hashes(tmp_path):
    from components import image

    setup = _setup_module()
    source = tmp_path / "src" / "worker"
    (source / "pkg" / "__pycache__").mkdir(parents=True)
    (source / "Dockerfile").write_text("FROM scratch\n")
    (source / "run.sh").write_text("#!/bin/sh\n")
    (source / "run.sh").chmod(0o755)
    (source / "pkg" / "m.py").write_text("X = 1\n")
    (source / "pkg" / "m.pyc").write_bytes(b"\0")
    (source / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    target = tmp_path / "recipe" / "worker"
    (target / "stale").mkdir(parents=True)
    written = setup.copy_recipe(source, target)
    assert sorted(Path(w).relative_to(target).as_posix() for w in written) == ["Dockerfile", "pkg/m.py", "run.sh"]
    assert not (target / "stale").exists() and os.access(target / "run.sh", os.X_OK)
    assert (image.source_digest(["worker"], root=tmp_path / "src")
            == image.source_digest(["worker"], root=tmp_path / "recipe"))


def test_the_sdist_carries_the_worker_recipe():
    manifest = (ROOT / "MANIFEST.in").read_text()
    assert "graft worker" in manifest and "policies/PulumiPolicy.yaml" in manifest


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


def test_check_and_policy_pack_path_in_the_repository(tmp_path):
    for package, cwd in (("components", ROOT), ("gpuburst", tmp_path)):
        path = subprocess.run([sys.executable, "-m", package, "policy-pack", "path"], cwd=cwd, capture_output=True,
                              text=True, timeout=60)
        assert path.returncode == 0, path.stderr
        assert Path(path.stdout.strip()) == ROOT / "policies"
        helped = subprocess.run([sys.executable, "-m", package, "check", "--help"], cwd=cwd, capture_output=True,
                                text=True, timeout=60)
        assert helped.stdout.startswith(f"usage: python -m {package} check PLAN.json"), helped.stdout[:200]


def test_check_delegates_to_the_pack_under_its_own_name(tmp_path, capsys):
    from components import __main__ as entry

    assert entry.main(["check", str(tmp_path / "absent.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("check: cannot read plan"), err


def test_check_without_pulumi_policy_says_how_to_get_it(monkeypatch, capsys):
    from components import __main__ as entry

    real = importlib.util.find_spec
    monkeypatch.setattr(entry.importlib.util, "find_spec", lambda n, *a: None if n == "pulumi_policy" else real(n, *a))
    assert entry.main(["check", "plan.json"]) == 2
    assert capsys.readouterr().err.strip() == ('check: the policy pack needs pulumi-policy, which is not installed '
                                               'here: pip install "gpuburst[policy]"')


def test_the_pack_python_warning(tmp_path):
    from components.__main__ import pack_python_warning

    pack = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "gpuburst" / "policy"
    pack.mkdir(parents=True)
    (tmp_path / "venv" / "bin").mkdir()
    (tmp_path / "venv" / "bin" / "python").write_text("")
    yaml_file = pack / "PulumiPolicy.yaml"
    yaml_file.write_text("runtime:\n  name: python\n  options:\n    virtualenv: ../../../../..\n")
    assert pack_python_warning(pack, prefix=str(tmp_path / "venv")) is None
    assert "not this environment" in pack_python_warning(pack, prefix=str(tmp_path / "other"))
    yaml_file.write_text("runtime: python\n")
    assert "names no virtualenv" in pack_python_warning(pack, prefix=str(tmp_path / "venv"))
    assert pack_python_warning(ROOT / "policies", prefix=str(ROOT / ".venv")) is None

"""Tests for policies/__main__.py: argv decides between serving the pack and the offline checker, in this repository
(`policies`) and in the installed layout (`gpuburst.policy` in site-packages)."""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

main_module = importlib.import_module("policies.__main__")


@pytest.fixture
def served(monkeypatch):
    calls = []
    import policies.pack

    monkeypatch.setattr(policies.pack, "serve", lambda: calls.append("served"))
    return calls


@pytest.mark.parametrize("argv", [[], ["127.0.0.1:50051", "/repo/policies"], ["127.0.0.1:1", "policies", "-v=9"]],
                         ids=["harness", "engine", "engine-with-flags"])
def test_no_check_argument_serves_the_pack(served, argv):
    assert main_module.main(argv) == 0
    assert served == ["served"]


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["help"], ["check", "--help"]])
def test_help_goes_to_the_checker(served, argv, capsys):
    assert main_module.main(argv) == 0
    assert served == [] and "usage: python -m policies check" in capsys.readouterr().out


def test_check_goes_to_the_checker(served, tmp_path, capsys):
    assert main_module.main(["check", str(tmp_path / "absent.json")]) == 2
    assert served == [] and "cannot read plan" in capsys.readouterr().err


def _installed_layout(tmp_path: Path) -> Path:
    """site-packages shaped like the wheel's: gpuburst/policy/__main__.py (this very file) beside stand-in cli and
    pack modules that say which package they were imported as."""
    pack_dir = tmp_path / "site" / "gpuburst" / "policy"
    pack_dir.mkdir(parents=True)
    (pack_dir.parent / "__init__.py").write_text('"""Stand-in gpuburst."""\n')
    (pack_dir / "__init__.py").write_text('"""Stand-in pack."""\n')
    shutil.copy2(main_module.__file__, pack_dir / "__main__.py")
    (pack_dir / "cli.py").write_text('"""Stand-in checker."""\n\ndef main(argv):\n    print("cli", __name__, argv)\n'
                                     '    return 0\n')
    (pack_dir / "pack.py").write_text('"""Stand-in pack."""\n\ndef serve():\n    print("served", __name__)\n')
    return pack_dir


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_installed_the_engine_way_serves_gpuburst_policy(tmp_path):
    # The CLI runs `python -u -m pulumi.policy ENGINE .` from the pack's folder: runpy on __main__.py as a script.
    pack_dir = _installed_layout(tmp_path)
    out = _run([sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:1", "."], cwd=pack_dir)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "served gpuburst.policy.pack"


def test_installed_as_a_script_the_checker_is_gpuburst_policy(tmp_path):
    pack_dir = _installed_layout(tmp_path)
    out = _run([sys.executable, str(pack_dir / "__main__.py"), "check", "plan.json"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "cli gpuburst.policy.cli ['check', 'plan.json']"


def test_installed_as_a_module_from_anywhere(tmp_path):
    pack_dir = _installed_layout(tmp_path)
    env_path = str(pack_dir.parent.parent)
    out = subprocess.run([sys.executable, "-P", "-m", "gpuburst.policy"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env={**os.environ, "PYTHONPATH": env_path})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "served gpuburst.policy.pack"


def test_in_the_repository_the_package_is_policies():
    assert main_module.PACKAGE == "policies" and not main_module._INSTALLED

"""Tests for policies/__main__.py: argv decides between serving the pack and the offline checker."""
from __future__ import annotations

import importlib

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

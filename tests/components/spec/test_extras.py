"""Which extra brings which optional package, and the one line a command prints when one is missing."""
from __future__ import annotations

import importlib.util

from components.spec.extras import EXTRA_OF, install_hint, is_installed, missing_message


def test_the_missing_line_names_who_needs_it_the_distribution_and_the_extra():
    assert install_hint("helm_python") == 'pip install "gpuburst[platform]"'
    assert missing_message("matplotlib", "plan-burst --out") == (
        'plan-burst --out needs matplotlib, which is not installed here: pip install "gpuburst[planner]"')
    assert {extra for _, extra in EXTRA_OF.values()} == {"platform", "verify", "planner", "policy"}


def test_is_installed_finds_without_importing():
    assert is_installed("yaml") and not is_installed("gpuburst_no_such_module")
    assert not is_installed("gpuburst_no_such_package.sub")  # a missing parent is "not installed", not an error


def test_verify_and_deploy_without_their_extra_say_so_in_one_line(monkeypatch, capsys):
    from components import __main__ as entry

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "kubernetes" else real(n, *a))
    assert entry.main(["verify", "--help"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ['verify: python -m components verify needs kubernetes, which is not installed here: '
                   'pip install "gpuburst[verify]"'], err
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "boto3" else real(n, *a))
    assert entry.main(["deploy", "--help"]) == 2
    assert 'pip install "gpuburst[verify]"' in capsys.readouterr().err

"""Tests for the checker's command line (in-process; the subprocess runs are in test_harness.py)."""
from __future__ import annotations

import json

import pytest

from policies import cli


def test_help_and_usage_errors(capsys):
    assert cli.main(["check", "--help"]) == 0
    assert "Exit status: 0 no mandatory violation, 1 mandatory violation(s), 2" in capsys.readouterr().out
    with pytest.raises(SystemExit) as raised:
        cli.main(["check"])
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("policies check: ")
    with pytest.raises(SystemExit):
        cli.main(["check", "plan.json", "--bogus"])


def test_exit_codes_in_process(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"resources": [{"type": "aws:sqs/queue:Queue", "properties": {
        "sqsManagedSseEnabled": True, "tags": {"gpuburst.io/role": "events"}}}]}))
    assert cli.main(["check", str(good)]) == 0
    assert capsys.readouterr().out.startswith("policy check passed")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"resources": [{"type": "aws:sqs/queue:Queue", "properties": {}}]}))
    assert cli.main(["check", str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("MANDATORY sqs-work-queue urn:pulumi:dev::gpuburst::aws:sqs/queue:Queue::queue-0: ")
    assert cli.main(["check", str(tmp_path / "nope.json")]) == 2

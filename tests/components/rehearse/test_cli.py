"""`rehearse`: exit 0 on the shipped stacks, 1 with one line per denial, 2 with one line when there is nothing to
judge."""
from __future__ import annotations

import json
from pathlib import Path

from components.rehearse.cli import main

ROOT = Path(__file__).resolve().parents[3]


def test_the_dev_stack_rehearses_clean_from_its_stack_file(capsys):
    assert main(["--stack", "dev", "--project-dir", str(ROOT)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("rehearse: 0 denial(s) for 1 deployer(s) from 198.51.100.0/24")


def test_a_plan_with_a_denial_exits_1_with_a_line_each(dev, tmp_path, capsys):
    plan = json.loads(json.dumps(dev["plan"]))
    for r in plan["resources"]:
        if r["type"] == "aws:s3/bucketPolicy:BucketPolicy" and "results" in r["name"]:
            doc = json.loads(r["properties"]["policy"])
            for st in doc["Statement"]:
                if st["Sid"] == "DenyOutsideVpce":
                    st["Condition"].pop("ArnNotLike")
            r["properties"]["policy"] = json.dumps(doc)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    assert main(["--plan", str(tmp_path / "plan.json")]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("rehearse: ") and not out[-1].startswith("rehearse: 0 ")
    assert all(x.startswith(("deployer: ", "reader: ")) for x in out[:-1]) and len(out) > 10


def test_a_plan_without_a_deploy_model_is_refused_in_one_line(dev, tmp_path, capsys):
    plan = {**dev["plan"], "resources": [r for r in dev["plan"]["resources"]
                                         if r["type"] != "gpuburst:index:DeployAccess"]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    assert main(["--plan", str(tmp_path / "plan.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rehearse: the plan declares no deploy model (gpuburst:index:DeployAccess): nothing to rehearse; "
                   "set gpuburst:deploy (README \"Deploying for real\")"]


def test_an_unknown_stack_is_refused_in_one_line(capsys):
    assert main(["--stack", "nosuch", "--project-dir", str(ROOT)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rehearse: ") and "nosuch" in err[0]

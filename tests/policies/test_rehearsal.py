"""`deploy-rehearsal` and `deploy-rehearsal-unjudged`: the rehearsal's findings as the pack's, and what it cannot
judge said once."""
from __future__ import annotations

import copy
import json

from policies.rehearsal import rehearsal_findings, unjudged_findings
from policies.unknowns import UNKNOWN
from tests.policies.fragments import as_res


def test_the_dev_plan_passes_and_has_nothing_unjudged(dev_plan):
    res = as_res(dev_plan)
    assert rehearsal_findings(res) == [] and unjudged_findings(res) == []


def test_a_deployer_locked_out_of_a_bucket_is_a_violation_on_that_bucket(dev_plan):
    plan = copy.deepcopy(dev_plan)
    for r in plan["resources"]:
        if r["type"] == "aws:s3/bucketPolicy:BucketPolicy" and "slides" in r["name"]:
            doc = json.loads(r["properties"]["policy"])
            for st in doc["Statement"]:
                if st["Sid"] == "DenyOutsideVpce":
                    st["Condition"].pop("ArnNotLike")
            r["properties"]["policy"] = json.dumps(doc)
    found = rehearsal_findings(as_res(plan))
    create = [(urn, m) for urn, m in found if "s3:CreateBucket" in m]
    assert len(create) == 1
    urn, message = create[0]
    assert urn.endswith("::gpuburst-storage-slides") and "statement DenyOutsideVpce" in message


def test_policies_without_a_deploy_model_are_said_once_as_unjudged(dev_plan):
    plan = {**dev_plan, "resources": [r for r in dev_plan["resources"]
                                      if r["type"] != "gpuburst:index:DeployAccess"]}
    res = as_res(plan)
    assert rehearsal_findings(res) == []
    (finding,) = unjudged_findings(res)
    assert "with a Deny in this plan" in finding[1]
    assert "and no deploy model: could not check that the deployers can still manage them" in finding[1]


def test_a_policy_unknown_during_preview_is_not_judged_and_said_once(dev_plan):
    plan = copy.deepcopy(dev_plan)
    unknown = 0
    for r in plan["resources"]:
        if r["type"] == "aws:s3/bucketPolicy:BucketPolicy":
            r["properties"]["policy"] = UNKNOWN
            unknown += 1
    res = as_res(plan)
    assert unknown >= 3 and rehearsal_findings(res) == []
    (finding,) = unjudged_findings(res)
    assert finding[1].startswith(f"{unknown} resource polic(ies) unknown during preview")

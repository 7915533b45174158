"""The rehearsal on real plans: the shipped stacks pass; each way a plan can lock out its deployer, strand its
uploaders or readers, let a stranger in or leave `pulumi up` without the API is one finding naming the statement."""
from __future__ import annotations

import copy
import json

from components.rehearse.plan_model import read_facts
from components.rehearse.scenarios import rehearse


def _policy_of(plan: dict, rtype: str, name_part: str) -> tuple[dict, dict]:
    (r,) = [r for r in plan["resources"] if r["type"] == rtype and name_part in r["name"]]
    return r, json.loads(r["properties"]["policy"])


def _with_policy(plan: dict, rtype: str, name_part: str, change) -> dict:
    plan = copy.deepcopy(plan)
    r, doc = _policy_of(plan, rtype, name_part)
    change(doc)
    r["properties"]["policy"] = json.dumps(doc)
    return plan


def lines(plan: dict) -> list[str]:
    return [f.line() for f in rehearse(read_facts(plan))]


def test_the_dev_and_prod_plans_rehearse_clean(dev, prod):
    assert lines(dev["plan"]) == []
    assert lines(prod["plan"]) == []


def test_a_bucket_deny_that_does_not_exempt_the_deployer_is_a_denial_per_provider_call(dev):
    def drop_exemptions(doc):
        for st in doc["Statement"]:
            if st["Sid"] == "DenyOutsideVpce":
                st["Condition"].pop("ArnNotLike")
    found = lines(_with_policy(dev["plan"], "aws:s3/bucketPolicy:BucketPolicy", "slides", drop_exemptions))
    deployer = [x for x in found if x.startswith("deployer: gpuburst-storage-slides")]
    assert any("(create): s3:CreateBucket by role/gpuburst-dev-deploy from 198.51.100.0/24: statement "
               "DenyOutsideVpce; fix: exempt the deployer" in x for x in deployer)
    assert any("(read): s3:GetBucketPolicy" in x for x in deployer)
    assert any("(delete): s3:DeleteBucket" in x for x in deployer)
    # The uploader lost its exemption too: its PutObject is refused by the same statement.
    assert any(x.startswith("uploader: gpuburst-storage-slides: s3:PutObject") and "DenyOutsideVpce" in x
               for x in found)
    assert all("\n" not in x for x in found)


def test_a_key_policy_without_the_account_statement_locks_the_deployer_out(dev):
    def drop_root(doc):
        doc["Statement"] = [st for st in doc["Statement"] if st.get("Sid") != "AccountAdministersKeyThroughIam"]
    found = lines(_with_policy(dev["plan"], "aws:kms/key:Key", "data-key", drop_root))
    assert any(x.startswith("deployer: gpuburst-data-key-key (read): kms:GetKeyPolicy") and
               "the key policy must allow the account" in x for x in found)


def test_a_bucket_that_lets_strangers_in_from_outside_is_a_boundary_finding(dev):
    def drop_boundary(doc):
        doc["Statement"] = [st for st in doc["Statement"] if st.get("Sid") != "DenyOutsideVpce"]
    found = lines(_with_policy(dev["plan"], "aws:s3/bucketPolicy:BucketPolicy", "results", drop_boundary))
    assert any(x.startswith("boundary: gpuburst-storage-results: s3:GetObject by role/rehearse-any-role-with-s3-star "
                            "from 198.18.0.1: allowed") for x in found)


def test_an_uploader_without_its_allow_is_a_denial(dev):
    def drop_allow(doc):
        doc["Statement"] = [st for st in doc["Statement"] if st.get("Sid") != "AllowUploader0"]
    found = lines(_with_policy(dev["plan"], "aws:s3/bucketPolicy:BucketPolicy", "slides", drop_allow))
    assert found == ["uploader: gpuburst-storage-slides: s3:PutObject by role/gpuburst-dev-slide-upload from "
                     "192.0.2.0/24: no statement allows it; fix: grant it in the resource policy or the role's IAM "
                     "policy"]


def test_a_private_api_endpoint_without_a_runner_is_unreachable_from_the_deploy_cidrs(dev):
    plan = copy.deepcopy(dev["plan"])
    (cluster,) = [r for r in plan["resources"] if r["type"] == "eks:index:Cluster"]
    cluster["properties"]["endpointPublicAccess"] = False
    cluster["properties"].pop("publicAccessCidrs", None)
    assert lines(plan) == [
        "kubernetes-api: eks cluster: HTTPS 443 by role/gpuburst-dev-deploy from 198.51.100.0/24: unreachable; fix: "
        "the API endpoint is private (or closed to this CIDR) and no in-VPC runner deploys: declare "
        "gpuburst:deploy.runner, or open the public endpoint to the deploy CIDRs"]


def test_a_runner_the_cluster_security_group_does_not_admit_cannot_reach_the_api(prod):
    plan = copy.deepcopy(prod["plan"])
    plan["resources"] = [r for r in plan["resources"] if "api-client" not in r["name"]]
    found = lines(plan)
    assert len(found) == 1 and found[0].startswith("kubernetes-api: eks cluster: HTTPS 443 by "
                                                   "role/gpuburst-prod-deploy from the deploy runner (in the VPC)")
    assert "ingress rule on the cluster security group" in found[0]


def test_a_grant_with_a_wildcard_inside_the_key_is_judged_on_an_object_it_matches():
    from components.rehearse.plan_model import Governed, PlanResource
    from components.rehearse.scenarios import _clinical_grants

    bucket = Governed(PlanResource("aws:s3/bucket:Bucket", "results", "urn:results", {}),
                      "arn:aws:s3:::results-bucket", None, None, clinical=True)
    doc = {"Statement": [{"Effect": "Allow", "Action": ["s3:PutObject"],
                          "Resource": ["arn:aws:s3:::results-bucket/results/probe-?/*.txt"]}]}
    ((g, action, target),) = list(_clinical_grants([doc], [bucket]))
    assert g is bucket and action == "s3:PutObject"
    assert target == "arn:aws:s3:::results-bucket/results/probe-x/rehearse-probe.txt"

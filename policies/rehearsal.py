"""Stack rules `deploy-rehearsal` (mandatory) and `deploy-rehearsal-unjudged` (advisory): what AWS will decide at
apply time for the plan's deploy model — the same checks as `gpuburst rehearse` (components/rehearse/).

Both ends are in the plan when it declares a `gpuburst:index:DeployAccess` (the deploy model: who deploys, from
where, who uploads and reads from outside) and the resource policies it judges: then each denial the deployers, the
uploaders, the readers, the workers or the Kubernetes API path would meet, and each clinical object a stranger could
reach from outside, is a violation naming the resource, the action, the principal, the place and the deciding Sid.
A plan with resource policies but no deploy model cannot be judged: said once, as advisory, with the fact that
would let it (declare DeployAccess). A policy unknown during preview (its ids are computed) is not judged either:
said once per plan, as advisory; `gpuburst rehearse` judges the synth's plan, where every id is known.
"""
from __future__ import annotations

import json
from typing import Any

from pulumi_policy import EnforcementLevel

from ._components import read_facts, rehearse
from .declare import plan_policy
from .fixes import fix_for
from .plan import Res
from .unknowns import UNKNOWN

NAME = "deploy-rehearsal"
UNJUDGED = "deploy-rehearsal-unjudged"
DEPLOY_ACCESS = "gpuburst:index:DeployAccess"
POLICY_TYPES = ("aws:s3/bucketPolicy:BucketPolicy", "aws:kms/key:Key", "aws:sqs/queuePolicy:QueuePolicy",
                "aws:sns/topicPolicy:TopicPolicy", "aws:ecr/repositoryPolicy:RepositoryPolicy")


def _entries(resources: list[Res]) -> list[dict[str, Any]]:
    return [{"type": r.type, "name": r.name, "urn": r.urn, "properties": r.props if isinstance(r.props, dict) else {},
             "dependencies": list(r.dependencies)} for r in resources]


def _unknown_policies(resources: list[Res]) -> list[Res]:
    return [r for r in resources if r.type in POLICY_TYPES and isinstance(r.props, dict)
            and (r.props.get("policy") is UNKNOWN or r.props.get("policy") == UNKNOWN)]


def rehearsal_findings(resources: list[Res]) -> list[tuple[str | None, str]]:
    """(urn, message) for each denial of the rehearsal, when the plan declares its deploy model."""
    access = [r for r in resources if r.type == DEPLOY_ACCESS]
    if not access:
        return []
    facts = read_facts(_entries(resources))  # a policy unknown during preview is left out of every check
    if facts.model is None:
        return [(access[0].urn, f"DeployAccess {access[0].name!r}: {facts.model_error}")]
    by_name = {r.name: r.urn for r in resources}
    out: list[tuple[str | None, str]] = []
    for f in rehearse(facts):
        resource = f.resource.split(" (", 1)[0]
        out.append((by_name.get(resource, access[0].urn), f.line()))
    return out


def _denies(policy: Any) -> bool:
    if isinstance(policy, str):
        try:
            policy = json.loads(policy)
        except ValueError:
            return False
    statements = policy.get("Statement") if isinstance(policy, dict) else None
    statements = statements if isinstance(statements, list) else [statements]
    return any(isinstance(st, dict) and st.get("Effect") == "Deny" for st in statements)


def unjudged_findings(resources: list[Res]) -> list[tuple[str | None, str]]:
    """What the rehearsal could not judge: a plan of resource policies without a deploy model, or policies whose
    document is unknown during preview (one finding each, at most)."""
    policies = [r for r in resources if r.type in POLICY_TYPES]
    if not policies:
        return []
    if not any(r.type == DEPLOY_ACCESS for r in resources):
        # A policy that denies can lock its deployer out; one that only allows cannot (the account's IAM decides).
        denying = [r for r in policies if _denies(r.props.get("policy") if isinstance(r.props, dict) else None)]
        if not denying:
            return []
        return [(denying[0].urn, f"{len(denying)} resource polic(ies) with a Deny in this plan ("
                                 f"{', '.join(r.name for r in denying[:3])}{', ...' if len(denying) > 3 else ''}), "
                                 "and no deploy model: could not check that the deployers can still manage them from "
                                 "where they deploy, nor who else reaches them (" + fix_for(
                                     denying[0].urn, platform="set gpuburst:deploy",
                                     component="declare a gpuburst DeployAccess with the deploy model") + ")")]
    unknown = _unknown_policies(resources)
    if unknown:
        return [(unknown[0].urn, f"{len(unknown)} resource polic(ies) unknown during preview ("
                                 f"{', '.join(r.name for r in unknown[:3])}{', ...' if len(unknown) > 3 else ''}): "
                                 "not rehearsed here; `gpuburst rehearse` judges the synth's plan, where they are "
                                 "known")]
    return []


POLICIES = [
    plan_policy(NAME, "What AWS will decide at apply time for the deploy model: the deployers manage every governed "
                      "resource from where they deploy, uploaders and readers do exactly their part from their "
                      "place, no one else reaches a clinical object from outside, `pulumi up` reaches the API",
                rehearsal_findings),
    plan_policy(UNJUDGED, "Resource policies the deploy rehearsal could not judge (no deploy model in the plan, or "
                          "documents unknown during preview)", unjudged_findings, level=EnforcementLevel.ADVISORY),
]

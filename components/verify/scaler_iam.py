"""The `scaler-iam` check: the identity KEDA reads each queue with (a TriggerAuthentication's `podIdentity.roleArn`,
the scaler role) may `sqs:GetQueueAttributes` on the ScaledJob's queue, and trusts the KEDA operator's role.

The `keda` check proves a probe message makes a Job (so the whole chain works today, on that queue); this one names
the link that breaks: the role's own policies, read live (iam:ListRolePolicies/GetRolePolicy,
iam:ListAttachedRolePolicies/GetPolicy/GetPolicyVersion, its permissions boundary) and evaluated here for that action
and the queue's ARN (explicit Deny wins; an Allow with a Condition counts, said so in the evidence), and its trust
policy (iam:GetRole) allowing `sts:AssumeRole` to the operator's role. `iam:SimulatePrincipalPolicy` is not used:
the test AWS (moto) does not implement it, and the evaluation here is the part of it the stack's policies need.

The operator's role is `--keda-operator-role-arn` when given, else the roleArn of the Pod Identity association of the
live keda-operator Deployment's ServiceAccount (eks:ListPodIdentityAssociations + DescribePodIdentityAssociation,
with a cluster name); without either, the trust is not judged and the summary says so. When it is known, its own
policy must allow `sts:AssumeRole` on the scaler role too. A refused IAM/EKS read is `error` (verify's access).
"""
from __future__ import annotations

import re
from fnmatch import fnmatchcase
from typing import Any

from .context import Context, one_line
from .keda import OPERATOR_SELECTOR
from .keda_probe import sqs_triggers
from .model import ERROR, FAIL, PASS, SKIPPED, CheckResult, CouldNotRun, headline, ns_name

NAME = "scaler-iam"
ACTION = "sqs:GetQueueAttributes"
_QUEUE_URL = re.compile(r"^https?://[^/]+/(?P<account>\d{12})/(?P<name>[^/?#]+)")
_ROLE_ARN = re.compile(r"^arn:(?P<partition>aws[a-z-]*):iam::(?P<account>\d{12}):role/(?:[^/]+/)*(?P<name>[^/]+)$")


def queue_arn(url: str, region: str | None) -> str | None:
    """`https://sqs.us-east-1.amazonaws.com/123456789012/q` -> `arn:aws:sqs:us-east-1:123456789012:q` (the region of
    the URL, else `region`); None when the URL has no account and name."""
    from .aws import region_from_queue_url

    m = _QUEUE_URL.match(url or "")
    region = region_from_queue_url(url) or region
    if not m or not region:
        return None
    partition = "aws-cn" if ".amazonaws.com.cn/" in url else "aws"
    return f"arn:{partition}:sqs:{region}:{m['account']}:{m['name']}"


def _list(v) -> list:
    return [] if v is None else list(v) if isinstance(v, (list, tuple)) else [v]


def _match(patterns: list, value: str, *, case: bool) -> bool:
    v = value if case else value.lower()
    return any(fnmatchcase(v, (str(p) if case else str(p).lower())) for p in patterns)


def _applies(st: dict, action: str, resource: str) -> bool:
    if "NotAction" in st:
        if _match(_list(st["NotAction"]), action, case=False):
            return False
    elif not _match(_list(st.get("Action")), action, case=False):
        return False
    if "NotResource" in st:
        return not _match(_list(st["NotResource"]), resource, case=True)
    return _match(_list(st.get("Resource")), resource, case=True)


def evaluate(docs: list[tuple[str, dict[str, Any]]], action: str, resource: str) -> tuple[str, list[str]]:
    """`allowed`, `denied` (an explicit Deny) or `implicit` (no Allow) for `action` on `resource` under the identity
    policies `docs` ((where, document) pairs), with the statements that decided."""
    allows: list[str] = []
    for where, doc in docs:
        for i, st in enumerate(_list((doc or {}).get("Statement"))):
            if not isinstance(st, dict) or not _applies(st, action, resource):
                continue
            label = f"{where} statement {st.get('Sid') or i}" + (" (with a Condition, not evaluated)"
                                                                   if st.get("Condition") else "")
            if st.get("Effect") == "Deny":
                return "denied", [label]
            if st.get("Effect") == "Allow":
                allows.append(label)
    return ("allowed", allows) if allows else ("implicit", [])


def granted_resources(docs: list[tuple[str, dict[str, Any]]], action: str) -> list[str]:
    """The resources the Allow statements of `docs` name for `action`, whatever the resource (`NotResource` shown as
    `everything but …`): what the policy does grant, quoted when it does not grant the queue asked about (a stale
    queue ARN is the usual drift)."""
    out: list[str] = []
    for _, doc in docs:
        for st in _list((doc or {}).get("Statement")):
            if not isinstance(st, dict) or st.get("Effect") != "Allow":
                continue
            actions = st.get("NotAction")
            if (actions is not None and _match(_list(actions), action, case=False)) or \
                    (actions is None and not _match(_list(st.get("Action")), action, case=False)):
                continue
            if "NotResource" in st:
                out.append("everything but " + ", ".join(str(r) for r in _list(st["NotResource"])))
            else:
                out += [str(r) for r in _list(st.get("Resource"))]
    return list(dict.fromkeys(out))


def trusts(trust: dict[str, Any], principal_arn: str) -> tuple[bool, str]:
    """Whether a role's trust policy lets `principal_arn` (a role) call sts:AssumeRole, and which statement says so
    (a Principal of the role's account root delegates to the principal's own policy: trusted, said so)."""
    m = _ROLE_ARN.match(principal_arn or "")
    account = m["account"] if m else ""
    root = f"arn:{m['partition']}:iam::{account}:root" if m else ""
    allowed = ""
    for i, st in enumerate(_list((trust or {}).get("Statement"))):
        if not isinstance(st, dict) or not _match(_list(st.get("Action")), "sts:AssumeRole", case=False):
            continue
        principal = st.get("Principal")
        aws = _list(principal.get("AWS")) if isinstance(principal, dict) else ["*"] if principal == "*" else []
        hit = principal_arn in aws or "*" in aws
        via_root = not hit and (root in aws or account in aws) and bool(account)
        if not (hit or via_root):
            continue
        label = f"trust statement {st.get('Sid') or i}" + (" (the account root: the operator's own policy decides)"
                                                           if via_root else "")
        if st.get("Effect") == "Deny":
            return False, f"{label} denies it"
        if st.get("Effect") == "Allow":
            allowed = allowed or label
    return (True, allowed) if allowed else (False, "no statement allows it")


def role_name(arn: str) -> str | None:
    m = _ROLE_ARN.match(arn or "")
    return m["name"] if m else None


def judge_role(aws: Any, role_arn: str, action: str, resource: str) -> tuple[str, list[str], list[str]]:
    """`allowed`/`denied`/`implicit` for the role (identity policies, then its permissions boundary), evidence, and
    the resources its policies grant the action on (granted_resources)."""
    name = role_name(role_arn)
    if name is None:
        return "implicit", [f"{role_arn} is not an IAM role ARN"], []
    docs = aws.role_policy_documents(name)
    verdict, why = evaluate(docs, action, resource)
    granted = granted_resources(docs, action)
    evidence = [f"role {role_arn}: {len(docs)} policy document(s); {action} on {resource}: {verdict}"
                + (f" by {'; '.join(why)}" if why else "")]
    if verdict != "allowed":
        evidence.append(f"role {role_arn}: its policies grant {action} on "
                        + (", ".join(granted) if granted else "no resource at all"))
    boundary = (aws.get_role(name).get("PermissionsBoundary") or {}).get("PermissionsBoundaryArn")
    if verdict == "allowed" and boundary:
        b_verdict, b_why = evaluate([(f"permissions boundary {boundary}", aws.managed_policy_document(boundary))],
                                    action, resource)
        evidence.append(f"role {role_arn}: permissions boundary {boundary}: {b_verdict}")
        if b_verdict != "allowed":
            return f"{b_verdict} by its permissions boundary {boundary}", evidence, granted
    return verdict, evidence, granted


def operator_role(ctx: Context) -> tuple[str | None, str]:
    """The KEDA operator's role ARN and where it came from (or None and why not)."""
    s = ctx.settings
    given = getattr(s, "keda_operator_role_arn", None)
    if given:
        return given, "--keda-operator-role-arn"
    if not s.cluster_name:
        return None, "no cluster name (--cluster-name or --stack) to read the operator's Pod Identity association"
    deployments = ctx.kube.list_deployments(OPERATOR_SELECTOR)
    if not deployments:
        return None, f"no Deployment labelled {OPERATOR_SELECTOR}"
    dep = deployments[0]
    ns = (dep.get("metadata") or {}).get("namespace") or "keda"
    sa = ((((dep.get("spec") or {}).get("template") or {}).get("spec") or {}).get("serviceAccountName")
          or "keda-operator")
    try:
        arn = ctx.aws().pod_identity_role(s.cluster_name, ns, sa)
    except CouldNotRun as e:
        return None, f"the operator's Pod Identity association could not be read: {one_line(e)}"
    if arn is None:
        return None, f"ServiceAccount {ns}/{sa} has no Pod Identity association in cluster {s.cluster_name}"
    return arn, f"the Pod Identity association of {ns}/{sa} in cluster {s.cluster_name}"


def run(ctx: Context) -> CheckResult:
    """For each ScaledJob trigger whose TriggerAuthentication names a roleArn: the role may read the queue's
    attributes, trusts the operator's role, and the operator's role may assume it."""
    s = ctx.settings
    kube = ctx.kube
    tas = {("TriggerAuthentication", ns_name(t)): t for t in kube.list_trigger_authentications(s.namespace)}
    evidence: list[str] = []
    try:
        tas.update({("ClusterTriggerAuthentication", (t.get("metadata") or {}).get("name")): t
                    for t in kube.list_cluster_trigger_authentications()})
    except CouldNotRun as e:
        evidence.append(f"ClusterTriggerAuthentications not read: {one_line(e)}")
    problems: list[str] = []
    errors: list[str] = []
    pairs: dict[tuple[str, str], list[str]] = {}  # (TA key, roleArn) -> queue ARNs
    where: dict[tuple[str, str], str] = {}
    for sj in kube.list_scaled_jobs(s.namespace):
        for trig in sqs_triggers(sj):
            ref = trig.get("auth") or {}
            kind = ref.get("kind") or "TriggerAuthentication"
            key = ref.get("name") if kind == "ClusterTriggerAuthentication" else f"{s.namespace}/{ref.get('name')}"
            ta = tas.get((kind, key))
            role = (((ta or {}).get("spec") or {}).get("podIdentity") or {}).get("roleArn")
            if not role:
                evidence.append(f"ScaledJob {ns_name(sj)}: {kind} {key} names no podIdentity.roleArn: not judged "
                                "here (the keda check judges the identity in force)")
                continue
            arn = queue_arn(trig.get("queue_url") or "", trig.get("region") or s.region)
            if arn is None:
                evidence.append(f"ScaledJob {ns_name(sj)}: queue {trig.get('queue_url')!r} has no ARN: not judged")
                continue
            pairs.setdefault((f"{kind} {key}", role), [])
            if arn not in pairs[(f"{kind} {key}", role)]:
                pairs[(f"{kind} {key}", role)].append(arn)
            where[(f"{kind} {key}", role)] = f"ScaledJob {ns_name(sj)}"
    op_arn, op_source = operator_role(ctx) if pairs else (None, "")
    if pairs:
        evidence.append(f"KEDA operator role: {op_arn} (from {op_source})" if op_arn else
                        f"KEDA operator role unknown: {op_source}")
    aws = ctx.aws() if pairs else None
    for (ta_key, role), queues in pairs.items():
        who = f"{ta_key} roleArn {role}"
        short = role_name(role) or role
        try:
            for q in queues:
                verdict, ev, granted = judge_role(aws, role, ACTION, q)
                evidence += ev
                if verdict != "allowed":
                    # What the policy does grant comes first after the verdict: a stale queue ARN shows at once.
                    shown = ", ".join(granted[:2]) + (f" (+{len(granted) - 2} more)" if len(granted) > 2 else "")
                    problems.append(f"scaler role {short} may not {ACTION} on queue "
                                    f"{q.rsplit(':', 1)[-1]} ({verdict}); its policies grant it on "
                                    f"{shown or 'no resource'}")
                    evidence.insert(0, f"{who} may not {ACTION} on {q} ({verdict}; used by "
                                       f"{where[(ta_key, role)]}); granted on: {', '.join(granted) or 'nothing'}")
            if op_arn:
                name = role_name(role)
                trusted, why = trusts(aws.get_role(name).get("AssumeRolePolicyDocument") or {}, op_arn) if name \
                    else (False, "not a role ARN")
                evidence.append(f"{who}: trust for the operator role {op_arn}: {'yes' if trusted else 'no'} ({why})")
                if not trusted:
                    problems.append(f"scaler role {short} does not trust the KEDA operator's role "
                                    f"{role_name(op_arn) or op_arn}: {why}")
                    evidence.insert(0, f"{who} does not trust the KEDA operator's role {op_arn}: {why}")
                op_verdict, op_ev, _ = judge_role(aws, op_arn, "sts:AssumeRole", role)
                evidence += op_ev
                if op_verdict != "allowed":
                    problems.append(f"the KEDA operator's role {role_name(op_arn) or op_arn} may not sts:AssumeRole "
                                    f"scaler role {short} ({op_verdict})")
                    evidence.insert(0, f"{who}: the KEDA operator's role {op_arn} may not sts:AssumeRole it "
                                       f"({op_verdict})")
        except CouldNotRun as e:
            errors.append(f"scaler role {short} could not be read: {one_line(e)}")
            evidence.insert(0, f"{who}: could not be read: {one_line(e)}")
    if problems:
        return CheckResult(NAME, FAIL, headline(problems), problems + errors + evidence)
    if errors:
        return CheckResult(NAME, ERROR, headline(errors, "errors"), errors + evidence)
    if not pairs:
        return CheckResult(NAME, SKIPPED, "no TriggerAuthentication with podIdentity.roleArn is used by a ScaledJob: "
                                       "nothing to judge", evidence)
    # The reason may quote an AWS error in full: the summary keeps its start, the evidence has it all.
    tail = "" if op_arn else f"; trust not judged: {op_source if len(op_source) <= 110 else op_source[:109] + '…'}"
    return CheckResult(NAME, PASS, f"{len(pairs)} scaler role(s) may {ACTION} on their queues"
                                   + (" and trust the KEDA operator's role" if op_arn else "") + tail, evidence)

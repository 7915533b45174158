"""Stack rule `slide-bucket-boundary`: a bucket of clinical slides refuses every request that does not come through
the VPC's endpoint, and is encrypted with a customer KMS key of this plan.

The threat: an exploited slide parser runs as the worker, with the worker's temporary credentials. Copied to a host
outside the VPC (through any path the network boundary missed, or in a log line), those credentials read every
slide the worker may read, from anywhere. A bucket policy that denies `s3:*` (or at least `s3:GetObject`) to any
request whose `aws:SourceVpce` (or `aws:SourceVpc`) is not the VPC's (`StringNotEquals`) makes stolen credentials
useless outside it; a customer key (its key policy limiting use to S3 through `kms:ViaService`) adds a second
gate, one the account's other principals do not pass by holding S3 permissions (the AWS-managed `aws/s3` key lets
them).

Which buckets: every `aws:s3/bucket:Bucket` / `aws:s3/bucketV2:BucketV2` tagged DATA_CLASS_TAG = CLINICAL_SLIDES
(`components.spec.names`), and every bucket a `gpuburst:index:SlideStorage` declares without that tag (forgetting
the tag must not exempt one; another class, e.g. the access-log bucket's, says it holds no slides). A bucket's
policy and encryption are the `aws:s3/bucketPolicy:BucketPolicy` and server-side encryption configuration
resources whose `bucket` is its name (its `bucket` input, else its resource name, or Pulumi's auto-name from it),
or, when that is unknown during preview, the bucket they depend on. A bucket policy for a bucket that is not in the
plan is judged alone (its Deny); the encryption of such a bucket is another stack's (an `Outside`), except in a
whole plan, where the bucket's absence is the violation. A policy document unknown during preview counts as the Deny
when the bucket policy depends on a VPC endpoint of the plan (the endpoint's id is the condition's value, computed);
otherwise it is a violation naming the field.
"""
from __future__ import annotations

from typing import Any

from ._components import CLINICAL_SLIDES, DATA_CLASS_TAG
from .declare import scoped_policy
from .documents import action_matches, conditions, effect, listed, principals, statements
from .facts import WHOLE, Scope
from .kms import OUTSIDE, UNTRACED, key_problem, key_ref
from .outside import Finding, Outside
from .plan import Res
from .resources import dig, enumerate_at, fmt
from .unknowns import UNKNOWN, unknown_message

NAME = "slide-bucket-boundary"
BUCKET_TYPES = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
SSE_TYPES = ("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
             "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2")
SLIDE_STORAGE = "gpuburst:index:SlideStorage"
VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
VPC_KEYS = ("aws:sourcevpce", "aws:sourcevpc")
"""Condition keys that say where a request came from (lower case: condition keys are case-insensitive)."""
NEGATED = ("stringnotequals", "stringnotlike")
KMS_ALGORITHMS = ("aws:kms", "aws:kms:dsse")


def bucket_name(b: Res) -> Any:
    """The bucket's physical name: its `bucket` input, else its resource name (UNKNOWN when unknown)."""
    given = b.props.get("bucket")
    return given if given is not None else b.name


def _names(b: Res, value: str) -> bool:
    name = bucket_name(b)
    if name is UNKNOWN:
        return False
    auto = b.props.get("bucket") is None and value.startswith(b.name + "-") and len(value) == len(b.name) + 8
    prefix = b.props.get("bucketPrefix")
    return value == name or auto or (isinstance(prefix, str) and b.props.get("bucket") is None
                                     and value.startswith(prefix))


def bucket_of(resources: list[Res], buckets: list[Res], sub: Res) -> tuple[Res | None, Any]:
    """(the plan's bucket a bucket-level resource configures, its `bucket` value)."""
    value = sub.props.get("bucket")
    if isinstance(value, str):
        return next((b for b in buckets if _names(b, value)), None), value
    deps = [b for b in buckets if b.urn in sub.dependencies]
    return (deps[0] if len(deps) == 1 else None), value


def clinical(b: Res, by_urn: dict[str, Res]) -> tuple[bool | None, str]:
    """(whether the bucket holds clinical slides, why; None when its tags are unknown during preview): its data-class
    tag says, and a SlideStorage bucket without the tag holds slides."""
    tag = dig(b.props, "tags", DATA_CLASS_TAG)
    if tag.unknown:
        return None, tag.path
    if isinstance(tag.value, str):
        return tag.value.strip().lower() == CLINICAL_SLIDES, f"{tag.path} = {fmt(tag.value)}"
    parent = by_urn.get(b.parent) if b.parent else None
    if parent is not None and parent.type == SLIDE_STORAGE:
        return True, f"a {SLIDE_STORAGE.rsplit(':', 1)[-1]} bucket without {DATA_CLASS_TAG}"
    return False, ""


def deny_outside_vpc(policy: Res) -> tuple[bool, str | None, str]:
    """(the policy denies s3:GetObject on objects to requests not from the VPC endpoint or VPC, the path of an
    unknown that leaves it undecided, what it holds instead, for the message)."""
    found = statements(policy.props.get("policy"), "policy")
    if found.error:
        return False, None, found.error
    unknown = found.unknown
    denies = []
    for path, st in found.items:
        if effect(st) != "Deny":
            continue
        sid = st.get("Sid")
        denies.append(sid if isinstance(sid, str) else path)
        everyone = principals(st, "AWS")
        covers = action_matches(st, "s3:GetObject")
        objects = [r for r in listed(st.get("Resource")) if r is UNKNOWN or (isinstance(r, str) and (
            r == "*" or r.endswith("/*")))]
        conds, cond_unknown = conditions(st)
        if everyone is None or covers is None or cond_unknown:
            part = "Principal" if everyone is None else "Action" if covers is None else "Condition"
            unknown = unknown or f"{path}.{part}"
            continue
        if not (covers and objects and "*" in everyone):
            continue
        if any(c.key.lower() in VPC_KEYS and c.base in NEGATED and c.qualifier == "" and c.values for c in conds):
            return True, None, ""
    held = f"its Deny statements: {', '.join(map(str, denies))}" if denies else "it has no Deny statement"
    return False, unknown, held


def _encryption(resources: list[Res], b: Res, configs: list[Res], scope: Scope) -> list[Finding | Outside]:
    """The bucket's violations when its default encryption does not name a customer key of this plan."""
    who = f"Bucket {b.name}"
    rules: list[tuple[Res, str, Any]] = []
    for c in configs:
        found = dig(c.props, "rules")
        if found.unknown:
            return [(b.urn, unknown_message(f"{c.type.rsplit(':', 1)[-1]} {c.name} rules",
                                            f"which key encrypts {who}"))]
        rules += [(c, path, rule) for path, rule in enumerate_at(found)]
    inline = dig(b.props, "serverSideEncryptionConfiguration", "rule")
    if isinstance(inline.value, dict):
        rules.append((b, inline.path, inline.value))
    if not rules:
        return [(b.urn, f"{who} has no server-side encryption configuration in the plan: S3 encrypts it with its own "
                        "key (SSE-S3), no key policy of yours gates a read; encrypt it with a customer KMS key "
                        "(sseAlgorithm aws:kms, kmsMasterKeyId the key's ARN)")]
    out: list[Finding | Outside] = []
    for res, path, rule in rules:
        by_default = dig(rule, "applyServerSideEncryptionByDefault", base=path)
        algorithm = dig(by_default.value, "sseAlgorithm", base=by_default.path)
        key = dig(by_default.value, "kmsMasterKeyId", base=by_default.path)
        where = f"{res.type.rsplit(':', 1)[-1]} {res.name}"
        if algorithm.unknown:
            out.append((b.urn, unknown_message(f"{where} {algorithm.path}", f"how {who} is encrypted")))
            continue
        if algorithm.value not in KMS_ALGORITHMS:
            out.append((b.urn, f"{where} {algorithm.path} = {fmt(algorithm.value)} encrypts {who} with S3's own key, "
                               "not a customer KMS key: no key policy of yours gates a read; use aws:kms with the "
                               "plan's key"))
            continue
        ref = key_ref(resources, res, key.value)
        problem = key_problem(ref, f"{where} {key.path}")
        if problem:
            out.append((b.urn, f"{problem}: {who} holds clinical slides; name the customer KMS key of this plan"))
        elif ref.kind == OUTSIDE and scope.whole:
            out.append((b.urn, f"{where} {key.path} = {fmt(ref.value)} names no aws:kms/key:Key of the plan: its "
                               f"rotation and key policy are not checked; encrypt {who} with the plan's key"))
        elif ref.kind == OUTSIDE:
            out.append(Outside(b.urn, f"{where} {key.path} = {fmt(ref.value)} is a key from another stack: could not "
                                      f"check that it is a rotated customer key gating {who}"))
        elif ref.kind == UNTRACED:
            out.append((b.urn, unknown_message(f"{where} {key.path}", f"which key encrypts {who}")))
    return out


def _policy_verdict(p: Res, who: str, endpoints: set[str]) -> Finding | None:
    ok, unknown, held = deny_outside_vpc(p)
    if ok:
        return None
    if unknown and endpoints & set(p.dependencies):
        return None  # computed from the VPC endpoint's id during preview: that is the Deny's condition value
    if unknown:
        return (p.urn, unknown_message(f"BucketPolicy {p.name} {unknown}",
                                       f"whether it denies reading {who} from outside the VPC endpoint"))
    return (p.urn, f"BucketPolicy {p.name} policy has no Deny of s3:GetObject (or s3:*) on {who}'s objects to "
                   f"Principal '*' conditioned StringNotEquals on aws:SourceVpce or aws:SourceVpc ({held}): stolen "
                   "worker credentials read the slides from anywhere; deny every request not from the VPC endpoint")


def bucket_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) for every clinical bucket without a bucket policy denying requests from outside the VPC
    endpoint or without a customer key of the plan, and every bucket policy of a bucket not in the plan without
    that Deny (its encryption an `Outside` in a partial plan)."""
    by_urn = {r.urn: r for r in resources}
    buckets = [r for r in resources if r.type in BUCKET_TYPES]
    policies = [(p, *bucket_of(resources, buckets, p)) for p in resources if p.type == BUCKET_POLICY]
    configs = [(c, *bucket_of(resources, buckets, c)) for c in resources if c.type in SSE_TYPES]
    endpoints = {r.urn for r in resources if r.type == VPC_ENDPOINT}
    out: list[Finding | Outside] = []
    for b in buckets:
        is_clinical, why = clinical(b, by_urn)
        if is_clinical is None:
            out.append((b.urn, unknown_message(f"Bucket {b.name} {why}", "whether it holds clinical slides")))
            continue
        if not is_clinical:
            continue
        who = f"Bucket {b.name} ({why})"
        mine = [p for p, owner, _v in policies if owner is b]
        if not mine:
            out.append((b.urn, f"{who} has no {BUCKET_POLICY} in the plan: nothing denies reading its slides from "
                               "outside the VPC endpoint, so stolen worker credentials read them from anywhere; add "
                               "a bucket policy denying s3:* unless aws:SourceVpce is the VPC's endpoint"))
        else:
            verdicts = [_policy_verdict(p, f"Bucket {b.name}", endpoints) for p in mine]
            if all(verdicts):
                out += [v for v in verdicts if v]
        out += _encryption(resources, b, [c for c, owner, _v in configs if owner is b], scope)
    for p, owner, value in policies:
        if owner is not None:
            continue
        if value is UNKNOWN:
            out.append((p.urn, unknown_message(f"BucketPolicy {p.name} bucket", "which bucket it guards (and it "
                                                                                  "depends on no single bucket)")))
            continue
        found = _policy_verdict(p, f"bucket {fmt(value)}", endpoints)
        if found:
            out.append(found)
        if scope.whole:
            out.append((p.urn, f"BucketPolicy {p.name} bucket = {fmt(value)} names a bucket the plan does not create: "
                               "its encryption is not checked; create the bucket in this stack or name the plan's"))
        else:
            out.append(Outside(p.urn, f"BucketPolicy {p.name} bucket = {fmt(value)} is a bucket from another stack: "
                                      "could not check that it is encrypted with a customer KMS key"))
    return out


POLICY = scoped_policy(
    NAME, f"Every bucket of clinical slides (tag {DATA_CLASS_TAG}: {CLINICAL_SLIDES}, or a SlideStorage bucket) has "
          "a bucket policy denying s3:* (or s3:GetObject) unless aws:SourceVpce / aws:SourceVpc is the VPC's, and "
          "default encryption with a customer KMS key of the plan.",
    bucket_findings)

POLICIES = [POLICY]

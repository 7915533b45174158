"""Plan fragments of the clinical-data boundary for the network, trust, bucket and key rules' tests: the sound pieces
the hardened platform declares (as the components write them) and a way to judge a fragment with one rule."""
from __future__ import annotations

import json
from collections.abc import Callable

from policies.facts import scope_of
from policies.outside import Outside
from tests.policies import fragments as F

ACCOUNT = F.ACCOUNT
CLUSTER = "gpuburst-dev"
CLUSTER_ARN = f"arn:aws:eks:us-east-1:{ACCOUNT}:cluster/{CLUSTER}"
VPCE = "vpce-0a1b2c3d4e5f60001"
BREAK_GLASS = f"arn:aws:iam::{ACCOUNT}:role/gpuburst-break-glass"

T_EKS = "eks:index:Cluster"
T_AWS_EKS = "aws:eks/cluster:Cluster"
T_ADDON = "aws:eks/addon:Addon"
T_NAMESPACE = "kubernetes:core/v1:Namespace"
T_BUCKET = "aws:s3/bucket:Bucket"
T_BUCKET_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
T_SSE = "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
T_LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
T_ALIAS = "aws:kms/alias:Alias"
T_STORAGE = "gpuburst:index:SlideStorage"
T_VPC_ENDPOINT = "aws:ec2/vpcEndpoint:VpcEndpoint"
T_DEPLOYMENT = F.T_DEPLOYMENT


def judge(findings: Callable, *entries: dict, config: dict | None = None) -> tuple[list[str], list[str]]:
    """(violation messages, Outside messages) of one rule over a plan of `entries`."""
    res = F.as_res(F.doc(*entries))
    found = list(findings(res, scope_of(res, config)))
    return ([m for item in found if not isinstance(item, Outside) for m in [item[1]]],
            [item.message for item in found if isinstance(item, Outside)])


def platform() -> dict:
    """The platform component: the plan is whole."""
    return F.entry(F.T_PLATFORM, "gpuburst", {})


def namespace(name: str = "gpu") -> dict:
    return F.entry(T_NAMESPACE, f"{name}-namespace", {"apiVersion": "v1", "kind": "Namespace",
                                                      "metadata": {"name": name}})


def worker_job(ns: str = "gpu") -> dict:
    return F.entry(F.T_SCALEDJOB, "slides", F.scaled_job(ns=ns))


STRICT_ENV = {"env": {"NETWORK_POLICY_ENFORCING_MODE": "strict"}}
"""The VPC CNI configuration values that put its network policy agent in strict mode."""


def eks_cluster(**vpc_cni) -> dict:
    """The platform's eks:index:Cluster, its VPC CNI enforcing NetworkPolicies in strict mode unless told otherwise."""
    options = vpc_cni if vpc_cni else {"enableNetworkPolicy": True, "configurationValues": STRICT_ENV}
    return F.entry(T_EKS, "gpuburst-cluster-eks", {"name": CLUSTER, "version": "1.35", "vpcCniOptions": options})


STRICT_ADDON = '{"enableNetworkPolicy": "true", "env": {"NETWORK_POLICY_ENFORCING_MODE": "strict"}}'
"""A vpc-cni add-on's configurationValues enforcing NetworkPolicies in strict mode."""


def vpc_cni_addon(values: object = STRICT_ADDON, name: str = "vpc-cni") -> dict:
    props = {"addonName": "vpc-cni", "clusterName": CLUSTER}
    if values is not None:
        props["configurationValues"] = values
    return F.entry(T_ADDON, name, props)


def key(name: str = "data-key", **over) -> dict:
    return F.entry(F.T_KEY, name, {"enableKeyRotation": True, "deletionWindowInDays": 30, **over})


def key_deps(name: str = "data-key") -> list[str]:
    return [F.urn(F.T_KEY, name)]


def log_group(name: str = f"/aws/eks/{CLUSTER}/cluster", **over) -> dict:
    props = {"name": name, "retentionInDays": 365, "kmsKeyId": F.KEY_ARN, **over}
    return F.entry(T_LOG_GROUP, "control-plane-logs", props, deps=key_deps() if "kmsKeyId" not in over else None)


def bucket(name: str = "slides", data_class: str | None = "clinical-slides", parent: str | None = None) -> dict:
    tags = {"Project": "gpuburst"} | ({"gpuburst.io/data-class": data_class} if data_class else {})
    return F.entry(T_BUCKET, name, {"forceDestroy": False, "tags": tags}, parent)


def deny_outside_vpce(bucket_name: str = "slides", **over) -> dict:
    """The statement the trust/keys engineer's `deny_outside_vpc_endpoints_statement` writes (with a break-glass)."""
    arn = f"arn:aws:s3:::{bucket_name}"
    return {"Sid": "DenyOutsideVpce", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
            "Resource": [arn, f"{arn}/*"],
            "Condition": {"StringNotEquals": {"aws:SourceVpce": [VPCE]},
                          "ArnNotLike": {"aws:PrincipalArn": [BREAK_GLASS]}}, **over}


def tls_only(bucket_name: str = "slides") -> list[dict]:
    arn = f"arn:aws:s3:::{bucket_name}"
    return [{"Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
             "Resource": [arn, f"{arn}/*"], "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]


def bucket_policy(bucket_name: str = "slides", statements: list[dict] | None = None, as_json: bool = True,
                  name: str | None = None) -> dict:
    doc = {"Version": "2012-10-17",
           "Statement": statements if statements is not None else tls_only(bucket_name) + [
               deny_outside_vpce(bucket_name)]}
    return F.entry(T_BUCKET_POLICY, name or f"{bucket_name}-policy",
                   {"bucket": bucket_name, "policy": json.dumps(doc) if as_json else doc},
                   deps=[F.urn(T_BUCKET, bucket_name)])


def encryption(bucket_name: str = "slides", key_id: object = F.KEY_ARN, algorithm: str = "aws:kms",
               deps: list[str] | None = None) -> dict:
    by_default = {"sseAlgorithm": algorithm} | ({"kmsMasterKeyId": key_id} if key_id is not None else {})
    return F.entry(T_SSE, f"{bucket_name}-encryption",
                   {"bucket": bucket_name, "rules": [{"applyServerSideEncryptionByDefault": by_default,
                                                      "bucketKeyEnabled": True}]},
                   deps=[F.urn(T_BUCKET, bucket_name)] + (key_deps() if deps is None else deps))


def slide_bucket(name: str = "slides") -> list[dict]:
    """A clinical bucket as SlideStorage declares it: tagged, its policy denying outside the endpoint, SSE-KMS with
    the plan's key."""
    return [bucket(name), bucket_policy(name), encryption(name)]


def pod_identity_trust(namespace: str = "gpu", service_account: str = "slides-worker", **condition) -> dict:
    """The trust policy `components.spec.policy_documents.pod_identity_trust_policy` writes (as an object)."""
    cond = condition or {
        "StringEquals": {"aws:SourceAccount": ACCOUNT, "aws:RequestTag/eks-cluster-arn": CLUSTER_ARN,
                         "aws:RequestTag/kubernetes-namespace": [namespace],
                         "aws:RequestTag/kubernetes-service-account": [service_account]},
        "ArnLike": {"aws:SourceArn": [
            CLUSTER_ARN, f"arn:aws:eks:us-east-1:{ACCOUNT}:podidentityassociation/{CLUSTER}/*"]}}
    return {"Version": "2012-10-17", "Statement": [{
        "Sid": "AllowEksAuthToAssumeRoleForPodIdentity", "Effect": "Allow",
        "Principal": {"Service": "pods.eks.amazonaws.com"}, "Action": ["sts:AssumeRole", "sts:TagSession"],
        "Condition": cond}]}


def unconditioned_trust() -> dict:
    """The trust policy the components wrote before the hardening: the service, no condition."""
    return {"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
                                                    "Principal": {"Service": "pods.eks.amazonaws.com"},
                                                    "Action": ["sts:AssumeRole", "sts:TagSession"]}]}


def worker_role(trust: object, name: str = "slides-worker-role", as_json: bool = True) -> dict:
    return F.entry(F.T_ROLE, name, {"description": "Pod Identity role of gpu/slides-worker",
                                    "assumeRolePolicy": json.dumps(trust) if as_json and isinstance(trust, dict)
                                    else trust})


def association(role: str = "slides-worker-role", cluster: str = CLUSTER, ns: str = "gpu",
                sa: str = "slides-worker") -> dict:
    return F.entry(F.T_ASSOCIATION, f"{role}-association",
                   {"clusterName": cluster, "namespace": ns, "serviceAccount": sa,
                    "roleArn": f"arn:aws:iam::{ACCOUNT}:role/{role}"})

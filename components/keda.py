"""KEDA on the system nodes with a Pod Identity operator role, and the per-queue TriggerAuthentications it scales by.

How the identities fit together (no static keys anywhere):

- The KEDA operator (service account `keda/keda-operator`) gets an IAM role through EKS Pod Identity. Its only
  permission is `sts:AssumeRole` + `sts:TagSession` on the scaler roles under `scaler_role_path`.
- Each queue gets a scaler role (`KedaScalerAuth`) that may only `sqs:GetQueueAttributes` on that queue, trusted
  by the operator role, and a `TriggerAuthentication` with `podIdentity: {provider: aws, roleArn: <scaler role>}`.
  KEDA assumes the scaler role when it polls the queue length. `sts:TagSession` is needed on both sides because
  the session tags EKS Pod Identity attaches are transitive: the chained AssumeRole carries them along.
- The GPU pods have their own roles (receive/delete on their queue, S3 prefixes); KEDA never holds those.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from .catalogue import CHARTS, KEDA_IDENTITY_OWNERS, KEDA_VERSION, keda_version_problem
from .catalogue.network import IMAGE_DIGESTS, KEDA_IMAGES, SYSTEM_NODE_MIRRORS
from .identity import WorkloadIdentity, WorkloadIdentityArgs
from .network import open_network_policy
from .spec.keda_identity import OPERATOR_SERVICE_ACCOUNT, SCALER_ROLE_PATH, check_scaler_role_path
from .spec.keda_schema import API_VERSION, AUTH_KINDS, check_keda_manifest
from .spec.names import POOL_LABEL, SYSTEM_POOL
from .spec.policy_documents import policy_document, queue_metrics_statements
from .spec.validation import ConfigError, names_its_errors

if TYPE_CHECKING:
    from .existing import ExistingKeda

KEDA_CHART = CHARTS["keda"]
"""The pinned KEDA chart (name, repository, version, namespace) from the catalogue."""

KEDA_POD_SECURITY_LABELS = {"pod-security.kubernetes.io/enforce": "restricted",
                            "pod-security.kubernetes.io/enforce-version": "latest",
                            "pod-security.kubernetes.io/audit": "restricted",
                            "pod-security.kubernetes.io/warn": "restricted"}
"""Pod Security admission labels of KEDA's namespace (Kubernetes Pod Security Standards, `restricted`)."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

SYSTEM_NODE_SELECTOR = {POOL_LABEL: SYSTEM_POOL}
"""Default nodeSelector: the label the cluster puts on its system managed node group (`gpuburst.io/pool: system`)."""


@dataclass
class TriggerAuthSpec:
    """One TriggerAuthentication (or ClusterTriggerAuthentication) with AWS pod identity."""

    name: str
    """metadata.name."""
    namespace: str | None
    """metadata.namespace of a TriggerAuthentication (the ScaledJob's); None for a ClusterTriggerAuthentication."""
    role_arn: pulumi.Input[str] | None = None
    """Role KEDA assumes to read the queue length (`podIdentity.roleArn`). Default None (then identity_owner)."""
    identity_owner: str | None = None
    """`podIdentity.identityOwner` (keda|workload), mutually exclusive with role_arn. Default None."""
    provider: str = "aws"
    """`podIdentity.provider`. Default aws (the only one the stack deploys; aws-eks is deprecated)."""
    kind: str = "TriggerAuthentication"
    """TriggerAuthentication or ClusterTriggerAuthentication. Default TriggerAuthentication."""


def trigger_authentication_manifest(spec: TriggerAuthSpec, keda_version: str = KEDA_VERSION) -> dict[str, Any]:
    """The TriggerAuthentication manifest, checked against `keda_version` (raises a one-line ConfigError)."""
    if spec.kind not in AUTH_KINDS:
        raise ConfigError("TriggerAuthSpec.kind", spec.kind, f"one of {', '.join(AUTH_KINDS)}")
    pod_identity: dict[str, Any] = {"provider": spec.provider}
    if spec.role_arn is not None:
        pod_identity["roleArn"] = spec.role_arn
    if spec.identity_owner is not None:
        pod_identity["identityOwner"] = spec.identity_owner
    metadata: dict[str, Any] = {"name": spec.name}
    if spec.kind == "TriggerAuthentication":
        if not spec.namespace:
            raise ConfigError("TriggerAuthSpec.namespace", spec.namespace,
                              "a namespace (a TriggerAuthentication is namespaced, like its ScaledJob)")
        metadata["namespace"] = spec.namespace
    manifest = {"apiVersion": API_VERSION, "kind": spec.kind, "metadata": metadata,
                "spec": {"podIdentity": pod_identity}}
    return check_keda_manifest(manifest, keda_version)


KEDA_RESOURCES = {
    component: {"requests": {"cpu": "100m", "memory": "100Mi"}, "limits": {"cpu": "1", "memory": "1000Mi"}}
    for component in ("operator", "metricServer", "webhooks")}
"""Requests and limits of KEDA's three Deployments (operator, metrics API server, admission webhooks): the chart's
own defaults for 2.20.2, stated here so a chart upgrade cannot drop or change them unseen."""


def keda_image_values(version: str = KEDA_VERSION, repositories: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The chart's `image` values: each of KEDA's images (catalogue KEDA_IMAGES) by its digest (catalogue
    IMAGE_DIGESTS) as `tag: <version>@<digest>` (the chart writes `<registry>/<repository>:<tag>` and has no digest
    value; the container runtime pulls by the digest). With `repositories` (upstream repository -> the stack's ECR
    mirror of it, network.mirror_image), the mirror, when it holds this version (the mirror's copies are the
    catalogue's pinned tag): `registry` empty, so the chart writes `<repository>:<tag>`. An image without a recorded
    digest keeps the chart's default (ghcr.io, by tag), which the pack's `image-pinned-by-digest` names."""
    mirrored = {m.source: m.tag for m in SYSTEM_NODE_MIRRORS}
    out: dict[str, dict] = {}
    for key, source in KEDA_IMAGES.items():
        digest = IMAGE_DIGESTS.get(f"{source}:{version}")
        if digest is None:
            continue
        image: dict[str, Any] = {"tag": f"{version}@{digest}"}
        mirror = (repositories or {}).get(source)
        if mirror is not None and mirrored.get(source) == version:
            image.update(registry="", repository=mirror)
        out[key] = image
    return out


def keda_chart_values(node_selector: dict[str, str], tolerations: list[dict[str, Any]], *,
                      watch_namespaces: list[str] | None = None, restrict_secret_access: bool = True,
                      version: str = KEDA_VERSION,
                      image_repositories: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Helm values for the KEDA chart: operator service account name, system-node placement, no IRSA, the requests
    and limits of every KEDA container (KEDA_RESOURCES), and the operator's reach.

    `restrict_secret_access` (chart `permissions.operator.restrict.secret`, and the same for the metrics server): the
    operator's ClusterRole loses `secrets` list/watch, and it reads secrets only in its own namespace (the chart's
    Role `keda-operator-certs`, for its certificates) - every TriggerAuthentication here uses pod identity, none a
    secret. `rbac.enabledCustomScaledRefKinds` is always off (see the comment below). `watch_namespaces` (chart
    `watchNamespace`, comma-separated): the operator, metrics server and webhooks watch only those namespaces, and the
    chart binds the operator's ClusterRole in each of them (and in its own) with RoleBindings instead of one
    ClusterRoleBinding, so it can create Jobs only there. None: every namespace. `version` and `image_repositories`:
    the images by digest, from the mirror when given (`keda_image_values`).
    """
    values: dict[str, Any] = {
        # The chart creates the service account; the Pod Identity association refers to it by this name.
        "serviceAccount": {"operator": {"create": True, "name": OPERATOR_SERVICE_ACCOUNT}},
        # Operator, metrics server and admission webhooks all run on the system node group, never on GPU nodes.
        "nodeSelector": dict(node_selector),
        "tolerations": [dict(t) for t in tolerations],
        # Pod Identity, not IRSA: no eks.amazonaws.com/role-arn annotation on the service account.
        "podIdentity": {"aws": {"irsa": {"enabled": False}}},
        "resources": {c: {k: dict(v) for k, v in r.items()} for c, r in KEDA_RESOURCES.items()},
        "permissions": {"operator": {"restrict": {"secret": bool(restrict_secret_access)}},
                        "metricServer": {"restrict": {"secret": bool(restrict_secret_access)}}},
        # The chart's default scaledRefKinds [{apiGroup: "*", kind: "*"}] adds `get` on every resource, Secrets
        # included, and scale on every `*/scale` to the operator's ClusterRole; Deployments and StatefulSets (all
        # a ScaledObject here targets) and Jobs (a ScaledJob's) have rules of their own without it.
        "rbac": {"enabledCustomScaledRefKinds": False},
    }
    images = keda_image_values(version, image_repositories)
    if images:
        values["image"] = images
    if watch_namespaces is not None:
        values["watchNamespace"] = ",".join(watch_namespaces)
    return values


def check_watch_namespaces(watch_namespaces: list[str] | None) -> None:
    """ConfigError unless `watch_namespaces` is None or a non-empty list of distinct namespace names."""
    if watch_namespaces is None:
        return
    if (not isinstance(watch_namespaces, list) or not watch_namespaces
            or len(set(watch_namespaces)) != len(watch_namespaces)):
        raise ConfigError("KedaArgs.watch_namespaces", watch_namespaces,
                          "None (every namespace) or a non-empty list of distinct namespace names")
    for ns in watch_namespaces:
        if not isinstance(ns, str) or not _DNS_LABEL.fullmatch(ns):
            raise ConfigError("KedaArgs.watch_namespaces", ns, "a namespace name (a DNS label)")


def operator_assume_policy(operator_role_arn: str, scaler_role_path: str = SCALER_ROLE_PATH) -> dict[str, Any]:
    """The operator role's policy: assume (and tag sessions of) scaler roles under `scaler_role_path` in its own
    account and partition (taken from the operator role's ARN)."""
    parts = operator_role_arn.split(":")
    if len(parts) < 6 or parts[2] != "iam":
        raise ConfigError("operator_role_arn", operator_role_arn, "an IAM role ARN")
    partition, account = parts[1], parts[4]
    return policy_document([{
        "Sid": "AssumeKedaScalerRoles",
        "Effect": "Allow",
        "Action": ["sts:AssumeRole", "sts:TagSession"],
        "Resource": f"arn:{partition}:iam::{account}:role{scaler_role_path}*",
    }])


def scaler_trust_policy(operator_role_arn: pulumi.Input[str]) -> dict[str, Any]:
    """Trust policy of a scaler role: only the KEDA operator role may assume it (tagging the session, since Pod
    Identity's session tags are transitive)."""
    return policy_document([{
        "Sid": "KedaOperatorAssumes",
        "Effect": "Allow",
        "Principal": {"AWS": operator_role_arn},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
    }])


@dataclass
class KedaArgs:
    """Inputs of Keda."""

    cluster_name: pulumi.Input[str]
    """EKS cluster (for the operator's Pod Identity association). Required."""
    version: str = KEDA_CHART.version
    """KEDA chart/operator version; never below the catalogue's minimum, and every KEDA manifest is checked
    against it. Default: the catalogue's pin."""
    system_node_selector: dict[str, str] = field(default_factory=lambda: dict(SYSTEM_NODE_SELECTOR))
    """nodeSelector that puts KEDA on the system node group. Default {gpuburst.io/pool: system}."""
    system_tolerations: list[dict[str, Any]] = field(default_factory=list)
    """Tolerations for taints on the system node group. Default none (the group has no taints)."""
    scaler_role_path: str = SCALER_ROLE_PATH
    """IAM path the operator may assume roles under. Default /gpuburst/keda-scaler/."""
    trigger_authentications: list[TriggerAuthSpec] = field(default_factory=list)
    """Extra TriggerAuthentications to declare (each GpuScaledJob declares its own through KedaScalerAuth).
    Default none."""
    watch_namespaces: list[str] | None = None
    """Namespaces KEDA watches and may create Jobs in (chart `watchNamespace`; its own is added by the chart).
    A ScaledJob or ScaledObject in any other namespace is never scaled: list every namespace that has one (another
    team's, attached through ExistingKeda, too). Default None: every namespace (a cluster-wide binding)."""
    cluster_arn: pulumi.Input[str] | None = None
    """The cluster's ARN for the operator role's trust policy. Default None: from the AWS provider."""
    restrict_secret_access: bool = True
    """The operator may read Secrets only in its own namespace (chart `permissions.operator.restrict.secret`):
    TriggerAuthentications must use pod identity, never a secret in a workload namespace. Default True."""
    image_repositories: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    """The stack's ECR mirror of KEDA's images, by upstream repository (`ghcr.io/kedacore/keda` -> its mirror,
    network.mirror_image); other entries are ignored. Default none: ghcr.io. Either way by digest."""


@names_its_errors
class Keda(pulumi.ComponentResource):
    """The KEDA chart in namespace `keda` on the system nodes, with the operator's Pod Identity role."""

    version: str
    namespace: str
    chart: k8s.helm.v4.Chart
    operator_role_arn: pulumi.Output[str]
    scaler_role_path: str
    network_policy: k8s.networking.v1.NetworkPolicy
    identity: WorkloadIdentity
    trigger_authentications: list[k8s.apiextensions.CustomResource]

    def __init__(self, name: str, args: KedaArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuburst:index:Keda", name, None, opts)
        problem = keda_version_problem(args.version)
        if problem:
            raise ConfigError("KedaArgs.version", args.version, problem)
        check_scaler_role_path("KedaArgs.scaler_role_path", args.scaler_role_path)
        check_watch_namespaces(args.watch_namespaces)
        # Check the extra TriggerAuthentications before anything is declared.
        manifests = [trigger_authentication_manifest(s, args.version) for s in args.trigger_authentications]
        self.version = args.version
        self.namespace = KEDA_CHART.namespace
        self.scaler_role_path = args.scaler_role_path
        child = pulumi.ResourceOptions(parent=self)

        ns = k8s.core.v1.Namespace(
            f"{name}-namespace",
            # The strictest Pod Security Standard KEDA's pods pass: 'restricted' (the chart's pods run as non-root,
            # every capability dropped, no privilege escalation, RuntimeDefault seccomp, read-only root, only
            # secret volumes). The pack's `pod-security-level` checks the rendered pods against it on every
            # preview, so a chart upgrade that breaks it fails the plan instead of the admission of the operator.
            metadata={"name": self.namespace, "labels": dict(KEDA_POD_SECURITY_LABELS)},
            opts=child)
        # The cluster's VPC CNI is strict: KEDA's pods (the API server calls its webhooks and metrics server; the
        # operator calls the API server, STS and SQS) need a policy selecting them, or they stay denied.
        open_policy = open_network_policy(self.namespace)
        self.network_policy = k8s.networking.v1.NetworkPolicy(
            f"{name}-allow-all", metadata=open_policy["metadata"], spec=open_policy["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))
        self.identity = WorkloadIdentity(
            f"{name}-operator",
            WorkloadIdentityArgs(cluster_name=args.cluster_name, namespace=self.namespace,
                                 service_account=OPERATOR_SERVICE_ACCOUNT, cluster_arn=args.cluster_arn),
            opts=child)
        self.operator_role_arn = self.identity.role_arn
        aws.iam.RolePolicy(
            f"{name}-operator-assume-scalers", role=self.identity.role.name,
            policy=self.identity.role_arn.apply(
                lambda arn: json.dumps(operator_assume_policy(arn, args.scaler_role_path))),
            opts=child)
        # The association exists before the operator pod starts: Pod Identity injects credentials at admission.
        self.chart = k8s.helm.v4.Chart(
            name,
            k8s.helm.v4.ChartArgs(
                chart=KEDA_CHART.chart, version=args.version, namespace=self.namespace, name="keda",
                repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=KEDA_CHART.repository),
                values=keda_chart_values(args.system_node_selector, args.system_tolerations,
                                         watch_namespaces=args.watch_namespaces,
                                         restrict_secret_access=args.restrict_secret_access,
                                         version=args.version, image_repositories=args.image_repositories)),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns, self.network_policy, self.identity]))
        self.trigger_authentications = [
            k8s.apiextensions.CustomResource(
                f"{name}-{m['metadata']['name']}", api_version=m["apiVersion"], kind=m["kind"],
                metadata=m["metadata"], spec=m["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.chart]))
            for m in manifests]
        self.register_outputs({"operatorRoleArn": self.operator_role_arn, "version": self.version,
                               "namespace": self.namespace})


@dataclass
class KedaScalerAuthArgs:
    """Inputs of KedaScalerAuth."""

    keda: Keda | ExistingKeda
    """The Keda component, or an ExistingKeda installed by another stack (operator role, chart to depend on,
    version to check against). Required."""
    namespace: str
    """Namespace of the ScaledJob that refers to the TriggerAuthentication. Required."""
    queue_arn: pulumi.Input[str]
    """The queue KEDA measures. Required."""
    auth_name: str
    """metadata.name of the TriggerAuthentication. Required."""
    identity_owner: str | None = None
    """None (default): a scaler role with roleArn. 'keda': no scaler role; the operator's own role is allowed
    sqs:GetQueueAttributes on the queue. 'workload' is refused (see `KedaScalerAuth`)."""


@names_its_errors
class KedaScalerAuth(pulumi.ComponentResource):
    """A queue's scaler identity: a role that may only read the queue's attributes, assumable by the KEDA operator,
    and the TriggerAuthentication (`provider: aws`, `roleArn`) that points KEDA at it."""

    role_arn: pulumi.Output[str] | None
    auth_name: str
    trigger_authentication: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: KedaScalerAuthArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuburst:index:KedaScalerAuth", name, None, opts)
        keda = args.keda
        if args.identity_owner not in (None,) + KEDA_IDENTITY_OWNERS:
            raise ConfigError("KedaScalerAuthArgs.identity_owner", args.identity_owner,
                              f"None (a scaler role with roleArn) or one of {', '.join(KEDA_IDENTITY_OWNERS)}")
        if args.identity_owner == "workload":
            raise ConfigError("KedaScalerAuthArgs.identity_owner", "workload",
                              "None or 'keda': identityOwner 'workload' makes KEDA assume the role named in the "
                              "workload's eks.amazonaws.com/role-arn (IRSA) annotation, and the stack's pods use "
                              "Pod Identity without that annotation")
        operator_role_name = _operator_role_name(keda) if args.identity_owner == "keda" else None
        if args.identity_owner is None and keda.operator_role_arn is None:
            raise ConfigError("ExistingKedaArgs.operator_role_arn", None,
                              "the KEDA operator role's ARN (e.g. the platform stack's output): the scaler role "
                              "trusts it")
        child = pulumi.ResourceOptions(parent=self)
        self.auth_name = args.auth_name
        statements = queue_metrics_statements(args.queue_arn)
        if args.identity_owner is None:
            role = aws.iam.Role(
                f"{name}-role", path=keda.scaler_role_path,
                assume_role_policy=pulumi.Output.from_input(scaler_trust_policy(keda.operator_role_arn)).apply(
                    json.dumps),
                description=f"KEDA reads the queue length for {args.namespace}/{args.auth_name}",
                opts=child)
            aws.iam.RolePolicy(f"{name}-queue-metrics", role=role.name,
                               policy=pulumi.Output.from_input(policy_document(statements)).apply(json.dumps),
                               opts=child)
            self.role_arn = role.arn
            spec = TriggerAuthSpec(args.auth_name, args.namespace, role_arn=role.arn)
        else:
            aws.iam.RolePolicy(f"{name}-operator-queue-metrics", role=operator_role_name,
                               policy=pulumi.Output.from_input(policy_document(statements)).apply(json.dumps),
                               opts=child)
            self.role_arn = None
            spec = TriggerAuthSpec(args.auth_name, args.namespace, identity_owner=args.identity_owner)
        manifest = trigger_authentication_manifest(spec, keda.version)
        self.trigger_authentication = k8s.apiextensions.CustomResource(
            f"{name}-trigger-auth", api_version=manifest["apiVersion"], kind=manifest["kind"],
            metadata=manifest["metadata"], spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[keda.chart] if keda.chart is not None else []))
        self.register_outputs({"roleArn": self.role_arn, "authName": self.auth_name})


def _operator_role_name(keda: Keda | ExistingKeda) -> pulumi.Input[str]:
    """The KEDA operator role's name, for a policy on it (identityOwner 'keda')."""
    if isinstance(keda, Keda):
        return keda.identity.role.name
    if keda.operator_role_name is None:
        raise ConfigError("ExistingKedaArgs.operator_role_name", None,
                          "the KEDA operator role's name: with scaler_identity_owner 'keda' the queue-metrics "
                          "policy goes on that role")
    return keda.operator_role_name

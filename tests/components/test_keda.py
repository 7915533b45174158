"""Tests of the Keda component and the per-queue scaler identity, under mocks: pinned chart, operator Pod Identity on
the system nodes, TriggerAuthentication with provider aws and roleArn (checked against the upstream CRD)."""
from __future__ import annotations

import json

import kubernetes_validate
import pulumi
import pytest

from components import catalogue
from components.catalogue.network import KEDA_IMAGES
from components.keda import (
    KEDA_POD_SECURITY_LABELS,
    OPERATOR_SERVICE_ACCOUNT,
    Keda,
    KedaArgs,
    KedaScalerAuth,
    KedaScalerAuthArgs,
    TriggerAuthSpec,
    keda_chart_values,
    keda_image_values,
    operator_assume_policy,
    trigger_authentication_manifest,
)
from components.spec.policy_documents import allow_wildcard_actions
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks
from tests.components.crd_oracle import validate_against_crd

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:slides"
ROLE = "arn:aws:iam::123456789012:role/gpuburst/keda-scaler/slides"
TA = "kubernetes:keda.sh/v1alpha1:TriggerAuthentication"


def run(scaler_owner=None, **keda_kw):
    def program():
        keda = Keda("keda", KedaArgs(cluster_name="gpuburst-dev", **keda_kw))
        KedaScalerAuth("slides-scaler", KedaScalerAuthArgs(keda=keda, namespace="gpuburst", queue_arn=QUEUE_ARN,
                                                           auth_name="slides-sqs-auth", identity_owner=scaler_owner))
    return run_under_mocks(program)


@pytest.fixture(scope="module")
def res():
    return run()


def by_name(res, type_, name):
    (r,) = [r for r in res.monitor.by_type(type_) if r.name == name]
    return r


def policies(res) -> dict[str, dict]:
    return {r.name: json.loads(r.properties["policy"]) for r in res.monitor.by_type("aws:iam/rolePolicy:RolePolicy")}


def test_chart_is_pinned_from_the_catalogue(res):
    (chart,) = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    p = chart.properties
    pin = catalogue.CHARTS["keda"]
    assert (p["chart"], p["version"], p["namespace"]) == (pin.chart, pin.version, "keda")
    assert p["repositoryOpts"]["repo"] == pin.repository
    assert p["values"]["serviceAccount"]["operator"]["name"] == OPERATOR_SERVICE_ACCOUNT
    assert p["values"]["nodeSelector"] == {"gpuburst.io/pool": "system"}  # the cluster's system node group label
    assert p["values"]["podIdentity"]["aws"]["irsa"]["enabled"] is False


def test_operator_identity_is_pod_identity_for_keda_operator(res):
    (assoc,) = [r for r in res.monitor.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
                if r.properties["namespace"] == "keda"]
    assert assoc.properties["serviceAccount"] == "keda-operator"
    assert assoc.properties["clusterName"] == "gpuburst-dev"
    # The operator starts after its association exists (credentials are injected at pod admission).
    (chart,) = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    assert assoc.urn in chart.dependencies
    ns = by_name(res, "kubernetes:core/v1:Namespace", "keda-namespace")
    assert ns.properties["metadata"]["name"] == "keda" and ns.urn in chart.dependencies


def test_operator_may_only_assume_scaler_roles(res):
    doc = policies(res)["keda-operator-assume-scalers"]
    (st,) = doc["Statement"]
    assert st["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert st["Resource"] == "arn:aws:iam::123456789012:role/gpuburst/keda-scaler/*"
    assert operator_assume_policy("arn:aws-us-gov:iam::111122223333:role/k")["Statement"][0]["Resource"] == \
        "arn:aws-us-gov:iam::111122223333:role/gpuburst/keda-scaler/*"


def test_scaler_role_reads_queue_attributes_only_and_trusts_the_operator(res):
    doc = policies(res)["slides-scaler-queue-metrics"]
    assert doc["Statement"] == [{"Effect": "Allow", "Action": ["sqs:GetQueueAttributes"], "Resource": QUEUE_ARN}]
    role = by_name(res, "aws:iam/role:Role", "slides-scaler-role")
    assert role.properties["path"] == "/gpuburst/keda-scaler/"
    trust = json.loads(role.properties["assumeRolePolicy"])
    (st,) = trust["Statement"]
    assert st["Principal"] == {"AWS": "arn:aws:iam::123456789012:role/keda-operator-role"}
    assert st["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    for name, doc in policies(res).items():
        assert allow_wildcard_actions(doc["Statement"]) == [], name


def test_trigger_authentication_provider_aws_with_scaler_role(res, upstream_crds):
    (ta,) = res.monitor.by_type(TA)
    p = ta.properties
    assert p["metadata"] == {"name": "slides-sqs-auth", "namespace": "gpuburst"}
    role = "arn:aws:iam::123456789012:role/gpuburst/keda-scaler/slides-scaler-role"
    assert p["spec"] == {"podIdentity": {"provider": "aws", "roleArn": role}}
    (chart,) = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    assert chart.urn in ta.dependencies  # the CRD comes from the chart
    crd = upstream_crds / f"keda-v{catalogue.KEDA_VERSION}-triggerauthentications.yaml"
    assert validate_against_crd(p, crd) == []


def test_identity_owner_keda_puts_queue_read_on_the_operator_role():
    res = run(scaler_owner="keda")
    (ta,) = res.monitor.by_type(TA)
    assert ta.properties["spec"]["podIdentity"] == {"provider": "aws", "identityOwner": "keda"}
    assert not [r for r in res.monitor.by_type("aws:iam/role:Role") if r.name == "slides-scaler-role"]
    doc = policies(res)["slides-scaler-operator-queue-metrics"]
    assert doc["Statement"][0]["Action"] == ["sqs:GetQueueAttributes"]


def test_identity_owner_workload_refused():
    with pytest.raises(ConfigError, match="identity_owner: 'workload' is not valid: .*Pod Identity"):
        run(scaler_owner="workload")


@pytest.mark.parametrize("version", ["2.18.3", "2.13.0", "2.9"])
def test_keda_older_than_minimum_refused(version):
    with pytest.raises(ConfigError) as e:
        run(version=version)
    assert e.value.detail.startswith(f"KedaArgs.version: {version!r} is not valid: keda {version} is older than the "
                                   f"minimum {catalogue.KEDA_MINIMUM}")


def test_extra_trigger_authentications_are_checked_at_construction():
    with pytest.raises(ConfigError) as e:
        run(trigger_authentications=[TriggerAuthSpec("old", "gpuburst", provider="aws-eks")])
    assert e.value.detail.startswith("TriggerAuthentication gpuburst/old spec.podIdentity.provider: 'aws-eks'")
    res = run(trigger_authentications=[TriggerAuthSpec("shared", None, identity_owner="keda",
                                                       kind="ClusterTriggerAuthentication")])
    kinds = sorted(r.type for r in res.registrations if r.type.startswith("kubernetes:keda.sh"))
    assert kinds == ["kubernetes:keda.sh/v1alpha1:ClusterTriggerAuthentication", TA]


def test_trigger_authentication_builder(upstream_crds):
    m = trigger_authentication_manifest(TriggerAuthSpec("sqs-auth", "gpuburst", role_arn=ROLE))
    assert m["spec"]["podIdentity"] == {"provider": "aws", "roleArn": ROLE}
    assert validate_against_crd(m, upstream_crds / "keda-v2.20.2-triggerauthentications.yaml") == []
    with pytest.raises(ConfigError, match="mutually exclusive"):
        trigger_authentication_manifest(TriggerAuthSpec("a", "gpuburst", role_arn=ROLE, identity_owner="keda"))
    with pytest.raises(ConfigError, match="TriggerAuthSpec.namespace"):
        trigger_authentication_manifest(TriggerAuthSpec("a", None, role_arn=ROLE))


def test_namespace_validates_strictly(res):
    ns = by_name(res, "kubernetes:core/v1:Namespace", "keda-namespace")
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": ns.properties["metadata"]}
    kubernetes_validate.validate(obj, catalogue.KUBERNETES_VERSION, strict=True)
    assert ns.properties["metadata"]["labels"] == KEDA_POD_SECURITY_LABELS
    assert KEDA_POD_SECURITY_LABELS["pod-security.kubernetes.io/enforce"] == "restricted"


def test_keda_pods_are_not_cut_off_by_the_strict_vpc_cni(res):
    (policy,) = res.monitor.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    (chart,) = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    ns = by_name(res, "kubernetes:core/v1:Namespace", "keda-namespace")
    assert policy.properties["metadata"] == {"name": "gpuburst-allow-all", "namespace": "keda"}
    assert policy.properties["spec"]["podSelector"] == {} and policy.properties["spec"]["ingress"] == [{}]
    assert policy.urn in chart.dependencies and ns.urn in policy.dependencies


KEDA_DIGESTS = {"keda": "sha256:fe74c7b8849586a67ad2201bcb89e7f5ac221ff90399ecaa8fd28427f1ef11e6",
                "metricsApiServer": "sha256:27286536a8a775aeeee37a7e343f8ecebb27ebf680ee1181a4f99e82eefb253b",
                "webhooks": "sha256:41f74102aba7959c6e8d08b433ab8a5fd6cae7c5646c78f7fe3de40a52df3439"}
MIRROR = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/gpuburst-prod/mirror/"


def test_images_are_pinned_by_digest_from_ghcr_or_the_mirror():
    assert keda_image_values() == {k: {"tag": f"2.20.2@{d}"} for k, d in KEDA_DIGESTS.items()}
    mirrors = {source: MIRROR + source.removeprefix("ghcr.io/") for source in KEDA_IMAGES.values()}
    assert keda_image_values(repositories={**mirrors, "nvcr.io/nvidia/k8s-device-plugin": "ignored"}) == {
        k: {"tag": f"2.20.2@{KEDA_DIGESTS[k]}", "registry": "", "repository": MIRROR + s.removeprefix("ghcr.io/")}
        for k, s in KEDA_IMAGES.items()}
    # A version without recorded digests keeps the chart's default (by tag, which the pack names); the mirror,
    # which holds only the pinned version, is not used for it.
    assert keda_image_values("2.21.0", mirrors) == {}
    assert "image" not in keda_chart_values({}, [], version="2.21.0")
    assert keda_chart_values({}, [])["image"] == keda_image_values()


def test_the_platform_mirror_reaches_the_chart():
    mirrors = {source: MIRROR + source.removeprefix("ghcr.io/") for source in KEDA_IMAGES.values()}
    (chart,) = run(image_repositories=mirrors).monitor.by_type("kubernetes:helm.sh/v4:Chart")
    assert chart.properties["values"]["image"]["keda"] == {
        "registry": "", "repository": MIRROR + "kedacore/keda", "tag": f"2.20.2@{KEDA_DIGESTS['keda']}"}


def test_rendered_pods_pull_by_digest_and_pass_the_restricted_pod_security_standard():
    from policies.namespaces import pod_security_problems

    mirrors = {source: MIRROR + source.removeprefix("ghcr.io/") for source in KEDA_IMAGES.values()}
    objects = _render({"image": keda_image_values(repositories=mirrors)})
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    assert len(deployments) == 3
    for d in deployments:
        pod = d["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["image"].startswith(MIRROR + "kedacore/keda") and "@sha256:" in container["image"], d
        assert pod_security_problems(pod, "restricted") == [], d["metadata"]["name"]
    images = {c["image"] for d in deployments for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {f"{MIRROR}{s.removeprefix('ghcr.io/')}:2.20.2@{KEDA_DIGESTS[k]}" for k, s in KEDA_IMAGES.items()}


def test_role_arn_output_is_passed_through():
    # The scaler role ARN is an Output when the TriggerAuthentication is built: checked only once known.
    m = trigger_authentication_manifest(TriggerAuthSpec("a", "gpuburst", role_arn=pulumi.Output.from_input(ROLE)))
    assert isinstance(m["spec"]["podIdentity"]["roleArn"], pulumi.Output)


# --------------------------------------------------------------------------------------------------------------------
# The operator's reach: secrets only in its own namespace, the workload namespaces only (issue 19).
# --------------------------------------------------------------------------------------------------------------------

def test_chart_values_restrict_the_operator_by_default(res):
    (chart,) = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    v = chart.properties["values"]
    assert v["permissions"] == {"operator": {"restrict": {"secret": True}},
                                "metricServer": {"restrict": {"secret": True}}}
    assert v["rbac"] == {"enabledCustomScaledRefKinds": False}
    assert "watchNamespace" not in v   # every namespace unless told


def test_watch_namespaces_become_the_charts_comma_list():
    res = run(watch_namespaces=["gpuburst", "lab-tils"])
    (chart,) = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    assert chart.properties["values"]["watchNamespace"] == "gpuburst,lab-tils"


@pytest.mark.parametrize("value", [[], ["gpuburst", "gpuburst"], ["Not_A_Namespace"], "gpuburst"])
def test_bad_watch_namespaces_are_one_line_errors(value):
    with pytest.raises(ConfigError) as e:
        run(watch_namespaces=value)
    assert "\n" not in str(e.value) and e.value.detail.startswith("KedaArgs.watch_namespaces: ")


def test_the_chart_values_keys_exist_at_the_pinned_version():
    import tarfile

    import yaml

    from components.synth.charts import SHARED_CHARTS
    archive = SHARED_CHARTS / f"keda-{catalogue.CHARTS['keda'].version}.tgz"
    if not archive.is_file():
        pytest.skip(f"{archive} is absent")
    with tarfile.open(archive) as t:
        chart_values = yaml.safe_load(t.extractfile("keda/values.yaml"))
    assert chart_values["watchNamespace"] == ""
    assert chart_values["permissions"]["operator"]["restrict"]["secret"] is False
    assert chart_values["permissions"]["metricServer"]["restrict"]["secret"] is False
    assert chart_values["rbac"]["enabledCustomScaledRefKinds"] is True
    assert chart_values["rbac"]["scaledRefKinds"] == [{"apiGroup": "*", "kind": "*"}]


def _render(values: dict) -> list[dict]:
    from components.synth.charts import SHARED_CHARTS, render_objects
    archive = SHARED_CHARTS / f"keda-{catalogue.CHARTS['keda'].version}.tgz"
    if not archive.is_file():
        pytest.skip(f"{archive} is absent")
    base = keda_chart_values({"gpuburst.io/pool": "system"}, [])
    return [o for _, o in render_objects(archive, {**base, **values}, "keda", "keda", skip_crds=True)]


def _grants(objects: list[dict], namespace: str | None) -> list[dict]:
    """The rules the keda-operator ServiceAccount holds in `namespace` (None: cluster-wide)."""
    roles = {(o["kind"], (o["metadata"].get("namespace") or "keda") if o["kind"] == "Role" else None,
              o["metadata"]["name"]): o.get("rules") or [] for o in objects if o["kind"] in ("Role", "ClusterRole")}
    rules: list[dict] = []
    for b in objects:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == "keda-operator" for s in b["subjects"]):
            continue
        bound_ns = b["metadata"].get("namespace") or "keda" if b["kind"] == "RoleBinding" else None
        if b["kind"] == "RoleBinding" and bound_ns != namespace:
            continue
        ref = b["roleRef"]
        rules += roles[(ref["kind"], bound_ns if ref["kind"] == "Role" else None, ref["name"])]
    return rules


def _allows(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    return any((group in r.get("apiGroups", []) or "*" in r.get("apiGroups", []))
               and (resource in r.get("resources", []) or "*" in r.get("resources", []))
               and verb in r.get("verbs", []) and not r.get("resourceNames") for r in rules)


def test_rendered_rbac_lets_the_operator_scale_jobs_in_the_workload_namespace_only():
    objects = _render({"watchNamespace": keda_chart_values({}, [], watch_namespaces=["gpuburst"])["watchNamespace"]})
    here = _grants(objects, "gpuburst")
    for group, resource, verbs in (("batch", "jobs", ("create", "delete", "get", "list", "watch")),
                                   ("keda.sh", "scaledjobs", ("get", "list", "watch", "update", "patch")),
                                   ("keda.sh", "scaledjobs/status", ("update", "patch")),
                                   ("keda.sh", "triggerauthentications", ("get", "list", "watch")),
                                   ("apps", "deployments/scale", ("get", "patch", "update")),   # the warm floor
                                   ("", "pods", ("get", "list", "watch"))):
        for verb in verbs:
            assert _allows(here, group, resource, verb), (group, resource, verb)
    cluster = _grants(objects, None)
    assert not _allows(cluster, "batch", "jobs", "create")        # nowhere else
    assert not _allows(_grants(objects, "lab-other"), "batch", "jobs", "create")
    for scope in (None, "gpuburst"):                                # no secret outside its own namespace
        for verb in ("get", "list", "watch"):
            assert not _allows(_grants(objects, scope), "", "secrets", verb), (scope, verb)
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRoleBinding"
            and o["roleRef"]["name"] == "keda-operator"] == []
    env = {e["name"]: e.get("value") for o in objects if o["kind"] == "Deployment"
           and o["metadata"]["name"] == "keda-operator" for e in o["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["WATCH_NAMESPACE"], env["KEDA_RESTRICT_SECRET_ACCESS"]) == ("gpuburst", "true")


def test_unrestricted_chart_would_read_every_secret_in_the_cluster():
    """What the restriction removes (the chart's defaults): secrets list/watch and `get` on every resource, bound
    cluster-wide. A test that can fail: if upstream ever drops these, the restriction values may be stale."""
    objects = _render({"permissions": {"operator": {"restrict": {"secret": False}}},
                       "rbac": {"enabledCustomScaledRefKinds": True}})
    cluster = _grants(objects, None)
    assert _allows(cluster, "", "secrets", "list") and _allows(cluster, "", "secrets", "get")
    assert _allows(cluster, "batch", "jobs", "create")


def test_dev_plan_keda_is_restricted_to_the_workload_namespace(dev):
    res = dev["plan"]["resources"]
    (chart,) = [r for r in res if r["type"] == "kubernetes:helm.sh/v4:Chart" and r["properties"]["chart"] == "keda"]
    values = chart["properties"]["values"]
    assert values["watchNamespace"] == "gpuburst"
    assert values["permissions"]["operator"]["restrict"]["secret"] is True
    rendered = [r for r in res if r["parent"] == chart["urn"]]
    bindings = {(r["type"].rsplit(":", 1)[1], r["properties"]["metadata"].get("namespace"))
                for r in rendered if r["type"].endswith("Binding")
                and r["properties"]["roleRef"]["name"] == "keda-operator"}
    assert bindings == {("RoleBinding", "gpuburst"), ("RoleBinding", "keda")}
    (role,) = [r for r in rendered if r["type"].endswith(":ClusterRole")
               and r["properties"]["metadata"]["name"] == "keda-operator"]
    assert not [rule for rule in role["properties"]["rules"]
                if "secrets" in rule.get("resources", []) or "*" in rule.get("resources", [])]


def test_the_platform_lets_keda_watch_its_namespace_and_the_extra_ones():
    from pathlib import Path

    import yaml

    from components.config import parse_config
    from components.platform import GpuBurstPlatform
    raw = yaml.safe_load((Path(__file__).resolve().parents[2] / "Pulumi.dev.yaml").read_text(encoding="utf-8"))
    res = run_under_mocks(lambda: GpuBurstPlatform("p", parse_config(raw["config"], stack="dev"), namespace="lab-a",
                                                   keda_extra_watch_namespaces=["lab-tils", "lab-a"]))
    (chart,) = [c for c in res.monitor.by_type("kubernetes:helm.sh/v4:Chart") if c.properties["chart"] == "keda"]
    assert chart.properties["values"]["watchNamespace"] == "lab-a,lab-tils"

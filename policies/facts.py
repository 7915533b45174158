"""What a plan says of the platform it runs on: whether it declares the whole platform, and the facts about what runs
outside it (reference components in the plan, policy config) that the cross-resource rules judge against.

A plan holding `gpuburst:index:GpuBurstPlatform` declares the whole platform: there an end a rule looks for and
does not find is a violation, as it always was. Any other plan is partial (a stack attaching workloads to a cluster
another stack runs): an absent end is reported once by `outside-this-stack`, unless a fact describes it, in which
case the rule checks against the fact. Policy config `wholePlatform: true|false` overrides the detection.

Facts come from the reference components (`gpuburst:index:ExistingKeda`, `...:ExistingKarpenter`,
`...:ExistingCluster`: ComponentResources whose registered properties are the facts) and from the policy config of
the policy that reads them (same meaning, the keys of `FACTS`); config wins over a reference. A whole plan reads no
fact: what it lacks is missing.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi_policy import PolicyConfigSchema

from .plan import Res
from .resources import as_number, fmt
from .unknowns import UNKNOWN

PLATFORM = "gpuburst:index:GpuBurstPlatform"
"""The platform component's type: a plan holding it declares the whole platform."""
EXISTING_KEDA = "gpuburst:index:ExistingKeda"
EXISTING_KARPENTER = "gpuburst:index:ExistingKarpenter"
EXISTING_CLUSTER = "gpuburst:index:ExistingCluster"
REFERENCES = (EXISTING_KEDA, EXISTING_KARPENTER, EXISTING_CLUSTER)
"""The reference components: what another stack runs, declared in this one (no children, only facts)."""

WHOLE_PLATFORM = "wholePlatform"
"""Policy config key: true judges the plan as the whole platform, false as a part (default: detected)."""


@dataclass(frozen=True)
class FactKey:
    """One fact: its name, where a reference carries it, and its policy config schema."""

    key: str
    """The fact's name; also its policy config key when `schema` is set."""
    reference: str
    """The reference component type that carries it."""
    prop: str
    """That reference's property (for `nodeClasses`, the field of each entry is `entry`)."""
    schema: dict[str, Any] | None
    """JSON schema of the policy config value; None when only the reference gives it."""
    entry: str | None = None
    """For a per-node-class fact: the field of each `nodeClasses` entry."""


_STRING = {"type": "string"}
FACTS: dict[str, FactKey] = {f.key: f for f in (
    FactKey("kedaVersion", EXISTING_KEDA, "version",
            {**_STRING, "description": "The KEDA version running on the cluster (e.g. 2.20.2)"}),
    FactKey("kedaNamespace", EXISTING_KEDA, "namespace",
            {**_STRING, "description": "The namespace KEDA runs in (e.g. keda)"}),
    FactKey("kedaOperatorServiceAccount", EXISTING_KEDA, "operatorServiceAccount",
            {**_STRING, "description": "The KEDA operator's ServiceAccount (e.g. keda-operator)"}),
    FactKey("kedaOperatorRoleArn", EXISTING_KEDA, "operatorRoleArn",
            {**_STRING, "description": "ARN of the KEDA operator's IAM role (scaler roles must trust it)"}),
    FactKey("kedaScalerRolePath", EXISTING_KEDA, "scalerRolePath", None),
    FactKey("kedaWatchNamespaces", EXISTING_KEDA, "watchNamespaces",
            {"type": "array", "items": {"type": "string"},
             "description": "The namespaces KEDA watches (its chart's watchNamespace; [\"*\"]: every namespace)"}),
    FactKey("karpenterVersion", EXISTING_KARPENTER, "version",
            {**_STRING, "description": "The Karpenter version running on the cluster (e.g. 1.14.1)"}),
    FactKey("clusterName", EXISTING_CLUSTER, "clusterName", None),
    FactKey("systemNodeLabels", EXISTING_CLUSTER, "systemNodeLabels",
            {"type": "object", "additionalProperties": {"type": "string"},
             "description": "Labels of the system node group's nodes (e.g. {\"gpuburst.io/pool\": \"system\"})"}),
    FactKey("devicePlugin", EXISTING_CLUSTER, "devicePlugin",
            {"type": "boolean", "description": "Whether the NVIDIA device plugin runs on the cluster"}),
    FactKey("networkPolicyEnforced", EXISTING_CLUSTER, "networkPolicyEnforced",
            {"type": "boolean", "description": "Whether the cluster's VPC CNI enforces NetworkPolicies "
                                               "(enableNetworkPolicy)"}),
    FactKey("nodeClassRootVolumeGiB", EXISTING_CLUSTER, "nodeClasses",
            {"type": "object", "additionalProperties": {"type": "number"},
             "description": "Root volume in GiB of each EC2NodeClass another stack declares, by name"},
            entry="rootVolumeGiB"),
    FactKey("nodeClassAmiAlias", EXISTING_CLUSTER, "nodeClasses", None, entry="amiAlias"),
    FactKey("nodeClassModelCacheFolder", EXISTING_CLUSTER, "nodeClasses", None, entry="modelCacheFolder"),
)}
"""Every fact a rule may judge against."""


def config_schema(*keys: str) -> PolicyConfigSchema:
    """The policy config schema of a policy reading `keys` (and `wholePlatform`)."""
    props: dict[str, Any] = {WHOLE_PLATFORM: {
        "type": "boolean", "description": "Judge the plan as the whole platform (true) or a part of it (false); "
                                          "default: whole when it declares gpuburst:index:GpuBurstPlatform"}}
    for key in keys:
        schema = FACTS[key].schema
        if schema is not None:
            props[key] = schema
    return PolicyConfigSchema(properties=props)


@dataclass(frozen=True)
class Fact:
    """A fact's value (UNKNOWN when the reference's value is computed at preview) and where it comes from."""

    value: Any
    source: str
    """How a message names it: `ExistingKeda 'shared' version`, `policy config kedaVersion`."""


def _short(token: str) -> str:
    return token.rsplit(":", 1)[-1]


@dataclass(frozen=True)
class Scope:
    """How much of the platform the plan declares, and the facts about the rest."""

    whole: bool
    why: str
    """Why it is judged whole or partial, for messages."""
    facts: Mapping[str, Fact] = field(default_factory=dict)
    """Fact name -> fact; a per-node-class fact's value is a dict name -> Fact."""

    def value(self, key: str) -> Any:
        """The fact's known value, or None when it is not given (or unknown during preview)."""
        fact = self.facts.get(key)
        return None if fact is None or fact.value is UNKNOWN else fact.value

    def source(self, key: str) -> str:
        fact = self.facts.get(key)
        return fact.source if fact is not None else key

    def entry(self, key: str, name: str) -> Fact | None:
        """A per-node-class fact for EC2NodeClass `name` (None when not given or unknown)."""
        table = self.value(key)
        fact = table.get(name) if isinstance(table, dict) else None
        return fact if fact is not None and fact.value is not UNKNOWN else None

    def hint(self, key: str, on: str = "") -> str:
        """How to give the fact, as the end of a message (`on`: the policies whose config would take it)."""
        spec = FACTS[key]
        fact = self.facts.get(key)
        where = f"{_short(spec.reference)} {spec.prop}" + (f"[name].{spec.entry}" if spec.entry else "")
        config = f"policy config {key}{' on ' + on if on else ''}" if spec.schema is not None else ""
        if fact is not None and fact.value is UNKNOWN:
            return f"{fact.source} is unknown during preview" + (f"; or set {config}" if config else "")
        return f"declare {where}" + (f" or set {config}" if config else "")


WHOLE = Scope(True, "judged as the whole platform")
"""What a rule function called without a scope assumes: every end must be in the plan (the rules as they were)."""


def _config_value(spec: FactKey, raw: Any) -> Any:
    kind = spec.schema["type"] if spec.schema else None
    ok = {"string": isinstance(raw, str) and bool(raw.strip()),
          "boolean": isinstance(raw, bool),
          "object": isinstance(raw, dict),
          "array": isinstance(raw, list) and bool(raw) and all(isinstance(v, str) and v.strip() for v in raw),
          }.get(kind, False)
    if ok and spec.key == "systemNodeLabels":
        ok = all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items())
    if ok and spec.entry == "rootVolumeGiB":
        ok = all((as_number(v) or 0) > 0 for v in raw.values())
    if not ok:
        want = {"string": "a non-empty string", "boolean": "true or false",
                "array": "a non-empty list of non-empty strings"}.get(
            kind, "an object of label to string" if spec.key == "systemNodeLabels"
            else "an object of EC2NodeClass name to a positive number of GiB")
        raise ValueError(f"policy config {spec.key}: {fmt(raw)} is not valid: {want}")
    if spec.entry:
        return {name: Fact(as_number(v), f"policy config {spec.key}[{name!r}]") for name, v in raw.items()}
    return raw


def _reference_value(spec: FactKey, ref: Res) -> Fact | None:
    value = ref.props.get(spec.prop) if isinstance(ref.props, dict) else None
    source = f"{_short(ref.type)} {ref.name!r} {spec.prop}"
    if value is None:
        return None
    if spec.entry is None or value is UNKNOWN:
        return Fact(value, source)
    if not isinstance(value, dict):
        return None
    table = {}
    for name, item in value.items():
        field_value = item.get(spec.entry) if isinstance(item, dict) else (UNKNOWN if item is UNKNOWN else None)
        if field_value is not None:
            table[name] = Fact(field_value, f"{source}[{name!r}].{spec.entry}")
    return Fact(table, source)


def scope_of(resources: list[Res], config: Mapping[str, Any] | None = None) -> Scope:
    """The scope of a plan under a policy's config (raise ValueError naming a config value of the wrong type)."""
    config = dict(config or {})
    whole_cfg = config.get(WHOLE_PLATFORM)
    platform = next((r for r in resources if r.type == PLATFORM), None)
    if whole_cfg is not None and not isinstance(whole_cfg, bool):
        raise ValueError(f"policy config {WHOLE_PLATFORM}: {fmt(whole_cfg)} is not valid: true or false")
    if whole_cfg is not None:
        whole, why = whole_cfg, f"policy config {WHOLE_PLATFORM}: {str(whole_cfg).lower()}"
    elif platform is not None:
        whole, why = True, f"the plan declares {PLATFORM} {platform.name!r}"
    else:
        whole, why = False, f"the plan declares no {PLATFORM}"
    if whole:
        return Scope(True, why)
    refs: dict[str, Res] = {}
    for r in resources:
        if r.type in REFERENCES:
            refs.setdefault(r.type, r)
    facts: dict[str, Fact] = {}
    for spec in FACTS.values():
        ref = refs.get(spec.reference)
        fact = _reference_value(spec, ref) if ref is not None else None
        if spec.schema is not None and config.get(spec.key) is not None:
            given = _config_value(spec, config[spec.key])
            if spec.entry and fact is not None and isinstance(fact.value, dict):
                given = {**fact.value, **given}  # config entries override the reference's, name by name
            fact = Fact(given, f"policy config {spec.key}")
        if fact is not None:
            facts[spec.key] = fact
    return Scope(False, why, facts)

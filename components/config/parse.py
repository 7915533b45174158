"""Parse and check the `gpuburst:` config map into a StackConfig: a table of rules per key, each refusal one line
naming the key and the value, before any resource exists."""
from __future__ import annotations

import difflib
import ipaddress
import json
import re
import zoneinfo
from collections.abc import Iterable, Mapping
from typing import Any

from .. import catalogue
from ..catalogue.network import PRIVATE_IPV4_RANGES
from ..planning.chooser import require_pattern
from ..spec.deploy_model import parse_deploy_model
from ..spec.validation import ConfigError, Rule, is_cdi_feature_flag, is_int_between, validate
from ..spec.worker_pod import image_digest_problem
from .artifacts import (
    artifact_workload_rules,
    check_batch,
    check_image_keys,
    check_keys,
    parse_model,
    parse_worker_build,
    parse_worker_image,
    parse_worker_image_cuda,
)
from .stack import BURST_BUDGET_MAX_S, NAMESPACE, WARM_GPUS_MAX, BurstBudget, StackConfig, WarmGpus, WorkloadConfig

_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")


_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


_CIDR = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})/(\d{1,2})$")


_ALIAS = re.compile(r"^al2023@(latest|v\d{8})$")


_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")




def _is_cidr(v: Any) -> bool:
    m = _CIDR.match(str(v))
    return bool(m) and all(int(x) <= 255 for x in m.groups()[:4]) and int(m.group(5)) <= 32


def _vpc_cidr_problem(v: str) -> str | None:
    """Why `v` is not a VPC CIDR the platform can create (private IPv4, /16 to /20), or None."""
    try:
        net = ipaddress.ip_network(v, strict=True)
    except ValueError:
        return "not a CIDR"
    if net.version != 4 or not any(net.subnet_of(ipaddress.ip_network(r)) for r in PRIVATE_IPV4_RANGES):
        return "not a private IPv4 range"
    return None if 16 <= net.prefixlen <= 20 else "not /16 to /20"


_CRON_FIELD = re.compile(r"^[0-9A-Za-z*?,/-]+$")


def _is_cron(v: Any) -> bool:
    """Five whitespace-separated fields (minute hour day-of-month month day-of-week), as KEDA's cron scaler takes."""
    return isinstance(v, str) and len(v.split()) == 5 and all(_CRON_FIELD.match(f) for f in v.split())


def _is_timezone(v: Any) -> bool:
    if not isinstance(v, str) or not v or v.startswith("/") or ".." in v:
        return False
    try:
        zoneinfo.ZoneInfo(v)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # a folder such as "Europe" is an OSError
        return False
    return True


_WARM_KEYS = ("count", "start", "end", "timezone")


def _warm_rules() -> list[Rule]:
    return [
        Rule("count", is_int_between(1, WARM_GPUS_MAX), f"an integer from 1 to {WARM_GPUS_MAX} (GPUs kept warm)"),
        Rule("start", _is_cron, "a 5-field cron expression (minute hour day-of-month month day-of-week), e.g. "
                                "'0 8 * * 1-5'"),
        Rule("end", _is_cron, "a 5-field cron expression (minute hour day-of-month month day-of-week), e.g. "
                              "'0 13 * * 1-5'"),
        Rule("timezone", _is_timezone, "an IANA time zone name such as Europe/London or UTC"),
    ]


def _check_mapping(key: str, value: Any, keys: tuple[str, ...], expected: str) -> str:
    """Refuse a non-mapping, an unknown sub-key or a missing one (one line naming it); returns `gpuburst:<key>`."""
    where = f"{NAMESPACE}:{key}"
    check_keys(where, value, keys, key, expected)
    for sub in keys:
        if sub not in value:
            raise ConfigError(f"{where}.{sub}", None, f"required: {key} needs {catalogue.join(keys)}")
    return where


def _parse_warm_gpus(value: Any) -> WarmGpus:
    where = _check_mapping("warmGpus", value, _WARM_KEYS, "a mapping with count, start, end and timezone")
    validate(value, _warm_rules(), where + ".")
    if value["start"].split() == value["end"].split():
        raise ConfigError(f"{where}.end", value["end"], "a cron expression different from start (the floor would "
                                                        "never stay up)")
    return WarmGpus(**{k: value[k] for k in _WARM_KEYS})


_BUDGET_KEYS = ("firstResultS", "lastResultS")


def _is_budget_s(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= BURST_BUDGET_MAX_S


def _budget_rules() -> list[Rule]:
    return [
        Rule("firstResultS", _is_budget_s, f"seconds > 0 and <= {BURST_BUDGET_MAX_S} (burst sent to first result)"),
        Rule("lastResultS", _is_budget_s, f"seconds > 0 and <= {BURST_BUDGET_MAX_S} (burst sent to last result)"),
    ]


def _parse_burst_budget(value: Any) -> BurstBudget:
    where = _check_mapping("burstBudget", value, _BUDGET_KEYS, "a mapping with firstResultS and lastResultS (seconds)")
    validate(value, _budget_rules(), where + ".")
    if value["lastResultS"] < value["firstResultS"]:
        raise ConfigError(f"{where}.lastResultS", value["lastResultS"],
                          f"seconds >= firstResultS = {value['firstResultS']} (the last result cannot come first)")
    return BurstBudget(first_result_s=float(value["firstResultS"]), last_result_s=float(value["lastResultS"]))


# Config keys as written in Pulumi.<stack>.yaml (camelCase) -> StackConfig field.
_KEYS: dict[str, str] = {
    "environment": "environment",
    "kubernetesVersion": "kubernetes_version",
    "upgradeSupportType": "upgrade_support_type",
    "devicePluginCdiFeatureFlags": "device_plugin_cdi_feature_flags",
    "karpenterVersion": "karpenter_version",
    "kedaVersion": "keda_version",
    "kedaProvider": "keda_provider",
    "kedaIdentityOwner": "keda_identity_owner",
    "kedaExtraWatchNamespaces": "keda_extra_watch_namespaces",
    "gpuInstanceTypes": "gpu_instance_types",
    "gpuCapacityTypes": "gpu_capacity_types",
    "gpuLimit": "gpu_limit",
    "amiAlias": "ami_alias",
    "systemNodeInstanceType": "system_node_instance_type",
    "systemNodeCount": "system_node_count",
    "endpointPublicAccess": "endpoint_public_access",
    "publicAccessCidrs": "public_access_cidrs",
    "vpcCidr": "vpc_cidr",
    "maxReceiveCount": "max_receive_count",
    "oldestMessageAlarmS": "oldest_message_alarm_s",
    "alarmEmails": "alarm_emails",
    "workloads": "workloads",
    "pollingIntervalS": "polling_interval_s",
    "karpenterBatchIdleS": "karpenter_batch_idle_s",
    "karpenterBatchMaxS": "karpenter_batch_max_s",
    "gpuInstanceStorePolicy": "gpu_instance_store_policy",
    "fastImagePull": "fast_image_pull",
    "gpuNodeSsm": "gpu_node_ssm",
    "warmGpus": "warm_gpus",
    "burstBudget": "burst_budget",
    "verifyImage": "verify_image",
    "workerImage": "worker_image",
    "workerBuild": "worker_build",
    "workerImageCuda": "worker_image_cuda",
    "deploy": "deploy",
}


_WORKLOAD_KEYS: dict[str, str] = {
    "itemsIndependent": "items_independent", "ordered": "ordered", "stateful": "stateful",
    "modelLoadS": "model_load_s", "secondsPerItem": "seconds_per_item", "burstItems": "burst_items",
    "expectedProcessingS": "expected_processing_s", "maxReplicas": "max_replicas", "pattern": "pattern",
    "messagesPerJob": "messages_per_job", "precision": "precision", "model": "model",
}


CONFIG_KEYS = tuple(_KEYS)
"""Every key a stack may set under `gpuburst:`."""


def did_you_mean(key: str, known: Iterable[str]) -> str | None:
    """The known key `key` most likely misspells (any case; a plural, a dropped or doubled letter), or None."""
    known = list(known)
    by_case = [k for k in known if k.lower() == key.lower()]
    if by_case:
        return by_case[0]
    close = difflib.get_close_matches(key.lower(), [k.lower() for k in known], n=1, cutoff=0.8)
    return next((k for k in known if close and k.lower() == close[0]), None)


def _str_list(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)


def _keda_provider_ok(cfg: Mapping[str, Any]) -> Rule:
    version = cfg.get("kedaVersion", catalogue.KEDA_VERSION)
    allowed = catalogue.keda_providers(version) if catalogue.keda_version_problem(version) is None else ()
    # Only 'aws' reaches SQS through Pod Identity; any other provider the CRD accepts would be written to no
    # TriggerAuthentication (the stack's is always 'aws') and silently ignored, so it is refused here.
    return Rule("kedaProvider", lambda v: v == "aws" and catalogue.keda_provider_problem(v, version) is None,
                f"KEDA {version} accepts {catalogue.join(allowed)}; 'aws-eks' is deprecated; this stack (AWS SQS) "
                "needs 'aws'")


def _rules(cfg: Mapping[str, Any]) -> list[Rule]:
    """The table of rules for the top-level keys (as written in YAML)."""
    return [
        Rule("environment", lambda v: isinstance(v, str) and bool(_NAME.match(v)),
             "a lower-case name of 1-31 letters, digits or '-', starting with a letter"),
        Rule("kubernetesVersion", lambda v: isinstance(v, str) and re.match(r"^1\.\d+$", v) is not None,
             f"a Kubernetes minor version such as {catalogue.KUBERNETES_VERSION!r}"),
        Rule("upgradeSupportType", lambda v: v in catalogue.SUPPORT_TYPES,
             f"one of {catalogue.join(catalogue.SUPPORT_TYPES)} (the EKS cluster's upgradePolicy.supportType)"),
        Rule("devicePluginCdiFeatureFlags", lambda v: _str_list(v) and all(is_cdi_feature_flag(x) for x in v)
             and len(set(v)) == len(v),
             "a list of distinct CDI feature flags, lower-case words joined by '-', e.g. ['disable-nvsandboxutils'] "
             "(or [] for none)"),
        Rule("karpenterVersion", lambda v: catalogue.karpenter_version_problem(v) is None,
             f"a Karpenter release >= {catalogue.KARPENTER_MINIMUM} and not one of "
             f"{catalogue.join(catalogue.KARPENTER_BROKEN_RELEASES)} (broken releases)"),
        Rule("kedaVersion", lambda v: catalogue.keda_version_problem(v) is None,
             f"a KEDA release >= {catalogue.KEDA_MINIMUM}"),
        _keda_provider_ok(cfg),
        Rule("kedaIdentityOwner", lambda v: v is None or v in catalogue.KEDA_IDENTITY_OWNERS,
             f"one of {catalogue.join(catalogue.KEDA_IDENTITY_OWNERS)} (or unset to use a roleArn)"),
        Rule("kedaExtraWatchNamespaces", lambda v: _str_list(v) and all(_DNS_LABEL.fullmatch(x) for x in v)
             and len(set(v)) == len(v),
             "a list of distinct namespace names (DNS labels: lower-case letters, digits, '-', at most 63), e.g. "
             "[cyto-slides]: other teams' namespaces KEDA watches besides the platform's (or [] for none)"),
        Rule("gpuInstanceTypes", lambda v: _str_list(v) and all(_INSTANCE_TYPE.match(x) for x in v)
             and len(set(v)) >= 2,
             "a list of at least two distinct EC2 instance types (a family of sizes, e.g. g5.xlarge, g5.2xlarge): "
             "a NodePool pinned to one type stalls the day that type runs out"),
        Rule("gpuCapacityTypes", lambda v: _str_list(v) and len(v) >= 1 and set(v) <= {"spot", "on-demand",
                                                                                          "reserved"},
             "a non-empty list of spot, on-demand, reserved (order is ignored: Karpenter prefers spot when allowed)"),
        Rule("gpuLimit", is_int_between(1, 1000), "an integer from 1 to 1000 (GPUs the NodePool may hold)"),
        Rule("amiAlias", lambda v: isinstance(v, str) and bool(_ALIAS.match(v)),
             "al2023@latest or a pinned al2023@vYYYYMMDD (AL2 and other families are refused)"),
        Rule("systemNodeInstanceType", lambda v: isinstance(v, str) and bool(_INSTANCE_TYPE.match(v)),
             "an EC2 instance type such as m6i.large"),
        Rule("systemNodeCount", is_int_between(1, 10), "an integer from 1 to 10"),
        Rule("endpointPublicAccess", lambda v: isinstance(v, bool), "true or false"),
        Rule("publicAccessCidrs", lambda v: _str_list(v) and len(v) >= 1
             and all(_is_cidr(x) and not x.endswith("/0") for x in v),
             "a non-empty list of IPv4 CIDRs such as 203.0.113.0/24, never 0.0.0.0/0 (the API endpoint would be open "
             "to the internet)"),
        Rule("vpcCidr", lambda v: isinstance(v, str) and _vpc_cidr_problem(v) is None,
             "a private IPv4 CIDR from /16 to /20 such as 10.64.0.0/16 (RFC 1918 or 100.64.0.0/10)"),
        Rule("maxReceiveCount", is_int_between(1, 1000), "an integer from 1 to 1000"),
        Rule("oldestMessageAlarmS", is_int_between(60, 1209600), "seconds from 60 to 1209600"),
        Rule("alarmEmails", lambda v: _str_list(v) and len(v) >= 1 and all(_EMAIL.match(x) for x in v),
             "a non-empty list of e-mail addresses (the alarms are how silent failures reach a person)"),
        Rule("workloads", lambda v: isinstance(v, dict) and len(v) >= 1,
             "a mapping of workload name to its facts (itemsIndependent, ordered, stateful, modelLoadS, ...)"),
        Rule("pollingIntervalS", is_int_between(5, 3600), "seconds from 5 to 3600 (KEDA's ScaledJob pollingInterval)"),
        Rule("karpenterBatchIdleS", is_int_between(1, 600), "seconds from 1 to 600 (Karpenter batchIdleDuration)"),
        Rule("karpenterBatchMaxS", is_int_between(1, 600), "seconds from 1 to 600 (Karpenter batchMaxDuration)"),
        Rule("gpuInstanceStorePolicy", lambda v: v in ("RAID0", "none"),
             "RAID0 (local NVMe for kubelet and containerd) or none (the root volume)"),
        Rule("fastImagePull", lambda v: isinstance(v, bool), "true or false (nodeadm's FastImagePull feature gate)"),
        Rule("gpuNodeSsm", lambda v: isinstance(v, bool),
             "true or false (AmazonSSMManagedInstanceCore on the GPU node role: a Session Manager shell on GPU nodes)"),
        Rule("verifyImage", lambda v: isinstance(v, str) and image_digest_problem(v) is None,
             "an image with gpuburst installed, pinned by digest: <registry>/<repository>@sha256:<64 hex> (the "
             "VerifyRunner's hook Job runs `python -m gpuburst verify` in it)"),
    ]


def _workload_rules() -> list[Rule]:
    number = lambda lo, hi: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi)  # noqa: E731
    boolean = lambda v: isinstance(v, bool)  # noqa: E731
    return [
        Rule("itemsIndependent", boolean, "true or false"),
        Rule("ordered", boolean, "true or false"),
        Rule("stateful", boolean, "true or false"),
        Rule("modelLoadS", number(0, 3600), "seconds from 0 to 3600"),
        Rule("secondsPerItem", number(0.001, 21600), "seconds from 0.001 to 21600"),
        Rule("burstItems", is_int_between(1, 1_000_000), "an integer from 1 to 1000000"),
        Rule("expectedProcessingS", is_int_between(1, 21600),
             "seconds from 1 to 21600 (twice this is the visibility timeout; SQS allows at most 43200)"),
        Rule("maxReplicas", is_int_between(1, 1000), "an integer from 1 to 1000"),
        Rule("pattern", lambda v: v is None or v in ("scaledjob", "consumer"), "scaledjob or consumer (or unset)"),
        *artifact_workload_rules(),
    ]


def _decode(raw: Any) -> Any:
    """Config values reach the program as strings (JSON for lists/maps/numbers/bools); decode them."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def parse_config(raw: Mapping[str, Any], *, stack: str = "dev") -> StackConfig:
    """Build the StackConfig from the full config map (`gpuburst:key` and `aws:region` keys).

    Unknown `gpuburst:` keys and bad values raise ConfigError in one line naming the key and the value, before any
    resource is registered.
    """
    prefix = NAMESPACE + ":"
    values: dict[str, Any] = {}
    for full_key, raw_value in raw.items():
        if not full_key.startswith(prefix):
            continue
        key = full_key[len(prefix):]
        if key not in _KEYS:
            close = did_you_mean(key, _KEYS)
            hint = f"did you mean {prefix}{close}?" if close else f"known keys: {catalogue.join(_KEYS)}"
            raise ConfigError(full_key, _decode(raw_value), f"unknown config key; {hint}")
        values[key] = _decode(raw_value)
        # A YAML value like `2` or `true` for a string field comes back decoded; keep version strings as strings.
        if key in ("kubernetesVersion", "karpenterVersion", "kedaVersion", "workerImageCuda") \
                and isinstance(values[key], (int, float)):
            values[key] = str(raw_value)
    values.setdefault("environment", stack)
    validate(values, _rules(values), prefix)
    check_image_keys(values)
    for instance in values.get("gpuInstanceTypes", ()):
        expectation = catalogue.instance_type_expectation(instance)
        if expectation is not None:
            raise ConfigError(prefix + "gpuInstanceTypes", instance, expectation)
    if "deploy" not in values:
        raise ConfigError(prefix + "deploy", None,
                          "required: who deploys and from where (deployerRoleArns, and deployCidrs or a runner): the "
                          "clinical buckets refuse every request from outside the VPC but the roles it names, the "
                          "deployer's too (README, \"Deploying for real\")")
    if "alarmEmails" not in values:
        raise ConfigError(prefix + "alarmEmails", None, "required: a non-empty list of e-mail addresses "
                                                        "(the alarms are how silent failures reach a person)")

    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        name = _KEYS[key]
        if name == "workloads":
            kwargs[name] = tuple(_parse_workload(n, w) for n, w in value.items())
        elif name == "warm_gpus":
            kwargs[name] = _parse_warm_gpus(value)
        elif name == "burst_budget":
            kwargs[name] = _parse_burst_budget(value)
        elif name == "deploy":
            kwargs[name] = parse_deploy_model(value, prefix + "deploy")
        elif name in _ARTIFACT_PARSERS:
            kwargs[name] = _ARTIFACT_PARSERS[name](value)
        elif isinstance(value, list):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    region = raw.get("aws:region")
    if region:
        kwargs["region"] = _decode(region)
    cfg = StackConfig(**kwargs)
    if cfg.endpoint_public_access and not cfg.public_access_cidrs:
        raise ConfigError(prefix + "publicAccessCidrs", None,
                          "required with endpointPublicAccess: true: the CIDRs that may reach the API endpoint, e.g. "
                          "[203.0.113.0/24] (unset, AWS would open it to 0.0.0.0/0)")
    if cfg.public_access_cidrs and not cfg.endpoint_public_access:
        raise ConfigError(prefix + "publicAccessCidrs", list(cfg.public_access_cidrs),
                          "unset unless endpointPublicAccess is true (there is no public endpoint to open)")
    check_deploy_reach(cfg, prefix)
    if cfg.karpenter_batch_max_s < cfg.karpenter_batch_idle_s:
        raise ConfigError(prefix + "karpenterBatchMaxS", cfg.karpenter_batch_max_s,
                          f"seconds >= karpenterBatchIdleS = {cfg.karpenter_batch_idle_s} (the idle window ends a "
                          "batch that the max window still allows)")
    if cfg.fast_image_pull and cfg.gpu_instance_store_policy != "RAID0":
        raise ConfigError(prefix + "fastImagePull", cfg.fast_image_pull,
                          f"false when gpuInstanceStorePolicy is {cfg.gpu_instance_store_policy!r}: a parallel pull "
                          f"onto the {catalogue.GP3_BASELINE_THROUGHPUT_MIBPS} MiB/s root volume is slower, not faster "
                          f"(nodeadm advises >= {catalogue.FAST_IMAGE_PULL_MIN_EBS_MIBPS} MiB/s)")
    if cfg.warm_gpus is not None and cfg.warm_gpus.count > cfg.gpu_limit:
        raise ConfigError(prefix + "warmGpus.count", cfg.warm_gpus.count,
                          f"at most gpuLimit = {cfg.gpu_limit} (a floor above the NodePool's limit never comes up)")
    consumers = [w.name for w in cfg.workloads if w.runs_as_consumer]
    if consumers and "on-demand" not in cfg.gpu_capacity_types:
        raise ConfigError(prefix + "gpuCapacityTypes", list(cfg.gpu_capacity_types),
                          f"a list including on-demand: workload {consumers[0]} runs as the persistent consumer, "
                          "which selects on-demand nodes only (a spot interruption would drop its per-study state)")
    problems = catalogue.combination_problems(kubernetes=cfg.kubernetes_version, karpenter=cfg.karpenter_version,
                                              keda=cfg.keda_version)
    if problems:
        raise ConfigError(prefix + "kubernetesVersion", cfg.kubernetes_version, problems[0])
    support = support_advisory(cfg)
    if support is not None and support.level == catalogue.MANDATORY:
        raise ConfigError(prefix + "kubernetesVersion", cfg.kubernetes_version, support.message)
    return cfg


def check_deploy_reach(cfg: StackConfig, prefix: str = NAMESPACE + ":") -> None:
    """ConfigError when the place `pulumi up` runs from cannot reach the cluster's API endpoint: with no runner, the
    deployers deploy from `deploy.deployCidrs`, so the endpoint must be public to (a superset of) each of them."""
    model = cfg.deploy
    if model is None or model.runner is not None:
        return
    if not cfg.endpoint_public_access:
        raise ConfigError(prefix + "endpointPublicAccess", cfg.endpoint_public_access,
                          "true (with publicAccessCidrs covering deploy.deployCidrs), or a deploy.runner: with the "
                          "API endpoint private and no in-VPC runner, `pulumi up` from the deploy CIDRs cannot reach "
                          "the cluster")
    opened = [ipaddress.ip_network(c) for c in cfg.public_access_cidrs]
    for c in model.deploy_cidrs:
        if not any(ipaddress.ip_network(c).subnet_of(o) for o in opened):  # type: ignore[arg-type]
            raise ConfigError(prefix + "publicAccessCidrs", list(cfg.public_access_cidrs),
                              f"a list covering deploy CIDR {c}: `pulumi up` from there must reach the API endpoint")


def support_advisory(cfg: StackConfig, on: Any = None) -> catalogue.SupportFinding | None:
    """The EKS support rule on the stack's Kubernetes version and upgrade policy (catalogue.kubernetes_support_finding,
    judged today or `on`): None when more than 90 days of standard support are left."""
    return catalogue.kubernetes_support_finding(cfg.kubernetes_version, cfg.upgrade_support_type, on)


def _parse_workload(name: str, facts: Any) -> WorkloadConfig:
    where = f"{NAMESPACE}:workloads.{name}"
    if not (isinstance(name, str) and _NAME.match(name)):
        raise ConfigError(f"{NAMESPACE}:workloads", name, "workload names are lower-case, 1-31 letters/digits/'-'")
    if not isinstance(facts, dict):
        raise ConfigError(where, facts, "a mapping of facts (itemsIndependent, ordered, stateful, modelLoadS, ...)")
    for key in facts:
        if key not in _WORKLOAD_KEYS:
            close = did_you_mean(key, _WORKLOAD_KEYS)
            if close:
                raise ConfigError(f"{where}.{key}", facts[key], f"unknown workload key; did you mean {where}.{close}?")
            raise ConfigError(f"{where}.{key}", facts[key], f"unknown workload key; known keys: "
                                                             f"{catalogue.join(_WORKLOAD_KEYS)}")
    validate(facts, _workload_rules(), where + ".")
    fields = {_WORKLOAD_KEYS[k]: v for k, v in facts.items()}
    if "model" in facts:
        fields["model"] = parse_model(where, facts["model"])
    workload = WorkloadConfig(name=name, **fields)
    if workload.pattern is not None:
        try:
            require_pattern(workload.facts(), workload.pattern, messages_per_job=workload.messages_per_job)
        except ConfigError as e:  # said in the stack's words: the key and value the user wrote
            fact = e.field.rpartition(".")[2]
            key = _FACT_KEYS.get(fact, fact)
            raise ConfigError(f"{where}.pattern", workload.pattern,
                              f"{where}.{key} is {json.dumps(e.value)}, so {e.expected}; set pattern: consumer, or "
                              "leave it out and let the chooser decide") from None
    check_batch(where, workload, written="messagesPerJob" in facts)
    return workload


_ARTIFACT_PARSERS = {"worker_image": parse_worker_image, "worker_build": parse_worker_build,
                     "worker_image_cuda": parse_worker_image_cuda}
"""StackConfig fields whose keys `artifacts` parses (the worker image)."""

_FACT_KEYS = {"ordered": "ordered", "state_across_messages": "stateful", "items_independent": "itemsIndependent"}
"""WorkloadFacts field -> the workload key that states it in the stack's config."""

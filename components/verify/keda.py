"""The `keda` check: KEDA's version, every TriggerAuthentication against the live CRD's schema, every ScaledJob's
health, and one test message that must make each ScaledJob create a Job.

A ScaledJob can say "configured" while it creates nothing (a TriggerAuthentication provider string that a KEDA
upgrade no longer accepts, a reconcile error logged every poll). So besides conditions and Warning events, this check
reads the operator's own log for errors about the ScaledJob, and finally proves scaling end to end with a probe
message (see docs/verify.md, "The probe message", for why it is safe next to real work)."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from .. import catalogue
from .context import Context
from .keda_identity import identity_owner_problems
from .keda_probe import _probe, name_of_ns, sqs_triggers
from .model import ERROR, FAIL, PASS, SKIPPED, CheckResult, condition, headline, name_of, ns_name, parse_time

NAME = "keda"


TA_CRD = "triggerauthentications.keda.sh"


CTA_CRD = "clustertriggerauthentications.keda.sh"


OPERATOR_SELECTOR = "app.kubernetes.io/name=keda-operator"


PAUSED_ANNOTATION = "autoscaling.keda.sh/paused"
"""Annotation that pauses a ScaledJob (KEDA creates no Jobs while it is "true")."""


def image_tag(image: str) -> str | None:
    """`ghcr.io/kedacore/keda:2.20.2@sha256:...` -> `2.20.2`; None when the reference has no tag."""
    ref = (image or "").split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def workload_versions(obj: dict[str, Any], chart: str) -> dict[str, str]:
    """Every version a Deployment/DaemonSet/CRD states about itself, keyed by where it was read.

    Sources: the `helm.sh/chart` label (`<chart>-<version>`), `app.kubernetes.io/version`, and each container
    image tag that parses as a version.
    """
    md = obj.get("metadata") or {}
    labels, annotations = md.get("labels") or {}, md.get("annotations") or {}
    found: dict[str, str] = {}
    for where, value in (("label helm.sh/chart", labels.get("helm.sh/chart")),
                         ("annotation helm.sh/chart", annotations.get("helm.sh/chart"))):
        if value and value.startswith(chart + "-"):
            found[where] = value[len(chart) + 1:]
    if labels.get("app.kubernetes.io/version"):
        found["label app.kubernetes.io/version"] = labels["app.kubernetes.io/version"]
    containers = ((((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [])
    for c in containers:
        tag = image_tag(c.get("image", ""))
        if tag:
            try:
                catalogue.parse_version(tag)
            except ValueError:
                continue
            found[f"image {c.get('image')}"] = tag
    return found


def canonical(version: str) -> str:
    """`v2.20.2` -> `2.20.2` (for comparing and for the catalogue)."""
    return "%d.%d.%d" % catalogue.parse_version(version)


def to_jsonschema(schema: Any) -> Any:
    """A Kubernetes structural schema as JSON Schema: `nullable: true` allows null; `x-kubernetes-*` dropped."""
    if isinstance(schema, list):
        return [to_jsonschema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: to_jsonschema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[key] = to_jsonschema(value)
        else:
            out[key] = value
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def served_schema(crd: dict[str, Any], version: str) -> dict[str, Any] | None:
    """The openAPIV3Schema of the CRD version named `version` when it is served, else None."""
    for v in ((crd.get("spec") or {}).get("versions") or []):
        if v.get("name") == version and v.get("served"):
            return ((v.get("schema") or {}).get("openAPIV3Schema")) or {}
    return None


def served_versions(crd: dict[str, Any]) -> list[str]:
    """Names of the versions the CRD serves."""
    return [v.get("name") for v in ((crd.get("spec") or {}).get("versions") or []) if v.get("served")]


def schema_errors(obj: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Every place `obj` breaks `schema`, as `path: message` (sorted, one line each)."""
    from jsonschema import Draft4Validator  # OpenAPI v3 schemas are JSON Schema draft 4 plus extensions

    validator = Draft4Validator(to_jsonschema(schema))
    out = []
    for err in validator.iter_errors(obj):
        path = ".".join(str(p) for p in err.absolute_path) or "(root)"
        out.append(f"{path}: {err.message}")
    return sorted(out)


def provider_enum(schema: dict[str, Any]) -> list[str] | None:
    """The `spec.podIdentity.provider` enum of a TriggerAuthentication schema, or None when it has none."""
    node = schema
    for key in ("spec", "podIdentity", "provider"):
        node = ((node or {}).get("properties") or {}).get(key)
    return list(node["enum"]) if node and "enum" in node else None


def judge_trigger_authentication(ta: dict[str, Any], crd: dict[str, Any] | None,
                                 keda_version: str) -> tuple[list[str], list[str]]:
    """(problems, evidence) for one (Cluster)TriggerAuthentication: the live CRD's schema, then the catalogue's
    view of its podIdentity.provider for the running KEDA version. Both are reported, because the live enum can
    still accept a provider the stack refuses (`aws-eks` is in KEDA 2.20's enum but deprecated)."""
    kind = ta.get("kind", "TriggerAuthentication")
    who = f"{kind} {ns_name(ta)}"
    problems: list[str] = []
    evidence: list[str] = []
    version = (ta.get("apiVersion") or "/").split("/", 1)[-1]
    provider = ((ta.get("spec") or {}).get("podIdentity") or {}).get("provider")
    if crd is None:
        problems.append(f"{who}: its CRD is not installed")
        return problems, evidence
    schema = served_schema(crd, version)
    if schema is None:
        problems.append(f"{who}: apiVersion {ta.get('apiVersion')} is not served by the live CRD {name_of(crd)} "
                        f"(served: {', '.join(served_versions(crd))})")
        return problems, evidence
    errs = schema_errors(ta, schema)
    for e in errs:
        problems.append(f"{who}: live CRD {name_of(crd)} ({version}) schema: {e}")
    if provider is not None:
        enum = provider_enum(schema)
        if enum is None:
            evidence.append(f"{who}: podIdentity.provider {provider!r}; live CRD {name_of(crd)} ({version}) "
                            "declares no provider enum")
        else:
            verdict = "accepts" if provider in enum else "REJECTS"
            evidence.append(f"{who}: podIdentity.provider {provider!r}: live CRD {name_of(crd)} ({version}) "
                            f"{verdict} it (enum: {', '.join(enum)})")
        problem = catalogue.keda_provider_problem(provider, keda_version)
        evidence.append(f"{who}: catalogue for KEDA {keda_version}: {problem or 'provider is fine'}")
        if problem:
            problems.append(f"{who}: {problem}")
    else:
        evidence.append(f"{who}: no podIdentity (secret or env based)" + ("" if not errs else ""))
    if not problems:
        evidence.append(f"{who}: valid against the live CRD {name_of(crd)} ({version})")
    return problems, evidence


def event_time(ev: dict[str, Any]) -> datetime | None:
    """When an Event last happened (series, lastTimestamp, eventTime, creationTimestamp, in that order)."""
    for text in (((ev.get("series") or {}).get("lastObservedTime")), ev.get("lastTimestamp"), ev.get("eventTime"),
                 (ev.get("metadata") or {}).get("creationTimestamp")):
        t = parse_time(text)
        if t is not None:
            return t
    return None


def recent_warnings(events: list[dict[str, Any]], kind: str, name: str, now: datetime,
                    window_s: float) -> list[dict[str, Any]]:
    """Warning events about `kind`/`name` that last happened within `window_s` of `now`."""
    out = []
    for ev in events:
        inv = ev.get("involvedObject") or {}
        if ev.get("type") != "Warning" or inv.get("kind") != kind or inv.get("name") != name:
            continue
        t = event_time(ev)
        if t is None or (now - t).total_seconds() <= window_s:
            out.append(ev)
    return out


def operator_errors(log_text: str, namespace: str, name: str) -> list[str]:
    """Error lines of the keda-operator log that name this ScaledJob (its name and its namespace both appear).

    Handles the console format (`...\\tERROR\\t...`) and the JSON format (`"level":"error"`).
    """
    out = []
    for line in (log_text or "").splitlines():
        low = line.lower()
        is_error = "\terror\t" in low or '"level":"error"' in low.replace(" ", "")
        if is_error and f'"{name}"' in line and f'"{namespace}"' in line:
            out.append(line.strip())
    return out


def scaledjob_problems(sj: dict[str, Any], warnings: list[dict[str, Any]], operator_lines: list[str],
                       auth_names: set[str],
                       cluster_auth_names: set[str]) -> tuple[list[str], list[str]]:
    """(problems, evidence) for one ScaledJob from its conditions, its recent Warning events, the operator's error
    lines about it, and whether its triggers' authenticationRefs exist."""
    who = f"ScaledJob {ns_name(sj)}"
    problems: list[str] = []
    evidence: list[str] = []
    conds = (sj.get("status") or {}).get("conditions") or []
    evidence.append(f"{who} conditions: " + (", ".join(
        f"{c.get('type')}={c.get('status')}" + (f" ({c.get('reason')})" if c.get("reason") else "")
        for c in conds) or "none"))
    ready = condition(sj, "Ready")
    if not ready or ready.get("status") != "True":
        problems.append(f"{who}: Ready={ready.get('status') if ready else 'absent'}"
                        + (f" reason {ready.get('reason')}: {ready.get('message', '')}".rstrip(": ")
                           if ready and ready.get("reason") else ""))
    for c in conds:
        if c.get("type") == "Ready":
            continue
        text = f"{c.get('type', '')} {c.get('reason', '')}".lower()
        if c.get("status") == "True" and (c.get("type") == "Paused" or "error" in text or "fail" in text):
            problems.append(f"{who}: {c.get('type')}=True reason {c.get('reason')}: {c.get('message', '')}"
                            .rstrip(": "))
    if str(((sj.get("metadata") or {}).get("annotations") or {}).get(PAUSED_ANNOTATION, "")).lower() == "true":
        problems.append(f"{who}: annotation {PAUSED_ANNOTATION}=true (scaling paused)")
    for ev in warnings:
        problems.append(f"{who}: Warning event {ev.get('reason')} x{ev.get('count') or 1}: "
                        f"{(ev.get('message') or '').strip()}")
    if operator_lines:
        problems.append(f"{who}: keda-operator logged {len(operator_lines)} error(s) about it; last: "
                        f"{operator_lines[-1][:300]}")
    for t in sqs_triggers(sj):
        ref = t["auth"] or {}
        if not ref:
            continue
        kind = ref.get("kind") or "TriggerAuthentication"
        names = cluster_auth_names if kind == "ClusterTriggerAuthentication" else auth_names
        if ref.get("name") not in names:
            problems.append(f"{who}: trigger authenticationRef {kind} {ref.get('name')!r} does not exist")
    if not sqs_triggers(sj):
        evidence.append(f"{who}: no aws-sqs-queue trigger")
    return problems, evidence


def judge_keda_static(operator: list[dict[str, Any]], ta_crd: dict[str, Any] | None, cta_crd: dict[str, Any] | None,
                      tas: list[dict[str, Any]], ctas: list[dict[str, Any]], scaled_jobs: list[dict[str, Any]],
                      events: list[dict[str, Any]], operator_log: str,
                      now: datetime, window_s: float, namespace: str) -> tuple[str | None, list[str], list[str],
                                                                                 dict[str, list[str]]]:
    """Everything but the probe: (KEDA version, problems, evidence, problems per ScaledJob name)."""
    problems: list[str] = []
    evidence: list[str] = []
    per_sj: dict[str, list[str]] = {}
    version = None
    if not operator:
        problems.append(f"no keda-operator Deployment ({OPERATOR_SELECTOR}) in the cluster")
    for dep in operator:
        found = workload_versions(dep, "keda")
        evidence.append(f"Deployment {ns_name(dep)}: " + ("; ".join(f"{k} says {v}" for k, v in found.items()) or
                                                          "states no version"))
        for v in found.values():
            p = catalogue.keda_version_problem(v)
            if p and p not in problems:
                problems.append(p)
        if found:
            version = canonical(next(iter(found.values())))
    judged_with = version or catalogue.KEDA_VERSION
    if version is None:
        evidence.append(f"KEDA version unknown: providers judged for the pinned KEDA {catalogue.KEDA_VERSION}")
    if ta_crd is None:
        problems.append(f"CRD {TA_CRD} is not installed")
    for ta in tas:
        ta.setdefault("kind", "TriggerAuthentication")
        p, e = judge_trigger_authentication(ta, ta_crd, judged_with)
        problems += p
        evidence += e
    for cta in ctas:
        cta.setdefault("kind", "ClusterTriggerAuthentication")
        p, e = judge_trigger_authentication(cta, cta_crd, judged_with)
        problems += p
        evidence += e
    if not tas and not ctas:
        evidence.append(f"no TriggerAuthentication in namespace {namespace} and no ClusterTriggerAuthentication")
    if not scaled_jobs:
        problems.append(f"no ScaledJob in namespace {namespace} (wrong --namespace?)")
    auth_names = {name_of(t) for t in tas}
    cluster_auth_names = {name_of(t) for t in ctas}
    owners, owner_evidence = identity_owner_problems(scaled_jobs, tas, ctas, judged_with)
    evidence += owner_evidence
    for sj in scaled_jobs:
        warnings = recent_warnings(events, "ScaledJob", name_of(sj), now, window_s)
        lines = operator_errors(operator_log, name_of_ns(sj), name_of(sj))
        p, e = scaledjob_problems(sj, warnings, lines, auth_names, cluster_auth_names)
        p += owners.get(name_of(sj), [])
        per_sj[name_of(sj)] = p
        problems += p
        evidence += e
    return version, problems, evidence, per_sj


def run(ctx: Context) -> CheckResult:
    """Read KEDA's operator, CRDs, TriggerAuthentications, ScaledJobs, events and log; judge; then probe each
    healthy ScaledJob through its queue."""
    from .aws import AwsError

    s = ctx.settings
    kube = ctx.kube
    operator = kube.list_deployments(OPERATOR_SELECTOR)
    ta_crd = kube.get_crd(TA_CRD)
    cta_crd = kube.get_crd(CTA_CRD)
    tas = kube.list_trigger_authentications(s.namespace) if ta_crd else []
    ctas = kube.list_cluster_trigger_authentications() if cta_crd else []
    sjs = kube.list_scaled_jobs(s.namespace)
    events = kube.list_events(s.namespace, field_selector="involvedObject.kind=ScaledJob")
    log = ""
    for dep in operator:
        ns = name_of_ns(dep)
        for pod in kube.list_pods(ns, label_selector=OPERATOR_SELECTOR):
            log += kube.read_pod_log(ns, name_of(pod), since_seconds=int(s.events_window_s), tail_lines=5000) + "\n"
    version, problems, evidence, per_sj = judge_keda_static(operator, ta_crd, cta_crd, tas, ctas, sjs, events, log,
                                                            ctx.clock.now(), s.events_window_s, s.namespace)
    known_queues = {w.queue_url for w in s.workloads}
    errors: list[str] = []
    unprobed: list[str] = []
    probed = 0
    for sj in sjs:
        triggers = [t for t in sqs_triggers(sj) if t["queue_url"]]
        for t in triggers:
            if known_queues and t["queue_url"] not in known_queues:
                # A ScaledJob can be Ready and scale perfectly on a queue nobody sends work to.
                problems.append(f"ScaledJob {ns_name(sj)} watches {t['queue_url']}, which is not one of the stack's "
                                f"queues ({', '.join(sorted(known_queues))})")
        if per_sj.get(name_of(sj)):
            evidence.append(f"ScaledJob {ns_name(sj)}: probe not sent (fix the problems above first)")
            continue
        if not triggers:
            evidence.append(f"ScaledJob {ns_name(sj)}: no aws-sqs-queue trigger with a queue URL: not probed")
            continue
        for t in triggers:
            try:
                ok, verdict, e = _probe(ctx, sj, t)
            except AwsError as err:  # verify's own SQS call refused or unanswered: the probe could not run
                ok, verdict, e = False, f"ScaledJob {ns_name(sj)}: probe could not run: {err}", []
                errors.append(verdict)
            evidence += e
            if ok is None:
                unprobed.append(verdict)
            elif ok:
                probed += 1
            elif verdict not in errors:
                problems.append(verdict)
    return verdict_of(version, len(tas) + len(ctas), len(sjs), probed, problems, errors, unprobed, evidence)


def verdict_of(version: str | None, n_auth: int, n_sj: int, probed: int, problems: list[str], errors: list[str],
               unprobed: list[str], evidence: list[str]) -> CheckResult:
    """fail when a defect was found; else error when a probe could not run; else skipped when no ScaledJob could be
    probed for a stated reason (activation threshold, maxReplicaCount); else pass (naming any not probed)."""
    if problems:
        return CheckResult(NAME, FAIL, headline(problems), problems + errors + [e for e in evidence
                                                                                 if e not in problems])
    if errors:
        return CheckResult(NAME, ERROR, headline(errors, "errors"), errors + evidence)
    if unprobed and not probed:
        return CheckResult(NAME, SKIPPED, headline(unprobed, "ScaledJobs not probed"), evidence)
    tail = f"; {len(unprobed)} not probed ({unprobed[0]})" if unprobed else ""
    return CheckResult(NAME, PASS, f"KEDA {version or '?'}: {n_auth} TriggerAuthentication(s) valid, {n_sj} "
                                   f"ScaledJob(s) Ready and each probed one created a Job for a probe message{tail}",
                       evidence)

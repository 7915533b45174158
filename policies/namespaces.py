"""Stack rules `namespace-pod-security` and `pod-security-level`: every namespace the plan creates states its Pod
Security admission level, and every pod the plan runs in it passes that level.

Pod Security admission (Kubernetes "Pod Security Admission", "Pod Security Standards") judges a pod by the labels of
its namespace: `pod-security.kubernetes.io/enforce` rejects a pod that breaks the level, `audit` and `warn` only
record or warn. A namespace without the label is admitted at the API server's default, `privileged` unless its
admission configuration says otherwise (EKS sets none): a namespace the stack creates without saying so runs anything.
`namespace-pod-security` therefore requires the `enforce` label, one of `privileged`, `baseline`, `restricted`, on
every `kubernetes:core/v1:Namespace` of the plan (and valid `audit`/`warn` levels where set), and refuses a Helm v3
Release with `createNamespace`, whose namespace carries no labels the stack sets.

`pod-security-level` then checks each pod template of the plan (chart-rendered objects included) in a namespace the
plan creates against that namespace's `enforce` level, with the Pod Security Standards' checks for Linux pods: so a
namespace labelled `restricted` whose pods would be rejected at admission fails the preview, not the rollout. It is
the standards' controls as written for v1.35; the API server's admission remains the authority.
"""
from __future__ import annotations

from typing import Any

from .declare import plan_policy
from .identity import workload_pods
from .plan import Res, describe_res, meta_name
from .resources import POD_TEMPLATE_PATHS, dig, fmt, join_path, k8s_kind
from .unknowns import UNKNOWN, unknown_message

NAME = "namespace-pod-security"
LEVEL_NAME = "pod-security-level"
NAMESPACE = ("core", "Namespace")
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
PREFIX = "pod-security.kubernetes.io/"
ENFORCE = PREFIX + "enforce"
MODES = ("enforce", "audit", "warn")
LEVELS = ("privileged", "baseline", "restricted")
"""The Pod Security Standards' levels, loosest first."""

BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                   "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
"""Capabilities `baseline` lets a container add (Pod Security Standards, Baseline, "Capabilities")."""
SAFE_SYSCTLS = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                          "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
                          "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                          "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"})
"""Sysctls `baseline` allows (Baseline, "Sysctls")."""
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
"""SELinux types `baseline` allows (Baseline, "SELinux")."""
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                                "projected", "secret"})
"""Volume types `restricted` allows (Restricted, "Volume Types")."""
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


# --------------------------------------------------------------------------------------------------------------------
# namespace-pod-security
# --------------------------------------------------------------------------------------------------------------------

def namespace_findings(resources: list[Res]) -> list[tuple[str | None, str]]:
    """(urn, message) for every Namespace without a valid explicit `enforce` level (or with an invalid audit/warn
    level), and every Helm v3 Release that creates its namespace."""
    out: list[tuple[str | None, str]] = []
    for r in resources:
        if k8s_kind(r.type) == NAMESPACE:
            out += [(r.urn, m) for m in _namespace_problems(r)]
        elif r.type == HELM_RELEASE and dig(r.props, "createNamespace").value is not None:
            create = dig(r.props, "createNamespace")
            if create.unknown:
                out.append((r.urn, unknown_message(f"Release {r.name} createNamespace",
                                                   "whether it creates a namespace without Pod Security labels")))
            elif create.value is True:
                ns = dig(r.props, "namespace").value
                out.append((r.urn, f"Release {r.name} createNamespace = True: Helm creates namespace {fmt(ns)} with no "
                                   f"labels, so no explicit {ENFORCE} level; declare a kubernetes:core/v1:Namespace "
                                   "with the label and set createNamespace false"))
    return out


def _namespace_problems(r: Res) -> list[str]:
    name = meta_name(r.props)
    who = f"Namespace {fmt(name)}"
    labels = dig(r.props, "metadata", "labels")
    if labels.unknown:
        return [unknown_message(f"{who} {labels.path}", "its Pod Security admission level")]
    values = labels.value if isinstance(labels.value, dict) else {}
    out = []
    for mode in MODES:
        key = PREFIX + mode
        value = values.get(key)
        if value is UNKNOWN:
            out.append(unknown_message(f"{who} metadata.labels[{key!r}]", "its Pod Security admission level"))
        elif value is None and mode == "enforce":
            out.append(f"{who} has no metadata.labels[{key!r}]: its pods are admitted at the API server's default "
                       "level (privileged unless its admission configuration says otherwise); set it to the "
                       f"strictest of {', '.join(reversed(LEVELS))} that its pods pass")
        elif value is not None and value not in LEVELS:
            out.append(f"{who} metadata.labels[{key!r}] = {fmt(value)}: not a Pod Security level; one of "
                       f"{', '.join(LEVELS)}")
    return out


# --------------------------------------------------------------------------------------------------------------------
# pod-security-level: the Pod Security Standards' checks
# --------------------------------------------------------------------------------------------------------------------

def _containers(pod: dict) -> list[tuple[str, Any]]:
    """(path, container) of every container of the pod spec, init and ephemeral ones included."""
    out = []
    for field in CONTAINER_LISTS:
        items = pod.get(field)
        if isinstance(items, list):
            out += [(f"{field}[{i}]", c) for i, c in enumerate(items)]
    return out


def _ctx(obj: Any) -> dict:
    ctx = obj.get("securityContext") if isinstance(obj, dict) else None
    return ctx if isinstance(ctx, dict) else {}


def baseline_problems(pod: dict[str, Any], base: str = "") -> list[str]:
    """`<field> = <value>: <why>` for every Baseline control the pod spec breaks."""
    at = lambda *keys: join_path(base, ".".join(str(k) for k in keys))  # noqa: E731
    out = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field) is True:
            out.append(f"{at(field)} = True: host namespaces")
    pod_ctx = _ctx(pod)
    for i, volume in enumerate(pod.get("volumes") or []):
        if isinstance(volume, dict) and "hostPath" in volume:
            out.append(f"{at(f'volumes[{i}]')}.hostPath: hostPath volumes")
    for i, sysctl in enumerate(pod_ctx.get("sysctls") or []):
        name = sysctl.get("name") if isinstance(sysctl, dict) else sysctl
        if name not in SAFE_SYSCTLS:
            out.append(f"{at(f'securityContext.sysctls[{i}].name')} = {fmt(name)}: not a safe sysctl")
    contexts = [("securityContext", pod_ctx)] + [(f"{p}.securityContext", _ctx(c)) for p, c in _containers(pod)]
    for path, ctx in contexts:
        if (dig(ctx, "seccompProfile", "type").value or "") == "Unconfined":
            out.append(f"{at(path)}.seccompProfile.type = 'Unconfined': seccomp must not be disabled")
        if (dig(ctx, "appArmorProfile", "type").value or "") == "Unconfined":
            out.append(f"{at(path)}.appArmorProfile.type = 'Unconfined': AppArmor must not be disabled")
        selinux = ctx.get("seLinuxOptions") if isinstance(ctx.get("seLinuxOptions"), dict) else {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            out.append(f"{at(path)}.seLinuxOptions = {fmt(selinux)}: custom SELinux user, role or type")
    for path, container in _containers(pod):
        ctx = _ctx(container)
        if ctx.get("privileged") is True:
            out.append(f"{at(path)}.securityContext.privileged = True: privileged container")
        added = dig(ctx, "capabilities", "add").value or []
        extra = [c for c in added if c not in BASELINE_CAPABILITIES] if isinstance(added, list) else [added]
        if extra:
            out.append(f"{at(path)}.securityContext.capabilities.add = {fmt(added)}: adds {fmt(extra)} beyond the "
                       "baseline set")
        if ctx.get("procMount") not in (None, "Default"):
            out.append(f"{at(path)}.securityContext.procMount = {fmt(ctx.get('procMount'))}: unmasked /proc")
        for j, port in enumerate(container.get("ports") or [] if isinstance(container, dict) else []):
            if isinstance(port, dict) and port.get("hostPort") not in (None, 0):
                out.append(f"{at(path)}.ports[{j}].hostPort = {fmt(port.get('hostPort'))}: host ports")
    return out


def restricted_problems(pod: dict[str, Any], base: str = "") -> list[str]:
    """`<field> = <value>: <why>` for every Restricted control (beyond Baseline's) the pod spec breaks."""
    at = lambda *keys: join_path(base, ".".join(str(k) for k in keys))  # noqa: E731
    out = []
    for i, volume in enumerate(pod.get("volumes") or []):
        kinds = [k for k in volume if k != "name"] if isinstance(volume, dict) else []
        bad = [k for k in kinds if k not in RESTRICTED_VOLUMES]
        if bad:
            out.append(f"{at(f'volumes[{i}]')}.{bad[0]}: restricted allows only "
                       f"{', '.join(sorted(RESTRICTED_VOLUMES))} volumes")
    pod_ctx = _ctx(pod)
    pod_non_root = pod_ctx.get("runAsNonRoot") is True
    pod_seccomp = dig(pod_ctx, "seccompProfile", "type").value in ("RuntimeDefault", "Localhost")
    if pod_ctx.get("runAsUser") == 0:
        out.append(f"{at('securityContext.runAsUser')} = 0: runs as root")
    for path, container in _containers(pod):
        ctx = _ctx(container)
        where = f"{at(path)}.securityContext"
        if ctx.get("allowPrivilegeEscalation") is not False:
            out.append(f"{where}.allowPrivilegeEscalation = {fmt(ctx.get('allowPrivilegeEscalation'))}: must be "
                       "False")
        non_root = ctx.get("runAsNonRoot")
        if non_root is False or (non_root is None and not pod_non_root):
            out.append(f"{where}.runAsNonRoot = {fmt(non_root)} (pod: {fmt(pod_ctx.get('runAsNonRoot'))}): must be "
                       "True")
        if ctx.get("runAsUser") == 0:
            out.append(f"{where}.runAsUser = 0: runs as root")
        seccomp = dig(ctx, "seccompProfile", "type").value
        if seccomp not in ("RuntimeDefault", "Localhost") and not (seccomp is None and pod_seccomp):
            out.append(f"{where}.seccompProfile.type = {fmt(seccomp)} (pod: "
                       f"{fmt(dig(pod_ctx, 'seccompProfile', 'type').value)}): RuntimeDefault or Localhost")
        dropped = dig(ctx, "capabilities", "drop").value
        if not (isinstance(dropped, list) and "ALL" in dropped):
            out.append(f"{where}.capabilities.drop = {fmt(dropped)}: must drop ALL")
        added = dig(ctx, "capabilities", "add").value or []
        if isinstance(added, list) and [c for c in added if c != "NET_BIND_SERVICE"]:
            out.append(f"{where}.capabilities.add = {fmt(added)}: only NET_BIND_SERVICE")
    return out


def pod_security_problems(pod: dict[str, Any], level: str, base: str = "") -> list[str]:
    """What keeps the pod spec `pod` (at `base`) from passing Pod Security `level`."""
    if level == "privileged":
        return []
    out = baseline_problems(pod, base)
    return out + restricted_problems(pod, base) if level == "restricted" else out


def _has_unknown(obj: Any) -> bool:
    if obj is UNKNOWN:
        return True
    if isinstance(obj, dict):
        return any(_has_unknown(v) for v in obj.values())
    if isinstance(obj, list):
        return any(_has_unknown(v) for v in obj)
    return False


def _security_fields(pod: dict) -> list[Any]:
    """The parts of a pod spec the standards judge (an unknown image or command is no business of theirs)."""
    fields = [pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC", "securityContext", "volumes")]
    for field in CONTAINER_LISTS:
        items = pod.get(field)
        fields += [items] if not isinstance(items, list) else [
            [c.get("securityContext"), c.get("ports")] if isinstance(c, dict) else c for c in items]
    return fields


def level_findings(resources: list[Res]) -> list[tuple[str | None, str]]:
    """(urn, message) for every pod template in a namespace the plan creates that breaks its `enforce` level."""
    levels: dict[str, str] = {}
    for r in resources:
        if k8s_kind(r.type) == NAMESPACE and isinstance(meta_name(r.props), str):
            level = dig(r.props, "metadata", "labels", ENFORCE).value
            if level in LEVELS:
                levels[meta_name(r.props)] = level
    out: list[tuple[str | None, str]] = []
    for r, ns, _sa, _path in workload_pods(resources):
        kind = k8s_kind(r.type)
        if ns not in levels or kind not in POD_TEMPLATE_PATHS:
            continue
        pod = dig(r.props, *POD_TEMPLATE_PATHS[kind])
        if not isinstance(pod.value, dict):
            continue
        level = levels[ns]
        if level != "privileged" and _has_unknown(_security_fields(pod.value)):
            out.append((r.urn, unknown_message(f"{describe_res(r)} {pod.path} (its security fields)",
                                               f"that its pods pass Pod Security {level!r}")))
            continue
        problems = pod_security_problems(pod.value, level, pod.path)
        if problems:
            out.append((r.urn, f"{describe_res(r)} in namespace {ns!r} (enforce: {level}) would be rejected at "
                               f"admission: {'; '.join(problems)}"))
    return out


POLICY = plan_policy(
    NAME, "Every Namespace the plan creates carries an explicit pod-security.kubernetes.io/enforce level (privileged, "
          "baseline or restricted); no Helm v3 Release creates its namespace.", namespace_findings)

LEVEL_POLICY = plan_policy(
    LEVEL_NAME, "Every pod template in a namespace the plan creates passes that namespace's Pod Security enforce "
                "level (the Pod Security Standards' baseline and restricted controls).", level_findings)

POLICIES = [POLICY, LEVEL_POLICY]

"""The thin Kubernetes access layer of `verify`: reads and the verify Job, as plain dicts exactly as the API sends them.

Nothing here judges anything; every call returns the API's JSON (`_preload_content=False`, parsed) so the checks'
pure functions see what `kubectl get -o json` shows. Connecting is done once, with a short connect timeout and no
retries, so a wrong or unreachable cluster fails at once in one line instead of after a retry storm.
"""
from __future__ import annotations

import errno
import json
import logging
import os
import re
import ssl
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from ..spec.verify_admission import ADMISSION_NAME
from .model import CouldNotRun


class KubeUnreachable(Exception):
    """The Kubernetes API cannot be used at all (no kubeconfig, no answer, refused credentials): one line."""


class KubeError(CouldNotRun):
    """One API call failed (forbidden, not served, a broken connection mid-run): one line naming the call."""


class KubeConflict(KubeError):
    """A write lost a race (409 Conflict / AlreadyExists): read again and retry."""


class _Capture(logging.Handler):
    """Collects the log records the kubernetes client writes while loading a kubeconfig (exec plugin errors),
    so they become part of the one-line error instead of stray stderr lines."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage().strip().replace("\n", " "))


def _reason(exc: BaseException) -> str:
    """A short human reason for a connection-level failure."""
    text = str(exc)
    inner = getattr(exc, "reason", None) or exc
    if isinstance(inner, urllib3.exceptions.NameResolutionError) or "Name or service not known" in text \
            or "nodename nor servname" in text:
        return "the host name does not resolve"
    # urllib3 2 makes NewConnectionError a subclass of ConnectTimeoutError: test it first.
    if isinstance(inner, urllib3.exceptions.NewConnectionError):
        cause = inner.__cause__ or inner.__context__
        if (isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED) or "refused" in text.lower():
            return "connection refused"
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower()
        return text.split(": ", 1)[-1][:200]
    if isinstance(inner, urllib3.exceptions.ConnectTimeoutError):
        return "no answer (connect timeout)"
    if isinstance(inner, urllib3.exceptions.ReadTimeoutError):
        return "the connection opened but the API did not answer (read timeout)"
    if isinstance(inner, (urllib3.exceptions.SSLError, ssl.SSLError)):
        return f"TLS handshake failed ({text.splitlines()[-1][:200]})"
    if isinstance(inner, urllib3.exceptions.ProtocolError):
        return "the server closed the connection without an answer (not a Kubernetes API, or a proxy in between?)"
    if "refused" in text.lower():
        return "connection refused"
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _api_message(e: ApiException) -> str:
    try:
        body = json.loads(e.body or "{}")
        msg = body.get("message") or ""
    except (ValueError, TypeError, AttributeError):
        msg = ""
    return f"{e.status} {e.reason}" + (f": {msg}" if msg else "")


_POLICY_DENIAL = re.compile(r"ValidatingAdmissionPolicy '(?P<policy>[^']+)'(?: with binding '[^']*')? denied request: "
                            r"(?P<message>.*)$")
"""How the API server words a ValidatingAdmissionPolicy's refusal (kubernetes apiserver, admission/plugin/policy/
validating/dispatcher.go: `ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s`, inside the Status
message `jobs.batch "NAME" is forbidden: ...`; code 403 for the `Forbidden` reason verify's rule gives, 422 without)."""
_NO_PARAMS = "no params found for policy binding"
"""The refusal's message when the binding's params object is missing (parameterNotFoundAction Deny)."""


def admission_refusal(message: str, namespace: str) -> str | None:
    """One line for the person on call when verify's own admission rule (spec/verify_admission.py,
    ValidatingAdmissionPolicy `gpuburst-verify-probes`) refused a probe Job: the rule's one-line message quoted, or
    that its params ConfigMap is missing; None for any other refusal (RBAC, another policy), left as the API said."""
    m = _POLICY_DENIAL.search(message or "")
    if m is None or m["policy"] != ADMISSION_NAME:
        return None
    why = m["message"].strip()
    head = f"verify's admission rule (ValidatingAdmissionPolicy {ADMISSION_NAME}) refused the probe Job: "
    if _NO_PARAMS in why:
        return head + (f"its params ConfigMap {namespace}/{ADMISSION_NAME} was not found (the stack's VerifyRunner "
                       f"declares it; the API server said: {why})")
    # The rule admits only the probes as this stack builds them: a refusal means verify's inputs are not the stack's.
    return head + f"{why} (give the stack's --image by digest and --namespace, or --stack)"


def _default_kubeconfig() -> str | None:
    env = os.environ.get("KUBECONFIG")
    if env:
        first = env.split(os.pathsep)[0]
        return first if Path(first).is_file() else None
    home = Path.home() / ".kube" / "config"
    return str(home) if home.is_file() else None


def connect(kubeconfig: str | None = None, context: str | None = None, *, connect_timeout_s: float = 5.0,
            request_timeout_s: float = 30.0) -> Kube:
    """Load the kubeconfig (or the in-cluster service account), ask the API for /version once, and return a Kube.

    Raises KubeUnreachable with one line when there is no kubeconfig, it cannot be used, or the API does not answer.
    """
    cfg = k8s.Configuration()
    source = kubeconfig
    if kubeconfig is None:
        source = _default_kubeconfig()
    capture = _Capture()
    root = logging.getLogger()
    root.addHandler(capture)
    try:
        if source is not None:
            if not Path(source).is_file():
                raise KubeUnreachable(f"no kubeconfig at {source} — pass --kubeconfig PATH or --stack NAME")
            k8s_config.load_kube_config(config_file=source, context=context, client_configuration=cfg,
                                        persist_config=False)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=cfg)
            source = "the in-cluster service account"
        else:
            raise KubeUnreachable("no kubeconfig found ($KUBECONFIG unset, no ~/.kube/config, not in a pod) — "
                                  "pass --kubeconfig PATH or --stack NAME")
    except ConfigException as e:
        raise KubeUnreachable(f"cannot use the kubeconfig {source}: {str(e).splitlines()[0]}") from None
    except KubeUnreachable:
        raise
    except Exception as e:  # YAML errors, bad base64, unreadable files: all mean "this kubeconfig is unusable"
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise KubeUnreachable(f"cannot read the kubeconfig {source}: {type(e).__name__}: {first}") from None
    finally:
        root.removeHandler(capture)
    host = cfg.host
    if capture.messages and not cfg.api_key and not cfg.cert_file:
        raise KubeUnreachable(f"cannot get credentials for the Kubernetes API at {host} from {source}: "
                              f"{capture.messages[-1]}")
    # No retries: a refused or silent endpoint must fail once, at once (urllib3 would otherwise retry 3 times).
    cfg.retries = False
    kube = Kube(k8s.ApiClient(cfg), host=host, connect_timeout_s=connect_timeout_s,
                request_timeout_s=request_timeout_s)
    try:
        kube.server_version = kube.version()
    except KubeError as e:
        raise KubeUnreachable(str(e)) from None
    return kube


class Kube:
    """Reads (and the verify Job's create/delete) against one cluster; every method returns API JSON dicts."""

    timeout: tuple[float, float]

    def __init__(self, api_client: Any, *, host: str, connect_timeout_s: float = 5.0,
                 request_timeout_s: float = 30.0) -> None:
        self.api_client = api_client
        self.host = host
        self.timeout = (connect_timeout_s, request_timeout_s)
        self.server_version: dict[str, Any] = {}
        self.core: k8s.CoreV1Api = k8s.CoreV1Api(api_client)
        self.apps: k8s.AppsV1Api = k8s.AppsV1Api(api_client)
        self.batch: k8s.BatchV1Api = k8s.BatchV1Api(api_client)
        self.custom: k8s.CustomObjectsApi = k8s.CustomObjectsApi(api_client)
        self.ext: k8s.ApiextensionsV1Api = k8s.ApiextensionsV1Api(api_client)
        self.versions: k8s.VersionApi = k8s.VersionApi(api_client)
        self.coordination: k8s.CoordinationV1Api = k8s.CoordinationV1Api(api_client)

    # -- plumbing ----------------------------------------------------------------------------------------------
    def _call(self, what: str, fn: Any, *args: Any, missing_ok: bool = False, raw: bool = False, **kwargs: Any):
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
        except AttributeError as e:
            # kubernetes-client turns a TLS failure into ApiException(status=0) whose body is None, then fails
            # decoding that body: recover the TLS reason from the exception being handled.
            ctx = e.__context__
            if isinstance(ctx, ApiException) and ctx.status == 0:
                reason = str(ctx.reason or "").splitlines()
                raise KubeError(f"cannot reach the Kubernetes API at {self.host}: TLS handshake failed "
                                f"({reason[-1][:200] if reason else 'SSL error'}) — is the kubeconfig for the "
                                "right cluster?") from None
            raise
        except ApiException as e:
            if e.status == 0:
                reason = str(e.reason or "").splitlines()
                raise KubeError(f"cannot reach the Kubernetes API at {self.host}: "
                                f"{reason[-1][:200] if reason else 'request failed'} — is the kubeconfig for the "
                                "right cluster?") from None
            if missing_ok and e.status == 404:
                return None
            if e.status == 409:
                raise KubeConflict(f"{what}: {_api_message(e)}") from None
            if e.status in (401, 403) and what == "GET /version":
                raise KubeError(f"the Kubernetes API at {self.host} refused the credentials ({_api_message(e)}) — "
                                "is the kubeconfig for the right cluster and identity?") from None
            raise KubeError(f"{what}: {_api_message(e)}") from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise KubeError(f"cannot reach the Kubernetes API at {self.host}: {_reason(e)} — is the kubeconfig "
                            "for the right cluster?") from None
        data = resp.data
        if raw:
            return data.decode("utf-8", errors="replace")
        return json.loads(data) if data else {}

    def _items(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> list[dict]:
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        return list((self._call(what, fn, *args, **kwargs) or {}).get("items") or [])

    # -- reads -------------------------------------------------------------------------------------------------
    def version(self) -> dict[str, Any]:
        """GET /version: `{"major": "1", "minor": "34+", "gitVersion": "v1.34.2-eks-..."}`."""
        return self._call("GET /version", self.versions.get_code)

    def list_nodes(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Nodes, optionally by label selector (`karpenter.sh/nodepool=gpu`)."""
        return self._items("list nodes", self.core.list_node, label_selector=label_selector)

    def list_pods(self, namespace: str | None = None, *, label_selector: str | None = None,
                  field_selector: str | None = None) -> list[dict[str, Any]]:
        """Pods of one namespace, or of all when namespace is None."""
        if namespace is None:
            return self._items("list pods", self.core.list_pod_for_all_namespaces, label_selector=label_selector,
                               field_selector=field_selector)
        return self._items(f"list pods in {namespace}", self.core.list_namespaced_pod, namespace,
                           label_selector=label_selector, field_selector=field_selector)

    def list_events(self, namespace: str, *, field_selector: str | None = None) -> list[dict[str, Any]]:
        """core/v1 Events of one namespace (e.g. `involvedObject.kind=ScaledJob,involvedObject.name=x`)."""
        return self._items(f"list events in {namespace}", self.core.list_namespaced_event, namespace,
                           field_selector=field_selector)

    def list_deployments(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Deployments of all namespaces, optionally by label selector."""
        return self._items("list deployments", self.apps.list_deployment_for_all_namespaces,
                           label_selector=label_selector)

    def list_daemonsets(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        """DaemonSets of all namespaces, optionally by label selector (the NVIDIA device plugin is one)."""
        return self._items("list daemonsets", self.apps.list_daemon_set_for_all_namespaces,
                           label_selector=label_selector)

    def get_crd(self, name: str) -> dict[str, Any] | None:
        """A CustomResourceDefinition (`triggerauthentications.keda.sh`), or None when it is not installed."""
        return self._call(f"get CRD {name}", self.ext.read_custom_resource_definition, name, missing_ok=True)

    def get_nodepool(self, name: str) -> dict[str, Any] | None:
        """The karpenter.sh/v1 NodePool, or None when absent."""
        return self._call(f"get NodePool {name}", self.custom.get_cluster_custom_object, "karpenter.sh", "v1",
                          "nodepools", name, missing_ok=True)

    def get_ec2nodeclass(self, name: str) -> dict[str, Any] | None:
        """The karpenter.k8s.aws/v1 EC2NodeClass, or None when absent."""
        return self._call(f"get EC2NodeClass {name}", self.custom.get_cluster_custom_object, "karpenter.k8s.aws",
                          "v1", "ec2nodeclasses", name, missing_ok=True)

    def list_nodeclaims(self) -> list[dict[str, Any]]:
        """karpenter.sh/v1 NodeClaims (cluster-scoped; [] when the CRD is not served)."""
        data = self._call("list NodeClaims", self.custom.list_cluster_custom_object, "karpenter.sh", "v1",
                          "nodeclaims", missing_ok=True)
        return list((data or {}).get("items") or [])

    def list_trigger_authentications(self, namespace: str) -> list[dict[str, Any]]:
        """keda.sh/v1alpha1 TriggerAuthentications of one namespace ([] when the CRD is not served)."""
        data = self._call(f"list TriggerAuthentications in {namespace}",
                          self.custom.list_namespaced_custom_object, "keda.sh", "v1alpha1", namespace,
                          "triggerauthentications", missing_ok=True)
        return list((data or {}).get("items") or [])

    def list_cluster_trigger_authentications(self) -> list[dict[str, Any]]:
        """keda.sh/v1alpha1 ClusterTriggerAuthentications ([] when the CRD is not served)."""
        data = self._call("list ClusterTriggerAuthentications", self.custom.list_cluster_custom_object,
                          "keda.sh", "v1alpha1", "clustertriggerauthentications", missing_ok=True)
        return list((data or {}).get("items") or [])

    def list_scaled_jobs(self, namespace: str) -> list[dict[str, Any]]:
        """keda.sh/v1alpha1 ScaledJobs of one namespace ([] when the CRD is not served)."""
        data = self._call(f"list ScaledJobs in {namespace}", self.custom.list_namespaced_custom_object,
                          "keda.sh", "v1alpha1", namespace, "scaledjobs", missing_ok=True)
        return list((data or {}).get("items") or [])

    def read_pod_log(self, namespace: str, name: str, *, container: str | None = None,
                     tail_lines: int | None = None, since_seconds: int | None = None) -> str:
        """The pod's log as text ('' when the pod is gone)."""
        kwargs = {k: v for k, v in (("container", container), ("tail_lines", tail_lines),
                                    ("since_seconds", since_seconds)) if v is not None}
        text = self._call(f"read log of pod {namespace}/{name}", self.core.read_namespaced_pod_log, name,
                          namespace, missing_ok=True, raw=True, **kwargs)
        return text or ""

    # -- jobs --------------------------------------------------------------------------------------------------
    def list_jobs(self, namespace: str, *, label_selector: str | None = None) -> list[dict[str, Any]]:
        """batch/v1 Jobs of one namespace."""
        return self._items(f"list jobs in {namespace}", self.batch.list_namespaced_job, namespace,
                           label_selector=label_selector)

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One Job, or None when it is gone."""
        return self._call(f"get job {namespace}/{name}", self.batch.read_namespaced_job, name, namespace,
                          missing_ok=True)

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create a Job from a manifest dict; returns the created object. A refusal by verify's admission rule is
        reported as such (admission_refusal), not as the API's generic `forbidden`."""
        try:
            return self._call(f"create job in {namespace}", self.batch.create_namespaced_job, namespace, manifest)
        except KubeConflict:
            raise
        except KubeError as e:
            friendly = admission_refusal(str(e), namespace)
            if friendly is None:
                raise
            raise KubeError(friendly) from None

    def delete_job(self, namespace: str, name: str) -> bool:
        """Delete a Job and (in the background) its pods; False when it was already gone."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        out = self._call(f"delete job {namespace}/{name}", self.batch.delete_namespaced_job, name, namespace,
                         body=body, missing_ok=True)
        return out is not None

    # -- the run lock (coordination.k8s.io/v1 Lease) ---------------------------------------------------------------
    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One Lease, or None when there is none."""
        return self._call(f"get lease {namespace}/{name}", self.coordination.read_namespaced_lease, name, namespace,
                          missing_ok=True)

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a Lease; KubeConflict when it already exists."""
        return self._call(f"create lease in {namespace}", self.coordination.create_namespaced_lease, namespace, body)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Replace a Lease (its metadata.resourceVersion must be current, else KubeConflict)."""
        return self._call(f"replace lease {namespace}/{name}", self.coordination.replace_namespaced_lease, name,
                          namespace, body)

    def delete_lease(self, namespace: str, name: str) -> bool:
        """Delete a Lease; False when it was already gone."""
        return self._call(f"delete lease {namespace}/{name}", self.coordination.delete_namespaced_lease, name,
                          namespace, missing_ok=True) is not None

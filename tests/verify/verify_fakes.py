"""Helpers of the verify tests: recorded API objects, an in-memory cluster (FakeKube), a fake clock, and a real
HTTP server that answers Kubernetes API paths from a FakeKube (so kube.py and the CLI run over the wire)."""
from __future__ import annotations

import copy
import json
import re
import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

FIXTURES = Path(__file__).parent / "fixtures"
NOW = datetime(2026, 11, 2, 10, 0, 0, tzinfo=timezone.utc)
"""The moment the recorded objects were 'read' (their timestamps are relative to it)."""


def load(name: str) -> Any:
    """A recorded API object (JSON or YAML) or text file from tests/verify/fixtures."""
    path = FIXTURES / name
    if path.suffix == ".json":
        return json.loads(path.read_text())
    if path.suffix in (".yaml", ".yml"):
        return yaml.safe_load(path.read_text())
    return path.read_text()


def items(name: str) -> list[dict]:
    """The items of a recorded *List object."""
    return load(name)["items"]


def at_pin(obj: dict, chart: str, recorded: str) -> dict:
    """A recorded object restamped at the catalogue's pin for `chart` (labels and image tags), so passing scenarios
    follow the catalogue when a pin moves instead of restating a version in a test."""
    from components import catalogue

    return json.loads(json.dumps(obj).replace(recorded, catalogue.CHARTS[chart].version))


RECORDED: dict[str, tuple[str, str]] = {
    "karpenter": ("deployment_karpenter_1.14.1.json", "1.14.1"),
    "keda": ("deployment_keda_2.20.2.json", "2.20.2"),
    "nvidia-device-plugin": ("daemonset_nvidia_device_plugin.json", "0.18.0"),
}
"""chart -> (fixture, the version it was recorded at): what `pinned` restamps."""


def pinned(chart: str) -> dict:
    """The recorded Deployment/DaemonSet of `chart`, restamped at the catalogue's pin."""
    name, recorded = RECORDED[chart]
    return at_pin(load(name), chart, recorded)


def server_at(minor: str, patch: int = 2) -> dict:
    """The recorded /version answer (version_1.35.json) restamped at another Kubernetes minor, e.g. `1.34`."""
    server = load("version_1.35.json")
    major, minor_n = minor.split(".")
    server.update({"major": major, "minor": f"{minor_n}+", "emulationMajor": major, "emulationMinor": minor_n,
                   "minCompatibilityMinor": str(int(minor_n) - 1),
                   "gitVersion": f"v{minor}.{patch}-eks-113cf36"})
    return server


def pinned_server() -> dict:
    """The recorded /version answer, restamped at the catalogue's Kubernetes pin."""
    from components import catalogue

    return server_at(catalogue.KUBERNETES_VERSION)


def karpenter_101_swap_cluster(**kw: Any) -> FakeKube:
    """The Karpenter 1.0.1 AMI swap with the GPU pool at zero: Karpenter 1.0.1's Deployment and controller pod, the
    NodePool `gpu` (Ready=True) and an EC2NodeClass `gpu` whose status.amis maps the Neuron image to
    `instance-gpu-count Exists` (Ready=True), and no GPU node; `kw` adds or replaces FakeKube arguments."""
    args: dict[str, Any] = dict(nodepools=[load("nodepool_gpu.json")],
                                nodeclasses=[load("ec2nodeclass_gpu_swapped.json")],
                                deployments=[load("deployment_karpenter_1.0.1.json")],
                                pods=[load("pod_karpenter_controller.json")], nodes=[])
    args.update(kw)
    return FakeKube(**args)


def load_crd(upstream: Path, filename: str) -> dict:
    """An upstream CRD file as the object the cluster would return for it."""
    docs = [d for d in yaml.safe_load_all((upstream / filename).read_text()) if d]
    return docs[0]


class FakeClock:
    """now() and monotonic() advance only when sleep() is called."""

    def __init__(self, start: datetime = NOW) -> None:
        self.t = 0.0
        self.start = start
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.t)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += max(seconds, 0.001)


def _match_labels(obj: dict, selector: str | None) -> bool:
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        k, _, v = term.partition("=")
        if labels.get(k.strip()) != v.strip():
            return False
    return True


def _field(obj: dict, path: str) -> Any:
    node: Any = obj
    for part in path.split("."):
        node = (node or {}).get(part) if isinstance(node, dict) else None
    return node


def _match_fields(obj: dict, selector: str | None) -> bool:
    if not selector:
        return True
    for term in selector.split(","):
        k, _, v = term.partition("=")
        if str(_field(obj, k.strip())) != v.strip():
            return False
    return True


class FakeKube:
    """An in-memory cluster with the same methods as components.verify.kube.Kube; records every mutating call.

    Hooks let a test play the cluster's part: `on_get_job(kube, ns, name)` runs before each get_job (advance the
    verify Job), `on_list_jobs(kube, ns)` before each list_jobs (KEDA creating a Job).
    """

    def __init__(self, *, nodes=(), pods=(), nodepools=(), nodeclasses=(), crds=(), tas=(), ctas=(), scaled_jobs=(),
                 events=(), deployments=(), daemonsets=(), jobs=(), logs: dict[str, str] | None = None,
                 version: dict | None = None, nodeclaims=()) -> None:
        cp = copy.deepcopy
        self.nodes = cp(list(nodes))
        self.pods = cp(list(pods))
        self.nodepools = {n["metadata"]["name"]: cp(n) for n in nodepools}
        self.nodeclasses = {n["metadata"]["name"]: cp(n) for n in nodeclasses}
        self.crds = {c["metadata"]["name"]: cp(c) for c in crds}
        self.tas = cp(list(tas))
        self.ctas = cp(list(ctas))
        self.scaled_jobs = cp(list(scaled_jobs))
        self.events = cp(list(events))
        self.deployments = cp(list(deployments))
        self.daemonsets = cp(list(daemonsets))
        self.jobs = cp(list(jobs))
        self.logs = dict(logs or {})
        self.nodeclaims = cp(list(nodeclaims))
        self.server_version = version or load("version_1.34.json")
        self.created: list[dict] = []
        self.deleted: list[str] = []
        self.on_get_job: Callable | None = None
        self.on_list_jobs: Callable | None = None
        self.job_admission: Callable[[dict], tuple[int, dict] | None] | None = None
        """Served over HTTP only: manifest -> (HTTP code, Status) when admission refuses the Job, None to admit."""
        self.host = "https://fake.example"
        self.leases: dict[tuple[str, str], dict] = {}
        """coordination.k8s.io/v1 Leases by (namespace, name); writes check metadata.resourceVersion like the API."""
        self.lease_writes: list[str] = []

    def version(self) -> dict:
        return self.server_version

    def list_nodes(self, label_selector=None):
        return [copy.deepcopy(n) for n in self.nodes if _match_labels(n, label_selector)]

    def list_pods(self, namespace=None, *, label_selector=None, field_selector=None):
        return [copy.deepcopy(p) for p in self.pods
                if (namespace is None or p["metadata"].get("namespace") == namespace)
                and _match_labels(p, label_selector) and _match_fields(p, field_selector)]

    def list_events(self, namespace, *, field_selector=None):
        return [copy.deepcopy(e) for e in self.events
                if (e.get("metadata") or {}).get("namespace", namespace) == namespace
                and _match_fields(e, field_selector)]

    def list_deployments(self, label_selector=None):
        return [copy.deepcopy(d) for d in self.deployments if _match_labels(d, label_selector)]

    def list_daemonsets(self, label_selector=None):
        return [copy.deepcopy(d) for d in self.daemonsets if _match_labels(d, label_selector)]

    def get_crd(self, name):
        return copy.deepcopy(self.crds.get(name))

    def get_nodepool(self, name):
        return copy.deepcopy(self.nodepools.get(name))

    def get_ec2nodeclass(self, name):
        return copy.deepcopy(self.nodeclasses.get(name))

    def list_nodeclaims(self):
        return copy.deepcopy(self.nodeclaims)

    def list_trigger_authentications(self, namespace):
        return [copy.deepcopy(t) for t in self.tas if t["metadata"].get("namespace") == namespace]

    def list_cluster_trigger_authentications(self):
        return copy.deepcopy(self.ctas)

    def list_scaled_jobs(self, namespace):
        return [copy.deepcopy(s) for s in self.scaled_jobs if s["metadata"].get("namespace") == namespace]

    def read_pod_log(self, namespace, name, *, container=None, tail_lines=None, since_seconds=None):
        return self.logs.get(name, "")

    def list_jobs(self, namespace, *, label_selector=None):
        if self.on_list_jobs:
            self.on_list_jobs(self, namespace)
        return [copy.deepcopy(j) for j in self.jobs
                if j["metadata"].get("namespace") == namespace and _match_labels(j, label_selector)]

    def get_job(self, namespace, name):
        if self.on_get_job:
            self.on_get_job(self, namespace, name)
        return next((copy.deepcopy(j) for j in self.jobs if j["metadata"].get("namespace") == namespace
                     and j["metadata"]["name"] == name), None)

    def create_job(self, namespace, manifest):
        job = copy.deepcopy(manifest)
        job["metadata"].setdefault("namespace", namespace)
        job["metadata"]["uid"] = str(uuid.uuid4())
        job["metadata"]["creationTimestamp"] = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
        job.setdefault("status", {})
        self.jobs.append(job)
        self.created.append(copy.deepcopy(job))
        return copy.deepcopy(job)

    def delete_job(self, namespace, name):
        before = len(self.jobs)
        self.jobs = [j for j in self.jobs if not (j["metadata"].get("namespace") == namespace
                                                   and j["metadata"]["name"] == name)]
        self.pods = [p for p in self.pods if (p["metadata"].get("labels") or {}).get("job-name") != name]
        self.deleted.append(f"{namespace}/{name}")
        return len(self.jobs) < before

    def get_lease(self, namespace, name):
        return copy.deepcopy(self.leases.get((namespace, name)))

    def _store_lease(self, namespace, body, verb):
        from components.verify.kube import KubeConflict

        name = body["metadata"]["name"]
        current = self.leases.get((namespace, name))
        if verb == "create" and current is not None:
            raise KubeConflict(f"create lease in {namespace}: 409 Conflict: leases {name!r} already exists")
        if verb == "replace" and (current is None or body["metadata"].get("resourceVersion")
                                  != current["metadata"]["resourceVersion"]):
            raise KubeConflict(f"replace lease {namespace}/{name}: 409 Conflict: the object has been modified")
        lease = copy.deepcopy(body)
        lease["metadata"].update(namespace=namespace, resourceVersion=str(len(self.lease_writes) + 1))
        self.leases[(namespace, name)] = lease
        self.lease_writes.append(f"{verb} {namespace}/{name} {lease['spec'].get('holderIdentity')}")
        return copy.deepcopy(lease)

    def create_lease(self, namespace, body):
        return self._store_lease(namespace, body, "create")

    def replace_lease(self, namespace, name, body):
        return self._store_lease(namespace, body, "replace")

    def delete_lease(self, namespace, name):
        self.lease_writes.append(f"delete {namespace}/{name}")
        return self.leases.pop((namespace, name), None) is not None


# --------------------------------------------------------------------------------------------------------------------
# The same FakeKube, served over HTTP on Kubernetes API paths.
# --------------------------------------------------------------------------------------------------------------------

def _status(code: int, message: str) -> dict:
    reason = {404: "NotFound", 403: "Forbidden", 400: "BadRequest"}.get(code, "Error")
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def _as_list(kind: str, objs: list[dict]) -> dict:
    return {"kind": kind + "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": objs}


class _Handler(BaseHTTPRequestHandler):
    kube: FakeKube
    requests: list[str]

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def _send(self, code: int, body: Any) -> None:
        raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _route(self, method: str) -> None:
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        p = url.path.rstrip("/")
        self.requests.append(f"{method} {p}")
        k = self.kube
        ls, fs = q.get("labelSelector"), q.get("fieldSelector")

        def one(obj, what):
            self._send(200, obj) if obj is not None else self._send(404, _status(404, f"{what} not found"))

        routes: list[tuple[str, str, Callable[..., None]]] = [
            ("GET", r"/version", lambda: self._send(200, k.version())),
            ("GET", r"/api/v1/nodes", lambda: self._send(200, _as_list("Node", k.list_nodes(ls)))),
            ("GET", r"/api/v1/pods", lambda: self._send(200, _as_list("Pod", k.list_pods(
                None, label_selector=ls, field_selector=fs)))),
            ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/pods", lambda ns: self._send(200, _as_list("Pod", k.list_pods(
                ns, label_selector=ls, field_selector=fs)))),
            ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log",
             lambda ns, name: self._send(200, k.read_pod_log(ns, name))),
            ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/events",
             lambda ns: self._send(200, _as_list("Event", k.list_events(ns, field_selector=fs)))),
            ("GET", r"/apis/apps/v1/deployments", lambda: self._send(200, _as_list("Deployment",
                                                                                   k.list_deployments(ls)))),
            ("GET", r"/apis/apps/v1/daemonsets", lambda: self._send(200, _as_list("DaemonSet", k.list_daemonsets(ls)))),
            ("GET", r"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/(?P<name>[^/]+)",
             lambda name: one(k.get_crd(name), f"customresourcedefinitions {name!r}")),
            ("GET", r"/apis/karpenter.sh/v1/nodepools/(?P<name>[^/]+)",
             lambda name: one(k.get_nodepool(name), f"nodepools {name!r}")),
            ("GET", r"/apis/karpenter.k8s.aws/v1/ec2nodeclasses/(?P<name>[^/]+)",
             lambda name: one(k.get_ec2nodeclass(name), f"ec2nodeclasses {name!r}")),
            ("GET", r"/apis/karpenter.sh/v1/nodeclaims",
             lambda: self._send(200, _as_list("NodeClaim", k.list_nodeclaims()))),
            ("GET", r"/apis/keda.sh/v1alpha1/namespaces/(?P<ns>[^/]+)/triggerauthentications",
             lambda ns: self._send(200, _as_list("TriggerAuthentication", k.list_trigger_authentications(ns)))),
            ("GET", r"/apis/keda.sh/v1alpha1/clustertriggerauthentications",
             lambda: self._send(200, _as_list("ClusterTriggerAuthentication",
                                              k.list_cluster_trigger_authentications()))),
            ("GET", r"/apis/keda.sh/v1alpha1/namespaces/(?P<ns>[^/]+)/scaledjobs",
             lambda ns: self._send(200, _as_list("ScaledJob", k.list_scaled_jobs(ns)))),
            ("GET", r"/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs",
             lambda ns: self._send(200, _as_list("Job", k.list_jobs(ns, label_selector=ls)))),
            ("GET", r"/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs/(?P<name>[^/]+)",
             lambda ns, name: one(k.get_job(ns, name), f"jobs.batch {name!r}")),
            ("POST", r"/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs", lambda ns: self._create_job(ns)),
            ("GET", r"/apis/coordination.k8s.io/v1/namespaces/(?P<ns>[^/]+)/leases/(?P<name>[^/]+)",
             lambda ns, name: one(k.get_lease(ns, name), f"leases.coordination.k8s.io {name!r}")),
            ("POST", r"/apis/coordination.k8s.io/v1/namespaces/(?P<ns>[^/]+)/leases",
             lambda ns: self._lease_write(201, k.create_lease, ns)),
            ("PUT", r"/apis/coordination.k8s.io/v1/namespaces/(?P<ns>[^/]+)/leases/(?P<name>[^/]+)",
             lambda ns, name: self._lease_write(200, k.replace_lease, ns, name)),
            ("DELETE", r"/apis/coordination.k8s.io/v1/namespaces/(?P<ns>[^/]+)/leases/(?P<name>[^/]+)",
             lambda ns, name: self._send(200, _status(200, "deleted")) if k.delete_lease(ns, name)
             else self._send(404, _status(404, f"leases.coordination.k8s.io {name!r} not found"))),
            ("DELETE", r"/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs/(?P<name>[^/]+)",
             lambda ns, name: self._send(200, _status(200, "deleted")) if k.delete_job(ns, name)
             else self._send(404, _status(404, f"jobs.batch {name!r} not found"))),
        ]
        for m, pattern, fn in routes:
            match = re.fullmatch(pattern, p)
            if m == method and match:
                fn(**match.groupdict())
                return
        self._send(404, _status(404, f"the server could not find the requested resource ({method} {p})"))

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def _create_job(self, namespace: str) -> None:
        body = self._body()
        refused = self.kube.job_admission(body) if self.kube.job_admission else None
        if refused is not None:
            self._send(*refused)
        else:
            self._send(201, self.kube.create_job(namespace, body))

    def _lease_write(self, code: int, write: Callable, *args: str) -> None:
        from components.verify.kube import KubeConflict

        try:
            self._send(code, write(*args, self._body()))
        except KubeConflict as e:
            self._send(409, _status(409, str(e)))

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._body()
        self._route("DELETE")


class FakeApiServer:
    """A FakeKube on http://127.0.0.1:<port>; `kubeconfig(tmp_path)` writes a kubeconfig pointing at it."""

    def __init__(self, kube: FakeKube) -> None:
        handler = type("Handler", (_Handler,), {"kube": kube, "requests": []})
        self.handler = handler
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def requests(self) -> list[str]:
        return self.handler.requests

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, folder: Path) -> Path:
        return write_kubeconfig(folder, self.url)


def write_kubeconfig(folder: Path, server: str) -> Path:
    """A kubeconfig with one cluster at `server` and a static token."""
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "users": [{"name": "test", "user": {"token": "not-a-real-token"}}],
    }))
    return path


def policy_denial(job: dict, policy: str, message: str, *, code: int = 403) -> tuple[int, dict]:
    """A ValidatingAdmissionPolicy refusing `job`, as the API server answers it (kubernetes apiserver, admission/plugin/
    policy/validating/dispatcher.go: admission.NewForbidden with the policy's message; code 403 for a validation whose
    reason is Forbidden, 422 for the default Invalid)."""
    name = job["metadata"]["name"]
    cause = f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: {message}"
    reason = "Forbidden" if code == 403 else "Invalid"
    return code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": f'jobs.batch "{name}" is forbidden: {cause}', "reason": reason,
                  "details": {"name": name, "group": "batch", "kind": "jobs", "causes": [{"message": cause}]},
                  "code": code}


def identity_probe_log(*, denied: dict[str, str] | None = None,
                       identity: str = "arn:aws:sts::123456789012:assumed-role/gpuburst-dev-slides-worker/eks-pod",
                       done: bool = True) -> str:
    """What the workload-identity probe script prints: one JSON line per call (`denied` maps a call to the error code
    it gets), the identity it ran as, and its end marker."""
    denied = denied or {}
    lines = []
    for call, resource in (("sts:GetCallerIdentity", ""), ("s3:PutObject", "s3://gpuburst-dev-results/results/k"),
                           ("s3:GetObject", "s3://gpuburst-dev-results/results/k"),
                           ("s3:DeleteObject", "s3://gpuburst-dev-results/results/k"),
                           ("sqs:GetQueueAttributes", "https://sqs.us-east-1.amazonaws.com/123456789012/q")):
        line: dict[str, Any] = {"call": call, "resource": resource, "ok": call not in denied}
        if call in denied:
            line.update(code=denied[call], message=f"User is not authorized to perform {call}")
        lines.append(json.dumps(line))
        if call == "sts:GetCallerIdentity" and call not in denied:
            lines.append(json.dumps({"identity": identity}))
    if done:
        lines.append(json.dumps({"done": True}))
    return "\n".join(lines) + "\n"


def finish_job(kube: FakeKube, name: str, log: str, *, succeeded: bool = True) -> None:
    """Play the cluster for a verify Job `name`: mark it Complete (or Failed), add its pod and the pod's log."""
    job = next((j for j in kube.jobs if j["metadata"]["name"] == name), None)
    if job is None or (job.get("status") or {}).get("conditions"):
        return
    kind = "Complete" if succeeded else "Failed"
    job["status"] = {"conditions": [{"type": kind, "status": "True"}], "succeeded" if succeeded else "failed": 1}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name + "-p0d", "namespace": job["metadata"]["namespace"],
                        "labels": {"job-name": name}},
           "spec": copy.deepcopy(job["spec"]["template"]["spec"]) | {"nodeName": "ip-10-0-1-10.ec2.internal"},
           "status": {"phase": "Succeeded" if succeeded else "Failed"}}
    kube.pods.append(pod)
    kube.logs[name + "-p0d"] = log


# --------------------------------------------------------------------------------------------------------------------
# The incident drills: a whole cluster (FakeKube) and its AWS (on moto), Karpenter's log in every layout, NodeClaims.
# --------------------------------------------------------------------------------------------------------------------

DRILL_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-worker@sha256:" + "c" * 64
DRILL_ROLE = "arn:aws:iam::123456789012:role/gpuburst-dev-slides-worker"
DRILL_CLUSTER = "gpuburst-dev"
DRILL_NVIDIA = "amazon-eks-node-al2023-x86_64-nvidia-1.34-v20261101"
AMI_ERROR = "resolving AMIs: no amis exist for the given selector terms"


def zap_console_line(time: str, level: str, message: str, context: dict | None = None, *,
                     logger: str | None = None, caller: str | None = None) -> str:
    """One line as zap's console encoder writes it (uber-go/zap zapcore/console_encoder.go, EncodeEntry): time,
    level, the logger name and the caller only when present, tab-joined; a tab and the message; a tab and the
    context as the JSON encoder's spaced form (`{"key": value, "k2": v2}`) when there is any."""
    columns = [time, level] + [c for c in (logger, caller) if c] + [message]
    line = "\t".join(columns)
    if context:
        line += "\t" + json.dumps(context, separators=(", ", ": "))
    return line


def karpenter_console_log(columns: tuple[str, ...] = (), errors: int = 12, error: str = AMI_ERROR) -> str:
    """Karpenter's controller log in a console layout: `columns` is () (no logger, no caller), ("logger",) or
    ("logger", "caller"); `errors` `Reconciler error` lines about EC2NodeClass gpu, one a minute from 09:48:30,
    between INFO lines (26 lines with the defaults, as in the drill)."""
    logger = "controller" if "logger" in columns else None
    lines = [zap_console_line("2026-11-02T09:45:06.101Z", "INFO", "starting server", {"commit": "bde00654"},
                              logger=logger, caller="operator/operator.go:120" if "caller" in columns else None),
             zap_console_line("2026-11-02T09:45:07.220Z", "INFO", "discovered karpenter version",
                              {"commit": "bde00654", "controller": "version", "version": "1.14.1"}, logger=logger,
                              caller="version/version.go:87" if "caller" in columns else None)]
    for i in range(errors):
        t = f"2026-11-02T09:{48 + i:02d}:30.{100 + i:03d}Z"
        lines.append(zap_console_line(t, "ERROR", "Reconciler error", {
            "commit": "bde00654", "controller": "nodeclass", "controllerGroup": "karpenter.k8s.aws",
            "controllerKind": "EC2NodeClass", "EC2NodeClass": {"name": "gpu"}, "namespace": "", "name": "gpu",
            "reconcileID": f"5a1c{i:04d}-0000-4000-8000-00000000{i:04d}", "error": error},
            logger=logger, caller="controller/controller.go:347" if "caller" in columns else None))
        lines.append(zap_console_line(t.replace(":30.", ":31."), "INFO", "found provisionable pod(s)", {
            "commit": "bde00654", "controller": "provisioner", "Pods": "gpuburst/slides-abcde", "duration": "9ms"},
            logger=logger, caller="provisioner/provisioner.go:123" if "caller" in columns else None))
    return "\n".join(lines) + "\n"


def stuck_nodeclaim(name: str = "gpu-x7k2p", *, minutes_old: int = 20, instance: str = "i-0a1b2c3d4e5f60718",
                    registered: bool = False) -> dict:
    """A NodeClaim launched (status.providerID names its instance) but never Registered: Karpenter v1's registration
    controller sets `Registered` Unknown with reason NodeNotFound, message "Node not registered with cluster"."""
    created = (NOW - timedelta(minutes=minutes_old)).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [{"type": "Launched", "status": "True", "reason": "Launched"},
                  {"type": "Registered", "status": "True", "reason": "Registered"} if registered else
                  {"type": "Registered", "status": "Unknown", "reason": "NodeNotFound",
                   "message": "Node not registered with cluster"},
                  {"type": "Initialized", "status": "Unknown", "reason": "NotRegistered" if not registered else
                   "NodeNotReady", "message": "Node not registered with cluster" if not registered else
                   "Node status is NotReady"}]
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "creationTimestamp": created,
                         "labels": {"karpenter.sh/nodepool": "gpu", "node.kubernetes.io/instance-type": "g5.xlarge"}},
            "status": {"providerID": f"aws:///us-east-1a/{instance}", "conditions": conditions}}


def drill_aws_world() -> tuple[str, list[str]]:
    """The stack's AWS on moto: the results bucket, the work queue, an NVIDIA image and two g5 instances booted from
    it, the EKS cluster, and the scaler role that may read the queue's attributes. Returns (queue URL, instance ids)."""
    import boto3

    from components import catalogue

    boto3.client("s3").create_bucket(Bucket="gpuburst-dev-results")
    url = boto3.client("sqs").create_queue(QueueName="gpuburst-dev-slides")["QueueUrl"]
    ec2 = boto3.client("ec2")
    ami = ec2.register_image(Name=DRILL_NVIDIA, Architecture="x86_64", RootDeviceName="/dev/xvda",
                             VirtualizationType="hvm")["ImageId"]
    ids = [i["InstanceId"] for i in ec2.run_instances(ImageId=ami, InstanceType="g5.xlarge", MinCount=2,
                                                      MaxCount=2)["Instances"]]
    boto3.client("eks").create_cluster(name=DRILL_CLUSTER, version=catalogue.KUBERNETES_VERSION,
                                       roleArn="arn:aws:iam::123456789012:role/gpuburst-dev-cluster",
                                       resourcesVpcConfig={"subnetIds": []})
    # the TriggerAuthentication's roleArn (scaler-iam reads its policies)
    scaler, queue = "gpuburst-dev-slides-scaler", "gpuburst-dev-slides"
    boto3.client("iam").create_role(RoleName=scaler, AssumeRolePolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": {
            "AWS": "arn:aws:iam::123456789012:role/keda-operator"}}]}))
    boto3.client("iam").put_role_policy(RoleName=scaler, PolicyName="queue-metrics", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sqs:GetQueueAttributes",
                                                "Resource": f"arn:aws:sqs:us-east-1:123456789012:{queue}"}]}))
    return url, ids


def drill_cluster(upstream_crds: Path, queue_url: str, instance_ids: list[str], *, trap: bool = False,
                  keda_reacts: bool | None = None, karpenter_log: str | None = None, nodes: list[dict] | None = None,
                  nodeclaims: list[dict] | None = None, gpu_job_runs: bool | None = None) -> FakeKube:
    """The whole cluster of a drill. `trap`: the seed's incident (Karpenter 1.0.1's AMI swap in status.amis, nodes
    without an allocatable GPU, 15 JSON reconcile errors, KEDA and the gpu-job never react); the keyword arguments
    override one part each: whether KEDA makes a Job for the probe, the Karpenter pod's log text, the GPU nodes, the
    NodeClaims, whether the gpu-job's pod runs nvidia-smi."""
    keda_reacts = (not trap) if keda_reacts is None else keda_reacts
    gpu_job_runs = (not trap) if gpu_job_runs is None else gpu_job_runs
    if nodes is None:
        nodes = items("nodes_gpu_not_allocatable.json") if trap else items("nodes_gpu_healthy.json")
    for node, iid in zip(nodes, instance_ids):
        zone = node["metadata"]["labels"]["topology.kubernetes.io/zone"]
        node["spec"]["providerID"] = f"aws:///{zone}/{iid}"
    sj = load("scaledjob_ready.json")
    sj["spec"]["triggers"][0]["metadata"]["queueURL"] = queue_url
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "nodepools.karpenter.sh"},
           "spec": {"versions": [{"name": "v1", "served": True, "storage": True}]}}
    karpenter_pod = load("pod_karpenter_controller.json")
    if karpenter_log is None:
        karpenter_log = load("karpenter_controller_ami_errors.log" if trap else "karpenter_controller_healthy.log")
    kube = FakeKube(
        nodes=nodes, pods=items("pods_device_plugin.json") + [karpenter_pod], nodepools=[load("nodepool_gpu.json")],
        nodeclasses=[load("ec2nodeclass_gpu_swapped.json" if trap else "ec2nodeclass_gpu.json")],
        logs={karpenter_pod["metadata"]["name"]: karpenter_log}, nodeclaims=nodeclaims or [],
        crds=[crd, load_crd(upstream_crds, "keda-v2.20.2-triggerauthentications.yaml")],
        tas=[load("triggerauthentication_aws.json")], scaled_jobs=[sj],
        deployments=[pinned("karpenter"), pinned("keda")],
        daemonsets=[pinned("nvidia-device-plugin")], version=pinned_server())

    looks = {"jobs": 0}

    def keda(k, ns):  # KEDA creates a Job for the probe a poll after it was sent
        looks["jobs"] += 1
        if looks["jobs"] == 3 and keda_reacts:
            k.jobs.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
                "name": "slides-x7p2q", "namespace": "gpuburst", "uid": "uid-slides-x7p2q",
                "ownerReferences": [{"kind": "ScaledJob", "name": "slides", "uid": sj["metadata"]["uid"]}]},
                "status": {"active": 1}})

    def verify_jobs(k, ns, name):
        if name.startswith("gpuburst-verify-id-"):  # the workload-identity probe: every call allowed
            finish_job(k, name, identity_probe_log())
            return
        job = next((j for j in k.jobs if j["metadata"]["name"] == name), None)
        if job is None or job.get("status", {}).get("conditions") or not gpu_job_runs:
            return
        job["status"] = copy.deepcopy(load("job_gpu_complete.json")["status"])
        pod = copy.deepcopy(load("pod_gpu_succeeded.json"))
        pod["metadata"]["name"] = name + "-abcde"
        pod["metadata"]["labels"]["job-name"] = name
        k.pods.append(pod)
        k.logs[name + "-abcde"] = load("nvidia_smi.log")

    kube.on_list_jobs = keda
    kube.on_get_job = verify_jobs
    return kube


def drill_argv(kubeconfig: Path, url: str) -> list[str]:
    """The command line of a drill (every stack value as a flag)."""
    return ["--kubeconfig", str(kubeconfig), "--queue-url", url, "--worker-role-arn", DRILL_ROLE,
            "--results-bucket", "gpuburst-dev-results", "--image", DRILL_IMAGE, "--nodepool", "gpu",
            "--namespace", "gpuburst", "--connect-timeout-s", "2"]

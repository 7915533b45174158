"""The admission rule that pins what the `verify` identity may start in the cluster: a ValidatingAdmissionPolicy and
its binding (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30) that admit, from the `gpuburst:verify` group
and the runner's ServiceAccount, only verify's own two probe Jobs as they are built, and refuse any other Job.

Why: verify's Role may create Jobs in the workload namespace, and the identity probe by design runs them as the
workloads' ServiceAccounts, whose Pod Identity roles read the slides; the same identity reads `pods/log`. Without a
rule on *what* it creates, anyone in the group (which a CI principal joins through an EKS access entry) could run a Job
that copies a slide and read it back through the Kubernetes API, around the S3 endpoint deny. RBAC cannot say what a
created object may contain; a ValidatingAdmissionPolicy can (CEL on `object.spec.template.spec`, matched on
`request.userInfo`). What the policy admits (every rule is one `validations` entry, `PROBE_VALIDATIONS`):

- only in the workload namespace, one pod (parallelism and completions at most 1);
- exactly one container, no init or ephemeral containers, no `args`;
- the image named in the params (the worker image, by digest) and nothing else;
- one of the two fixed commands: the gpu-job's `nvidia-smi` query (`GPU_PROBE_COMMAND`), or the identity probe's
  `python -c IDENTITY_PROBE_SCRIPT BUCKET KEY QUEUE_URL REGION` with the results bucket of the params, a key in the
  probe folder (`<prefix>gpuburst-verify/<32 hex>.identity.txt`), an SQS queue URL and a region name;
- as no ServiceAccount (the namespace's `default`) or one of the workloads' (the params list them);
- env only by the names the params list (the workloads' own plus HOME, TMPDIR, NVIDIA_DRIVER_CAPABILITIES), literal
  values only (no `valueFrom`, no `envFrom`); volumes only `emptyDir` (no hostPath, secret, projected, CSI or claim);
- no host namespaces, no privileged container, no added capability or privilege escalation, no API token.

The stack's own values (image, bucket, probe key pattern, ServiceAccounts, env names) are the params, a ConfigMap in
the workload namespace (`admission_params_manifest`) that verify cannot write (its RBAC has no `configmaps` verb):
so the expressions are constants the pack compares and a test evaluates with cel-python, and an image built during
the deployment (an Output) reaches the rule without making it unknown at preview. A missing ConfigMap refuses every
probe (`parameterNotFoundAction: Deny`), an expression error refuses the request (`failurePolicy: Fail`).

Why the log reads stay as they are (`pods/log` get in the workload namespace, `verify_runner.RBAC_RULES`): RBAC cannot
narrow them to verify's own pods (`resourceNames` needs names known in advance, and a Job's pods get generated names;
RBAC has no label selectors); a separate probe namespace cannot work either, since a pod can only run as a
ServiceAccount of its own namespace and the identity probe must run as the workloads'; and the keda check's evidence
(the worker's `verify probe <id> acknowledged` line) is in a worker pod's log, not in a pod of verify's. What makes the
read harmless is this rule: every pod the verify identity can start prints only the probe's own results (the fixed
script never prints an object's bytes), and the other pods of the namespace run commands the plan fixes (the workers,
which log no slide content, and the runner). The leak was never the log read but a Job running code of the caller's
choosing as a ServiceAccount that reads slides.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

VERIFY_GROUP = "gpuburst:verify"
"""Kubernetes group bound to verify's rights (an EKS access entry for a CI principal puts it there)."""
VERIFY_SERVICE_ACCOUNT = "gpuburst-verify"
"""The runner's ServiceAccount (and the name of its RBAC objects)."""
ADMISSION_NAME = "gpuburst-verify-probes"
"""Name of the ValidatingAdmissionPolicy, its binding and its params ConfigMap."""
PROBE_FOLDER = "gpuburst-verify/"
"""Folder under the results prefix where verify's probe objects go (`<prefix>gpuburst-verify/<id>.txt`)."""
PROBE_OBJECT_SUFFIX = ".txt"
"""Every probe object's key ends so; the worker's outputs never do (`.overlay.ome.tif`, `.preview.png`, `.json`)."""

GPU_PROBE_COMMAND = ("nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader")
"""The gpu-job's command (components/verify/gpujob.py builds its Job with it)."""

GPU_PROBE_ENV = (("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),)
"""The gpu-job's env: the NVIDIA runtime mounts nvidia-smi only when the utility capability is asked for."""

IDENTITY_PROBE_SCRIPT = r"""
import json, sys, uuid
bucket, key, queue_url, region = sys.argv[1:5]
def out(call, resource, fn):
    try:
        fn()
        print(json.dumps({"call": call, "resource": resource, "ok": True}), flush=True)
    except Exception as e:
        code = getattr(e, "response", {}).get("Error", {}).get("Code") or type(e).__name__
        print(json.dumps({"call": call, "resource": resource, "ok": False, "code": code,
                          "message": " ".join(str(e).split())[:300]}), flush=True)
try:
    import boto3
except Exception as e:
    print(json.dumps({"call": "import boto3", "resource": "", "ok": False, "code": type(e).__name__}), flush=True)
    sys.exit(3)
kw = {"region_name": region} if region else {}
who = {}
out("sts:GetCallerIdentity", "", lambda: who.update(boto3.client("sts", **kw).get_caller_identity()))
if who.get("Arn"):
    print(json.dumps({"identity": who["Arn"]}), flush=True)
s3 = boto3.client("s3", **kw)
uri = "s3://%s/%s" % (bucket, key)
body = ("gpuburst verify workload-identity probe " + key).encode()
if bucket:
    out("s3:PutObject", uri, lambda: s3.put_object(Bucket=bucket, Key=key, Body=body))
    def get():
        if s3.get_object(Bucket=bucket, Key=key)["Body"].read() != body:
            raise ValueError("read back different bytes than were written")
    out("s3:GetObject", uri, get)
    out("s3:DeleteObject", uri, lambda: s3.delete_object(Bucket=bucket, Key=key))
out("sqs:GetQueueAttributes", queue_url, lambda: boto3.client("sqs", **kw).get_queue_attributes(
    QueueUrl=queue_url, AttributeNames=["QueueArn"]))
print(json.dumps({"done": True}), flush=True)
"""
"""The identity probe, run as `python -c IDENTITY_PROBE_SCRIPT BUCKET KEY QUEUE_URL REGION` (argv, so nothing is
interpolated; components/verify/identity_probe.py builds its Job with it). It prints one JSON line per call and never
an object's bytes."""

PROBE_FIXED_ENV = ("HOME", "TMPDIR", "NVIDIA_DRIVER_CAPABILITIES")
"""Env names a probe sets itself (the identity probe's HOME and TMPDIR, the gpu-job's capability), besides the
workloads' own."""

QUEUE_URL_PATTERN = r"^$|^https://sqs[.][a-z0-9-]+[.]amazonaws[.]com(|[.]cn)/[0-9]{12}/[A-Za-z0-9_-]{1,80}([.]fifo)?$"
"""An SQS queue URL (or none): the identity probe's GetQueueAttributes argument."""
REGION_PATTERN = r"^$|^[a-z]{2}(-[a-z]+)+-[0-9]+$"
"""An AWS region name (or none)."""

ENV_KEY_PREFIX = "env."
"""Params key prefix of an allowed env name (`env.QUEUE_URL`)."""
SERVICE_ACCOUNT_KEY_PREFIX = "serviceAccount."
"""Params key prefix of an allowed ServiceAccount (`serviceAccount.slides-worker`)."""


def cel_string(text: str) -> str:
    """A CEL string literal for `text`: JSON's string escapes are also CEL's."""
    return json.dumps(text, ensure_ascii=True)


def cel_list(items: Iterable[str]) -> str:
    """A CEL list literal of strings."""
    return "[" + ", ".join(cel_string(i) for i in items) + "]"


def probe_username(namespace: str) -> str:
    """The Kubernetes username of the runner's ServiceAccount in `namespace`."""
    return f"system:serviceaccount:{namespace}:{VERIFY_SERVICE_ACCOUNT}"


def identity_condition(namespace: str) -> str:
    """The matchCondition selecting requests from the verify identity: the group, or the runner's ServiceAccount."""
    return (f"(has(request.userInfo.groups) && {cel_string(VERIFY_GROUP)} in request.userInfo.groups) || "
            f"request.userInfo.username == {cel_string(probe_username(namespace))}")


_IDENTITY_COMMAND = (
    "(size(c.command) == 7 ? (c.command[0] == 'python' && c.command[1] == '-c' && c.command[2] == "
    + cel_string(IDENTITY_PROBE_SCRIPT) + " && c.command[3] == params.data.resultsBucket && "
    "c.command[4].matches(params.data.probeKeyPattern) && c.command[5].matches(" + cel_string(QUEUE_URL_PATTERN)
    + ") && c.command[6].matches(" + cel_string(REGION_PATTERN) + ")) : false)")
"""The identity probe's command, parenthesised: a CEL conditional binds looser than `||`."""

PROBE_VALIDATIONS: tuple[tuple[str, str], ...] = (
    ("request.namespace == params.metadata.namespace",
     "verify may create Jobs only in the workload namespace"),
    ("(!has(object.spec.parallelism) || object.spec.parallelism <= 1) && "
     "(!has(object.spec.completions) || object.spec.completions <= 1)",
     "a verify probe Job runs one pod"),
    ("size(variables.pod.containers) == 1 && (!has(variables.pod.initContainers) || "
     "size(variables.pod.initContainers) == 0) && !has(variables.pod.ephemeralContainers)",
     "a verify probe runs exactly one container and no init or ephemeral container"),
    ("variables.pod.containers.all(c, c.image == params.data.image && c.image.matches('@sha256:[0-9a-f]{64}$'))",
     "a verify probe runs only the worker image named in the admission params, by digest"),
    ("variables.pod.containers.all(c, (!has(c.args) || size(c.args) == 0) && (c.command == "
     + cel_list(GPU_PROBE_COMMAND) + " || " + _IDENTITY_COMMAND + "))",
     "a verify probe runs only the gpu-job's nvidia-smi query or the identity probe's fixed script on a probe key"),
    ("(!has(variables.pod.serviceAccountName) || variables.pod.serviceAccountName == 'default' || "
     f"('{SERVICE_ACCOUNT_KEY_PREFIX}' + variables.pod.serviceAccountName) in params.data) && "
     "(!has(variables.pod.serviceAccount) || variables.pod.serviceAccount == 'default' || "
     f"('{SERVICE_ACCOUNT_KEY_PREFIX}' + variables.pod.serviceAccount) in params.data)",
     "a verify probe runs as no ServiceAccount or as one of the workloads'"),
    ("variables.pod.containers.all(c, !has(c.envFrom) && (!has(c.env) || c.env.all(e, "
     f"('{ENV_KEY_PREFIX}' + e.name) in params.data && !has(e.valueFrom))))",
     "a verify probe sets only the workloads' and its own env names, as literal values"),
    ("!has(variables.pod.volumes) || variables.pod.volumes.all(v, has(v.emptyDir))",
     "a verify probe mounts emptyDir volumes only"),
    ("!(has(variables.pod.hostNetwork) && variables.pod.hostNetwork) && !(has(variables.pod.hostPID) && "
     "variables.pod.hostPID) && !(has(variables.pod.hostIPC) && variables.pod.hostIPC)",
     "a verify probe uses no host namespace"),
    ("variables.pod.containers.all(c, !has(c.securityContext) || (!(has(c.securityContext.privileged) && "
     "c.securityContext.privileged) && !(has(c.securityContext.allowPrivilegeEscalation) && "
     "c.securityContext.allowPrivilegeEscalation) && !(has(c.securityContext.capabilities) && "
     "has(c.securityContext.capabilities.add) && size(c.securityContext.capabilities.add) > 0)))",
     "a verify probe runs unprivileged, adds no capability and cannot escalate"),
    ("has(variables.pod.automountServiceAccountToken) && variables.pod.automountServiceAccountToken == false",
     "a verify probe mounts no Kubernetes API token"),
)
"""(CEL expression, message) of every rule the policy applies to a Job from the verify identity (`variables.pod` is
`object.spec.template.spec`). Constants: the stack's values are in the params."""

PROBE_VARIABLES = (("pod", "object.spec.template.spec"),)
"""The policy's variables (name, expression)."""


def probe_key_pattern(results_prefix: str) -> str:
    """The RE2 pattern of the identity probe's object key under `results_prefix`:
    `^results/gpuburst-verify/[0-9a-f]{32}[.]identity[.]txt$` for `results/`."""
    prefix = results_prefix if not results_prefix or results_prefix.endswith("/") else results_prefix + "/"
    return f"^{re.escape(prefix + PROBE_FOLDER)}[0-9a-f]{{32}}[.]identity[.]txt$"


def admission_policy_manifest(namespace: str) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy: Jobs created (or updated) by the verify identity must pass PROBE_VALIDATIONS,
    with the params ConfigMap of `namespace`. Other callers' Jobs (KEDA's, the deployer's) are not matched."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": ADMISSION_NAME, "labels": {"app.kubernetes.io/name": VERIFY_SERVICE_ACCOUNT,
                                                        "app.kubernetes.io/part-of": "gpuburst"}},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["*"],
                                                    "operations": ["CREATE", "UPDATE"], "resources": ["jobs"]}]},
            "matchConditions": [{"name": "verify-identity", "expression": identity_condition(namespace)}],
            "variables": [{"name": n, "expression": e} for n, e in PROBE_VARIABLES],
            "validations": [{"expression": e, "message": m, "reason": "Forbidden"} for e, m in PROBE_VALIDATIONS],
        },
    }


def admission_binding_manifest(namespace: str) -> dict[str, Any]:
    """The binding: the policy applies everywhere (no namespace or object selector), denies, and reads its params
    from the ConfigMap in `namespace` (none there: every verify Job is refused)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": ADMISSION_NAME, "labels": {"app.kubernetes.io/name": VERIFY_SERVICE_ACCOUNT,
                                                        "app.kubernetes.io/part-of": "gpuburst"}},
        "spec": {"policyName": ADMISSION_NAME, "validationActions": ["Deny"],
                 "paramRef": {"name": ADMISSION_NAME, "namespace": namespace, "parameterNotFoundAction": "Deny"}},
    }


def admission_params_data(*, image: Any, results_bucket: Any, results_prefix: str, service_accounts: Iterable[str],
                          env_names: Iterable[str]) -> dict[str, Any]:
    """The params ConfigMap's data: `image` and `resultsBucket` (may be Outputs), `probeKeyPattern`, and one empty
    key per allowed ServiceAccount (`serviceAccount.<name>`) and env name (`env.<NAME>`, PROBE_FIXED_ENV included)."""
    data: dict[str, Any] = {"image": image, "resultsBucket": results_bucket,
                            "probeKeyPattern": probe_key_pattern(results_prefix)}
    data.update({f"{SERVICE_ACCOUNT_KEY_PREFIX}{sa}": "" for sa in sorted(set(service_accounts))})
    data.update({f"{ENV_KEY_PREFIX}{n}": "" for n in sorted(set(env_names) | set(PROBE_FIXED_ENV))})
    return data


def admission_params_manifest(namespace: str, data: dict[str, Any]) -> dict[str, Any]:
    """The params ConfigMap (`admission_params_data`) in the workload namespace."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": ADMISSION_NAME, "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": VERIFY_SERVICE_ACCOUNT,
                                    "app.kubernetes.io/part-of": "gpuburst"}},
            "data": data}

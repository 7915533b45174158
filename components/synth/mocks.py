"""Pulumi mocks that record every registration and answer with realistic outputs, for offline synth and tests."""
from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as _mocks
from pulumi.runtime import rpc
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

FAKE_ACCOUNT = "123456789012"
"""The account id every mocked ARN uses: AWS's documentation placeholder, obviously not a real account."""

UNKNOWN = "<unknown during preview>"
"""How a value that is unknown during preview is written into a plan."""


def _slug(name: str) -> str:
    return name.replace("_", "-")[:63]


def _kubeconfig(cluster: str, region: str) -> dict:
    endpoint = f"https://{'0' * 32}.gr7.{region}.eks.amazonaws.com"
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMOCK\n-----END CERTIFICATE-----\n").decode()
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "aws",
        "clusters": [{"name": "kubernetes", "cluster": {"server": endpoint, "certificate-authority-data": ca}}],
        "contexts": [{"name": "aws", "context": {"cluster": "kubernetes", "user": "aws"}}],
        "users": [{"name": "aws", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster, "--region", region, "--output", "json"]}}}],
    }


class RealisticMocks(pulumi.runtime.Mocks):
    """Answers registrations and invokes with outputs shaped like AWS's, so no export renders as `None`."""

    def __init__(self, region: str = "us-east-1") -> None:
        self.region = region

    def _arn(self, service: str, resource: str, regional: bool = True) -> str:
        return f"arn:aws:{service}:{self.region if regional else ''}:{FAKE_ACCOUNT}:{resource}"

    def new_resource(self, args: _mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        t, name, inputs = args.typ, args.name, dict(args.inputs)
        physical = str(inputs.get("name") or _slug(name))
        out: dict[str, Any] = dict(inputs)
        rid = f"{physical}-id"
        if t == "eks:index:Cluster":
            cname = str(inputs.get("name") or physical)
            kc = _kubeconfig(cname, self.region)
            issuer = f"https://oidc.eks.{self.region}.amazonaws.com/id/{'0' * 32}"
            out.update({
                "kubeconfig": kc, "kubeconfigJson": json.dumps(kc),
                "oidcProviderArn": self._arn("iam", f"oidc-provider/{issuer[8:]}", regional=False),
                "oidcProviderUrl": issuer, "oidcIssuer": issuer[8:],
                "clusterSecurityGroupId": "sg-0a1b2c3d4e5f60001", "nodeSecurityGroupId": "sg-0a1b2c3d4e5f60002",
                "clusterName": cname,
            })
            rid = cname
        elif t == "aws:sqs/queue:Queue":
            qname = str(inputs.get("name") or physical)
            url = f"https://sqs.{self.region}.amazonaws.com/{FAKE_ACCOUNT}/{qname}"
            out.update({"arn": self._arn("sqs", qname), "url": url, "name": qname})
            rid = url
        elif t == "aws:s3/bucket:Bucket" or t == "aws:s3/bucketV2:BucketV2":
            bname = str(inputs.get("bucket") or physical)
            out.update({"arn": f"arn:aws:s3:::{bname}", "bucket": bname,
                        "bucketDomainName": f"{bname}.s3.amazonaws.com"})
            rid = bname
        elif t == "aws:ecr/repository:Repository":
            rname = str(inputs.get("name") or physical)
            out.update({"arn": self._arn("ecr", f"repository/{rname}"), "name": rname,
                        "repositoryUrl": f"{FAKE_ACCOUNT}.dkr.ecr.{self.region}.amazonaws.com/{rname}",
                        "registryId": FAKE_ACCOUNT})
            rid = rname
        elif t == "docker-build:index:Image":
            digest = "sha256:" + "0" * 63 + "1"
            tags = inputs.get("tags") or []
            ref = (tags[0].rsplit(":", 1)[0] if tags else "registry.invalid/worker") + "@" + digest
            out.update({"digest": digest, "ref": ref})
            rid = digest
        elif t == "aws:iam/role:Role":
            # IAM puts a role's path into its ARN (arn:aws:iam::ACCOUNT:role/PATH/NAME), as a wiring rule expects.
            path = inputs.get("path") if isinstance(inputs.get("path"), str) else "/"
            path = path if path.startswith("/") and path.endswith("/") else "/"
            out.update({"arn": self._arn("iam", f"role{path}{physical}", regional=False), "name": physical,
                        "uniqueId": "AROA" + "0" * 17})
            rid = physical
        elif t == "aws:iam/policy:Policy":
            out.update({"arn": self._arn("iam", f"policy/{physical}", regional=False), "name": physical})
        elif t == "aws:iam/instanceProfile:InstanceProfile":
            out.update({"arn": self._arn("iam", f"instance-profile/{physical}", regional=False), "name": physical})
        elif t == "aws:sns/topic:Topic":
            out.update({"arn": self._arn("sns", physical), "name": physical})
            rid = out["arn"]
        elif t == "aws:cloudwatch/eventRule:EventRule":
            out.update({"arn": self._arn("events", f"rule/{physical}"), "name": physical})
        elif t == "aws:kms/key:Key":
            out.update({"arn": self._arn("kms", "key/00000000-0000-0000-0000-000000000000"),
                        "keyId": "00000000-0000-0000-0000-000000000000"})
        elif t == "aws:ec2/launchTemplate:LaunchTemplate":
            out.update({"arn": self._arn("ec2", "launch-template/lt-0a1b2c3d4e5f60001"), "latestVersion": 1,
                        "defaultVersion": 1})
            rid = "lt-0a1b2c3d4e5f60001"
        elif t.startswith("aws:"):
            out.setdefault("arn", self._arn(t.split(":")[1].split("/")[0], physical))
        return rid, out

    def call(self, args: _mocks.MockCallArgs) -> dict[str, Any]:
        tok = args.token
        if tok == "aws:ecr/getAuthorizationToken:getAuthorizationToken":
            return {"userName": "AWS", "password": "mock-ecr-token", "authorizationToken": "QVdTOm1vY2s=",
                    "proxyEndpoint": f"https://{FAKE_ACCOUNT}.dkr.ecr.{self.region}.amazonaws.com",
                    "expiresAt": "2099-01-01T00:00:00Z", "id": self.region}
        if tok == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": FAKE_ACCOUNT, "arn": self._arn("iam", "user/mock", regional=False),
                    "userId": "AIDA" + "0" * 17, "id": FAKE_ACCOUNT}
        if tok == "aws:index/getRegion:getRegion":
            return {"name": self.region, "region": self.region, "id": self.region}
        if tok == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"}
        if tok == "aws:index/getAvailabilityZones:getAvailabilityZones":
            zones = [f"{self.region}{z}" for z in "abc"]
            return {"names": zones, "zoneIds": [f"use1-az{i}" for i in (1, 2, 3)], "id": self.region}
        if tok == "aws:ec2/getSubnets:getSubnets":
            return {"ids": [f"subnet-0a1b2c3d4e5f6000{i}" for i in (1, 2, 3)], "id": self.region}
        if tok == "aws:ec2/getVpc:getVpc":
            return {"id": "vpc-0a1b2c3d4e5f60001", "cidrBlock": "172.31.0.0/16", "default": True}
        if tok == "aws:iam/getPolicyDocument:getPolicyDocument":
            return {"json": json.dumps({"Version": "2012-10-17", "Statement": []}), "id": "doc"}
        return {}


def to_plain(value: Any) -> Any:
    """Turn deserialized Pulumi property values into JSON-friendly ones (integral floats back to ints)."""
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if type(value).__name__ == "Unknown":
        return UNKNOWN
    if isinstance(value, pulumi.Resource):
        return f"<resource {type(value).__name__}>"
    return str(value)


@dataclass
class Registration:
    """One resource registration as the engine would see it."""

    urn: str
    type: str
    name: str
    parent: str
    custom: bool
    remote: bool
    dependencies: list[str]
    properties: dict[str, Any]

    def as_plan_entry(self) -> dict[str, Any]:
        return {"urn": self.urn, "type": self.type, "name": self.name, "parent": self.parent or None,
                "dependencies": sorted(set(self.dependencies)), "properties": self.properties}


STACK_TYPE = "pulumi:pulumi:Stack"
"""The root stack resource's type: its children's URNs carry no parent type (the engine's rule)."""


class RecordingMonitor(_mocks.MockMonitor):
    """A MockMonitor that keeps every registration (type, name, parent, dependencies, inputs) and stack outputs."""

    stack_urn: str

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.registrations: list[Registration] = []
        self.stack_outputs: dict[str, Any] = {}
        self.stack_urn = ""

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        """The URN the engine gives: its type part is the parent's whole chain of types, then this type
        (`GpuBurstPlatform$GpuScaledJob$kubernetes:keda.sh/v1alpha1:ScaledJob`), as the SDK's `create_urn` builds it
        from the parent's URN. Pulumi's MockMonitor keeps only the nearest parent's type, so a rule reading the chain
        (policies/fixes.py: which kind of stack declared it) would judge a synth plan unlike a real preview."""
        chain = parent.split("::")[2] if parent.count("::") >= 3 else ""
        qualified = f"{chain}${type_}" if chain and chain != STACK_TYPE else type_
        return "urn:pulumi:" + "::".join([pulumi.get_stack(), pulumi.get_project(), qualified, name])

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        """Record the registration (type, name, parent, dependencies, inputs), then answer as the mocks do."""
        response = super().RegisterResource(request)
        if request.type == STACK_TYPE:
            self.stack_urn = response.urn
            return response
        inputs = rpc.deserialize_properties(request.object, keep_unknowns=True)
        self.registrations.append(Registration(
            urn=response.urn, type=request.type, name=request.name, parent=request.parent,
            custom=bool(request.custom), remote=bool(request.remote), dependencies=list(request.dependencies),
            properties=to_plain(inputs)))
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:  # noqa: N802
        """Keep the stack's outputs (`pulumi.export`), then answer as the mocks do."""
        stack_suffix = f"::{STACK_TYPE}::" + request.urn.split("::")[-1]
        if request.urn == self.stack_urn or request.urn.endswith(stack_suffix):
            self.stack_outputs.update(to_plain(rpc.deserialize_properties(request.outputs, keep_unknowns=True)))
        return super().RegisterResourceOutputs(request)

    def by_type(self, type_: str) -> list[Registration]:
        """Registrations of one type token, in registration order."""
        return [r for r in self.registrations if r.type == type_]


@dataclass(frozen=True)
class LogLine:
    """One line the program logged with `pulumi.log` (info, warn or error; debug is left out, as the CLI does
    without --debug)."""

    severity: str
    """"info", "warning" or "error"."""
    message: str
    """The text as the program wrote it."""

    def __str__(self) -> str:
        return f"{self.severity}: {self.message}"


class _ProgramLog(logging.Handler):
    """Keeps each record of the mock engine's logger as a LogLine, and hands it to `on_log` as it comes."""

    def __init__(self, lines: list[LogLine], on_log: Callable[[LogLine], None] | None) -> None:
        super().__init__(logging.INFO)
        self.lines, self.on_log = lines, on_log

    def emit(self, record: logging.LogRecord) -> None:
        line = LogLine(record.levelname.lower(), record.getMessage())
        self.lines.append(line)
        if self.on_log is not None:
            self.on_log(line)


def program_logger(lines: list[LogLine], on_log: Callable[[LogLine], None] | None = None) -> logging.Logger:
    """A logger of its own (not the root logger, whose WARNING level drops `pulumi.log.info`) for the mock engine:
    Pulumi's MockEngine turns each `pulumi.log` call into a call on it (pulumi/runtime/mocks.py, MockEngine.Log)."""
    logger = logging.Logger("gpuburst.program", logging.INFO)
    logger.propagate = False
    logger.addHandler(_ProgramLog(lines, on_log))
    return logger


@dataclass
class RunResult:
    """What a program run under mocks registered."""

    monitor: RecordingMonitor
    error: BaseException | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    logs: list[LogLine] = field(default_factory=list)
    """What the program logged with `pulumi.log.info`/`warn`/`error`, in order."""

    @property
    def registrations(self) -> list[Registration]:
        return self.monitor.registrations


def close_event_loops() -> None:
    """Close every idle asyncio loop the Pulumi runtime left open. Called before a command exits on an error: a loop
    still open at interpreter shutdown is finalized after its self-pipe socket and prints ~25 lines of
    `ValueError: Invalid file descriptor: -1` under the one-line error."""
    import gc

    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance asks a weakref.proxy for its referent's class, and a dead proxy
        # (the GC's list holds those too) raises ReferenceError
        if issubclass(type(obj), asyncio.AbstractEventLoop) and not obj.is_closed() and not obj.is_running():
            obj.close()


def run_under_mocks(program: Callable[[], Any], *, project: str = "gpuburst", stack: str = "dev",
                    region: str = "us-east-1", config: dict[str, Any] | None = None,
                    preview: bool = False, mocks: pulumi.runtime.Mocks | None = None,
                    on_log: Callable[[LogLine], None] | None = None) -> RunResult:
    """Run `program` (which declares resources) under recording mocks and wait for every registration.

    `config` maps full keys (`gpuburst:environment`, `aws:region`) to values; non-strings are JSON-encoded, as the
    engine passes them. Exceptions from the program are re-raised after the runtime settles. What the program logs
    with `pulumi.log` is kept in the result's `logs` and, as it comes, handed to `on_log` (the synth prints it).
    """
    all_config = {"aws:region": region}
    for k, v in (config or {}).items():
        all_config[k] = v if isinstance(v, str) else json.dumps(v)
    pulumi.runtime.set_all_config(all_config, [])
    monitor = RecordingMonitor(mocks or RealisticMocks(region))
    try:
        if asyncio.get_event_loop().is_closed():  # closed by an earlier run's error path (close_event_loops)
            raise RuntimeError("closed")
    except RuntimeError:
        asyncio.set_event_loop(asyncio.new_event_loop())
    from pulumi.runtime import settings as _settings
    from pulumi.runtime.settings import SETTINGS
    _settings.ROOT.set(None)  # a fresh root stack per run, so exports of an earlier run never leak into this one
    logs: list[LogLine] = []
    pulumi.runtime.set_mocks(monitor.mocks, project=project, stack=stack, preview=preview, monitor=monitor,
                             logger=program_logger(logs, on_log))
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()

    def body():
        program()

    try:
        _sync_await(run_pulumi_func(body))
        root = pulumi.runtime.get_root_resource()
        outputs = {}
        for key, value in (getattr(root, "outputs", None) or {}).items():
            out = pulumi.Output.from_input(value)
            outputs[key] = to_plain(_sync_await(out.future(with_unknowns=True)))
            if _sync_await(out.is_secret()):
                outputs[key] = {"secret": True, "value": outputs[key]}
    except BaseException:
        close_event_loops()
        raise
    finally:
        pulumi.runtime.set_all_config({}, [])
    return RunResult(monitor=monitor, outputs=outputs, logs=logs)

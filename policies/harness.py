"""Drive the policy pack over the real analyzer gRPC protocol, the way the Pulumi engine does, without the CLI.

`Pack` starts the pack as a subprocess (`python -u -m policies`, no arguments, so it serves; installed,
`python -u -P -m gpuburst.policy`), reads the port it
prints (with a timeout), connects `pulumi.runtime.proto.analyzer_pb2_grpc.AnalyzerStub`, and then for a plan:

1. `Handshake` (pulumi-policy answers UNIMPLEMENTED, which the engine tolerates too), `GetAnalyzerInfo`;
2. reconciles the policy config the way the engine's `ReconcilePolicyPackConfig` does (every policy's default level
   and schema defaults, then the pack's `initialConfig`, then the `--policy-pack-config`-shaped file: `"all"` first,
   then per policy) and sends it with `Configure`; `ConfigureStack` with the stack name and dry_run;
3. `Analyze` once per resource (type, properties as a Struct, urn, name, options with the parent), then
   `AnalyzeStack` with every resource (parent and dependencies included).

Properties travel as the engine sends them: the plan's unknown marker (`components.synth.mocks.UNKNOWN`) and the
engine's own sentinels both become the engine's unknown string sentinel. The subprocess is always stopped (terminate,
wait with a timeout, kill, wait with a timeout) on every path; every wait and every RPC has a timeout.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from ._components import PLAN_UNKNOWN
from .unknowns import SENTINELS, UNKNOWN_STRING

PACK_MODULE = __name__.rpartition(".")[0] or "policies"
"""The pack's package: `policies` in this repository, `gpuburst.policy` once installed."""
REPO_ROOT = Path(sys.modules[PACK_MODULE.split(".")[0]].__path__[0]).resolve().parent
"""The folder the pack's top-level package is imported from: this repository's root, where `python -m policies` finds
both `policies` and `components`; installed, site-packages (and for `gpuburst` from the editable install, this
repository's root again)."""

START_TIMEOUT_S = 60.0
"""How long the pack may take to print its port (it imports grpc, pulumi and the catalogue first)."""
RPC_TIMEOUT_S = 30.0
"""Deadline of every gRPC call."""
STOP_TIMEOUT_S = 10.0
"""How long to wait after terminate, and again after kill."""

LEVELS = {"advisory": analyzer_pb2.ADVISORY, "mandatory": analyzer_pb2.MANDATORY,
          "remediate": analyzer_pb2.REMEDIATE, "disabled": analyzer_pb2.DISABLED}
"""Enforcement levels as the config file spells them -> the protocol's enum."""
LEVEL_NAMES = {v: k.upper() for k, v in LEVELS.items()}


class HarnessError(Exception):
    """The check could not run; the message is one line."""


class InputError(HarnessError):
    """The plan or the config file is missing, not JSON, or the wrong shape."""


class PackError(HarnessError):
    """The pack did not start, did not print a port, or failed an RPC."""


# --------------------------------------------------------------------------------------------------------------------
# Inputs.
# --------------------------------------------------------------------------------------------------------------------

def _read_json(path: Path, what: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read {what} {str(path)!r}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise InputError(f"{what} {str(path)!r} is not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{what} {str(path)!r} is not valid JSON: {e.msg} (line {e.lineno} column {e.colno})") \
            from None


def normalise_plan(doc: Any, where: str = "plan") -> dict[str, Any]:
    """A plan `{"stack", "resources": [{"type", "properties", ...}]}` with urn, name, parent and dependencies filled
    in (made up when missing). Raise InputError naming the first thing of the wrong shape."""
    if not isinstance(doc, dict) or not isinstance(doc.get("resources"), list):
        got = type(doc).__name__ if not isinstance(doc, dict) else f"resources = {type(doc.get('resources')).__name__}"
        raise InputError(f"{where}: expected an object with a 'resources' list (the synth's plan.json), got {got}")
    stack = doc.get("stack") if isinstance(doc.get("stack"), str) and doc.get("stack") else "dev"
    project = doc.get("project") if isinstance(doc.get("project"), str) and doc.get("project") else "gpuburst"
    resources = []
    for i, res in enumerate(doc["resources"]):
        here = f"{where}: resources[{i}]"
        if not isinstance(res, dict):
            raise InputError(f"{here} must be an object with 'type' and 'properties', got {type(res).__name__}")
        rtype = res.get("type")
        if not isinstance(rtype, str) or not rtype:
            raise InputError(f"{here}: 'type' must be a non-empty string (a type token), got {rtype!r}")
        props = res.get("properties")
        if not isinstance(props, dict):
            raise InputError(f"{here} ({rtype}): 'properties' must be an object, got {type(props).__name__}")
        name = res.get("name") if isinstance(res.get("name"), str) and res.get("name") else \
            f"{rtype.rsplit(':', 1)[-1].lower()}-{i}"
        urn = res.get("urn") if isinstance(res.get("urn"), str) and res.get("urn") else \
            f"urn:pulumi:{stack}::{project}::{rtype}::{name}"
        deps = res.get("dependencies") or []
        if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
            raise InputError(f"{here} ({rtype}): 'dependencies' must be a list of URNs")
        parent = res.get("parent") if isinstance(res.get("parent"), str) else ""
        resources.append({"urn": urn, "type": rtype, "name": name, "parent": parent, "dependencies": deps,
                          "properties": props})
    urns = [r["urn"] for r in resources]
    dup = next((u for u in urns if urns.count(u) > 1), None)
    if dup:
        raise InputError(f"{where}: two resources share the URN {dup!r}")
    return {"stack": stack, "project": project, "resources": resources}


def load_plan(path: Path) -> dict[str, Any]:
    """Read and normalise a plan file (see `normalise_plan`)."""
    return normalise_plan(_read_json(path, "plan"), f"plan {str(path)!r}")


def parse_config(doc: Any, where: str = "config") -> dict[str, tuple[str | None, dict[str, Any]]]:
    """A `--policy-pack-config` document -> {policy or "all": (level or None, properties)}.

    Values are a level string (`"advisory"`) or an object with an optional `enforcementLevel` and properties.
    """
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InputError(f"{where}: expected an object mapping policy names to a level or an object, "
                         f"got {type(doc).__name__}")
    out: dict[str, tuple[str | None, dict]] = {}
    for name, value in doc.items():
        if isinstance(value, str):
            level, props = value, {}
        elif isinstance(value, dict):
            props = {k: v for k, v in value.items() if k != "enforcementLevel"}
            level = value.get("enforcementLevel")
            if level is not None and not isinstance(level, str):
                raise InputError(f"{where}: {name}.enforcementLevel must be a string, got {level!r}")
        else:
            raise InputError(f"{where}: {name!r} must be a level string or an object, got {value!r}")
        if level is not None and level not in LEVELS:
            raise InputError(f"{where}: {name!r} has enforcement level {level!r}; use one of {', '.join(LEVELS)}")
        out[name] = (level, props)
    return out


def load_config(path: Path) -> dict[str, tuple[str | None, dict[str, Any]]]:
    """Read a `--policy-pack-config`-shaped JSON file (an empty file means no config, as for the CLI)."""
    try:
        if Path(path).is_file() and not Path(path).read_text(encoding="utf-8").strip():
            return {}
    except (OSError, UnicodeDecodeError):
        pass  # _read_json reports it
    return parse_config(_read_json(path, "config"), f"config {str(path)!r}")


# --------------------------------------------------------------------------------------------------------------------
# Wire conversion.
# --------------------------------------------------------------------------------------------------------------------

def _to_wire(value: Any) -> Any:
    """Plan values -> what the engine puts in a Struct (unknown markers become the engine's string sentinel)."""
    if isinstance(value, str):
        return UNKNOWN_STRING if (value == PLAN_UNKNOWN or value in SENTINELS) else value
    if isinstance(value, dict):
        return {str(k): _to_wire(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_wire(v) for v in value]
    return value


def to_struct(props: dict[str, Any]) -> struct_pb2.Struct:
    """Properties as the Struct the engine sends."""
    s = struct_pb2.Struct()
    s.update(_to_wire(props))
    return s


def reconcile_config(info: analyzer_pb2.AnalyzerInfo,
                     given: dict[str, tuple[str | None, dict[str, Any]]]) -> dict[str, analyzer_pb2.PolicyConfig]:
    """The engine's ReconcilePolicyPackConfig: policy defaults, then the pack's initialConfig, then `given`."""
    known = {p.name for p in info.policies}
    unknown = sorted(set(given) - known - {"all"})
    if unknown:
        raise InputError(f"config names unknown policies: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    levels: dict[str, int] = {}
    props: dict[str, dict] = {}
    for p in info.policies:
        levels[p.name] = p.enforcementLevel
        schema = json_format.MessageToDict(p.configSchema.properties) if p.HasField("configSchema") else {}
        defaults = {k: v["default"] for k, v in schema.items() if isinstance(v, dict) and "default" in v}
        props[p.name] = defaults
    # The pack's programmatic initialConfig, as the engine converts it (the proto level always has a value).
    initial = {k: (LEVEL_NAMES[v.enforcementLevel].lower(), json_format.MessageToDict(v.properties))
               for k, v in info.initialConfig.items()}
    layers = [initial, given]
    for layer in layers:
        if "all" in layer and layer["all"][0] is not None:
            for name in levels:
                levels[name] = LEVELS[layer["all"][0]]
        for name, (level, extra) in layer.items():
            if name == "all" or name not in levels:
                continue
            if level is not None:
                levels[name] = LEVELS[level]
            props[name].update(extra)
    out = {}
    for name in levels:
        cfg = analyzer_pb2.PolicyConfig(enforcementLevel=levels[name])
        if props[name]:
            cfg.properties.update(props[name])
        out[name] = cfg
    return out


# --------------------------------------------------------------------------------------------------------------------
# Results.
# --------------------------------------------------------------------------------------------------------------------

@dataclass
class Diagnostic:
    """One violation the pack reported."""

    level: str
    """ADVISORY, MANDATORY, ... (the protocol's enum name)."""
    policy: str
    urn: str
    """The offending resource; empty for a stack-wide violation."""
    message: str
    """The rule's own message (the policy description the servicer prepends is removed)."""
    description: str

    def line(self) -> str:
        """`LEVEL policy-name resource-name: message [urn]`, one line: the rule, the resource's name and what is
        wrong come first and the long URN last, so a line cut short (a terminal, a hook's `cut -c1-240`) still says
        it; a stack-wide violation reads `LEVEL policy-name (stack): message`."""
        text = " ".join(self.message.split("\n")).strip()
        if not self.urn:
            return f"{self.level} {self.policy} (stack): {text}"
        return f"{self.level} {self.policy} {resource_name(self.urn)}: {text} [{self.urn}]"


def resource_name(urn: str) -> str:
    """The resource's name, the URN's last `::` part (`urn:pulumi:dev::gpuburst::aws:sqs/queue:Queue::q` -> `q`)."""
    return urn.rsplit("::", 1)[-1] or urn


@dataclass
class Report:
    """Everything one check produced."""

    pack: str
    policies: dict[str, str]
    """Policy name -> the enforcement level it ran at (after the config)."""
    resources: int
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def mandatory(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.level in ("MANDATORY", "REMEDIATE")]

    @property
    def advisory(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.level == "ADVISORY"]

    def by_policy(self, name: str) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.policy == name]

    def summary(self) -> str:
        verdict = "FAILED" if self.mandatory else "passed"
        disabled = sum(1 for lvl in self.policies.values() if lvl == "DISABLED")
        return (f"policy check {verdict}: {len(self.mandatory)} mandatory, {len(self.advisory)} advisory violation(s) "
                f"in {self.resources} resource(s) (pack {self.pack}, {len(self.policies)} policies"
                f"{f', {disabled} disabled' if disabled else ''})")


def _diagnostic(d: analyzer_pb2.AnalyzeDiagnostic, urn: str) -> Diagnostic:
    message = d.message
    if d.description and message.startswith(d.description + "\n"):
        message = message[len(d.description) + 1:]
    return Diagnostic(LEVEL_NAMES.get(d.enforcementLevel, str(d.enforcementLevel)), d.policyName, d.urn or urn,
                      message, d.description)


# --------------------------------------------------------------------------------------------------------------------
# The pack process.
# --------------------------------------------------------------------------------------------------------------------

def pack_command() -> list[str]:
    """How to start the pack: this interpreter, `-m policies` (installed: `-P -m gpuburst.policy`, `-P` so that the
    working folder is not put first on sys.path, wherever it is), no arguments (so __main__ serves the pack)."""
    if PACK_MODULE == "policies":
        return [sys.executable, "-u", "-m", PACK_MODULE]
    return [sys.executable, "-u", "-P", "-m", PACK_MODULE]


class Pack:
    """A running policy pack subprocess and a gRPC stub to it; use as a context manager (always stopped)."""

    command: list[str]
    cwd: Path

    def __init__(self, command: list[str] | None = None, cwd: Path = REPO_ROOT,
                 start_timeout_s: float = START_TIMEOUT_S, rpc_timeout_s: float = RPC_TIMEOUT_S,
                 stop_timeout_s: float = STOP_TIMEOUT_S, env: dict[str, str] | None = None) -> None:
        """`env`: the subprocess's whole environment; default: this one, with the repository root on PYTHONPATH when
        the pack is the repository's `policies` (the installed `gpuburst.policy` imports as it is)."""
        self.command = command or pack_command()
        self.env = env
        self.cwd = Path(cwd)
        self.start_timeout_s = start_timeout_s
        self.rpc_timeout_s = rpc_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.pid: int | None = None
        self._reader: threading.Thread | None = None
        self.port: int | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr = None
        self._channel: grpc.Channel | None = None
        self.stub: analyzer_pb2_grpc.AnalyzerStub | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------------

    def __enter__(self) -> Pack:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return (" | stderr: " + " / ".join(lines[-3:])) if lines else ""

    def start(self) -> None:
        env = self.env
        if env is None:
            env = dict(os.environ)
            if PACK_MODULE == "policies":
                env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                                        else []))
            env["PYTHONUNBUFFERED"] = "1"
        self._stderr = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(self.command, cwd=self.cwd, env=env, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=self._stderr)
        except OSError as e:
            raise PackError(f"cannot start the policy pack ({' '.join(self.command)}): {e}") from None
        self.pid = self._proc.pid
        first_line: queue.Queue[bytes] = queue.Queue()

        def read_stdout(stream) -> None:
            # The first line is the port; keep draining afterwards so a chatty pack can never block on a full pipe.
            first = True
            try:
                for line in iter(stream.readline, b""):
                    if first:
                        first_line.put(line)
                        first = False
            except (OSError, ValueError):
                pass  # the pipe was closed by stop()
            if first:
                first_line.put(b"")

        self._reader = threading.Thread(target=read_stdout, args=(self._proc.stdout,), daemon=True)
        self._reader.start()
        try:
            line = first_line.get(timeout=self.start_timeout_s)
        except queue.Empty:
            raise PackError(f"the policy pack printed no port within {self.start_timeout_s:g} s"
                            f"{self._stderr_tail()}") from None
        text = line.decode("utf-8", "replace").strip()
        if not text.isdigit():
            try:
                self._proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
            what = f"printed {text!r}" if text else f"exited (code {self._proc.poll()})"
            raise PackError(f"the policy pack {what} instead of its port{self._stderr_tail()}")
        self.port = int(text)
        self._channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.start_timeout_s)
        except grpc.FutureTimeoutError:
            raise PackError(f"the policy pack's port {self.port} did not accept a connection within "
                            f"{self.start_timeout_s:g} s{self._stderr_tail()}") from None
        self.stub = analyzer_pb2_grpc.AnalyzerStub(self._channel)

    def stop(self) -> None:
        """Close the channel and stop the subprocess: terminate, wait, kill, wait (each wait bounded)."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None
            self.stub = None
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    try:
                        proc.wait(timeout=self.stop_timeout_s)
                    except subprocess.TimeoutExpired:
                        pass  # unkillable (a stuck kernel call); nothing more a user process can do
            if self._reader is not None:
                self._reader.join(timeout=self.stop_timeout_s)  # EOF once the process is gone
                self._reader = None
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- protocol ------------------------------------------------------------------------------------------------

    def _call(self, method: str, request: Any) -> Any:
        if self.stub is None:
            raise PackError("the policy pack is not running")
        try:
            return getattr(self.stub, method)(request, timeout=self.rpc_timeout_s)
        except grpc.RpcError as e:
            detail = (e.details() or "").strip().splitlines() if hasattr(e, "details") else []
            code = e.code().name if hasattr(e, "code") else "ERROR"
            raise PackError(f"{method} failed ({code}): {' / '.join(detail[-2:])}{self._stderr_tail()}") from None

    def info(self) -> analyzer_pb2.AnalyzerInfo:
        """GetAnalyzerInfo."""
        return self._call("GetAnalyzerInfo", empty_pb2.Empty())

    def analyze(self, plan: dict[str, Any],
                config: dict[str, tuple[str | None, dict[str, Any]]] | None = None) -> Report:
        """Run a normalised plan through the pack as the engine would (see the module docstring)."""
        try:
            self._call("Handshake", analyzer_pb2.AnalyzerHandshakeRequest(
                root_directory=str(REPO_ROOT), program_directory=str(REPO_ROOT)))
        except PackError as e:
            if "UNIMPLEMENTED" not in str(e):
                raise
        info = self.info()
        policy_config = reconcile_config(info, config or {})
        self._call("Configure", analyzer_pb2.ConfigureAnalyzerRequest(policyConfig=policy_config))
        self._call("ConfigureStack", analyzer_pb2.AnalyzerStackConfigureRequest(
            stack=plan["stack"], project=plan["project"], dry_run=True))
        report = Report(pack=info.name, resources=len(plan["resources"]),
                        policies={n: LEVEL_NAMES.get(c.enforcementLevel, "?") for n, c in policy_config.items()})
        stack_resources = []
        for res in plan["resources"]:
            props = to_struct(res["properties"])
            options = analyzer_pb2.AnalyzerResourceOptions(parent=res["parent"])
            response = self._call("Analyze", analyzer_pb2.AnalyzeRequest(
                type=res["type"], properties=props, urn=res["urn"], name=res["name"], options=options))
            report.diagnostics += [_diagnostic(d, res["urn"]) for d in response.diagnostics]
            stack_resources.append(analyzer_pb2.AnalyzerResource(
                type=res["type"], properties=props, urn=res["urn"], name=res["name"], options=options,
                parent=res["parent"], dependencies=res["dependencies"]))
        response = self._call("AnalyzeStack", analyzer_pb2.AnalyzeStackRequest(resources=stack_resources))
        report.diagnostics += [_diagnostic(d, "") for d in response.diagnostics]
        return report


def check(plan: dict[str, Any], config: dict[str, tuple[str | None, dict[str, Any]]] | None = None,
          **pack_args: Any) -> Report:
    """Start the pack, run one normalised plan through it, stop the pack (on every path)."""
    with Pack(**pack_args) as pack:
        return pack.analyze(plan, config)

"""The deploy model: who deploys the stack and from where, who puts slides in and takes results out from outside the
VPC, and who may break glass — the facts the clinical buckets' and the data key's policies, the deploy runner and
`gpuburst rehearse` are built from.

Config (`gpuburst:deploy`, every key camelCase, each refused in one line naming it):

    gpuburst:deploy:
      deployerRoleArns: [arn:aws:iam::123456789012:role/gpuburst-deploy]   # CI's role and the administrators'
      deployCidrs: [198.51.100.0/24]       # public egress of the laptops / self-hosted CI that deploy (not 0.0.0.0/0)
      runner:                              # the in-VPC deploy runner the stack declares (CodeBuild, system subnets)
        roleArn: arn:aws:iam::123456789012:role/gpuburst-deploy
        backendUrl: s3://example-pulumi-state
      bootstrap: false                     # true: the first `up` creates only what the runner needs
      slideUploaders:
        - roleArn: arn:aws:iam::123456789012:role/scanner-upload
          cidrs: [192.0.2.0/24]
      resultReaders:
        - roleArn: arn:aws:iam::123456789012:role/researchers
          vpcEndpointIds: [vpce-0123456789abcdef0]
      breakGlassRoleArns: [arn:aws:iam::123456789012:role/incident-response]
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .validation import ConfigError

ROLE_ARN = re.compile(r"^arn:(aws[a-z-]*):iam::(\d{12}):role/(?:[\w+=,.@-]+/)*[\w+=,.@-]{1,64}$")
"""An exact IAM role ARN (path allowed, no wildcard): the form a bucket or key policy can name as a principal."""
ROLE_ARN_PATTERN = re.compile(r"^arn:(aws[a-z-]*):iam::(\d{12}):role/[\w+=,.@/*-]{1,512}$")
"""A role ARN that may hold `*` (break-glass roles matched with `ArnLike`)."""
VPCE_ID = re.compile(r"^vpce-[0-9a-f]{8,17}$")
BACKEND_URL = re.compile(r"^(s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?|https://[^\s/]+(/[^\s]*)?)$")
SECRET_ARN = re.compile(r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+$")

DEPLOY_KEYS = ("deployerRoleArns", "deployCidrs", "runner", "bootstrap", "slideUploaders", "resultReaders",
               "breakGlassRoleArns")
RUNNER_KEYS = ("roleArn", "backendUrl", "secretsProviderSecretArn", "accessTokenSecretArn")
OUTSIDE_ROLE_KEYS = ("roleArn", "cidrs", "vpcEndpointIds")


@dataclass(frozen=True)
class Place:
    """Where requests of a role come from, outside the stack's VPC."""

    cidrs: tuple[str, ...] = ()
    """Public IPv4 CIDRs the requests leave from (`aws:SourceIp`), none of them 0.0.0.0/0 nor a private range (a
    request over the internet never carries a private source address). Default none."""
    vpc_endpoint_ids: tuple[str, ...] = ()
    """S3 interface endpoints the requests come through over VPN or Direct Connect (`aws:SourceVpce`). Default none."""

    @property
    def empty(self) -> bool:
        """True when the place names neither a CIDR nor an endpoint."""
        return not self.cidrs and not self.vpc_endpoint_ids


@dataclass(frozen=True)
class OutsideRole:
    """A role that reaches a clinical bucket from outside the VPC: a scanner's uploader or the researchers' reader."""

    role_arn: str
    """The exact role ARN (no wildcard; the bucket policy names it as a principal, so it must exist at `up`)."""
    place: Place
    """Where its requests come from (at least one CIDR or endpoint)."""


@dataclass(frozen=True)
class DeployRunner:
    """The in-VPC deploy runner: a CodeBuild project in the system subnets that runs `pulumi up` as a deployer."""

    role_arn: str
    """The role the runner's builds run as: one of `deployer_role_arns`, trusting `codebuild.amazonaws.com`."""
    backend_url: str
    """The Pulumi state backend the runner logs in to (`s3://BUCKET[/PATH]` or `https://api.pulumi.com`)."""
    secrets_provider_secret_arn: str | None = None
    """Secrets Manager secret holding `PULUMI_CONFIG_PASSPHRASE` for a self-managed backend. Default None."""
    access_token_secret_arn: str | None = None
    """Secrets Manager secret holding `PULUMI_ACCESS_TOKEN` for Pulumi Cloud. Default None."""


@dataclass(frozen=True)
class DeployModel:
    """Who deploys, from where, who ingests and reads from outside, and who may break glass."""

    deployer_role_arns: tuple[str, ...]
    """Roles that run `pulumi up`/`refresh`/`destroy` (CI's and the administrators'): exact role ARNs. Required."""
    deploy_cidrs: tuple[str, ...] = ()
    """Public CIDRs the deployers deploy from outside the VPC (laptops, self-hosted CI; the bootstrap). Default
    none: only the runner deploys."""
    runner: DeployRunner | None = None
    """The in-VPC deploy runner the stack declares. Default None."""
    bootstrap: bool = False
    """True for the first `up` of a stack with a runner and a private API endpoint: it creates only the key, the
    network and the runner; every later `up` runs in the runner with this false. Default False."""
    slide_uploaders: tuple[OutsideRole, ...] = ()
    """Roles that put slides into the slides bucket from outside the VPC. Default none."""
    result_readers: tuple[OutsideRole, ...] = ()
    """Roles that get results from the results bucket from outside the VPC. Default none."""
    break_glass_role_arns: tuple[str, ...] = field(default=())
    """Roles exempt from the endpoint restriction everywhere (`*` allowed in the name); each session of one raises
    an alarm. Default none."""

    @property
    def deploy_place(self) -> Place:
        """Where the deployers deploy from outside the VPC (the runner is inside)."""
        return Place(cidrs=self.deploy_cidrs)

    def as_facts(self) -> dict[str, Any]:
        """The model as plain camelCase values (the DeployAccess component's properties, which the pack reads)."""
        def outside(r: OutsideRole) -> dict[str, Any]:
            return {"roleArn": r.role_arn, "cidrs": list(r.place.cidrs),
                    "vpcEndpointIds": list(r.place.vpc_endpoint_ids)}
        return {
            "deployerRoleArns": list(self.deployer_role_arns), "deployCidrs": list(self.deploy_cidrs),
            "runner": None if self.runner is None else {"roleArn": self.runner.role_arn,
                                                         "backendUrl": self.runner.backend_url},
            "bootstrap": self.bootstrap,
            "slideUploaders": [outside(r) for r in self.slide_uploaders],
            "resultReaders": [outside(r) for r in self.result_readers],
            "breakGlassRoleArns": list(self.break_glass_role_arns),
        }


def public_cidr_problem(v: Any) -> str | None:
    """Why `v` is not a public IPv4 CIDR a request can come from, or None."""
    if not isinstance(v, str):
        return "not a string"
    try:
        net = ipaddress.ip_network(v, strict=True)
    except ValueError:
        return "not a CIDR (host bits set, or not an address)"
    if net.version != 4:
        return "not IPv4"
    if net.prefixlen == 0:
        return "0.0.0.0/0 admits the whole internet"
    if net.is_private and not _documentation(net):
        return "a private range: a request over the internet never carries a private source address"
    return None


_DOC_RANGES = tuple(ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"))


def _documentation(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    # RFC 5737's ranges count as private to Python; examples (and tests) use them in place of real egress ranges.
    return any(net.subnet_of(d) for d in _DOC_RANGES)  # type: ignore[arg-type]


def _mapping(key: str, value: Any, keys: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(key, value, f"a mapping with {', '.join(keys)}")
    for k in value:
        if k not in keys:
            raise ConfigError(f"{key}.{k}", value[k], f"not a key of {key} (known: {', '.join(keys)})")
    return value


def _str_list(key: str, value: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(key, value, "a list")
    return value


def _role(key: str, v: Any, *, wildcard: bool = False) -> str:
    pattern = ROLE_ARN_PATTERN if wildcard else ROLE_ARN
    if not isinstance(v, str) or not pattern.match(v):
        raise ConfigError(key, v, "an IAM role ARN, arn:aws:iam::ACCOUNT:role/NAME" +
                          (" ('*' allowed in the name)" if wildcard else " (exact: no '*')"))
    return v


def _cidrs(key: str, value: Any) -> tuple[str, ...]:
    out = []
    for v in _str_list(key, value):
        problem = public_cidr_problem(v)
        if problem:
            raise ConfigError(key, v, f"a public IPv4 CIDR such as 198.51.100.0/24 ({problem})")
        out.append(v)
    return tuple(out)


def _endpoints(key: str, value: Any) -> tuple[str, ...]:
    out = []
    for v in _str_list(key, value):
        if not isinstance(v, str) or not VPCE_ID.match(v):
            raise ConfigError(key, v, "a VPC endpoint id like vpce-0123456789abcdef0")
        out.append(v)
    return tuple(out)


def _outside_roles(key: str, value: Any) -> tuple[OutsideRole, ...]:
    out = []
    for i, entry in enumerate(_str_list(key, value)):
        where = f"{key}[{i}]"
        m = _mapping(where, entry, OUTSIDE_ROLE_KEYS)
        if "roleArn" not in m:
            raise ConfigError(f"{where}.roleArn", None, "the role's exact ARN (required)")
        place = Place(_cidrs(f"{where}.cidrs", m.get("cidrs")), _endpoints(f"{where}.vpcEndpointIds",
                                                                           m.get("vpcEndpointIds")))
        if place.empty:
            raise ConfigError(f"{where}.cidrs", m.get("cidrs"),
                              "at least one CIDR, or a vpcEndpointIds entry: where this role's requests come from")
        out.append(OutsideRole(_role(f"{where}.roleArn", m["roleArn"]), place))
    return tuple(out)


def _runner(key: str, value: Any, deployers: tuple[str, ...]) -> DeployRunner | None:
    if value is None:
        return None
    m = _mapping(key, value, RUNNER_KEYS)
    role = _role(f"{key}.roleArn", m.get("roleArn"))
    if role not in deployers:
        raise ConfigError(f"{key}.roleArn", role, "one of deployerRoleArns (the runner deploys as a deployer)")
    backend = m.get("backendUrl")
    if not isinstance(backend, str) or not BACKEND_URL.match(backend):
        raise ConfigError(f"{key}.backendUrl", backend,
                          "the Pulumi backend the runner logs in to: s3://BUCKET[/PATH] or https://api.pulumi.com")
    secrets = {}
    for k, attr in (("secretsProviderSecretArn", "secrets_provider_secret_arn"),
                    ("accessTokenSecretArn", "access_token_secret_arn")):
        v = m.get(k)
        if v is not None and (not isinstance(v, str) or not SECRET_ARN.match(v)):
            raise ConfigError(f"{key}.{k}", v, "a Secrets Manager secret ARN (arn:aws:secretsmanager:REGION:"
                                               "ACCOUNT:secret:NAME)")
        secrets[attr] = v
    return DeployRunner(role, backend, **secrets)


def parse_deploy_model(value: Any, key: str = "deploy") -> DeployModel:
    """The DeployModel of a `gpuburst:deploy` mapping; ConfigError (one line naming `deploy.<field>` and the value)
    for the first bad field."""
    m = _mapping(key, value, DEPLOY_KEYS)
    deployers = tuple(_role(f"{key}.deployerRoleArns", v) for v in _str_list(f"{key}.deployerRoleArns",
                                                                               m.get("deployerRoleArns")))
    if not deployers:
        raise ConfigError(f"{key}.deployerRoleArns", m.get("deployerRoleArns"),
                          "at least one role that runs `pulumi up` (CI's role, the administrators' role)")
    cidrs = _cidrs(f"{key}.deployCidrs", m.get("deployCidrs"))
    runner = _runner(f"{key}.runner", m.get("runner"), deployers)
    if not cidrs and runner is None:
        raise ConfigError(f"{key}.deployCidrs", m.get("deployCidrs"),
                          "at least one CIDR the deployers deploy from, or a runner (the in-VPC deploy runner)")
    bootstrap = m.get("bootstrap", False)
    if not isinstance(bootstrap, bool):
        raise ConfigError(f"{key}.bootstrap", bootstrap, "true or false")
    if bootstrap and (runner is None or not cidrs):
        raise ConfigError(f"{key}.bootstrap", bootstrap,
                          "false unless both a runner and deployCidrs are set (the bootstrap creates the runner "
                          "from the deploy CIDRs)")
    breakers = tuple(_role(f"{key}.breakGlassRoleArns", v, wildcard=True)
                     for v in _str_list(f"{key}.breakGlassRoleArns", m.get("breakGlassRoleArns")))
    uploaders = _outside_roles(f"{key}.slideUploaders", m.get("slideUploaders"))
    readers = _outside_roles(f"{key}.resultReaders", m.get("resultReaders"))
    model = DeployModel(deployers, cidrs, runner, bootstrap, uploaders, readers, breakers)
    check_roles_apart(model, key)
    return model


def check_roles_apart(model: DeployModel, key: str = "deploy") -> None:
    """ConfigError when one role holds two parts: a deployer never reads clinical objects, an uploader never reads,
    a reader never writes, and a break-glass role is nobody's everyday role."""
    seen: dict[str, str] = {}
    parts = [("deployerRoleArns", a) for a in model.deployer_role_arns]
    parts += [("slideUploaders", r.role_arn) for r in model.slide_uploaders]
    parts += [("resultReaders", r.role_arn) for r in model.result_readers]
    parts += [("breakGlassRoleArns", a) for a in model.break_glass_role_arns]
    for part, arn in parts:
        if arn in seen:
            raise ConfigError(f"{key}.{part}", arn, f"a role not also listed in {key}.{seen[arn]} (each role has "
                                                    "one part: deploy, upload, read or break glass)")
        seen[arn] = part
    accounts = {ROLE_ARN_PATTERN.match(a).group(2) for _, a in parts}  # type: ignore[union-attr]
    if len(accounts) > 1:
        raise ConfigError(f"{key}.deployerRoleArns", sorted(accounts),
                          "roles of the stack's one account (the policies judge same-account requests)")

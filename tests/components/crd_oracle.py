"""Test oracle: validate a manifest against an upstream CRD (openAPIV3Schema via jsonschema, CEL rules via cel-python).

Generic over CRDs (Karpenter, KEDA, ...). It does what the API server does on create, as far as can be done offline:
apply the schema's defaults, check the structural schema (types, enums, patterns, required fields, and unknown
fields, which a strict server-side apply rejects and a lax one silently prunes), then evaluate every
`x-kubernetes-validations` rule with `self` bound to the value the rule is attached to. Rules that use Kubernetes-only
CEL libraries (`split`, `find`, `quantity`, ...) or that compare against the previous object (`oldSelf`, transition
rules) cannot be evaluated by cel-python; they are skipped and counted, never silently passed.

Use `validate_against_crd(manifest, crd_path) -> list[str]` for the errors, or `check_against_crd` for the full report
(errors, rules evaluated and skipped), and `cel_inventory(crd_path)` for the CRD's rules split into evaluable/skipped.
Import it as `from tests.components.crd_oracle import validate_against_crd`; take the CRD folder from the
`upstream_crds` fixture (which skips, with the reason, where the folder is absent).
"""
from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml

# Functions of the Kubernetes CEL libraries (strings, regex, lists, url, quantity, ip/cidr, sets, optional, semver,
# format, base64, math, authz) that plain CEL, and so cel-python, does not have.
# https://kubernetes.io/docs/reference/using-api/cel/#cel-options-language-features-and-libraries
K8S_CEL_EXTENSIONS = frozenset({
    # strings
    "charAt", "indexOf", "lastIndexOf", "lowerAscii", "upperAscii", "replace", "split", "substring", "trim", "join",
    "format", "quote", "reverse",
    # regex
    "find", "findAll",
    # lists
    "isSorted", "sum", "min", "max", "slice", "flatten", "sort", "sortBy", "distinct", "first", "last", "range",
    # url
    "url", "isURL", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath", "getQuery",
    # quantity
    "quantity", "isQuantity", "isInteger", "asInteger", "asApproximateFloat", "sign", "add", "sub",
    "isGreaterThan", "isLessThan", "compareTo",
    # ip / cidr
    "ip", "isIP", "cidr", "isCIDR", "family", "isUnspecified", "isLoopback", "isLinkLocalMulticast",
    "isLinkLocalUnicast", "isGlobalUnicast", "containsIP", "containsCIDR", "prefixLength", "masked",
    # optional
    "orValue", "hasValue", "optMap", "optFlatMap",
    # semver
    "semver", "isSemver", "major", "minor", "patch",
    # two-variable comprehensions and transforms
    "transformList", "transformMap", "transformMapEntry",
    # authz
    "authorizer", "serviceAccount", "resource", "subresource", "namespace", "check", "allowed", "reason", "errored",
})
"""Function names that mark a rule as needing a Kubernetes CEL extension cel-python lacks."""

_K8S_NAMESPACES = re.compile(r"(?<![\w.])(sets|optional|base64|math|strings|lists)\s*\.")
_CALL = re.compile(r"(?<![\w])\.?\s*([A-Za-z_]\w*)\s*\(")
_OLD_SELF = re.compile(r"(?<![\w])oldSelf(?![\w])")
_OPTIONAL_FIELD = re.compile(r"\.\?|\[\?")
_STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def skip_reason(rule: str) -> str | None:
    """Why cel-python cannot evaluate `rule` faithfully (a Kubernetes-only feature it uses), or None when it can."""
    code = _STRING_LITERAL.sub("''", rule)
    if _OLD_SELF.search(code):
        return "transition rule (uses oldSelf; only checked on update, against the previous object)"
    if _OPTIONAL_FIELD.search(code):
        return "uses optional field selection (.? / [?]), a Kubernetes CEL extension"
    m = _K8S_NAMESPACES.search(code)
    if m:
        return f"uses the Kubernetes CEL library {m.group(1)}.*"
    for name in _CALL.findall(code):
        if name in K8S_CEL_EXTENSIONS:
            return f"uses {name}(), a Kubernetes CEL extension"
    return None


@dataclass(frozen=True)
class CelRule:
    """One `x-kubernetes-validations` entry of a CRD schema."""

    schema_path: str
    """Where the rule is attached, e.g. `spec.template.spec.requirements`."""
    rule: str
    """The CEL expression."""
    message: str
    """The message the API server would return."""
    skipped: str | None
    """Why the oracle does not evaluate it, or None when it does."""


@dataclass
class OracleReport:
    """What `check_against_crd` found for one manifest."""

    errors: list[str] = field(default_factory=list)
    """Validation errors, one line each, prefixed by the path into the manifest."""
    cel_evaluated: int = 0
    """CEL rule evaluations performed (a rule under a list counts once per item)."""
    cel_skipped: int = 0
    """CEL rule evaluations skipped because cel-python cannot do them (see `skipped_rules`)."""
    evaluated_rules: set[str] = field(default_factory=set)
    """The distinct rules evaluated at least once."""
    skipped_rules: dict[str, str] = field(default_factory=dict)
    """The distinct rules skipped, with the reason."""


# ----------------------------------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _load(crd_path: str) -> dict:
    docs = [d for d in yaml.safe_load_all(Path(crd_path).read_text()) if d]
    crds = [d for d in docs if d.get("kind") == "CustomResourceDefinition"]
    if len(crds) != 1:
        raise ValueError(f"{crd_path}: expected exactly one CustomResourceDefinition, found {len(crds)}")
    return crds[0]


def load_crd(crd_path: str | Path) -> dict:
    """The CustomResourceDefinition in `crd_path` (a deep copy; the parsed file is cached)."""
    return copy.deepcopy(_load(str(crd_path)))


def crd_schema(crd: dict, version: str | None = None) -> dict:
    """The openAPIV3Schema of `version` (default: the storage version)."""
    versions = crd["spec"]["versions"]
    chosen = next((v for v in versions if v["name"] == version), None) if version else \
        next((v for v in versions if v.get("storage")), versions[0])
    if chosen is None:
        raise KeyError(f"{crd['metadata']['name']} has no version {version!r} "
                       f"(has: {', '.join(v['name'] for v in versions)})")
    return chosen["schema"]["openAPIV3Schema"]


# ----------------------------------------------------------------------------------------------------------------------
# Schema walking
# ----------------------------------------------------------------------------------------------------------------------

def _iter_rules(schema: dict, path: str = "") -> Iterator[CelRule]:
    for v in schema.get("x-kubernetes-validations", []) or []:
        yield CelRule(path or "<root>", v["rule"], v.get("message") or v["rule"], skip_reason(v["rule"]))
    for name, sub in (schema.get("properties") or {}).items():
        yield from _iter_rules(sub, f"{path}.{name}" if path else name)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _iter_rules(schema["additionalProperties"], f"{path}[*]")
    if isinstance(schema.get("items"), dict):
        yield from _iter_rules(schema["items"], f"{path}[]")


def cel_inventory(crd_path: str | Path, version: str | None = None) -> tuple[list[CelRule], list[CelRule]]:
    """All CEL rules of the CRD version, split into (evaluable, skipped)."""
    rules = list(_iter_rules(crd_schema(_load(str(crd_path)), version)))
    return [r for r in rules if r.skipped is None], [r for r in rules if r.skipped is not None]


def _json_schema(schema: Any) -> Any:
    """OpenAPI v3 (Kubernetes flavour) to JSON Schema: `nullable` and `x-kubernetes-int-or-string` made explicit."""
    if isinstance(schema, list):
        return [_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _json_schema(v) if k in ("properties", "items", "additionalProperties", "anyOf", "allOf", "oneOf",
                                       "not") else v
           for k, v in schema.items() if k != "properties"}
    if "properties" in schema:
        out["properties"] = {k: _json_schema(v) for k, v in schema["properties"].items()}
    if schema.get("x-kubernetes-int-or-string") and "anyOf" not in schema and "type" not in schema:
        out["type"] = ["integer", "string"]
    if schema.get("nullable") and "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = types + ["null"]
    return out


def _is_type(value: Any, schema: dict) -> bool:
    t = schema.get("type")
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "boolean":
        return isinstance(value, bool)
    return True  # untyped (int-or-string, preserve-unknown-fields)


def _apply_defaults(schema: dict, value: Any) -> None:
    """Fill in `default`s the way the API server does before validating (in place)."""
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _apply_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name in value:
                if name not in (schema.get("properties") or {}):
                    _apply_defaults(extra, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _apply_defaults(schema["items"], item)


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


@functools.lru_cache(maxsize=2048)
def _program(rule: str):
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _walk(schema: dict, value: Any, path: str, report: OracleReport, strict: bool) -> None:
    if not _is_type(value, schema):
        return  # the structural check reports the type error; rules cannot be judged on the wrong type
    for v in schema.get("x-kubernetes-validations", []) or []:
        _evaluate(v, value, path or "<root>", report)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for name, sub_value in value.items():
            if name in props:
                _walk(props[name], sub_value, _join(path, name), report, strict)
            elif isinstance(extra, dict):
                _walk(extra, sub_value, _join(path, name), report, strict)
            elif (strict and props and extra is None
                  and not schema.get("x-kubernetes-preserve-unknown-fields")):
                report.errors.append(f"{_join(path, name)}: unknown field {name!r} (the schema has: "
                                     f"{', '.join(sorted(props))})")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _walk(schema["items"], item, _join(path, i), report, strict)


def _evaluate(validation: dict, value: Any, path: str, report: OracleReport) -> None:
    rule = validation["rule"]
    message = validation.get("message") or f"failed rule: {rule}"
    reason = skip_reason(rule)
    if reason is None:
        try:
            program = _program(rule)
        except Exception as e:  # noqa: BLE001 - cel-python's parser errors have no common base
            reason = f"cel-python cannot compile it ({type(e).__name__})"
    if reason is not None:
        report.cel_skipped += 1
        report.skipped_rules.setdefault(rule, reason)
        return
    try:
        result = program.evaluate({"self": celpy.json_to_cel(value)})
    except celpy.CELEvalError as e:
        if "undeclared reference" in str(e.args[0] if e.args else e):
            report.cel_skipped += 1
            report.skipped_rules.setdefault(rule, "cel-python lacks a function it uses")
            return
        result = e
    report.cel_evaluated += 1
    report.evaluated_rules.add(rule)
    if isinstance(result, celpy.CELEvalError):
        detail = result.args[0] if result.args else result
        report.errors.append(f"{path}: CEL rule raised an evaluation error ({detail}) [rule: {rule}]")
    elif result is not True and not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
        report.errors.append(f"{path}: {message} [rule: {rule}]")


# ----------------------------------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------------------------------

def check_against_crd(manifest: dict, crd_path: str | Path, *, strict: bool = True) -> OracleReport:
    """Validate `manifest` against the CRD in `crd_path` as the API server would on create; return the full report.

    `strict` reports fields the schema does not know (a strict server-side apply refuses them; otherwise they are
    pruned silently, which hides typos).
    """
    crd = _load(str(crd_path))
    report = OracleReport()
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    api_version = manifest.get("apiVersion", "")
    m_group, _, m_version = api_version.rpartition("/")
    if m_group != group:
        report.errors.append(f"apiVersion: {api_version!r} is not in group {group!r} of {crd['metadata']['name']}")
        return report
    if manifest.get("kind") != kind:
        report.errors.append(f"kind: {manifest.get('kind')!r} is not {kind!r}")
        return report
    version = next((v for v in crd["spec"]["versions"] if v["name"] == m_version), None)
    if version is None or not version.get("served", False):
        served = [v["name"] for v in crd["spec"]["versions"] if v.get("served")]
        report.errors.append(f"apiVersion: version {m_version!r} is not served by this CRD "
                             f"(served: {', '.join(served)})")
        return report
    name = (manifest.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name or len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        report.errors.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")

    schema = version["schema"]["openAPIV3Schema"]
    obj = copy.deepcopy(manifest)
    _apply_defaults(schema, obj)
    validator = jsonschema.Draft7Validator(_json_schema(schema))
    for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        path = ""
        for part in err.absolute_path:
            path = _join(path, part)
        report.errors.append(f"{path or '<root>'}: {err.message}")
    _walk(schema, obj, "", report, strict)
    return report


def validate_against_crd(manifest: dict, crd_path: str | Path, *, strict: bool = True) -> list[str]:
    """The errors the API server would return for creating `manifest` (empty when it is valid)."""
    return check_against_crd(manifest, crd_path, strict=strict).errors

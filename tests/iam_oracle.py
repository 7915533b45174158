"""Test oracle wrapper: runs a batch of iam-simulate simulations through `node tests/oracle/iam-simulate/simulate.mjs`.

`simulate(batch)` starts ONE node process for the whole batch (a list of iam-simulate `Simulation` dicts) with a
timeout, kills it on every path, and returns one `{decision, errors, ignoredContextKeys}` dict per simulation, in
order. `unavailable()` says why the oracle cannot run here (node or the installed node_modules absent), or None;
the `iam_oracle` fixture in tests/conftest.py skips with that reason. See tests/oracle/iam-simulate/README.md.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

ORACLE_DIR = Path(__file__).resolve().parent / "oracle" / "iam-simulate"
SCRIPT = ORACLE_DIR / "simulate.mjs"
PACKAGE = ORACLE_DIR / "node_modules" / "@cloud-copilot" / "iam-simulate" / "package.json"
TIMEOUT_S = 60.0
"""Longest one batch may run (a few hundred simulations take well under a second)."""


def unavailable() -> str | None:
    """Why the oracle cannot run here, or None when node and the installed package are present."""
    if shutil.which("node") is None:
        return "node is not on PATH (the IAM oracle tests/oracle/iam-simulate needs Node 18+)"
    if not PACKAGE.is_file():
        return ("the IAM oracle is not installed (no @cloud-copilot/iam-simulate under "
                "tests/oracle/iam-simulate/node_modules): run `npm ci --prefix tests/oracle/iam-simulate` or "
                "`make test`")
    return None


def simulate(batch: list[dict[str, Any]], timeout_s: float = TIMEOUT_S) -> list[dict[str, Any]]:
    """Run every simulation of `batch` in one node process; return the results in order."""
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    node = shutil.which("node")
    assert node is not None
    proc = subprocess.Popen([node, str(SCRIPT)], cwd=ORACLE_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(json.dumps(batch), timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"simulate.mjs exited {proc.returncode}: {err[-2000:]}")
    results = json.loads(out)
    if len(results) != len(batch):
        raise RuntimeError(f"simulate.mjs returned {len(results)} results for {len(batch)} simulations")
    return results


def simulation_of(request: Any, account: str, *, identity_policies: Any = (), resource_policy: Any = None,
                  permissions_boundary: Any = None, endpoint_policy: Any = None, **_: Any) -> dict[str, Any]:
    """The iam-simulate Simulation of one of our evaluator's requests (components.rehearse.evaluate.Request) with the
    same keyword arguments `evaluate` takes: the caller is the role's session, the context exactly the one our
    evaluator reads (`request_context`), each policy a document or a `Policy(label, document)`."""
    from components.rehearse import request_context

    def doc(p: Any) -> Any:
        return getattr(p, "document", p)

    principal = request.principal
    if ":role/" in principal:
        principal = f"arn:aws:sts::{account}:assumed-role/{principal.rsplit('/', 1)[1]}/{request.session_name}"
    sim: dict[str, Any] = {
        "request": {"principal": principal, "action": request.action,
                    "resource": {"resource": request.resource, "accountId": account},
                    "contextVariables": request_context(request)},
        "identityPolicies": [{"name": getattr(p, "label", f"identity[{i}]"), "policy": doc(p)}
                             for i, p in enumerate(identity_policies)],
        "serviceControlPolicies": [], "resourceControlPolicies": [],
        "resourcePolicy": doc(resource_policy) if resource_policy is not None else None}
    if permissions_boundary is not None:
        sim["permissionBoundaryPolicies"] = [{"name": "boundary", "policy": doc(permissions_boundary)}]
    if endpoint_policy is not None:
        sim["vpcEndpointPolicies"] = [{"name": "endpoint", "policy": doc(endpoint_policy)}]
    return sim

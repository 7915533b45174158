"""Entry point of the policy pack itself AND of `python -m policies check PLAN.json [--config CONFIG.json]`.

Both uses run this one file, so it tells them apart by argv, the only thing that differs:

- The Pulumi CLI (`pulumi preview --policy-pack policies`) runs a Python pack as
  `python -u -m pulumi.policy ENGINE_ADDRESS PACK_DIR`, and pulumi.policy `runpy.run_path(PACK_DIR)`s this file:
  sys.argv is then [PACK_DIR, ENGINE_ADDRESS, PACK_DIR]. The engine never passes `check`.
- The offline checker's harness starts the pack as `python -m policies` with no arguments at all.
- A person or CI runs `python -m policies check PLAN.json [--config CONFIG.json]` (or `--help`).

So a first argument of `check` (or `-h`, `--help`, `help`) selects the checker; anything else, including the
engine's arguments, serves the pack. The pack reads no argv: PolicyPack's constructor serves gRPC on 127.0.0.1:0,
writes the port as the only line on stdout, and blocks, so nothing else may print to stdout on that path.

Installed (`pip install "gpuburst[policy]"`) the pack is the package `gpuburst.policy` in site-packages: the engine
runs this file from there (`--policy-pack "$(gpuburst policy-pack path)"`), the harness as
`python -m gpuburst.policy`, and both import `gpuburst.policy.*` instead of `policies.*`.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

_PACK_DIR = Path(__file__).resolve().parent
_INSTALLED = (_PACK_DIR.name == "policy" and _PACK_DIR.parent.name == "gpuburst"
              and (_PACK_DIR.parent / "__init__.py").is_file())
"""This file is the installed `gpuburst/policy/__main__.py` (site-packages), not the repository's policies/."""
PACKAGE = __package__ or ("gpuburst.policy" if _INSTALLED else "policies")
"""The pack's package as this process imports it: `policies` in the repository, `gpuburst.policy` installed (or
when started as `python -m gpuburst.policy` from the editable install)."""
_IMPORT_ROOT = _PACK_DIR.parent.parent if _INSTALLED else _PACK_DIR.parent
"""The folder that holds the pack's top-level package: site-packages installed, the repository root here."""

CHECKER_ARGS = ("check", "-h", "--help", "help")
"""First arguments that select the offline checker instead of the pack."""


def _fix_sys_path() -> None:
    # Run as a script (what pulumi.policy does), sys.path[0] is the pack's folder itself: the rule modules would
    # import as top-level names and neither the pack's package nor the components would import. Swap it for the
    # folder holding the package so the pack imports the same way whichever way it was started. In the repository
    # that is the root, put first (the one place `policies` and `components` are); installed it is site-packages,
    # already on sys.path, so it is only appended if missing (first, it would shadow the standard library).
    if not __package__:
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _PACK_DIR]
    if str(_IMPORT_ROOT) not in sys.path:
        if _INSTALLED:
            sys.path.append(str(_IMPORT_ROOT))
        else:
            sys.path.insert(0, str(_IMPORT_ROOT))


def main(argv: list[str]) -> int:
    """Dispatch on argv (see the module docstring)."""
    _fix_sys_path()
    if argv[:1] and argv[0] in CHECKER_ARGS:
        check_main = importlib.import_module(f"{PACKAGE}.cli").main
        return check_main(argv)
    serve = importlib.import_module(f"{PACKAGE}.pack").serve
    serve()  # blocks while the engine (or the harness) talks to the pack
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

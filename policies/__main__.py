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
"""
from __future__ import annotations

import sys
from pathlib import Path

_PACK_DIR = Path(__file__).resolve().parent
_REPO_ROOT = _PACK_DIR.parent

CHECKER_ARGS = ("check", "-h", "--help", "help")
"""First arguments that select the offline checker instead of the pack."""


def _fix_sys_path() -> None:
    # Run as a script (what pulumi.policy does), sys.path[0] is policies/ itself: the rule modules would import as
    # top-level names and neither `policies` nor `components` would import. Swap it for the repository root so the
    # pack imports `policies.*` and `components.catalogue` the same way whichever way it was started.
    if not __package__:
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _PACK_DIR]
    if str(_REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(_REPO_ROOT))


def main(argv: list[str]) -> int:
    """Dispatch on argv (see the module docstring)."""
    _fix_sys_path()
    if argv[:1] and argv[0] in CHECKER_ARGS:
        from policies.cli import main as check_main

        return check_main(argv)
    from policies.pack import serve

    serve()  # blocks while the engine (or the harness) talks to the pack
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

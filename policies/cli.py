"""`python -m policies check PLAN.json [--config CONFIG.json]`: run a plan through the pack offline, over gRPC.

Prints one line per diagnostic, `LEVEL policy-name resource-name: message [urn]` (the URN last), then a summary
line. Exit status: 0 when no mandatory violation, 1 when there is at least one, 2 when the check could not run
(unreadable or ill-shaped plan or config, or a pack that failed to start or answer), with a one-line message on
stderr. Installed, the same checker
is `gpuburst check` (components/__main__.py passes its own name) or `python -m gpuburst.policy check`.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

PROG = f"python -m {__package__ or 'policies'} check"
"""How the checker is called by default: `python -m policies check` here, `python -m gpuburst.policy check`
installed."""

USAGE = """usage: {prog} PLAN.json [--config CONFIG.json]

Run the gpuburst policy pack over PLAN.json (the synth's out/plan.json) exactly as the Pulumi engine would: the
pack runs as a subprocess and is driven over the analyzer gRPC protocol. CONFIG.json has the shape
`pulumi preview --policy-pack-config` takes, e.g. {"nodepool-instance-diversity": "advisory"} or
{"sqs-work-queue": {"enforcementLevel": "disabled"}} ("all" sets every policy's level).

Exit status: 0 no mandatory violation, 1 mandatory violation(s), 2 the check could not run."""


class _Parser(argparse.ArgumentParser):
    label = "policies check"
    """What each error line starts with."""

    def error(self, message: str) -> None:  # one line and exit 2, like every other input error
        print(f"{self.label}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None, prog: str = PROG, label: str = "policies check") -> int:
    """`argv` starts with `check` (or a help flag), as dispatched by policies/__main__.py. `prog` is how the user
    called the checker (usage and hints; `gpuburst check` passes its own) and `label` starts each error line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help") or argv[1:2] in (["-h"], ["--help"]):
        print(USAGE.replace("{prog}", prog))
        return 0
    parser = _Parser(prog=prog, add_help=False)
    parser.label = label
    parser.add_argument("plan", type=Path)
    parser.add_argument("--config", type=Path, default=None)
    args = parser.parse_args(argv[1:])

    # Imported here: the harness pulls in grpc and the pulumi protocol stubs, which `--help` does not need.
    from .harness import HarnessError, check, load_config, load_plan

    t0 = time.perf_counter()
    try:
        plan = load_plan(args.plan)
        config = load_config(args.config) if args.config is not None else {}
        report = check(plan, config)
    except HarnessError as e:
        print(f"{label}: {e}", file=sys.stderr)
        return 2
    for diagnostic in report.diagnostics:
        print(diagnostic.line())
    print(f"{report.summary()} in {time.perf_counter() - t0:.1f} s")
    return 1 if report.mandatory else 0

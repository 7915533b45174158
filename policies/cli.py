"""`python -m policies check PLAN.json [--config CONFIG.json]`: run a plan through the pack offline, over gRPC.

Prints one line per diagnostic, `LEVEL policy-name urn: message`, then a summary line. Exit status: 0 when no
mandatory violation, 1 when there is at least one, 2 when the check could not run (unreadable or ill-shaped plan or
config, or a pack that failed to start or answer), with a one-line message on stderr.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

USAGE = """usage: python -m policies check PLAN.json [--config CONFIG.json]

Run the gpuburst policy pack over PLAN.json (the synth's out/plan.json) exactly as the Pulumi engine would: the
pack runs as a subprocess and is driven over the analyzer gRPC protocol. CONFIG.json has the shape
`pulumi preview --policy-pack-config` takes, e.g. {"nodepool-instance-diversity": "advisory"} or
{"sqs-work-queue": {"enforcementLevel": "disabled"}} ("all" sets every policy's level).

Exit status: 0 no mandatory violation, 1 mandatory violation(s), 2 the check could not run."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like every other input error
        print(f"policies check: {message} (see python -m policies --help)", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    """`argv` starts with `check` (or a help flag), as dispatched by policies/__main__.py."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help") or argv[1:2] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    parser = _Parser(prog="python -m policies check", add_help=False)
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
        print(f"policies check: {e}", file=sys.stderr)
        return 2
    for diagnostic in report.diagnostics:
        print(diagnostic.line())
    print(f"{report.summary()} in {time.perf_counter() - t0:.1f} s")
    return 1 if report.mandatory else 0

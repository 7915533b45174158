"""Command line of the components package: `synth` (offline plan) and `verify` (post-upgrade live checks)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _synth(argv: list[str]) -> int:
    from .synth import SynthError, summary, synth
    from .validation import ConfigError

    parser = argparse.ArgumentParser(
        prog="python -m components synth",
        description="Run the stack's Pulumi program offline under recording mocks and write the plan: "
                    "OUT/plan.json (every registration, sorted by URN) and OUT/manifests/*.yaml.")
    parser.add_argument("--stack", default="dev", help="stack whose Pulumi.<stack>.yaml to read (default: dev)")
    parser.add_argument("--out", default="out", type=Path, help="output folder (default: out)")
    parser.add_argument("--stack-file", type=Path, default=None,
                        help="read the config from this YAML file instead of Pulumi.<stack>.yaml")
    args = parser.parse_args(argv)
    try:
        result = synth(args.stack, args.out, stack_file=args.stack_file)
    except (SynthError, ConfigError) as e:
        print(f"synth: {e}", file=sys.stderr)
        return 2
    print(summary(result))
    return 0


def _verify(argv: list[str]) -> int:
    from .verify.cli import main

    return main(argv)


COMMANDS = {"synth": _synth, "verify": _verify}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m components {synth,verify} [options]\n\n"
              "  synth   render the whole stack offline under Pulumi mocks (out/plan.json, out/manifests/)\n"
              "  verify  post-upgrade checks against the live cluster and AWS (exit 1 on any failure)\n\n"
              "Run `python -m components COMMAND --help` for a command's options.",
              file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())

"""Test-only launcher: `python -m worker consume` with a stand-in or slowed processor injected (for signal tests).

Usage: python tests/worker/consumer_harness.py [--stand-in S [--uninterruptible]] [--slow-before S] [--die]
       -- consume ARGS
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]

from standin_processor import StandIn, slow_before  # noqa: E402

from worker import commands  # noqa: E402
from worker.logfmt import setup_logging  # noqa: E402


def main() -> int:
    argv = sys.argv[1:]
    split = argv.index("--")
    h = argparse.ArgumentParser()
    h.add_argument("--stand-in", type=float, default=None, metavar="S", help="stand-in processor taking S seconds")
    h.add_argument("--uninterruptible", action="store_true", help="the stand-in never calls progress")
    h.add_argument("--slow-before", type=float, default=None, metavar="S", help="real processor, S seconds late")
    h.add_argument("--die", action="store_true", help="the processor SIGKILLs its own process (a slide that kills "
                                                     "its worker: out of memory, a native crash)")
    hargs = h.parse_args(argv[:split])
    args = commands.build_parser().parse_args(argv[split + 1:])
    setup_logging(args.log_level)
    inject = {}
    if hargs.stand_in is not None:
        inject["processor"] = StandIn(hargs.stand_in, interruptible=not hargs.uninterruptible)
    if hargs.die:
        inject["processor"] = lambda *_a: os.kill(os.getpid(), signal.SIGKILL)
    if hargs.slow_before is not None:
        inject["wrap_processor"] = slow_before(hargs.slow_before)
    return commands.cmd_consume(args, **inject)


if __name__ == "__main__":
    sys.exit(main())

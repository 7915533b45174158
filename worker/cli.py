"""Command line of the worker: `python -m worker consume|infer|bench|demo`."""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from worker.logfmt import setup_logging

#: Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error, 3 no usable GPU for --device cuda.
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_NO_GPU = 0, 1, 2, 3


def _env(name: str, default: Any = None) -> Any:
    value = os.environ.get(name)
    return default if value in (None, "") else value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of all subcommands (its --help is the CLI reference)."""
    p = argparse.ArgumentParser(prog="python -m worker",
                                description="gpuburst GPU worker: whole-slide inference from an SQS queue.")
    p.add_argument("--log-level", default=None, help="DEBUG, INFO (default, or $LOG_LEVEL), WARNING, ERROR")
    sub = p.add_subparsers(dest="command", required=True, metavar="{consume,infer,bench,demo}")

    c = sub.add_parser("consume", help="process slides from an SQS queue (KEDA ScaledJob or Deployment)",
                       description="Long-poll an SQS queue and process one slide per message; see "
                                   "docs/worker.md for the message contract.")
    c.add_argument("--queue-url", default=_env("QUEUE_URL"), help="SQS work queue URL (default $QUEUE_URL)")
    c.add_argument("--mode", choices=("job", "service"), default="job",
                   help="job: exit 0 when a long poll comes back empty (or after --max-messages); "
                        "service: loop until SIGTERM or --idle-exit (default job)")
    c.add_argument("--max-messages", type=int, default=None, metavar="N",
                   help="stop after N messages (default: no limit)")
    c.add_argument("--idle-exit", type=_positive_float, default=None, metavar="S",
                   help="service mode: exit 0 after S seconds without a message (default: never)")
    c.add_argument("--device", choices=("auto", "cuda", "cpu"), default=_env("DEVICE", "auto"),
                   help="auto (default, or $DEVICE), cuda (exit 3 at once without a usable GPU) or cpu")
    c.add_argument("--model", default=_env("MODEL_PATH"), metavar="PATH",
                   help="TorchScript model file (default $MODEL_PATH, else the built-in model)")
    c.add_argument("--visibility-timeout", type=int, default=_env("VISIBILITY_TIMEOUT", "600"), metavar="S",
                   help="seconds a received message stays invisible, renewed while working "
                        "(default $VISIBILITY_TIMEOUT or 600)")
    c.add_argument("--visibility-extension-interval", type=_positive_float,
                   default=_env("VISIBILITY_EXTENSION_INTERVAL", "120"), metavar="S",
                   help="seconds between renewals, < --visibility-timeout "
                        "(default $VISIBILITY_EXTENSION_INTERVAL or 120)")
    c.add_argument("--wait-time", type=int, default=20, metavar="S",
                   help="long-poll seconds per receive, 0-20 (default 20)")
    c.add_argument("--grace-period", type=float, default=_env("GRACE_PERIOD", "25"), metavar="S",
                   help="after SIGTERM: seconds the current slide may still take before it is released "
                        "(default $GRACE_PERIOD or 25; keep below terminationGracePeriodSeconds)")
    c.add_argument("--retry-backoff", type=int, default=30, metavar="S",
                   help="first retry delay after a failure, doubled per receive, max 900 (default 30)")
    c.add_argument("--scratch", default=_env("SCRATCH_DIR"), metavar="DIR",
                   help="working folder for downloads and results (default $SCRATCH_DIR, else $TMPDIR)")

    i = sub.add_parser("infer", help="process one local slide, no queue",
                       description="Run the pipeline on one local slide and write its overlay, preview and "
                                   "summary into --out.")
    i.add_argument("slide", help="a local TIFF/OME-TIFF/SVS slide")
    i.add_argument("--out", required=True, metavar="DIR", help="output folder (created)")
    i.add_argument("--model", default=_env("MODEL_PATH"), metavar="PATH", help="TorchScript model (default built-in)")
    i.add_argument("--device", choices=("auto", "cuda", "cpu"), default=_env("DEVICE", "auto"))
    i.add_argument("--mpp-um", type=_positive_float, default=None, metavar="X",
                   help="microns per pixel of the full-resolution level, for slides without calibration "
                        "(default: read from the file)")
    i.add_argument("--slide-id", default=None, help="name of the outputs (default: the file stem)")

    b = sub.add_parser("bench", help="measure throughput; prints JSON")
    b.add_argument("--quick", action="store_true", help="a short run (seconds, not minutes)")
    b.add_argument("--device", choices=("auto", "cuda", "cpu"), default=_env("DEVICE", "auto"))

    d = sub.add_parser("demo", help="the whole queue flow on this machine against a local moto_server",
                       description="Start moto_server on loopback, upload synthetic slides, queue them (plus one "
                                   "malformed message), run the consumer in job mode and show the results.")
    d.add_argument("--out", default="out/demo", metavar="DIR", help="where results are downloaded (default out/demo)")
    d.add_argument("--slides", type=int, default=3, metavar="N", help="number of synthetic slides, 1-10 (default 3)")
    d.add_argument("--size", type=int, default=6144, metavar="PX",
                   help="width and height of each synthetic slide in pixels, 1024-16384 (default 6144)")
    d.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    return p


def consume_settings(args: argparse.Namespace) -> Any:
    """ConsumerSettings from parsed `consume` arguments (raises ValueError with a one-line reason)."""
    from worker.consumer import ConsumerSettings

    s = ConsumerSettings(
        queue_url=args.queue_url or "", mode=args.mode, max_messages=args.max_messages,
        idle_exit_s=args.idle_exit, device=args.device, model_path=args.model,
        visibility_timeout_s=args.visibility_timeout,
        visibility_extension_interval_s=args.visibility_extension_interval, wait_time_s=args.wait_time,
        grace_period_s=args.grace_period, retry_backoff_s=args.retry_backoff, scratch_dir=args.scratch,
        liveness_file=os.environ.get("LIVENESS_FILE") or None)
    s.validate()
    return s


_FLAGS = {"queue_url": "--queue-url", "visibility_timeout_s": "--visibility-timeout",
          "visibility_extension_interval_s": "--visibility-extension-interval", "wait_time_s": "--wait-time",
          "max_messages": "--max-messages", "idle_exit_s": "--idle-exit", "grace_period_s": "--grace-period",
          "retry_backoff_s": "--retry-backoff", "mode": "--mode", "device": "--device"}


def cmd_consume(args: argparse.Namespace, **inject: Any) -> int:
    """`consume`: validate settings, GPU self-check, load the model, consume."""
    from worker import consumer

    try:
        settings = consume_settings(args)
    except ValueError as e:
        text = str(e)
        for name, flag in _FLAGS.items():  # say it in the user's terms: the flag, not the dataclass field
            text = re.sub(rf"\b{name}\b", flag, text)
        print(f"python -m worker consume: error: {text}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return consumer.run(settings, **inject)
    except Exception as e:
        if type(e).__name__ == "NoUsableGpu":
            print(str(e), file=sys.stderr)
            return EXIT_NO_GPU
        raise


class ProgressBar:
    """A plain-text progress bar on stderr (no tqdm): `[#####.....]  52%  1234/2368 tiles  12.3 s`."""

    def __init__(self, label: str, stream: Any = None, width: int = 30, min_interval_s: float = 0.2) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.min_interval_s = min_interval_s
        self.t0 = time.monotonic()
        self._last = 0.0
        self._shown = False
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, done: Any = None, total: Any = None, *args: Any, **kwargs: Any) -> None:
        done = kwargs.get("done", done)
        total = kwargs.get("total", total)
        if not isinstance(done, (int, float)) or not isinstance(total, (int, float)) or total <= 0:
            return
        now = time.monotonic()
        if done < total and now - self._last < self.min_interval_s:
            return
        if not self._tty and done < total and now - self._last < 5.0:
            return  # logs and pipes get a line every 5 s, not a redraw
        self._last = now
        frac = min(max(done / total, 0.0), 1.0)
        filled = int(round(frac * self.width))
        line = (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {100 * frac:5.1f}%  "
                f"{int(done)}/{int(total)} tiles  {now - self.t0:6.1f} s")
        self.stream.write(("\r" + line) if self._tty else (line + "\n"))
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """End the bar's line."""
        if self._shown and self._tty:
            self.stream.write("\n")
            self.stream.flush()


def cmd_infer(args: argparse.Namespace) -> int:
    """`infer`: one local slide, no queue; progress bar on stderr; prints where the outputs are."""
    from worker.device import NoUsableGpu, describe_device, select_device
    from worker.messages import OUTPUT_SUFFIXES, default_slide_id
    from worker.slides import SlideError

    slide = Path(args.slide)
    if not slide.is_file():
        print(f"python -m worker infer: error: slide={str(slide)!r}: no such file", file=sys.stderr)
        return EXIT_USAGE
    slide_id = args.slide_id or default_slide_id(slide.name)
    try:
        device = select_device(args.device)
    except NoUsableGpu as e:
        print(str(e), file=sys.stderr)
        return EXIT_NO_GPU
    from worker.model import load_model
    from worker.pipeline import process_slide

    print(f"device: {describe_device(device)}", file=sys.stderr)
    model = load_model(args.model, device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bar = ProgressBar(slide_id)
    t0 = time.monotonic()
    try:
        summary = process_slide(slide, out, model, slide_id=slide_id, settings=_pipeline_settings(args),
                                progress=bar)
    except SlideError as e:
        bar.close()
        print(f"python -m worker infer: error: {e}", file=sys.stderr)
        return EXIT_FAILURE
    bar.close()
    from worker.study import slide_metrics

    m = slide_metrics(summary)
    print(f"{slide_id}: {m['tiles_seen']} tissue tiles, tissue {_pct(m['tissue_percent'])}, "
          f"{time.monotonic() - t0:.1f} s with {model.name} {model.version} on {describe_device(device)}")
    print(f"outputs in {out}:")
    for suffix in OUTPUT_SUFFIXES:
        print(f"  {out / (slide_id + suffix)}")
    return EXIT_OK


def _pct(v: Any) -> str:
    return "?" if v is None else f"{float(v):.1f}%"


def _pipeline_settings(args: argparse.Namespace) -> Any:
    """The pipeline's settings object with the CLI's overrides (None when nothing is overridden)."""
    if args.mpp_um is None:
        return None
    from worker import pipeline

    cls = getattr(pipeline, "PipelineSettings")
    return cls(mpp_um=args.mpp_um)


def cmd_bench(args: argparse.Namespace) -> int:
    """`bench`: run the compute half's benchmark and print its result as indented JSON."""
    from worker.bench import run_bench
    from worker.device import NoUsableGpu

    try:
        result = run_bench(quick=args.quick, device=args.device)
    except NoUsableGpu as e:
        print(str(e), file=sys.stderr)
        return EXIT_NO_GPU
    print(json.dumps(result, indent=2))
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """`demo`: the end-to-end queue flow against a local moto_server."""
    from worker.demo import run_demo

    return run_demo(out=Path(args.out), slides=args.slides, size_px=args.size, device=args.device)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse argv, set up one-line logging, and run a subcommand; return the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    commands = {"consume": cmd_consume, "infer": cmd_infer, "bench": cmd_bench, "demo": cmd_demo}
    try:
        return commands[args.command](args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one readable line instead of a traceback for operational errors
        logging.getLogger("worker").error(f"{args.command}.failed error={type(e).__name__} detail=\"{e}\"")
        if logging.getLogger().isEnabledFor(logging.DEBUG):
            raise
        return EXIT_FAILURE

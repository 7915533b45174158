"""One-line, human-readable text: structured log events (`event.name key=value key="value with spaces"`) and errors."""
from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/:@+,%")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.2f}"
    text = str(value).replace("\r", " ").replace("\n", " ")
    if text and set(text) <= _SAFE:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def event(name: str, /, **fields: Any) -> str:
    """Render one event as a single line; None values print as '-', floats with two decimals (seconds)."""
    return " ".join([name] + [f"{k}={_fmt(v)}" for k, v in fields.items()])


def one_line(exc: BaseException, limit: int = 200) -> str:
    """An exception as one line of at most `limit` characters (whitespace collapsed, "..." where it was cut)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class LibraryRecords(logging.Filter):
    """Routes what libraries log (any logger outside `worker`: wsidicom, pydicom, OpenSlide, PIL, tifffile, botocore,
    Python warnings...) to DEBUG: shown only at DEBUG, as DEBUG lines naming the library's logger and its level.

    Why: the worker says what matters about a slide in one line of its own (a refusal, a dead-letter reason); a
    library's warnings about the same file (wsidicom prints nine about the BPAEC series' orientation before the
    worker's one-line refusal) only bury that line. The worker's own records pass unchanged.
    """

    def __init__(self, show: bool) -> None:
        super().__init__()
        self.show = show

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "worker" or record.name.startswith("worker."):
            return True
        if not self.show:
            return False
        text = " ".join(record.getMessage().split())  # one line: a warning carries its source line after a newline
        record.msg, record.args = f"{record.name} {record.levelname}: {text}", None
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        record.exc_info = record.exc_text = None  # one line: a library's traceback is not the worker's error
        return True


def setup_logging(level: str | None = None) -> None:
    """Log to stderr, one line per event with a UTC timestamp; level from `level`, else $LOG_LEVEL, else INFO.

    Only the worker's own loggers (`worker.*`) speak at their level: libraries' records and Python warnings go
    through `LibraryRecords`, at DEBUG, so a bad slide stays one line.
    """
    level_name = (level or os.environ.get("LOG_LEVEL") or "INFO").upper()
    numeric = getattr(logging, level_name, logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter("%(asctime)s.%(msecs)03dZ %(levelname)-7s %(message)s", "%Y-%m-%dT%H:%M:%S")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    handler.addFilter(LibraryRecords(show=numeric <= logging.DEBUG))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(numeric)
    logging.captureWarnings(True)  # warnings.warn from a library: a py.warnings record, routed like the others
    # Libraries log at their own level; below the worker's level they need not even build the record. boto's and
    # urllib3's DEBUG is wire-level (every request's headers), too much even for --log-level DEBUG.
    for name, floor in (("botocore", logging.WARNING), ("boto3", logging.WARNING), ("urllib3", logging.WARNING),
                        ("s3transfer", logging.WARNING)):
        logging.getLogger(name).setLevel(floor)

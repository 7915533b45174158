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


def setup_logging(level: str | None = None) -> None:
    """Log to stderr, one line per event with a UTC timestamp; level from `level`, else $LOG_LEVEL, else INFO.

    Libraries that log on their own are held back (boto to WARNING, tifffile to ERROR) so a bad slide stays one line.
    """
    level_name = (level or os.environ.get("LOG_LEVEL") or "INFO").upper()
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter("%(asctime)s.%(msecs)03dZ %(levelname)-7s %(message)s", "%Y-%m-%dT%H:%M:%S")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level_name, logging.INFO))
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # tifffile's warnings about a broken file repeat what our one dead-letter line says.
    logging.getLogger("tifffile").setLevel(logging.ERROR)

"""The one-line errors of the slide readers: SlideError (not a slide this worker can use) and SlideLimitError."""
from __future__ import annotations

from pathlib import Path


class SlideError(Exception):
    """The input is not a slide this worker can read; the message is one line naming the file and the problem."""


class SlideLimitError(SlideError):
    """The slide declares more than a `SlideLimits` limit admits (a decompression bomb, a damaged header, or a slide
    larger than the worker is configured for); found from headers before any pixel is decoded, and permanent."""


def fail(path: Path | str, what: str) -> SlideError:
    """A SlideError whose one line starts with the file's path."""
    return SlideError(f"{path}: {what}")

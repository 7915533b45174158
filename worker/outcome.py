"""What happened to one received message (Outcome), and the failures that decide its final action."""
from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Outcome:
    """What happened to one received message (kept in Consumer.outcomes, in order)."""

    message_id: str
    """The SQS message id."""
    status: str
    """'done', 'skipped' (already finished), 'dead-lettered', 'retry' (left for redelivery), 'released', or 'probe'
    (a `verify` probe, deleted at once)."""
    slide_id: str | None = None
    """The slide's id, when the body was valid."""
    study: str | None = None
    """The study (message group), when known."""
    sequence: int | None = None
    """The message's sequence, when given."""
    seconds: float = 0.0
    """Wall-clock seconds from receipt to the final action on the message."""
    reason: str = ""
    """Why it was dead-lettered, retried or released (one line)."""
    summary: dict | None = None
    """The committed summary (status 'done'), or the existing one (status 'skipped')."""


class PermanentError(Exception):
    """A failure that no retry can fix (contract violation, missing slide, unreadable slide, a slide over a
    SlideLimits limit): dead-letter at once."""


class Cancelled(Exception):
    """The grace period after SIGTERM ran out while a slide was in progress."""


def permanent_types() -> tuple[type[BaseException], ...]:
    """Exception types from the compute half that mean 'this slide can never be processed' (bad file): SlideError,
    which includes SlideLimitError (the slide declares more than the limits admit: no retry can change that)."""
    types: list[type[BaseException]] = [PermanentError]
    try:
        from worker.slides import SlideError
        types.append(SlideError)
    except ImportError:  # pragma: no cover - the compute half is absent only in partial checkouts
        pass
    return tuple(types)


def where(exc: BaseException) -> str:
    """'file.py:123' of the innermost frame of an exception's traceback (for one-line error logs)."""
    tb = traceback.extract_tb(exc.__traceback__)
    return f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"

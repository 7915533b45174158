"""run_under_mocks on its error path: the program's error comes through, no asyncio loop is left open to be finalized
noisily at interpreter exit (the ~25-line `Invalid file descriptor: -1` traceback under a one-line error), and the
next run in the same process still works."""
from __future__ import annotations

import asyncio
import gc

import pulumi_aws as aws
import pytest

from components.synth.mocks import run_under_mocks


def _open_idle_loops() -> list[asyncio.AbstractEventLoop]:
    return [o for o in gc.get_objects()
            if isinstance(o, asyncio.AbstractEventLoop) and not o.is_closed() and not o.is_running()]


def test_an_error_after_registrations_leaves_no_loop_open_and_the_next_run_works():
    def failing():
        aws.sqs.Queue("registered-first")
        raise ValueError("the program's own error")

    with pytest.raises(ValueError, match="the program's own error"):
        run_under_mocks(failing)
    assert _open_idle_loops() == []
    res = run_under_mocks(lambda: aws.sqs.Queue("after"))
    assert [r.name for r in res.monitor.by_type("aws:sqs/queue:Queue")] == ["after"]

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


def test_the_programs_log_lines_are_kept_in_order_and_handed_over_as_they_come():
    import pulumi

    from components.synth.mocks import LogLine

    seen: list[LogLine] = []

    def program():
        queue = aws.sqs.Queue("q")
        pulumi.log.info("chose the consumer: ordered work")
        pulumi.log.warn("kubernetesVersion 1.34: standard support ends soon", queue)  # attached to a resource
        pulumi.log.debug("left out, as the CLI does without --debug")

    res = run_under_mocks(program, on_log=seen.append)
    assert res.logs == [LogLine("info", "chose the consumer: ordered work"),
                        LogLine("warning", "kubernetesVersion 1.34: standard support ends soon")]
    assert seen == res.logs and [str(line) for line in seen][0] == "info: chose the consumer: ordered work"
    assert run_under_mocks(lambda: aws.sqs.Queue("quiet")).logs == []  # a run's lines never leak into the next


def test_closing_the_loops_steps_over_a_dead_weak_proxy():
    """The collector's list can hold a weakref.proxy whose referent is gone; isinstance() on it raises ReferenceError,
    which once failed every later program's error path in the same process (45 tests in one xdist worker)."""
    import gc
    import weakref

    from components.synth.mocks import close_event_loops

    class Referent:
        pass

    referent = Referent()
    holder = [weakref.proxy(referent)]
    del referent
    assert any(type(o) is weakref.ProxyType for o in gc.get_objects()), "the dead proxy is not where the loop looks"
    close_event_loops()
    assert holder  # still held: the proxy was in gc.get_objects() while the loops were closed


def test_a_urn_carries_its_parents_whole_chain_of_types_as_the_engine_gives_it():
    """The engine's URN type is the parent's qualified type, `$`, then the resource's own (the SDK's create_urn builds
    it the same way from the parent's URN); Pulumi's MockMonitor keeps only the nearest parent's type. Rules that
    read the chain (policies/fixes.py) must see a synth plan as they see a real preview."""
    import pulumi

    def program():
        outer = pulumi.ComponentResource("test:index:Outer", "outer")
        inner = pulumi.ComponentResource("test:index:Inner", "inner", opts=pulumi.ResourceOptions(parent=outer))
        aws.sqs.Queue("q", opts=pulumi.ResourceOptions(parent=inner))
        aws.sqs.Queue("top")

    res = run_under_mocks(program, project="proj", stack="st")
    urns = {r.name: r.urn for r in res.registrations}
    assert urns["q"] == "urn:pulumi:st::proj::test:index:Outer$test:index:Inner$aws:sqs/queue:Queue::q"
    assert urns["inner"] == "urn:pulumi:st::proj::test:index:Outer$test:index:Inner::inner"
    assert urns["top"] == "urn:pulumi:st::proj::aws:sqs/queue:Queue::top"

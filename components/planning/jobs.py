"""The ScaledJob's part of the burst model: KEDA's polls starting Jobs and each Job receiving its messages (the rules
are in `simulation`'s docstring)."""
from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Mapping
from typing import Any

from .. import catalogue

__all__ = ["run_jobs"]


def run_jobs(msgs: list[float], opened: Mapping[float, bool], poll: float, parallel: int, per_job: int,
              pods_per_node: int, alive: Callable[..., Any], place: Callable[..., Any],
              open_pod: Callable[..., Any], result: Callable[..., Any], close_pod: Callable[..., Any]) -> int:
    """The ScaledJob's run over the messages' sorted arrival times `msgs` (`opened[t]`: the warm floor is up for a
    message arriving at t), `parallel` slots and Jobs of `per_job` messages, with `simulate`'s node and pod helpers
    (`alive`, `place`, `open_pod`, `result`, `close_pod`); returns the Jobs started."""
    wait = float(catalogue.WORKER_EMPTY_RECEIVE_S)
    items = len(msgs)

    def next_poll(t: float) -> float:
        """KEDA's first poll at or after `t`: on a fixed grid from the first arrival, which (worst case) lands just
        after one."""
        return t if poll == 0 else poll * max(1, math.ceil(t / poll - 1e-9))

    # One heap entry per free GPU slot: (free at, tie-break, node it last ran on). A slot's own node has the image
    # and the model cached and a free slot when the slot frees, so it is the best place for the next Job while alive.
    slots: list = [(0.0, k, None) for k in range(parallel)]
    events: list = []  # (time, sequence, pod, slot) : a Job ready to receive its next message
    done: list[float] = []  # result times not yet counted at a poll
    exits: list[float] = []  # exit times not yet counted at a poll
    state = {"claimed": 0, "done": 0, "exited": 0, "started": 0, "waiting": 0, "seq": 0}
    last_poll, now, dirty = -math.inf, 0.0, True

    def receive(t: float, pod: dict, k: int) -> None:
        """Job `pod` asks SQS for a message at `t`: the oldest not yet taken (on arrival when it comes within the
        long poll), or it exits — at once after `per_job` messages, else after an empty long poll."""
        c = state["claimed"]
        if pod["count"] < per_job and c < items and msgs[c] <= t + wait:
            state["claimed"] += 1
            state["waiting"] -= pod["count"] == 0
            result(pod, msgs[c])  # (counts it)
            heapq.heappush(done, pod["end"])
            state["seq"] += 1
            heapq.heappush(events, (pod["end"], state["seq"], pod, k))
            return
        state["waiting"] -= pod["count"] == 0
        end = t if pod["count"] >= per_job else t + wait
        close_pod(pod, end)
        heapq.heappush(exits, end)
        heapq.heappush(slots, (end, k, pod["n"]))

    def do_poll(p: float) -> None:
        """KEDA's poll at `p`: min(ceil(Q / N), parallel) - running new Jobs."""
        while done and done[0] <= p:
            heapq.heappop(done)
            state["done"] += 1
        while exits and exits[0] <= p:
            heapq.heappop(exits)
            state["exited"] += 1
        arrived = bisect_right(msgs, p)
        running = state["started"] - state["exited"]
        for _ in range(min(math.ceil((arrived - state["done"]) / per_job), parallel) - running):
            if not slots or slots[0][0] > p:
                break
            free_at, k, n = heapq.heappop(slots)
            floor_ok = opened[msgs[min(state["claimed"] + state["waiting"], arrived - 1)]]
            if not (n is not None and alive(n, p, floor_ok)
                    and n.running(p) < pods_per_node):  # (place() may have filled it meanwhile)
                n = place(p, floor_ok)
            state["started"] += 1
            state["waiting"] += 1
            pod = open_pod(n, p, f"job {state['started']}")
            state["seq"] += 1
            heapq.heappush(events, (pod["serving"], state["seq"], pod, k))

    grid = (-1, -math.inf, math.inf)  # (claimed, last poll) -> the next poll on the grid, kept while they hold
    while events or state["claimed"] < items:
        te = events[0][0] if events else math.inf
        tp = math.inf
        if state["claimed"] < items:
            t0 = msgs[state["claimed"]]
            if poll > 0:
                if grid[:2] != (state["claimed"], last_poll):
                    after = next_poll(last_poll + poll / 2) if last_poll > -math.inf else poll
                    grid = (state["claimed"], last_poll, max(next_poll(t0), after))
                tp = grid[2]
            else:  # KEDA's poll zeroed (--warm): a poll whenever something changes (a receive, an exit)
                tp = max(t0, now) if dirty or t0 > last_poll else max(t0, min(te, exits[0] if exits else te))
        if te <= tp:
            t, _, pod, k = heapq.heappop(events)
            now, dirty = t, True
            receive(t, pod, k)
        elif tp < math.inf:
            do_poll(tp)
            last_poll, now, dirty = tp, tp, False
        else:  # cannot happen: unclaimed messages with no Job and no poll to come
            raise RuntimeError("the ScaledJob model stalled")
    return state["started"]

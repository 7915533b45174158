"""The planner's output: the JSON document, the table `plan-burst` prints, and the PNG timeline."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import catalogue
from .arrivals import Trace
from .stack import WorkloadPlan
from .stages import CONSOLIDATE_AFTER_S

__all__ = [
    "plans_json",
    "plans_table",
    "write_timeline",
]

def plans_json(plans: Mapping[str, list[WorkloadPlan]]) -> dict[str, Any]:
    """`{"workloads": {NAME: {first burst's keys..., "patterns": {...}, "bursts": [every burst]}}}`."""
    out = {}
    for name, per_burst in plans.items():
        entry = per_burst[0].summary()
        entry["bursts"] = [p.summary() for p in per_burst]
        out[name] = entry
    return {"workloads": out}


def _fmt_s(s: float) -> str:
    """Seconds as `1,060 s (17 min 40 s)`, or `19,703 s (5 h 28 min)` from an hour (a trace's spans)."""
    if s >= 3600:
        return f"{s:,.0f} s ({int(s // 3600)} h {int(s % 3600 // 60):02d} min)"
    return f"{s:,.0f} s ({int(s // 60)} min {s % 60:02.0f} s)" if s >= 60 else f"{s:,.0f} s"


def plans_table(plans: Mapping[str, list[WorkloadPlan]]) -> str:
    """A readable report: per workload and burst, the stages and both patterns' times and costs."""
    lines = []
    for name, per_burst in plans.items():
        for wp in per_burst:
            if isinstance(wp.burst, Trace):
                what = (f"trace {wp.burst.source}: {wp.burst.items} messages in {len(wp.burst.arrivals)} arrivals "
                        f"from {wp.burst.at.isoformat()} to {wp.burst.arrivals[-1][0].isoformat()}")
            else:
                when = wp.burst.at.isoformat() if wp.burst.at else "no time (warm floor not applied)"
                what = f"burst of {wp.burst.items} at {when}"
            lines += [f"{name}: {what}; runs as {wp.pattern}", f"  chooser: {wp.reason}"]
            st = wp.patterns["scaledjob"].stages
            lines.append("  stages: " + ", ".join(f"{k} {v:g} s" for k, v in st.items()))
            if wp.image_pull:
                lines.append(f"  image pull: {wp.image_pull}")
            lines.append(f"  {'pattern':<11}{'type':<24}{'par':>4}{'nodes':>6}{'floor':>6}{'cold start':>22}"
                         f"{'first result':>23}{'last result':>23}{'latency mean/p95/max s':>24}{'node-s':>9}"
                         f"{'cost $':>10}{'$/item':>10}{'idle $/day':>11}")
            for p in ("scaledjob", "consumer"):
                pp = wp.patterns[p]
                mark = "*" if p == wp.pattern else " "
                latency = f"{pp.latency_mean_s:,.0f}/{pp.latency_p95_s:,.0f}/{pp.latency_max_s:,.0f}"
                lines.append(f" {mark}{p:<11}{pp.instance_type + ' ' + pp.capacity_type:<24}{pp.parallel:>4}"
                             f"{pp.nodes_launched:>6}{pp.warm_floor_nodes:>6}{_fmt_s(pp.cold_start_s):>22}"
                             f"{_fmt_s(pp.time_to_first_result_s):>23}{_fmt_s(pp.time_to_last_result_s):>23}"
                             f"{latency:>24}{pp.gpu_node_seconds_billed:>9,.0f}{pp.cost_usd:>10.4f}"
                             f"{pp.cost_per_item_usd:>10.5f}"
                             f"{pp.idle_cost_per_day_usd:>11.2f}")
            lines.append("")
    lines.append("* = the pattern the stack runs. Times from the burst's arrival (a trace: its first arrival); latency "
                 "= a message's result time - its arrival; costs per burst or trace (per-second billing, "
                 f"60 s minimum, {CONSOLIDATE_AFTER_S} s consolidation tail for Job nodes; spot at "
                 f"{catalogue.SPOT_PRICE_FRACTION:.0%} of on-demand, an assumption).")
    return "\n".join(lines)


def write_timeline(wp: WorkloadPlan, path: Any) -> None:
    """A PNG timeline of both patterns (nodes with their start-up stages, pods with load and inference, results, and
    a 'messages' row with a tick per arrival)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"nodeclaim": "#bbbbbb", "ec2_ready": "#9ecae1", "gpu_registered": "#6baed6", "image_pull": "#fd8d3c",
               "wait": "#eeeeee", "model_load": "#e6550d", "inference": "#31a354", "node_up": "#dadaeb"}
    fig, axes = plt.subplots(2, 1, figsize=(12, 7), squeeze=False)
    for ax, p in zip(axes[:, 0], ("scaledjob", "consumer")):
        plan = wp.patterns[p]
        rows: list[tuple[str, list[tuple[float, float, str]]]] = []
        for n in plan.timeline["nodes"]:
            segs = [] if n["floor"] else [
                (n["created"], n["launched"], "nodeclaim"), (n["launched"], n["ready"], "ec2_ready"),
                (n["ready"], n["gpu"], "gpu_registered"), (n["gpu"], n["image"], "image_pull")]
            segs.append((n["image"], n["released"], "node_up"))
            rows.append((f"node {n['id']}{' (floor)' if n['floor'] else ''}", segs))
        for pod in plan.timeline["pods"][:40]:
            runs = pod.get("runs") or [(pod["serving"], pod["end"])]  # a consumer idles between a trace's arrivals
            rows.append((pod["label"], [(pod["created"], pod["start"], "wait"),
                                        (pod["start"], pod["serving"], "model_load")]
                         + [(a, b, "inference") for a, b in runs]))
        for y, (label, segs) in enumerate(rows):
            for a, b, kind in segs:
                if b > a:
                    ax.barh(y, b - a, left=a, color=colours[kind], edgecolor="none")
        results = sorted(r for pod in plan.timeline["pods"] for r in pod["results"])
        ax.plot(results, [len(rows)] * len(results), "|", color="black")
        arrivals = plan.timeline.get("arrivals") or [(0.0, plan.items)]
        ax.plot([t for t, _ in arrivals], [len(rows) + 1] * len(arrivals), "|", color="#3182bd", markersize=10)
        if len(arrivals) <= 30:  # label how many arrived at each tick while they stay legible
            for t, n in arrivals:
                ax.annotate(f"{n}", (t, len(rows) + 1), textcoords="offset points", xytext=(2, 3), fontsize=6)
        ax.set_yticks(range(len(rows) + 2), [r[0] for r in rows] + ["results", "messages"], fontsize=6)
        ax.invert_yaxis()
        span = (f"{len(arrivals)} arrivals, " if len(arrivals) > 1 else "")
        ax.set_title(f"{wp.workload} as {p}: {plan.items} messages, {span}first result "
                     f"{plan.time_to_first_result_s:,.0f} s, last {plan.time_to_last_result_s:,.0f} s, latency p95 "
                     f"{plan.latency_p95_s:,.0f} s, {plan.nodes_launched} "
                     f"node{'' if plan.nodes_launched == 1 else 's'} launched, ${plan.cost_usd:.3f}",
                     fontsize=9)
        ax.set_xlabel("seconds from the first arrival" if isinstance(wp.burst, Trace) else "seconds from the burst")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    fig.legend(handles, list(colours), loc="lower center", ncol=len(colours), fontsize=7)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)

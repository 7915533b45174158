"""The planner's output: the JSON document, the table `plan-burst` prints, and the PNG timeline; the advisor's
ranked configurations with their config lines, as a table or JSON."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import catalogue
from .advice import Advice, Option
from .arrivals import Trace
from .stack import WorkloadPlan
from .stages import CONSOLIDATE_AFTER_S, NODE_STAGES

if TYPE_CHECKING:
    from ..config import StackConfig, WorkloadConfig

__all__ = [
    "plans_json",
    "plans_table",
    "write_timeline",
    "describe",
    "bound_paragraph",
    "config_fragment",
    "advice_json",
    "advice_table",
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


# --------------------------------------------------------------------------------------------------------------------
# The advisor's output (`plan-burst --deadline/--budget`): the ranked configurations, their config lines, and why
# nothing meets the goal when nothing does.
# --------------------------------------------------------------------------------------------------------------------

def describe(o: Option) -> str:
    """`8 Jobs at once of 25 messages on g4dn.2xlarge spot, no warm floor`, or `one consumer on ... on-demand`."""
    if o.pattern == "consumer":
        return f"one consumer on {o.instance_type} on-demand"
    floor = f"a warm floor of {o.warm_floor}" if o.warm_floor else "no warm floor"
    return (f"{o.jobs_at_once} Job{'s' if o.jobs_at_once != 1 else ''} at once of {o.messages_per_job} "
            f"message{'s' if o.messages_per_job != 1 else ''} on {o.instance_type} {o.capacity_type}, {floor}")


def bound_paragraph(evaluated: list[Option], deadline_s: float | None, budget_usd: float | None,
                    config: StackConfig, workload: WorkloadConfig) -> str:
    """One paragraph on why no configuration meets the goal, naming the stage that bounds the best one."""
    fastest = min(evaluated, key=lambda o: (o.time_to_last_result_s, o.cost_usd, o.key()))
    if deadline_s is not None and fastest.time_to_last_result_s > deadline_s:
        plan, st = fastest.plan, fastest.plan.stages
        poll = st["poll"] if fastest.pattern == "scaledjob" else 0.0
        node_s = 0.0 if plan.nodes_launched == 0 else sum(st[s] for s in NODE_STAGES)
        load = st["model_fetch"] + st["model_load"] if plan.model_fetches else st["model_cache_hit"] + st["model_load"]
        per_pod = math.ceil(plan.items / max(1, fastest.jobs_at_once))
        work = per_pod * st["per_item"]
        parts = {"KEDA's poll": poll, "node start": node_s, "the model load": load, "inference": work}
        top = max(parts, key=lambda k: (parts[k], k))
        why = {
            "inference": f"inference bounds it: {plan.items} messages × {st['per_item']:g} s on at most "
                         f"{fastest.jobs_at_once} GPU{'s' if fastest.jobs_at_once != 1 else ''} (gpuLimit "
                         f"{config.gpu_limit}) leave {per_pod} per Job, {_fmt_s(work)}; only more GPUs (gpuLimit and "
                         "maxReplicas) or a faster model (secondsPerItem) shorten it",
            "node start": f"node start bounds it ({_fmt_s(node_s)}: NodeClaim, EC2 launch, GPU registration, image "
                          "pull); a warm floor covering the burst removes it"
                          + ("" if fastest.plan.warm_floor_nodes else " (give --burst a time to search one)"),
            "the model load": f"the model load bounds it ({_fmt_s(load)}, which every Job pays once: modelLoadS"
                              + (", with the first Job on a node fetching the model and later ones checking the "
                                 "cached file" if st["model_fetch"] or st["model_cache_hit"] else "") + ")",
            "KEDA's poll": f"KEDA's poll bounds it ({_fmt_s(poll)}: gpuburst:pollingIntervalS, the worst case)",
        }[top]
        first = min(evaluated, key=lambda o: (o.time_to_first_result_s, o.key()))
        fs = first.plan.stages
        first_poll = fs["poll"] if first.pattern == "scaledjob" else 0.0
        first_node = max(0.0, first.plan.cold_start_s - first_poll - fs["model_fetch"] - fs["model_load"])
        fetch = f", model fetch {fs['model_fetch']:g} s" if fs["model_fetch"] else ""
        return (f"Nothing the stack allows meets the deadline of {_fmt_s(deadline_s)}. The fastest configuration, "
                f"{describe(fastest)}, has its last result at {_fmt_s(fastest.time_to_last_result_s)}: KEDA's poll "
                f"{poll:g} s, node start {node_s:g} s, model load {load:g} s, then {per_pod} message"
                f"{'s' if per_pod != 1 else ''} × {st['per_item']:g} s per Job; {why}. The first result cannot come "
                f"before {_fmt_s(first.time_to_first_result_s)}: KEDA's poll {first_poll:g} s + node start "
                f"{first_node:g} s{fetch} + model load {fs['model_load']:g} s + one message {fs['per_item']:g} s, "
                f"with {describe(first)}.")
    pool = [o for o in evaluated if deadline_s is None or o.time_to_last_result_s <= deadline_s]
    cheapest = min(pool, key=lambda o: (o.cost_usd, o.time_to_last_result_s, o.key()))
    plan, st = cheapest.plan, cheapest.plan.stages
    if cheapest.pattern == "consumer":
        detail, top = f"its node all day at ${plan.usd_per_hour:.4f}/h", "the consumer's node, held all day,"
    else:
        held = cheapest.cost_usd * 3600 / plan.usd_per_hour if plan.usd_per_hour else 0.0
        parts = {"inference": plan.items * st["per_item"], "the model load": plan.pods * st["model_load"]}
        parts["what the nodes hold besides (node start, the warm floor's window, the consolidation tail)"] = max(
            0.0, held - sum(parts.values()))
        top = max(parts, key=lambda k: (parts[k], k))
        detail = (f"{held:,.0f} node-seconds at ${plan.usd_per_hour:.4f}/h: inference {parts['inference']:,.0f} s, "
                  f"model load {parts['the model load']:,.0f} s ({plan.pods} Job{'s' if plan.pods != 1 else ''}), "
                  f"the rest node start, warm floor and the {CONSOLIDATE_AFTER_S} s consolidation tail per node")
    within = f" that meets the deadline of {_fmt_s(deadline_s)}" if deadline_s is not None else ""
    return (f"Nothing the stack allows fits the budget of ${budget_usd:.4f}: the cheapest configuration{within}, "
            f"{describe(cheapest)}, costs ${cheapest.cost_usd:.4f} ({detail}); {top} bounds it.")


def config_fragment(stack: str, workload: str, o: Option) -> str:
    """The `Pulumi.<stack>.yaml` lines that give option `o`, in the file's nested form (to merge into its mappings);
    stack-wide keys carry a comment, a key to remove is a comment naming it."""
    lines = ["config:"]
    if o.workload_keys:
        lines += ["  gpuburst:workloads:", f"    {workload}:"]
        lines += [f"      {k}: {_yaml(v)}" for k, v in o.workload_keys.items()]
    for k, v in o.stack_keys.items():
        if v is None:
            lines.append(f"  # remove gpuburst:{k} (stack-wide)")
        elif isinstance(v, dict):
            lines.append(f"  gpuburst:{k}:  # stack-wide: every workload")
            lines += [f"    {sk}: {_yaml(sv)}" for sk, sv in v.items()]
        else:
            lines.append(f"  gpuburst:{k}: {_yaml(v)}  # stack-wide: every workload")
    if len(lines) == 1:
        return f"# nothing to change: Pulumi.{stack}.yaml as it is"
    return "\n".join(lines)


def _yaml(v: Any) -> str:
    """A scalar or flow list as the stack files write them; strings with spaces (cron) are double-quoted."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_yaml(x) for x in v) + "]"
    if isinstance(v, str) and (" " in v or not v):
        return '"' + v + '"'
    return str(v)


def _option_json(rank: int, stack: str, workload: str, o: Option) -> dict[str, Any]:
    """One ranked option as JSON: its figures, the keys (`config`), the YAML fragment and plan-burst's figures."""
    config: dict[str, Any] = {f"gpuburst:{k}": v for k, v in o.stack_keys.items()}
    if o.workload_keys:
        config = {"gpuburst:workloads": {workload: dict(o.workload_keys)}, **config}
    return {"rank": rank, "pattern": o.pattern, "messages_per_job": o.messages_per_job,
            "jobs_at_once": o.jobs_at_once, "instance_type": o.instance_type, "capacity_type": o.capacity_type,
            "warm_floor": o.warm_floor, "time_to_first_result_s": o.time_to_first_result_s,
            "time_to_last_result_s": o.time_to_last_result_s, "cost_usd": round(o.cost_usd, 6),
            "cost_per_item_usd": round(o.cost_per_item_usd, 6), "config": config,
            "stack_wide": sorted(f"gpuburst:{k}" for k in o.stack_keys),
            "yaml": config_fragment(stack, workload, o), "plan": o.plan.summary()}


def advice_json(advices: list[Advice]) -> dict[str, Any]:
    """`{"advice": {WORKLOAD: {goal, burst, as_configured, search, meeting, options: [...], bound, notes}}}`."""
    out = {}
    for a in advices:
        out[a.workload] = {
            "burst": {"items": a.burst.items, "at": a.burst.at.isoformat() if a.burst.at else None},
            "deadline_s": a.deadline_s, "budget_usd": a.budget_usd,
            "ranked_by": "cost" if a.deadline_s is not None else "time_to_last_result_s",
            "as_configured": _option_json(0, a.stack, a.workload, a.current),
            "search": {"simulations": a.simulations, "evaluated": a.evaluated, "space": a.space,
                       "seconds": round(a.seconds, 3)},
            "meeting": a.meeting, "options": [_option_json(i, a.stack, a.workload, o)
                                              for i, o in enumerate(a.options, 1)],
            "bound": a.bound, "notes": list(a.notes)}
    return {"advice": out}


def advice_table(advices: list[Advice]) -> str:
    """The advisor's report: per workload the goal, the stack as configured, the search, the ranked configurations
    and the config lines of each (or the paragraph on what bounds the best one)."""
    lines: list[str] = []
    for a in advices:
        when = a.burst.at.isoformat() if a.burst.at else "no time (no warm floor searched)"
        goal = []
        if a.deadline_s is not None:
            goal.append(f"last result within {_fmt_s(a.deadline_s)}")
        if a.budget_usd is not None:
            goal.append(f"at most ${a.budget_usd:.4f}")
        order = "cheapest first" if a.deadline_s is not None else "fastest first"
        cur = a.current
        ok = (a.deadline_s is None or cur.time_to_last_result_s <= a.deadline_s) and (
            a.budget_usd is None or cur.cost_usd <= a.budget_usd)
        lines += [f"{a.workload}: burst of {a.burst.items} at {when}; goal: {' and '.join(goal)}",
                  f"  as configured: {describe(cur) if cur.pattern == 'scaledjob' else 'the consumer'}: first result "
                  f"{_fmt_s(cur.time_to_first_result_s)}, last {_fmt_s(cur.time_to_last_result_s)}, "
                  f"${cur.cost_usd:.4f} (${cur.cost_per_item_usd:.5f}/item): {'meets' if ok else 'misses'} the goal",
                  f"  search: {a.simulations:,} burst-model runs priced as {a.evaluated:,} configurations (of "
                  f"{a.space:,} in the space) in {a.seconds:.2f} s; {a.meeting:,} of them meet the goal"]
        lines += [f"  note: {n}" for n in a.notes]
        if not a.options:
            lines += ["  " + (a.bound or "Nothing meets the goal."), ""]
            continue
        lines.append(f"  {'#':>2}  {'pattern':<10}{'msgs/Job':>9}{'Jobs':>6}  {'type':<15}{'capacity':<10}"
                     f"{'floor':>5}{'first result':>22}{'last result':>24}{'cost $':>10}{'$/item':>10}   ({order})")
        for i, o in enumerate(a.options, 1):
            per, jobs = (o.messages_per_job, o.jobs_at_once) if o.pattern == "scaledjob" else ("-", "-")
            lines.append(f"  {i:>2}  {o.pattern:<10}{per:>9}{jobs:>6}  "
                         f"{o.instance_type:<15}{o.capacity_type:<10}{o.warm_floor:>5}"
                         f"{_fmt_s(o.time_to_first_result_s):>22}{_fmt_s(o.time_to_last_result_s):>24}"
                         f"{o.cost_usd:>10.4f}{o.cost_per_item_usd:>10.5f}")
        lines.append(f"  config lines for Pulumi.{a.stack}.yaml (merge each key into the file's own mappings; a "
                     "gpuburst: key other than workloads is stack-wide):")
        for i, o in enumerate(a.options, 1):
            lines.append(f"  #{i}")
            lines += ["    " + x for x in config_fragment(a.stack, a.workload, o).splitlines()]
        lines.append("")
    lines.append(f"Cost: a ScaledJob's node-seconds (per-second billing, {catalogue.BILLING_MINIMUM_S} s minimum, the "
                 f"{CONSOLIDATE_AFTER_S} s consolidation tail; a warm floor's nodes from its window's start), the "
                 "consumer's node all day; spot at "
                 f"{catalogue.SPOT_PRICE_FRACTION:.0%} of on-demand, an assumption. Times from the burst's arrival.")
    return "\n".join(lines)

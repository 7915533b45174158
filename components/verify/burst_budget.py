"""The burst check's yardstick and verdict: the planner's prediction for the probes, the budget (the stack's
`gpuburst:burstBudget`, flags, or the prediction x BURST_TOLERANCE), and the judgement of a measured timeline."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .burst_timeline import NODE_STAGES, STAGES, Timeline

if TYPE_CHECKING:
    from ..config import StackConfig

BURST_TOLERANCE = 1.5
"""Without `gpuburst:burstBudget` (or budget flags), the budget is the planner's cold prediction x this."""


@dataclass(frozen=True)
class Prediction:
    """The planner's plan of the probe burst on the stack as configured."""

    workload: str
    """Workload name."""
    pattern: str
    """'scaledjob' or 'consumer' (the one the stack runs)."""
    items: int
    """Probes in the burst."""
    stages: dict[str, Any]
    """Stage name -> seconds the planner used (STAGES)."""
    time_to_first_result_s: float
    """Predicted sent -> first result, seconds (warm floor applied when the burst falls in its window)."""
    time_to_last_result_s: float
    """Predicted sent -> last result, seconds."""
    cold_first_result_s: float
    """The same burst with no warm floor (every node cold): first result, seconds."""
    cold_last_result_s: float
    """Cold: last result, seconds."""
    warm_floor_nodes: int = 0
    """Warm-floor nodes the planner assumed up at the burst. Default 0."""


def default_workload(config: StackConfig) -> str:
    """The first workload of the config that runs as a ScaledJob, else the first workload."""
    for w in config.workloads:
        if not w.runs_as_consumer:
            return w.name
    return config.workloads[0].name


def predicted(config: StackConfig, workload_name: str, n: int, at: datetime | None = None) -> Prediction:
    """The planner's prediction for a burst of `n` probes of `workload_name` at `at` (pure; ConfigError when the
    workload is not in the config)."""
    from ..planning import Burst, plan_workload
    from ..spec.validation import ConfigError

    workload = next((w for w in config.workloads if w.name == workload_name), None)
    if workload is None:
        raise ConfigError("--burst-workload", workload_name,
                          f"a workload of the stack, one of {', '.join(w.name for w in config.workloads)}")
    wp = plan_workload(config, workload, Burst(n, at))
    cold = plan_workload(config, workload, Burst(n, None)).patterns[wp.pattern]
    plan = wp.patterns[wp.pattern]
    stages = {k: float(plan.stages.get(k, 0.0)) for k in STAGES}
    # The worker's `model_load` counts the model's fetch too; the slowest probe is a cold node's first Job, which
    # downloads a lab's model from S3 (the planner's `model_fetch`, 0 for a model in the image).
    stages["model_load"] += float(plan.stages.get("model_fetch", 0.0))
    return Prediction(workload.name, wp.pattern, n, stages,
                      plan.time_to_first_result_s, plan.time_to_last_result_s, cold.time_to_first_result_s,
                      cold.time_to_last_result_s, plan.warm_floor_nodes)


@dataclass(frozen=True)
class Budget:
    """The limits the burst is judged against, and where they came from."""

    first_result_s: float
    """Most seconds from sending to the first result."""
    last_result_s: float
    """Most seconds from sending to the last result."""
    source: str
    """Where the figures came from, for the output."""


def budget_for(config_budget: Any, prediction: Prediction, *, first_override: float | None = None,
               last_override: float | None = None, tolerance: float = BURST_TOLERANCE) -> Budget:
    """Flags win, then `gpuburst:burstBudget`, then the planner's cold prediction x `tolerance` (pure)."""
    if config_budget is not None:
        first, last, source = config_budget.first_result_s, config_budget.last_result_s, "gpuburst:burstBudget"
    else:
        first = round(prediction.cold_first_result_s * tolerance, 1)
        last = round(prediction.cold_last_result_s * tolerance, 1)
        source = (f"no gpuburst:burstBudget in the stack config: the planner's cold prediction x {tolerance:g} "
                  f"({prediction.cold_first_result_s:.0f} s / {prediction.cold_last_result_s:.0f} s)")
    if first_override is not None or last_override is not None:
        first = first if first_override is None else float(first_override)
        last = last if last_override is None else float(last_override)
        source = "--burst-first-result-s/--burst-last-result-s" + (f" over {source}" if source else "")
    return Budget(float(first), float(last), source)


def _fmt(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:,.0f} s ({int(s // 60)}m{s % 60:02.0f}s)" if s >= 60 else f"{s:,.1f} s"


def worst_overrun(measured: Timeline, prediction: Prediction) -> tuple[str, float, float] | None:
    """(stage, measured s, predicted s) of the stage that overran its prediction most, or None when none did."""
    worst = None
    for s in STAGES:
        m, p = measured.stages.get(s), prediction.stages.get(s)
        if m is None or p is None or m <= p:
            continue
        if worst is None or m - p > worst[1] - worst[2]:
            worst = (s, m, p)
    return worst


def judge(measured: Timeline, prediction: Prediction, budget: Budget) -> tuple[bool, list[str]]:
    """(ok, lines): fails when the first or last result is missing or past the budget. When it fails, the first
    lines say which limit, by how much, and the stage that overran its prediction most; then the timeline, stage by
    stage beside the prediction; then the notes and the problems seen."""
    failures: list[str] = []
    for what, m, limit in (("first result", measured.time_to_first_result_s, budget.first_result_s),
                           ("last result", measured.time_to_last_result_s, budget.last_result_s)):
        if m is None:
            failures.append(f"time to {what}: none within the wait (budget {limit:.0f} s)")
        elif m > limit:
            failures.append(f"time to {what} {m:.0f} s exceeds the budget of {limit:.0f} s by {m - limit:.0f} s")
    lines: list[str] = []
    if failures:
        worst = worst_overrun(measured, prediction)
        lines += failures
        lines.append(f"stage that overran its prediction most: {worst[0]} {worst[1]:.0f} s vs {worst[2]:.0f} s "
                     f"predicted (+{worst[1] - worst[2]:.0f} s)" if worst else
                     "no single stage overran its prediction (the time went between the stages)")
        lines += [f"problem: {p}" for p in measured.problems]
    lines.append(f"{'stage':<16}{'measured':>18}{'predicted':>18}")
    node_cold = any(n.cold for n in measured.nodes)
    for s in STAGES:
        m, p = measured.stages.get(s), prediction.stages.get(s)
        if m is None and s in NODE_STAGES and measured.warm_node:
            shown = "warm node"
        elif s == "image_pull" and m == 0.0 and not node_cold and any(x.image_cached for x in measured.pods):
            shown = "0 s (cached)"
        else:
            shown = _fmt(m)
        delta = f"  ({m - p:+,.0f} s)" if m is not None and p is not None else ""
        lines.append(f"{s:<16}{shown:>18}{_fmt(p):>18}{delta}")
    for what, m, p, limit in (
            ("first result", measured.time_to_first_result_s, prediction.time_to_first_result_s,
             budget.first_result_s),
            ("last result", measured.time_to_last_result_s, prediction.time_to_last_result_s, budget.last_result_s)):
        verdict = "no result" if m is None else ("within budget" if m <= limit else "OVER BUDGET")
        lines.append(f"{what:<16}{_fmt(m):>18}{_fmt(p):>18}  budget {limit:,.0f} s: {verdict}")
    lines.append(f"budget: {budget.source}")
    lines.append(f"prediction: {prediction.workload} as {prediction.pattern}, {prediction.items} probe(s)"
                 + (f", {prediction.warm_floor_nodes} warm-floor node(s)" if prediction.warm_floor_nodes else ""))
    for n in measured.nodes:
        if n.cold:
            lines.append(f"node {n.node or '(none yet)'} (NodeClaim {n.nodeclaim}): created +{_fmt(n.created_s)}, "
                         f"Launched +{_fmt(n.launched_s)}, Registered +{_fmt(n.registered_s)}, Initialized "
                         f"+{_fmt(n.initialized_s)}")
    for p in measured.pods:
        lines.append(f"pod {p.name} on {p.node or '(unscheduled)'}: created +{_fmt(p.created_s)}, scheduled "
                     f"+{_fmt(p.scheduled_s)}, image {'cached' if p.image_cached else _fmt(p.pull_s)}, container "
                     f"started +{_fmt(p.started_s)}" + (f", finished +{_fmt(p.finished_s)}" if p.finished_s else ""))
    lines += list(measured.notes)
    if not failures:
        lines += [f"problem: {p}" for p in measured.problems]
    return not failures, lines

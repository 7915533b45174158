"""Choose between a KEDA ScaledJob (one GPU job per message) and one long-lived consumer from facts about the work.

The two patterns trade model loads against parallelism. Per burst of `n` items, with `L` = model load seconds and
`t` = seconds per item:

- **ScaledJob** loads the model once per item, so it spends `jobs_s = n × (L + t)` GPU-seconds. Its wall time
  with up to `m` = max_replicas jobs at once is `jobs_wall_s ≈ ceil(n / m) × (L + t)`; work that must run
  in order cannot run in parallel, so then `jobs_wall_s = jobs_s`.
- **Consumer** (one Deployment replica) loads the model once and processes items one after another:
  `consumer_s = L + n × t`, both its GPU-seconds and its wall time.

Ordered or stateful work (per-study order, state carried from one message to the next) always gets the consumer:
parallel jobs neither keep order nor share memory. Independent work gets the ScaledJob only when the parallel
speed-up beats the per-job cold start, `ceil(n / m) × (L + t) < L + n × t`; a tie goes to the consumer (fewer model
loads, fewer GPU-seconds). The estimates cover GPU time per burst; node start-up (a Karpenter GPU node for the
first job) and the consumer's idle GPU between bursts are outside them and are the reasons to revisit a close call.

Worked example (the issue's): 20 ordered slides, 45 s model load, 8 s each: as jobs 20 × (45 + 8) = 1,060 s, as one
consumer 45 + 20 × 8 = 205 s.

The figures come from the burst planner (`planner.seed_estimates`: `planner.simulate` with `warm=True`, i.e. nodes up,
the image cached and KEDA's poll zeroed), whose warm model reduces to the formulas above; `plan-burst` adds the node,
image and poll stages and the bill.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .planner import seed_estimates
from .validation import ConfigError, Rule, validate

PATTERNS = ("scaledjob", "consumer")
"""The two deployment patterns: a KEDA ScaledJob, or one persistent consumer Deployment."""


@dataclass(frozen=True, kw_only=True)
class WorkloadFacts:
    """What is known about one queue's work; every behavioural fact must be stated (no defaults that guess)."""

    items_independent: bool
    """True when any item can be processed without any other item (no cross-item reads). Required."""
    state_across_messages: bool
    """True when processing a message needs state left by earlier messages (e.g. per-study running totals held in
    the worker's memory). Required."""
    ordered: bool
    """True when items must be processed in order (e.g. per-study sequence on a FIFO queue). Required."""
    model_load_s: float
    """Seconds from process start to a loaded model on the GPU (image pull excluded). Required, >= 0."""
    seconds_per_item: float
    """GPU seconds to process one item once the model is loaded. Required, > 0."""
    burst_items: int
    """Items arriving in one burst. Required, >= 1."""
    max_replicas: int = 8
    """How many jobs may run at once (the ScaledJob's maxReplicaCount, i.e. GPUs available). Default 8, >= 1."""


_FACT_RULES = [
    Rule("model_load_s", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0,
         "a number of seconds >= 0"),
    Rule("seconds_per_item", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
         "a number of seconds > 0"),
    Rule("burst_items", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an int >= 1"),
    Rule("max_replicas", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an int >= 1"),
    Rule("items_independent", lambda v: isinstance(v, bool), "True or False"),
    Rule("state_across_messages", lambda v: isinstance(v, bool), "True or False"),
    Rule("ordered", lambda v: isinstance(v, bool), "True or False"),
]


@dataclass(frozen=True)
class PatternChoice:
    """The chosen pattern, why, and the per-burst estimates it was chosen on (seconds)."""

    pattern: str
    """'scaledjob' or 'consumer'."""
    reason: str
    """One sentence a reviewer can check against the facts."""
    jobs_s: float
    """GPU-seconds per burst as one job per item: n × (load + per_item)."""
    consumer_s: float
    """GPU-seconds (and wall seconds) per burst as one consumer: load + n × per_item."""
    jobs_wall_s: float
    """Wall seconds per burst as jobs: ceil(n / max_replicas) × (load + per_item), or jobs_s when the work
    cannot run in parallel (ordered or stateful)."""


def _check(facts: WorkloadFacts) -> None:
    validate({name: getattr(facts, name) for name in (r.field for r in _FACT_RULES)}, _FACT_RULES,
             prefix="WorkloadFacts.")


def parallel_blocker(facts: WorkloadFacts) -> tuple[str, str] | None:
    """(fact name, why) of the first fact that rules out parallel jobs, or None when items may run in parallel."""
    if facts.ordered:
        return ("ordered", "parallel jobs finish in any order; ordered work needs the single consumer")
    if facts.state_across_messages:
        return ("state_across_messages", "each job starts with empty memory; state carried from message to message "
                                         "needs the single consumer")
    if not facts.items_independent:
        return ("items_independent", "items that depend on each other cannot be split across jobs; they need the "
                                     "single consumer")
    return None


def estimates(facts: WorkloadFacts) -> tuple[float, float, float]:
    """(jobs_s, consumer_s, jobs_wall_s) per burst from the planner's warm model; see the module docstring."""
    _check(facts)
    parallel = 1 if parallel_blocker(facts) is not None else facts.max_replicas
    return seed_estimates(items=facts.burst_items, model_load_s=float(facts.model_load_s),
                          seconds_per_item=float(facts.seconds_per_item), parallel=parallel)


def choose_pattern(facts: WorkloadFacts) -> PatternChoice:
    """The pattern for this work: the consumer for ordered/stateful/dependent work, else whichever is faster."""
    jobs_s, consumer_s, jobs_wall_s = estimates(facts)
    blocker = parallel_blocker(facts)
    n = facts.burst_items
    if blocker is not None:
        fact, why = blocker
        return PatternChoice("consumer", f"{fact}={getattr(facts, fact)}: {why} ({n} items: {jobs_s:,.0f} s as jobs "
                                         f"vs {consumer_s:,.0f} s as one consumer)", jobs_s, consumer_s, jobs_wall_s)
    if jobs_wall_s < consumer_s:
        return PatternChoice(
            "scaledjob", f"independent items: {n} items on up to {facts.max_replicas} parallel jobs take "
                         f"{jobs_wall_s:,.0f} s wall ({jobs_s:,.0f} GPU-s) vs {consumer_s:,.0f} s as one consumer; "
                         "the parallel speed-up beats the per-job model load", jobs_s, consumer_s, jobs_wall_s)
    return PatternChoice(
        "consumer", f"independent items, but the per-job model load ({facts.model_load_s:g} s) outweighs the "
                    f"speed-up: {jobs_wall_s:,.0f} s wall as jobs vs {consumer_s:,.0f} s as one consumer",
        jobs_s, consumer_s, jobs_wall_s)


def require_pattern(facts: WorkloadFacts, pattern: str) -> PatternChoice:
    """Raise ConfigError when `pattern` cannot carry this work (a ScaledJob for ordered/stateful work); else the
    requested pattern, with `choose_pattern`'s estimates (and its pick, in the reason, when it differs). A consumer
    can carry any work, only more slowly."""
    if pattern not in PATTERNS:
        raise ConfigError("pattern", pattern, f"one of {', '.join(PATTERNS)}")
    choice = choose_pattern(facts)
    if pattern == "scaledjob":
        blocker = parallel_blocker(facts)
        if blocker is not None:
            fact, why = blocker
            raise ConfigError(f"WorkloadFacts.{fact}", getattr(facts, fact),
                              f"a ScaledJob cannot carry this work: {why} (GpuConsumer; {choice.jobs_s:,.0f} s as "
                              f"jobs vs {choice.consumer_s:,.0f} s as one consumer per burst)")
    if choice.pattern != pattern:  # the config's word is final: build what it asks for, say what the model thinks
        return replace(choice, pattern=pattern,
                       reason=f"pattern {pattern!r} set in the config; the chooser would pick {choice.pattern}: "
                              f"{choice.reason}")
    return choice


ORDERED_ANNOTATION = "gpuburst.io/ordered"
"""Annotation carrying WorkloadFacts.ordered on the rendered ScaledJob/Deployment (read by the policy pack)."""
STATEFUL_ANNOTATION = "gpuburst.io/stateful"
"""Annotation carrying WorkloadFacts.state_across_messages on the rendered ScaledJob/Deployment."""


def fact_annotations(facts: WorkloadFacts) -> dict[str, str]:
    """The workload's declared facts as annotations, so a policy can judge the rendered object during preview."""
    return {ORDERED_ANNOTATION: str(facts.ordered).lower(),
            STATEFUL_ANNOTATION: str(facts.state_across_messages).lower()}

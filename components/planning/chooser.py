"""Choose between a KEDA ScaledJob (GPU Jobs of N queue messages each) and one long-lived consumer from facts about
the work.

The two patterns trade model loads against parallelism. Per burst of `n` items, with `L` = model load seconds,
`t` = seconds per item and `N` = messages per Job (`messagesPerJob`, default 1):

- **ScaledJob** loads the model once per Job, so it spends `jobs_s = ceil(n / N) × L + n × t` GPU-seconds (one
  message per Job: `n × (L + t)`). Its wall time with up to `m` = max_replicas Jobs at once is `jobs_wall_s ≈
  ceil(n / (m × N)) × (L + N × t)` (KEDA starts ceil(n / N) Jobs, at most m; a Job that drains the queue before its
  N-th message also waits one empty long poll); work that must run in order cannot run in parallel, so then
  `jobs_wall_s = jobs_s`.
- **Consumer** (one Deployment replica) loads the model once and processes items one after another:
  `consumer_s = L + n × t`, both its GPU-seconds and its wall time.

Ordered or stateful work (per-study order, state carried from one message to the next) always gets the consumer:
parallel jobs neither keep order nor share memory. Independent work gets the ScaledJob only when the parallel
speed-up beats the per-job cold start, `ceil(n / m) × (L + t) < L + n × t`; a tie goes to the consumer (fewer model
loads, fewer GPU-seconds). The estimates cover GPU time per burst; node start-up (a Karpenter GPU node for the
first job) and the consumer's idle GPU between bursts are outside them and are the reasons to revisit a close call.

Worked example (the issue's): 20 ordered slides, 45 s model load, 8 s each: as jobs 20 × (45 + 8) = 1,060 s, as one
consumer 45 + 20 × 8 = 205 s.

The figures come from the burst planner (`planning.simulation.seed_estimates`: `simulate` with `warm=True`, i.e.
nodes up, the image cached and KEDA's poll zeroed), whose warm model reduces to the formulas above; `plan-burst` adds
the node, image and poll stages and the bill.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..spec.validation import ConfigError
from ..spec.workload import PATTERNS, WorkloadFacts, check_facts, parallel_blocker
from .simulation import seed_estimates


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


def estimates(facts: WorkloadFacts, *, messages_per_job: int = 1) -> tuple[float, float, float]:
    """(jobs_s, consumer_s, jobs_wall_s) per burst from the planner's warm model, with Jobs of `messages_per_job`
    messages (default 1); see the module docstring."""
    check_facts(facts)
    parallel = 1 if parallel_blocker(facts) is not None else facts.max_replicas
    return seed_estimates(items=facts.burst_items, model_load_s=float(facts.model_load_s),
                          seconds_per_item=float(facts.seconds_per_item), parallel=parallel,
                          messages_per_job=messages_per_job)


def choose_pattern(facts: WorkloadFacts, *, messages_per_job: int = 1) -> PatternChoice:
    """The pattern for this work: the consumer for ordered/stateful/dependent work, else whichever is faster, the
    Jobs taking `messages_per_job` messages each (the workload's `messagesPerJob`; default 1)."""
    jobs_s, consumer_s, jobs_wall_s = estimates(facts, messages_per_job=messages_per_job)
    blocker = parallel_blocker(facts)
    n = facts.burst_items
    if blocker is not None:
        fact, why = blocker
        return PatternChoice("consumer", f"{fact}={getattr(facts, fact)}: {why} ({n} items: {jobs_s:,.0f} s as jobs "
                                         f"vs {consumer_s:,.0f} s as one consumer)", jobs_s, consumer_s, jobs_wall_s)
    per = "" if messages_per_job == 1 else f" of up to {messages_per_job} messages"
    if jobs_wall_s < consumer_s:
        return PatternChoice(
            "scaledjob", f"independent items: {n} items on up to {facts.max_replicas} parallel jobs{per} take "
                         f"{jobs_wall_s:,.0f} s wall ({jobs_s:,.0f} GPU-s) vs {consumer_s:,.0f} s as one consumer; "
                         "the parallel speed-up beats the per-job model load", jobs_s, consumer_s, jobs_wall_s)
    return PatternChoice(
        "consumer", f"independent items, but the per-job model load ({facts.model_load_s:g} s) outweighs the "
                    f"speed-up: {jobs_wall_s:,.0f} s wall as jobs{per} vs {consumer_s:,.0f} s as one consumer",
        jobs_s, consumer_s, jobs_wall_s)


def require_pattern(facts: WorkloadFacts, pattern: str, *, messages_per_job: int = 1) -> PatternChoice:
    """Raise ConfigError when `pattern` cannot carry this work (a ScaledJob for ordered/stateful work); else the
    requested pattern, with `choose_pattern`'s estimates (and its pick, in the reason, when it differs). A consumer
    can carry any work, only more slowly."""
    if pattern not in PATTERNS:
        raise ConfigError("pattern", pattern, f"one of {', '.join(PATTERNS)}")
    choice = choose_pattern(facts, messages_per_job=messages_per_job)
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

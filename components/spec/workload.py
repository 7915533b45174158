"""What is known about one workload's work (its facts), the rule that rules out parallel jobs, and the annotations
that carry the facts onto the workload's objects: the leaf the chooser, the config and the components share."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .validation import Rule, validate

PATTERNS = ("scaledjob", "consumer")
"""The two deployment patterns: a KEDA ScaledJob, or one persistent consumer Deployment."""

MESSAGES_PER_JOB_MAX = 1000
"""Most messages one ScaledJob Job may take (`messagesPerJob`, KEDA `queueLength`, the worker's `--max-messages`).
KEDA starts one Job per that many messages, so a larger batch gives a burst fewer GPUs; past this a Job is hours of
work on one GPU, a persistent consumer in all but name (use that pattern), and its deadline (see `job_deadline_s`)
would pass JOB_DEADLINE_MAX_S for any realistic processing time."""

JOB_DEADLINE_FLOOR_S = 3600
"""The shortest activeDeadlineSeconds a worker Job gets (the ScaledJob's default): time for a slow node start and
image pull before the first message, which the deadline counts too."""

JOB_DEADLINE_MAX_S = 7 * 24 * 3600
"""The longest activeDeadlineSeconds a worker Job may get (a week)."""


def job_deadline_s(model_load_s: float, messages_per_job: int, expected_processing_s: int) -> int:
    """activeDeadlineSeconds of a Job that takes `messages_per_job` messages: the model load plus that many times the
    declared upper bound of one message's processing (`expectedProcessingS`), never under JOB_DEADLINE_FLOOR_S.

    The deadline covers the whole Job, so it grows with the batch. The visibility timeout does not: the worker
    receives one message at a time (SQS MaxNumberOfMessages 1) only when it is ready to process it, and renews the
    one it holds, so a message is never invisible while it waits behind others of the same Job; it stays twice one
    message's processing time."""
    return max(JOB_DEADLINE_FLOOR_S, math.ceil(model_load_s + messages_per_job * expected_processing_s))


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


def check_facts(facts: WorkloadFacts) -> None:
    """Raise ConfigError (one line naming the fact and its value) when a fact is not valid."""
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


ORDERED_ANNOTATION = "gpuburst.io/ordered"
"""Annotation carrying WorkloadFacts.ordered on the rendered ScaledJob/Deployment (read by the policy pack)."""
STATEFUL_ANNOTATION = "gpuburst.io/stateful"
"""Annotation carrying WorkloadFacts.state_across_messages on the rendered ScaledJob/Deployment."""


INDEPENDENT_ANNOTATION = "gpuburst.io/items-independent"
"""Annotation carrying WorkloadFacts.items_independent on the rendered ScaledJob/Deployment."""
CHOICE_ANNOTATION = "gpuburst.io/chooser-pattern"
"""Annotation carrying the pattern `planning.chooser.choose_pattern` picks for the workload's facts (`scaledjob` or
`consumer`), whatever pattern was declared: the pack's `consumer-for-independent-work` compares the two."""
CHOICE_REASON_ANNOTATION = "gpuburst.io/chooser-reason"
"""Annotation carrying the chooser's reason with its per-burst estimates (one sentence)."""


def fact_annotations(facts: WorkloadFacts) -> dict[str, str]:
    """The workload's declared facts as annotations, so a policy can judge the rendered object during preview."""
    return {ORDERED_ANNOTATION: str(facts.ordered).lower(),
            STATEFUL_ANNOTATION: str(facts.state_across_messages).lower(),
            INDEPENDENT_ANNOTATION: str(facts.items_independent).lower()}


def choice_annotations(pattern: str, reason: str) -> dict[str, str]:
    """The chooser's pick for the workload's facts and its reason (`PatternChoice.pattern`, `.reason`) as
    annotations."""
    return {CHOICE_ANNOTATION: pattern, CHOICE_REASON_ANNOTATION: reason}

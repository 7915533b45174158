"""Tests of the pattern chooser: the issue's worked example, the refusal of jobs for ordered/stateful work, the
parallel speed-up rule for independent work."""
from __future__ import annotations

import math

import pytest

from components.planning.chooser import PatternChoice, choose_pattern, estimates, require_pattern
from components.spec.validation import ConfigError
from components.spec.workload import WorkloadFacts


def facts(**kw) -> WorkloadFacts:
    base = dict(items_independent=True, state_across_messages=False, ordered=False, model_load_s=45,
                seconds_per_item=8, burst_items=20)
    base.update(kw)
    return WorkloadFacts(**base)


def test_worked_example_20_ordered_slides():
    choice = choose_pattern(facts(ordered=True))
    assert isinstance(choice, PatternChoice)
    assert choice.pattern == "consumer"
    assert choice.jobs_s == 1060 and choice.consumer_s == 205
    # Ordered work cannot run in parallel: its wall time as jobs is the serial sum.
    assert choice.jobs_wall_s == 1060
    assert "ordered" in choice.reason and "1,060" in choice.reason and "205" in choice.reason


@pytest.mark.parametrize("fact,kw", [
    ("ordered", {"ordered": True}),
    ("state_across_messages", {"state_across_messages": True}),
    ("items_independent", {"items_independent": False}),
])
def test_scaledjob_refused_for_ordered_or_stateful_work(fact, kw):
    with pytest.raises(ConfigError) as e:
        require_pattern(facts(**kw), "scaledjob")
    text = str(e.value)
    assert "\n" not in text
    assert text.startswith(f"WorkloadFacts.{fact}: ")
    assert "ScaledJob" in text and "GpuConsumer" in text
    # ...while a consumer is always allowed (it is only slower for independent work).
    assert require_pattern(facts(**kw), "consumer").pattern == "consumer"


def test_independent_many_items_gets_scaledjob_when_parallelism_beats_cold_start():
    f = facts(burst_items=200, max_replicas=8)
    choice = require_pattern(f, "scaledjob")
    assert choice.pattern == "scaledjob"
    assert choice.jobs_wall_s == math.ceil(200 / 8) * (45 + 8) == 1325
    assert choice.consumer_s == 45 + 200 * 8 == 1645
    assert choice.jobs_s == 200 * 53


def test_independent_short_items_get_consumer_when_cold_start_dominates():
    f = facts(burst_items=20, seconds_per_item=2, max_replicas=8)
    choice = choose_pattern(f)
    # 3 rounds of (45 + 2) = 141 s as jobs vs 45 + 40 = 85 s as one consumer.
    assert (choice.jobs_wall_s, choice.consumer_s) == (141, 85)
    assert choice.pattern == "consumer"
    assert "outweighs" in choice.reason


def test_a_tie_goes_to_the_consumer():
    # One item: both take load + per_item; fewer model loads wins.
    assert choose_pattern(facts(burst_items=1)).pattern == "consumer"


@pytest.mark.parametrize("n,m,load,per", [(1, 1, 0, 1), (7, 3, 10, 5), (64, 8, 120, 30), (9, 10, 45, 8)])
def test_formulas(n, m, load, per):
    jobs_s, consumer_s, wall = estimates(facts(burst_items=n, max_replicas=m, model_load_s=load,
                                               seconds_per_item=per))
    assert jobs_s == n * (load + per)
    assert consumer_s == load + n * per
    assert wall == math.ceil(n / m) * (load + per)


@pytest.mark.parametrize("field,value", [("burst_items", 0), ("seconds_per_item", 0), ("model_load_s", -1),
                                         ("max_replicas", 0), ("ordered", "yes")])
def test_bad_facts_are_one_line_errors(field, value):
    with pytest.raises(ConfigError) as e:
        choose_pattern(facts(**{field: value}))
    assert str(e.value).startswith(f"WorkloadFacts.{field}: {value!r} is not valid")


def test_unknown_pattern_refused():
    with pytest.raises(ConfigError, match="pattern: 'deployment' is not valid: one of scaledjob, consumer"):
        require_pattern(facts(), "deployment")


def test_behavioural_facts_have_no_defaults():
    # A forgotten 'ordered' must not silently default to parallel jobs.
    with pytest.raises(TypeError):
        WorkloadFacts(model_load_s=45, seconds_per_item=8, burst_items=20)  # type: ignore[call-arg]


def test_a_pattern_set_in_the_config_is_what_is_built_even_when_the_chooser_would_pick_the_other():
    f = facts(burst_items=200, max_replicas=8)  # independent work the chooser gives to a ScaledJob
    assert choose_pattern(f).pattern == "scaledjob"
    forced = require_pattern(f, "consumer")
    assert forced.pattern == "consumer"
    assert "set in the config" in forced.reason and "would pick scaledjob" in forced.reason
    assert (forced.jobs_s, forced.consumer_s) == (choose_pattern(f).jobs_s, choose_pattern(f).consumer_s)


# --------------------------------------------------------------------------------------------------------------------
# Jobs of N messages (messagesPerJob): one model load per Job.
# --------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,m,per_job,load,per", [(200, 8, 25, 45, 8), (20, 8, 5, 45, 8), (64, 4, 16, 120, 30)])
def test_formulas_with_messages_per_job(n, m, per_job, load, per):
    # Here every Job gets exactly its N messages (n = jobs x N, all started at once), so none waits on an empty queue.
    jobs_s, consumer_s, wall = estimates(facts(burst_items=n, max_replicas=m, model_load_s=load,
                                               seconds_per_item=per), messages_per_job=per_job)
    assert jobs_s == math.ceil(n / per_job) * load + n * per
    assert consumer_s == load + n * per
    assert wall == math.ceil(n / (m * per_job)) * (load + per_job * per)


def test_messages_per_job_can_turn_the_choice_to_jobs():
    # 20 short items: one message per Job pays 3 rounds of loads (141 s) > one consumer (85 s) ...
    f = facts(burst_items=20, seconds_per_item=2, max_replicas=8)
    assert choose_pattern(f).pattern == "consumer"
    # ... 4 Jobs of 5 messages load once each: 45 + 5 x 2 = 55 s < 85 s.
    choice = choose_pattern(f, messages_per_job=5)
    assert (choice.pattern, choice.jobs_wall_s) == ("scaledjob", 55) and "of up to 5 messages" in choice.reason
    # One Job of all the messages is the consumer's arithmetic: a tie, which goes to the consumer.
    assert choose_pattern(f, messages_per_job=20).pattern == "consumer"
    assert require_pattern(f, "scaledjob", messages_per_job=20).pattern == "scaledjob"

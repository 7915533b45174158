"""Tests of the ScaledJob's part of the burst model: Jobs of N messages (KEDA's queueLength and the worker's
--max-messages), KEDA's ceil(queue / N) arithmetic, the empty long poll of a Job that drains the queue, and the dev
stack's `slides` with messagesPerJob 1 against 25."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from components import catalogue
from components.config import parse_config
from components.planning import Burst, plan_workload, simulate, stage_durations
from components.spec.validation import ConfigError

ROOT = Path(__file__).resolve().parents[3]
COLD_NODE = sum(catalogue.STAGE_DURATIONS[s].seconds for s in ("nodeclaim", "ec2_ready", "gpu_registered",
                                                                "image_pull"))
WAIT = catalogue.WORKER_EMPTY_RECEIVE_S


def dev_with(**slides_keys):
    """The dev stack file with keys set on its `slides` workload, parsed as `plan-burst` parses it."""
    doc = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8"))["config"]
    doc["gpuburst:workloads"]["slides"].update(slides_keys)
    return parse_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in doc.items()}, stack="dev")


def slides_plan(cfg):
    w = next(w for w in cfg.workloads if w.name == "slides")
    return plan_workload(cfg, w, Burst(200)).patterns["scaledjob"]


def test_dev_slides_last_result_drops_with_25_messages_per_job():
    one, batched = slides_plan(dev_with(messagesPerJob=1)), slides_plan(dev_with(messagesPerJob=25))
    # One message per Job: 25 rounds of 8 Jobs, each paying the 45 s load and waiting for KEDA's next poll.
    assert one.pods == 200 and one.messages_per_job == 1 and one.time_to_last_result_s > 25 * (45 + 8)
    # 25 per Job: KEDA starts ceil(200 / 25) = 8 Jobs at the first poll, each loads once and does 25 slides.
    assert batched.pods == 8 and batched.messages_per_job == 25 and batched.nodes_launched == 8
    assert batched.time_to_last_result_s == 30 + COLD_NODE + 45 + 25 * 8
    assert batched.time_to_first_result_s == one.time_to_first_result_s == 30 + COLD_NODE + 45 + 8
    assert batched.time_to_last_result_s < one.time_to_last_result_s / 4
    assert batched.cost_usd < one.cost_usd / 2  # 8 loads and 8 node starts instead of 200 loads
    assert batched.gpu_busy_s == 8 * 45 + 200 * 8  # every Job exits on --max-messages: no empty long poll


def test_keda_starts_ceil_queue_over_n_jobs_at_most_max_replicas():
    stages = stage_durations(warm=True)
    # 200 messages, 50 per Job: 4 Jobs, although 8 may run.
    four = simulate("scaledjob", items=200, model_load_s=45, seconds_per_item=8, parallel=8, stages=stages,
                    messages_per_job=50)
    assert four.pods == 4 and four.time_to_last_result_s == 45 + 50 * 8
    # 10 per Job: 20 Jobs, 8 at a time, in three waves (8, 8, 4), each Job loading once.
    waves = simulate("scaledjob", items=200, model_load_s=45, seconds_per_item=8, parallel=8, stages=stages,
                     messages_per_job=10)
    assert waves.pods == 20 and waves.time_to_last_result_s == 3 * (45 + 10 * 8)


def test_a_job_that_drains_the_queue_waits_one_long_poll_then_exits():
    stages = stage_durations(warm=True)
    # 200 messages, 30 per Job: 7 Jobs share them (28 or 29 each); each then finds the queue empty.
    plan = simulate("scaledjob", items=200, model_load_s=45, seconds_per_item=8, parallel=8, stages=stages,
                    messages_per_job=30)
    assert plan.pods == 7 and plan.time_to_last_result_s == 45 + math.ceil(200 / 7) * 8
    assert plan.gpu_busy_s == 7 * 45 + 200 * 8 + 7 * WAIT
    assert sorted(p["messages"] for p in plan.timeline["pods"]) == [28] * 3 + [29] * 4


def test_a_job_takes_a_message_that_arrives_during_its_long_poll():
    stages = stage_durations(warm=True)
    # One Job of up to 3: the first message at 0 s (done at 53 s), the second arrives at 60 s, within its 20 s long
    # poll, so the same Job takes it without a second model load; the third, at 200 s, comes after it exited.
    plan = simulate("scaledjob", model_load_s=45, seconds_per_item=8, parallel=1, stages=stages, messages_per_job=3,
                    arrivals=[(0, 1), (60, 1), (200, 1)])
    assert plan.pods == 2
    results = sorted(r for p in plan.timeline["pods"] for r in p["results"])
    assert results == [53, 68, 200 + 45 + 8]


def test_one_message_per_job_is_the_model_it_always_was():
    # With N = 1 every Job takes exactly one message and exits without a long poll: n x (load + per_item) GPU-s.
    plan = simulate("scaledjob", items=20, model_load_s=45, seconds_per_item=8, parallel=1,
                    stages=stage_durations(warm=True))
    assert (plan.pods, plan.gpu_busy_s, plan.time_to_last_result_s) == (20, 1060, 1060)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_messages_per_job_is_a_one_line_error(bad):
    with pytest.raises(ConfigError, match=rf"^messagesPerJob: {bad!r} is not valid: a whole number of messages >= 1$"):
        simulate("scaledjob", items=3, model_load_s=1, seconds_per_item=1, parallel=1,
                 stages=stage_durations(warm=True), messages_per_job=bad)

"""Tests of the burst planner: the seed's 1,060/205 s under --warm, the cold stages, polls, nodes, billing, the warm
floor, the CLI's JSON, table and PNG, and the one-line errors."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from components import catalogue, planner
from components.chooser import choose_pattern
from components.config import StackConfig, WorkloadConfig, parse_config
from components.offline.synth import read_stack_config
from components.planner import (Burst, parse_burst, parse_set, plan_stack, plan_workload, plans_json, simulate,
                                stage_durations)
from components.validation import ConfigError

ROOT = Path(__file__).resolve().parents[2]
COLD_NODE = 13 + 40 + 36 + 121  # nodeclaim + EC2 Ready + GPU registered + image pull (catalogue defaults)


@pytest.fixture(scope="module")
def dev() -> StackConfig:
    return parse_config(read_stack_config("dev"), stack="dev")


def workload(cfg: StackConfig, name: str) -> WorkloadConfig:
    return next(w for w in cfg.workloads if w.name == name)


def test_warm_reproduces_the_readme_example_for_studies(dev):
    wp = plan_workload(dev, workload(dev, "studies"), warm=True)
    assert wp.patterns["scaledjob"].time_to_last_result_s == 1060 == 20 * (45 + 8)
    assert wp.patterns["consumer"].time_to_last_result_s == 205 == 45 + 20 * 8
    assert wp.pattern == "consumer"
    # --warm zeroes KEDA's poll and every node and image stage: what is left is load and inference.
    assert all(wp.patterns["scaledjob"].stages[s] == 0 for s in planner.WARM_ZEROED)


def test_warm_independent_work_matches_the_chooser(dev):
    wp = plan_workload(dev, workload(dev, "slides"), warm=True)
    choice = choose_pattern(workload(dev, "slides").facts())
    assert wp.patterns["scaledjob"].time_to_last_result_s == choice.jobs_wall_s == 25 * 53
    assert wp.patterns["scaledjob"].gpu_busy_s == choice.jobs_s == 200 * 53
    assert wp.patterns["consumer"].time_to_last_result_s == choice.consumer_s == 45 + 200 * 8


def test_cold_start_pays_poll_node_image_and_load(dev):
    wp = plan_workload(dev, workload(dev, "studies"))
    jobs, consumer = wp.patterns["scaledjob"], wp.patterns["consumer"]
    assert consumer.time_to_first_result_s == COLD_NODE + 45 + 8 == 263  # no KEDA poll: the consumer long-polls
    assert jobs.time_to_first_result_s == 30 + COLD_NODE + 45 + 8 == 293
    assert consumer.cold_start_s == COLD_NODE + 45
    assert consumer.time_to_last_result_s == COLD_NODE + 205
    # Ordered Jobs run one at a time and each waits for KEDA's next poll after the previous one ends.
    assert jobs.time_to_last_result_s > 1060 + COLD_NODE


def test_set_overrides_a_stage_after_warm(dev):
    w = workload(dev, "studies")
    cold = plan_workload(dev, w).patterns["consumer"].time_to_first_result_s
    soci = plan_workload(dev, w, overrides={"image_pull": 40}).patterns["consumer"].time_to_first_result_s
    assert cold - soci == 121 - 40
    warm_poll = plan_workload(dev, w, warm=True, overrides={"poll": 30}).patterns["scaledjob"]
    assert warm_poll.time_to_first_result_s == 30 + 53


def test_keda_polls_gate_job_creation():
    stages = stage_durations(polling_interval_s=10, overrides={k: 0 for k in planner.NODE_STAGES})
    # Jobs of 53 s, one at a time: each next Job is created at the first poll (multiple of 10 s) after the last ends.
    plan = simulate("scaledjob", items=3, model_load_s=45, seconds_per_item=8, parallel=1, stages=stages)
    assert plan.time_to_first_result_s == 10 + 53
    assert plan.time_to_last_result_s == 130 + 53  # created at 10 (ends 63), 70 (ends 123), 130
    assert stage_durations()["poll"] == 30 == catalogue.STAGE_DURATIONS["poll"].seconds


def test_the_workloads_polling_interval_is_used_when_it_has_one(dev):
    w = SimpleNamespace(**dataclasses.asdict(workload(dev, "studies")), polling_interval_s=5)
    w.facts = workload(dev, "studies").facts
    plan = plan_workload(dev, w, warm=True, overrides={"poll": 5}).patterns["scaledjob"]
    assert plan.stages["poll"] == 5
    cold = plan_workload(dev, w).patterns["scaledjob"]
    assert cold.stages["poll"] == 5 and cold.time_to_first_result_s == 5 + COLD_NODE + 53


def test_node_type_is_the_cheapest_that_hosts_the_pod_and_spot_is_discounted(dev):
    wp = plan_workload(dev, workload(dev, "slides"))
    jobs, consumer = wp.patterns["scaledjob"], wp.patterns["consumer"]
    # The xlarges allocate 3,920m CPU: the 4-core worker pod does not fit; g4dn.2xlarge is the cheaper 2xlarge.
    assert jobs.instance_type == consumer.instance_type == "g4dn.2xlarge"
    od = catalogue.INSTANCE_TYPES["g4dn.2xlarge"].on_demand_usd_per_hour
    assert consumer.capacity_type == "on-demand" and consumer.usd_per_hour == od
    assert jobs.capacity_type == "spot" and jobs.usd_per_hour == pytest.approx(od * catalogue.SPOT_PRICE_FRACTION)
    assert jobs.cost_usd == pytest.approx(jobs.gpu_node_seconds_billed * jobs.usd_per_hour / 3600)
    assert jobs.cost_per_item_usd == pytest.approx(jobs.cost_usd / 200)
    assert consumer.idle_cost_per_day_usd == pytest.approx(od * 24)
    assert jobs.idle_cost_per_day_usd == 0
    on_demand_only = dataclasses.replace(dev, gpu_capacity_types=("on-demand",))
    assert plan_workload(on_demand_only, workload(dev, "slides")).patterns["scaledjob"].usd_per_hour == od


def test_no_type_can_host_the_pod_is_a_one_line_error(dev):
    small = dataclasses.replace(dev, gpu_instance_types=("g4dn.xlarge", "g5.xlarge"))
    with pytest.raises(ConfigError, match=r"^gpuInstanceTypes: \['g4dn.xlarge', 'g5.xlarge'\] is not valid"):
        plan_workload(small, workload(dev, "slides"))


def test_gpu_limit_and_multi_gpu_nodes(dev):
    w = workload(dev, "slides")
    two = plan_workload(dataclasses.replace(dev, gpu_limit=2), w).patterns["scaledjob"]
    assert two.parallel == 2 and two.nodes_launched == 2
    four_gpu = dataclasses.replace(dev, gpu_instance_types=("g4dn.12xlarge", "g5.12xlarge"))
    plan = plan_workload(four_gpu, w).patterns["scaledjob"]
    assert plan.instance_type == "g4dn.12xlarge" and plan.parallel == 8 and plan.nodes_launched == 2


def test_billing_minimum_and_consolidation_tail():
    stages = stage_durations(warm=True)
    short = simulate("scaledjob", items=1, model_load_s=1, seconds_per_item=1, parallel=1, stages=stages,
                     consolidate_after_s=0)
    assert short.gpu_node_seconds_billed == catalogue.BILLING_MINIMUM_S == 60
    tail = simulate("scaledjob", items=1, model_load_s=45, seconds_per_item=8, parallel=1, stages=stages)
    assert tail.gpu_node_seconds_billed == 53 + planner.CONSOLIDATE_AFTER_S
    # A Job created within consolidateAfter reuses the node (image cached); one created later pays a new node.
    cold = stage_durations(polling_interval_s=1000)  # 2nd Job at 2,000 s > 1,263 + 300
    gap = simulate("scaledjob", items=2, model_load_s=45, seconds_per_item=8, parallel=1, stages=cold)
    assert gap.nodes_launched == 2
    reuse = simulate("scaledjob", items=2, model_load_s=45, seconds_per_item=8, parallel=1, stages=stage_durations())
    assert reuse.nodes_launched == 1


def test_stage_table_has_a_source_for_each_stage_and_the_published_figures():
    table = catalogue.STAGE_DURATIONS
    assert {k: v.seconds for k, v in table.items()} == {"poll": 30, "nodeclaim": 13, "ec2_ready": 40,
                                                         "gpu_registered": 36, "image_pull": 121}
    assert all(len(s.source) > 20 for s in table.values())
    assert "data-on-eks" in table["ec2_ready"].source and "karpenter-blueprints" in table["image_pull"].source
    node_stages = sum(table[s].seconds for s in planner.NODE_STAGES)
    assert node_stages < catalogue.FRESH_NODE_POD_TO_SERVING_S and catalogue.WARM_NODE_POD_TO_SERVING_S < 393


def test_constants_agree_with_the_components():
    from components.nodepool import GpuNodePoolArgs
    from components.pod import WorkerPodSettings

    pod = SimpleNamespace(**{f.name: f.default for f in dataclasses.fields(WorkerPodSettings)})
    assert (pod.cpu_cores, pod.memory_gib, pod.gpus) == (planner.POD_CPU_CORES, planner.POD_MEMORY_GIB,
                                                          planner.POD_GPUS)
    consolidate = next(f.default for f in dataclasses.fields(GpuNodePoolArgs) if f.name == "consolidate_after")
    assert consolidate == "5m" and planner.CONSOLIDATE_AFTER_S == 300


@dataclasses.dataclass(frozen=True)
class _WithFloor(StackConfig):
    warm_gpus: Any = None


def test_a_burst_inside_the_warm_floor_schedule_starts_sooner(dev):
    floor = SimpleNamespace(count=2, start="0 8 * * 1-5", end="0 18 * * 1-5", timezone="Europe/London")
    # (Works before and after StackConfig gains its own warm_gpus field.)
    cfg = _WithFloor(**{f.name: getattr(dev, f.name) for f in dataclasses.fields(StackConfig)
                        if f.name != "warm_gpus"}, warm_gpus=floor)
    w = workload(dev, "slides")
    inside = plan_workload(cfg, w, Burst(20, datetime(2026, 1, 5, 9, 30, tzinfo=timezone.utc)))  # Monday
    outside = plan_workload(cfg, w, Burst(20, datetime(2026, 1, 5, 20, 0, tzinfo=timezone.utc)))
    assert inside.patterns["scaledjob"].warm_floor_nodes == 2 and outside.patterns["scaledjob"].warm_floor_nodes == 0
    for p in ("scaledjob", "consumer"):
        assert inside.patterns[p].time_to_first_result_s < outside.patterns[p].time_to_first_result_s
    assert inside.patterns["consumer"].time_to_first_result_s == 45 + 8  # a floor node: image cached, model to load
    assert inside.patterns["scaledjob"].time_to_first_result_s == 30 + 45 + 8
    price = inside.patterns["scaledjob"].usd_per_hour
    assert inside.patterns["scaledjob"].idle_cost_per_day_usd == pytest.approx(2 * 10 * price)
    # Without warm_gpus (StackConfig as it is) or without a burst time the floor is not applied.
    assert plan_workload(dev, w, Burst(20, inside.burst.at)).patterns["scaledjob"].warm_floor_nodes == 0
    assert plan_workload(cfg, w, Burst(20)).patterns["scaledjob"].warm_floor_nodes == 0


@pytest.mark.parametrize("text", ["20", "0@2026-01-05T09:00:00", "x@2026-01-05", "20@not-a-date", "-1@2026-01-05"])
def test_bad_burst_is_a_one_line_error(text):
    with pytest.raises(ConfigError) as e:
        parse_burst(text)
    assert str(e.value).startswith(f"--burst: {text!r} is not valid") and "\n" not in str(e.value)


@pytest.mark.parametrize("text", ["image_pull", "image_pull=-1", "model_load=3", "poll=abc", "poll=nan"])
def test_bad_set_is_a_one_line_error(text):
    with pytest.raises(ConfigError) as e:
        parse_set(text)
    assert str(e.value).startswith(f"--set: {text!r} is not valid") and "\n" not in str(e.value)


def test_parse_burst_and_set():
    assert parse_burst("20@2026-01-05T09:30:00").at == datetime(2026, 1, 5, 9, 30, tzinfo=timezone.utc)
    assert parse_set("image_pull=40") == ("image_pull", 40.0)


def test_unknown_workload_is_refused(dev):
    with pytest.raises(ConfigError, match="^--workload: 'nope' is not valid: one of slides, studies$"):
        plan_stack(dev, workload="nope")


def test_json_shape_and_determinism(dev):
    doc = plans_json(plan_stack(dev, bursts=[Burst(20), Burst(5)]))
    again = plans_json(plan_stack(dev, bursts=[Burst(20), Burst(5)]))
    assert doc == again
    studies = doc["workloads"]["studies"]
    keys = {"pattern", "time_to_first_result_s", "time_to_last_result_s", "cost_usd", "cost_per_item_usd",
            "gpu_node_seconds_billed", "idle_cost_per_day_usd"}
    assert keys <= set(studies) and set(studies["patterns"]) == {"scaledjob", "consumer"}
    assert all(keys <= set(p) for p in studies["patterns"].values())
    assert studies["pattern"] == "consumer" and studies["time_to_last_result_s"] == \
        studies["patterns"]["consumer"]["time_to_last_result_s"]
    assert [b["items"] for b in studies["bursts"]] == [20, 5]
    json.dumps(doc)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "components", "plan-burst", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_cli_warm_json_gives_the_readme_numbers():
    proc = _cli("--stack", "dev", "--workload", "studies", "--warm", "--json")
    assert proc.returncode == 0, proc.stderr
    studies = json.loads(proc.stdout)["workloads"]["studies"]
    assert studies["patterns"]["scaledjob"]["time_to_last_result_s"] == 1060
    assert studies["patterns"]["consumer"]["time_to_last_result_s"] == 205
    assert studies["pattern"] == "consumer"


def test_cli_table_and_png(tmp_path):
    proc = _cli("--workload", "slides", "--set", "image_pull=40", "--burst", "50@2026-01-05T09:30:00+00:00",
                "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "cold start" in proc.stdout and "image_pull 40 s" in proc.stdout and "scaledjob" in proc.stdout
    png = tmp_path / "plan-burst-slides-1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bad_flag_is_one_line_on_stderr():
    proc = _cli("--set", "warp=1")
    assert proc.returncode == 2 and proc.stderr.startswith("plan-burst: --set: 'warp=1' is not valid")
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("poll,floor", [(1000, 0), (1000, 2), (30, 1), (0, 0)])
def test_a_node_never_holds_more_pods_than_it_has_slots(poll, floor):
    stages = stage_durations(polling_interval_s=poll)
    plan = simulate("scaledjob", items=12, model_load_s=45, seconds_per_item=8, parallel=3, stages=stages,
                    max_nodes=3, warm_floor_nodes=floor)
    pods = plan.timeline["pods"]
    assert len(pods) == 12
    for p in pods:
        overlapping = [q for q in pods if q["node"] == p["node"] and q["start"] < p["end"] and p["start"] < q["end"]]
        assert len(overlapping) == 1, (p, overlapping)
    if poll == 1000 and floor == 0:
        assert plan.nodes_launched == 12  # every poll gap outlasts consolidateAfter: a fresh node each time

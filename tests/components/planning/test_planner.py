"""Tests of the burst planner: the seed's 1,060/205 s under --warm, the cold stages, polls, nodes, billing, the warm
floor, the CLI's JSON, table and PNG, and the one-line errors."""
from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from components import catalogue
from components import planning as planner
from components.config import StackConfig, WorkloadConfig, parse_config
from components.config.files import read_stack_config
from components.planning import (
    Burst,
    parse_burst,
    parse_set,
    plan_stack,
    plan_workload,
    plans_json,
    simulate,
    stage_durations,
)
from components.planning.chooser import choose_pattern
from components.spec.validation import ConfigError

ROOT = Path(__file__).resolve().parents[3]
IMAGE_PULL = 13  # the layered worker image, FastImagePull on the NVMe RAID0 (test_image_layers.py checks the model)
COLD_NODE = 13 + 40 + 36 + IMAGE_PULL  # nodeclaim + EC2 Ready + GPU registered + image pull (catalogue defaults)


@pytest.fixture(scope="module")
def dev() -> StackConfig:
    return parse_config(read_stack_config("dev", ROOT), stack="dev")


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
    assert consumer.time_to_first_result_s == COLD_NODE + 45 + 8 == 155  # no KEDA poll: the consumer long-polls
    assert jobs.time_to_first_result_s == 30 + COLD_NODE + 45 + 8 == 185
    assert consumer.cold_start_s == COLD_NODE + 45
    assert consumer.time_to_last_result_s == COLD_NODE + 205
    # Ordered Jobs run one at a time and each waits for KEDA's next poll after the previous one ends.
    assert jobs.time_to_last_result_s > 1060 + COLD_NODE


def test_set_overrides_a_stage_after_warm(dev):
    w = workload(dev, "studies")
    cold = plan_workload(dev, w).patterns["consumer"].time_to_first_result_s
    fat = plan_workload(dev, w, overrides={"image_pull": 121}).patterns["consumer"].time_to_first_result_s
    assert fat - cold == 121 - IMAGE_PULL
    warm_poll = plan_workload(dev, w, warm=True, overrides={"poll": 30}).patterns["scaledjob"]
    assert warm_poll.time_to_first_result_s == 30 + 53


def test_keda_polls_gate_job_creation():
    stages = stage_durations(polling_interval_s=10, overrides={k: 0 for k in planner.NODE_STAGES})
    # Jobs of 53 s, one at a time: each next Job is created at the first poll (multiple of 10 s) after the last ends.
    plan = simulate("scaledjob", items=3, model_load_s=45, seconds_per_item=8, parallel=1, stages=stages)
    assert plan.time_to_first_result_s == 10 + 53
    assert plan.time_to_last_result_s == 130 + 53  # created at 10 (ends 63), 70 (ends 123), 130
    assert stage_durations()["poll"] == 30 == catalogue.STAGE_DURATIONS["poll"].seconds


def test_the_stacks_polling_interval_is_used(dev):
    # gpuburst:pollingIntervalS is a stack key (every ScaledJob polls at it): the planner must read it from the stack.
    cfg = dataclasses.replace(dev, polling_interval_s=5)
    w = workload(cfg, "studies")
    plan = plan_workload(cfg, w, warm=True, overrides={"poll": 5}).patterns["scaledjob"]
    assert plan.stages["poll"] == 5
    cold = plan_workload(cfg, w).patterns["scaledjob"]
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
                                                         "gpu_registered": 36, "image_pull": IMAGE_PULL,
                                                         "model_fetch": 0, "model_cache_hit": 0}  # model in image
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


# --------------------------------------------------------------------------------------------------------------------
# --trace: a recorded arrival pattern (issue 10, part 1).
# --------------------------------------------------------------------------------------------------------------------

from components.__main__ import main  # noqa: E402
from components.planning import Trace, parse_trace, warm_floor_open  # noqa: E402

MON = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)  # a Monday


def _csv(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _floor_cfg(dev: StackConfig) -> StackConfig:
    floor = SimpleNamespace(count=2, start="0 8 * * 1-5", end="0 18 * * 1-5", timezone="Europe/London")
    return _WithFloor(**{f.name: getattr(dev, f.name) for f in dataclasses.fields(StackConfig)
                         if f.name != "warm_gpus"}, warm_gpus=floor)


def test_parse_trace_sorts_merges_and_defaults(tmp_path):
    path = _csv(tmp_path, "# exported from CloudWatch\nAt , Items\n2026-01-05T10:00:00Z,5\n\n"
                          "2026-01-05T09:00:00,3\n2026-01-05T10:00:00+00:00,\n2026-01-05T11:00:00+01:00,2\n")
    trace = parse_trace(path).for_workload("anything")
    assert trace.arrivals == ((MON, 3), (MON.replace(hour=10), 8))  # naive = UTC; same times add; 11:00+01 = 10:00Z
    assert trace.items == 11 and trace.at == MON and trace.arrivals_s() == [(0.0, 3), (3600.0, 8)]
    only_at = parse_trace(_csv(tmp_path, "at\n2026-01-05T09:00:30Z\n2026-01-05T09:00:00Z\n", "b.csv"))
    assert only_at.for_workload("x").arrivals_s() == [(0.0, 1), (30.0, 1)]  # items default 1, rows sorted


def test_parse_trace_workload_column(tmp_path):
    csv = parse_trace(_csv(tmp_path, "workload,at,items\nstudies,2026-01-05T09:00:00Z,4\n"
                                     "slides,2026-01-05T09:05:00Z,7\n,2026-01-05T09:10:00Z,1\n"))
    assert csv.for_workload("studies").arrivals == ((MON, 4), (MON.replace(minute=10), 1))  # empty cell: every one
    assert csv.for_workload("slides").items == 8 and csv.for_workload("slides").at == MON.replace(minute=5)
    only = parse_trace(_csv(tmp_path, "at,workload\n2026-01-05T09:00:00Z,studies\n", "b.csv"))
    assert only.for_workload("slides") is None


@pytest.mark.parametrize("text,message", [
    ("at,items\n2026-01-05T09:00:00Z,2\n\n# note\n2026-13-01,1\n",
     "--trace {p} line 5 column at: '2026-13-01' is not valid: an ISO-8601 datetime"),
    ("at,items\n2026-01-05T09:00:00Z,0\n", "--trace {p} line 2 column items: '0' is not valid: a whole number"),
    ("at,items\n2026-01-05T09:00:00Z,2.5\n", "--trace {p} line 2 column items: '2.5' is not valid"),
    ("at,items\n2026-01-05T09:00:00Z,-3\n", "--trace {p} line 2 column items: '-3' is not valid"),
    ("at,items\n2026-01-05T09:00:00Z,2,x\n", "--trace {p} line 2: '2026-01-05T09:00:00Z,2,x' is not valid: 2 fields"),
    ("when,items\n2026-01-05T09:00:00Z,2\n", "--trace {p} line 1 header: 'when,items' is not valid"),
    ("items,count\n2,3\n", "--trace {p} line 1 header: 'items,count' is not valid"),
    ("at,at\n2026-01-05T09:00:00Z,2026-01-05T09:00:00Z\n", "--trace {p} line 1 header: 'at,at' is not valid"),
    ("at,items\n", "--trace: '{p}' is not valid: an arrival trace"),
    ("", "--trace: '{p}' is not valid: an arrival trace"),
])
def test_bad_trace_is_a_one_line_error(tmp_path, text, message):
    path = _csv(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        parse_trace(path)
    assert str(e.value).startswith(message.format(p=path)) and "\n" not in str(e.value)


def test_missing_trace_file_and_unknown_workload_are_one_line_errors(dev, tmp_path):
    with pytest.raises(ConfigError, match=r"^--trace: '.*nope.csv' is not valid: a readable CSV file"):
        parse_trace(tmp_path / "nope.csv")
    csv = parse_trace(_csv(tmp_path, "at,workload\n2026-01-05T09:00:00Z,studies\n2026-01-05T09:01:00Z,slidez\n"))
    with pytest.raises(ConfigError, match=r"^--trace .*trace.csv line 3 column workload: 'slidez' is not valid: a "
                                          r"workload of the stack: one of slides, studies$"):
        plan_stack(dev, trace=csv)
    only_studies = parse_trace(_csv(tmp_path, "at,workload\n2026-01-05T09:00:00Z,studies\n", "s.csv"))
    assert list(plan_stack(dev, trace=only_studies)) == ["studies"]  # a workload without rows is left out
    with pytest.raises(ConfigError, match=r"^--trace: '.*s.csv' is not valid: rows for slides"):
        plan_stack(dev, workload="slides", trace=only_studies)
    with pytest.raises(ConfigError, match=r"^--trace: '.*s.csv' is not valid: not with --burst"):
        plan_stack(dev, trace=only_studies, bursts=[Burst(3)])


def test_two_bursts_an_hour_apart_cold_start_jobs_twice_and_the_consumer_once(dev):
    w = workload(dev, "studies")
    trace = Trace(((MON, 20), (MON.replace(hour=10), 20)))
    wp = plan_workload(dev, w, trace)
    jobs, consumer = wp.patterns["scaledjob"], wp.patterns["consumer"]
    assert jobs.nodes_launched == 2 and consumer.nodes_launched == 1
    assert jobs.items == consumer.items == 40 and jobs.arrivals == 2
    one = plan_workload(dev, w, Burst(20, MON)).patterns
    # Jobs: the second burst is the first one again an hour later, less the first poll wait (3,600 s is on KEDA's
    # 30 s poll grid, so the poll then picks it up at once), on a fresh node billed just as long.
    assert jobs.time_to_last_result_s == 3600 - 30 + one["scaledjob"].time_to_last_result_s
    assert jobs.gpu_node_seconds_billed == 2 * one["scaledjob"].gpu_node_seconds_billed
    second_job = next(p for p in jobs.timeline["pods"] if p["label"] == "job 21")
    assert second_job["results"] == [3600 + COLD_NODE + 45 + 8]  # a fresh node, the image, the model again
    # The consumer stayed up with the model loaded: the second burst pays no node and no load, only the items.
    assert consumer.time_to_last_result_s == 3600 + 20 * 8
    assert consumer.time_to_first_result_s == COLD_NODE + 45 + 8 and consumer.cold_start_s == COLD_NODE + 45
    assert consumer.gpu_node_seconds_billed == 3600 + 20 * 8 - 13  # launch (after the NodeClaim) to the last result
    # Per-message latency: the consumer's second burst waits only behind its own items.
    assert consumer.latency_max_s == COLD_NODE + 45 + 20 * 8
    assert jobs.latency_max_s > consumer.latency_max_s and jobs.latency_p95_s <= jobs.latency_max_s


def test_a_second_burst_within_consolidate_after_reuses_the_node():
    kw = dict(model_load_s=45, seconds_per_item=8, parallel=1, stages=stage_durations())
    first_end = 30 + COLD_NODE + 53  # 184 s; the node goes at 593 s
    near = simulate("scaledjob", arrivals=[(0, 1), (400, 1)], **kw)
    assert near.nodes_launched == 1
    assert near.time_to_last_result_s == 420 + 53  # next poll after 400, image cached: only the model and the item
    assert near.gpu_node_seconds_billed == 420 + 53 + planner.CONSOLIDATE_AFTER_S - (30 + 13)  # from the launch
    late = first_end + planner.CONSOLIDATE_AFTER_S + 60
    far = simulate("scaledjob", arrivals=[(0, 1), (late, 1)], **kw)
    assert far.nodes_launched == 2
    assert far.time_to_last_result_s == 30 * math.ceil(late / 30) + COLD_NODE + 53  # KEDA's next poll, a cold node


def test_a_burst_is_the_one_arrival_trace(dev, tmp_path):
    for name in ("slides", "studies"):
        w = workload(dev, name)
        for warm in (False, True):
            burst = plan_workload(dev, w, Burst(20, MON), warm=warm)
            trace = plan_workload(dev, w, Trace(((MON, 20),)), warm=warm)
            assert {k: p.summary() for k, p in trace.patterns.items()} == \
                {k: p.summary() for k, p in burst.patterns.items()}
    kw = dict(model_load_s=45, seconds_per_item=8, parallel=3, stages=stage_durations())
    base = simulate("scaledjob", items=12, **kw).summary()
    assert simulate("scaledjob", arrivals=[(0, 12)], **kw).summary() == base
    assert simulate("scaledjob", arrivals=[(500, 5), (500, 7)], **kw).summary() == base  # from the first arrival
    # And through the command: a one-row trace gives the --burst numbers.
    path = _csv(tmp_path, "at,items\n2026-01-05T09:00:00Z,20\n")
    via = [json.loads(_cli("--workload", "studies", *args, "--json").stdout)["workloads"]["studies"]
           for args in (("--trace", str(path)), ("--burst", "20@2026-01-05T09:00:00Z"))]
    assert via[0]["patterns"] == via[1]["patterns"] and via[0]["trace"]["arrivals"] == 1


def test_warm_floor_open_for_the_first_arrival_but_not_the_second(dev):
    cfg = _floor_cfg(dev)
    evening = MON.replace(hour=20)  # 20:00 London: the 08:00-18:00 window has closed
    wp = plan_workload(cfg, workload(dev, "slides"), Trace(((MON, 2), (evening, 2))))
    jobs, consumer = wp.patterns["scaledjob"], wp.patterns["consumer"]
    gap = (evening - MON).total_seconds()
    assert jobs.warm_floor_nodes == 2 and jobs.nodes_launched == 2  # the evening's 2 Jobs launch 2 fresh nodes
    firsts = sorted(p["results"][0] for p in jobs.timeline["pods"])
    assert firsts[:2] == [30 + 53, 30 + 53]  # on the floor: image cached, model to load
    assert firsts[2:] == [gap + COLD_NODE + 53] * 2  # (20:00 is on the poll grid: picked up at once)
    assert consumer.warm_floor_nodes == 2 and consumer.nodes_launched == 0  # it sits on a floor node all along
    inside_only = plan_workload(cfg, workload(dev, "slides"), Trace(((MON, 2),))).patterns["scaledjob"]
    assert inside_only.nodes_launched == 0
    # Floor nodes are charged only from the arrival they serve to the pod's end.
    # (Fresh nodes from the EC2 launch, after the 13 s NodeClaim, to 300 s after they empty.)
    assert jobs.gpu_node_seconds_billed == 2 * 83 + 2 * (COLD_NODE - 13 + 53 + planner.CONSOLIDATE_AFTER_S)
    # Neither arrival in the window: the floor is not in the model at all.
    late = plan_workload(cfg, workload(dev, "slides"), Trace(((evening, 2), (evening.replace(hour=21), 1))))
    assert late.patterns["scaledjob"].warm_floor_nodes == 0 and late.patterns["scaledjob"].nodes_launched == 3


def test_warm_floor_open_sweep_agrees_with_the_cron_window_across_dst(dev):
    from zoneinfo import ZoneInfo

    from components.planning.cron import window_active

    cfg = _floor_cfg(dev)
    start = datetime(2026, 3, 26, 7, 0, tzinfo=timezone.utc)  # Thu; Europe/London goes to BST on Sun 29 March
    offsets = [k * 37 * 60.0 + 11 for k in range(0, 6 * 24 * 60 // 37)]
    swept = warm_floor_open(cfg, start, offsets)
    tz = ZoneInfo("Europe/London")
    expected = [window_active("0 8 * * 1-5", "0 18 * * 1-5", (start + timedelta(seconds=s)).astimezone(tz))
                for s in offsets]
    assert swept == expected and any(swept) and not all(swept)
    assert warm_floor_open(dev, start, [0.0, 60.0]) == [False, False]  # no warm_gpus
    assert warm_floor_open(cfg, None, [0.0]) == [False]  # no time


def test_latency_figures_and_the_consumer_idling_between_arrivals():
    stages = stage_durations(warm=True)
    plan = simulate("consumer", arrivals=[(0, 2), (100, 1)], model_load_s=45, seconds_per_item=8, parallel=1,
                    stages=stages)
    # Serving at 45 s: results at 53 and 61; the third arrives at 100 s (idle pod) and is done at 108 s.
    assert sorted(r for p in plan.timeline["pods"] for r in p["results"]) == [53, 61, 108]
    assert plan.latency_max_s == 61 and plan.latency_p95_s == 61 and plan.latency_mean_s == pytest.approx(122 / 3)
    assert plan.timeline["pods"][0]["runs"] == [(45, 61), (100, 108)]
    assert plan.timeline["arrivals"] == [(0.0, 2), (100.0, 1)]
    with pytest.raises(ConfigError, match="^arrivals: "):
        simulate("consumer", arrivals=[(0, 0)], model_load_s=45, seconds_per_item=8, parallel=1, stages=stages)


def test_cli_trace_json_table_and_png(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the command reads Pulumi.dev.yaml from the working folder, as a user runs it
    path = _csv(tmp_path, "at,items,workload\n2026-01-05T10:00:00Z,20,studies\n2026-01-05T09:00:00,20,studies\n"
                          "2026-01-05T09:00:00Z,30,slides\n")
    assert main(["plan-burst", "--trace", str(path), "--json", "--out", str(tmp_path / "png")]) == 0
    doc = json.loads(capsys.readouterr().out)["workloads"]
    studies = doc["studies"]
    assert studies["trace"] == {"file": str(path), "arrivals": 2, "items": 40,
                                "first_arrival_at": "2026-01-05T09:00:00+00:00",
                                "last_arrival_at": "2026-01-05T10:00:00+00:00"}
    keys = {"pattern", "time_to_first_result_s", "time_to_last_result_s", "cost_usd", "cost_per_item_usd",
            "nodes_launched", "gpu_node_seconds_billed", "idle_cost_per_day_usd", "latency_mean_s", "latency_p95_s",
            "latency_max_s"}
    assert keys <= set(studies) and all(keys <= set(p) for p in studies["patterns"].values())
    assert studies["patterns"]["scaledjob"]["nodes_launched"] == 2
    assert studies["patterns"]["consumer"]["nodes_launched"] == 1
    assert doc["slides"]["items"] == 30 and len(studies["bursts"]) == 1
    for name in ("studies", "slides"):
        assert (tmp_path / "png" / f"plan-burst-{name}-trace.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plan-burst", "--trace", str(path), "--workload", "studies"]) == 0
    table = capsys.readouterr().out
    assert f"studies: trace {path}: 40 messages in 2 arrivals" in table and "latency mean/p95/max s" in table


def test_cli_trace_errors_are_one_line(tmp_path, capsys):
    bad = _csv(tmp_path, "at,items\n2026-01-05T09:00:00Z,3\n2026-13-01,1\n")
    assert main(["plan-burst", "--trace", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"plan-burst: --trace {bad} line 3 column at: '2026-13-01' is not valid") and \
        len(err.strip().splitlines()) == 1
    good = _csv(tmp_path, "at\n2026-01-05T09:00:00Z\n", "good.csv")
    assert main(["plan-burst", "--trace", str(good), "--burst", "3@2026-01-05T09:00:00Z"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"plan-burst: --trace: '{good}' is not valid: not with --burst") and \
        len(err.strip().splitlines()) == 1


def test_the_sample_trace_plans():
    csv = parse_trace(ROOT / "examples" / "trace-monday.csv")
    assert {r.workload for r in csv.rows} == {"slides", "studies"}
    assert csv.for_workload("studies").items == 43


# --- faster image start: the levers, before and after -------------------------------------------------------------

def test_fast_image_pull_and_the_nvme_raid0_shorten_the_cold_start(dev):
    w = workload(dev, "studies")
    one_stream = round(catalogue.image_pull_seconds(catalogue.worker_image_bytes(), parallel=False))
    on = plan_workload(dev, w)
    off = plan_workload(dataclasses.replace(dev, fast_image_pull=False), w)
    no_raid = plan_workload(dataclasses.replace(dev, fast_image_pull=False, gpu_instance_store_policy="none"), w)
    assert on.patterns["consumer"].stages["image_pull"] == IMAGE_PULL < one_stream == 31
    for before in (off, no_raid):
        assert before.patterns["consumer"].stages["image_pull"] == one_stream
        assert (before.patterns["consumer"].time_to_first_result_s
                - on.patterns["consumer"].time_to_first_result_s) == one_stream - IMAGE_PULL
    assert "parallel pull" in on.image_pull and "fastImagePull is off" in off.image_pull
    table = planner.plans_table({"studies": [off]})
    assert "image pull: worker image ~2.97 GB compressed, largest layer 0.55 GB" in table
    assert "31 s as one stream" in table


def test_nodeadm_ignores_fast_image_pull_on_small_nodes_and_the_planner_knows(dev, monkeypatch):
    small = dataclasses.replace(catalogue.instance_type("g4dn.xlarge"), vcpu=2)
    monkeypatch.setitem(catalogue.INSTANCE_TYPES, "g4dn.xlarge", small)
    assert not planner.parallel_pull(dev, "g4dn.xlarge")
    assert planner.parallel_pull(dev, "g4dn.2xlarge")
    assert not planner.parallel_pull(dev, "x9.unknown")


# --------------------------------------------------------------------------------------------------------------------
# A lab's own model (issue 17): the first Job on a node fetches it from S3, later ones check the cached file.
# --------------------------------------------------------------------------------------------------------------------

def test_the_first_job_on_a_node_fetches_the_model_and_later_ones_read_the_cache():
    stages = stage_durations(warm=True, overrides={"model_fetch": 31, "model_cache_hit": 6})
    plan = simulate("scaledjob", items=3, model_load_s=45, seconds_per_item=8, parallel=1, stages=stages)
    assert plan.model_fetches == 1 and plan.nodes_launched == 1
    pods = plan.timeline["pods"]
    assert [p["serving"] - p["start"] for p in pods] == [31 + 45, 6 + 45, 6 + 45]
    # Two Jobs that start together on one 4-GPU node: one fetches, the other waits for it, then reads the cache.
    four = catalogue.INSTANCE_TYPES["g4dn.12xlarge"]
    node = planner.NodeType(four.name, 4, 4, four.on_demand_usd_per_hour, "on-demand")
    cold = stage_durations(overrides={"poll": 0, "model_fetch": 31, "model_cache_hit": 6})
    pair = simulate("scaledjob", items=2, model_load_s=45, seconds_per_item=8, parallel=2, stages=cold, node=node)
    starts = sorted((p["start"], p["serving"]) for p in pair.timeline["pods"])
    assert pair.model_fetches == 1 and starts[0][0] == starts[1][0]
    assert sorted(s for _, s in starts) == [starts[0][0] + 31 + 45, starts[0][0] + 31 + 6 + 45]


def test_a_workload_with_its_own_model_pays_the_catalogues_fetch(dev):
    from components.config import ModelSource

    w = dataclasses.replace(workload(dev, "slides"), model=ModelSource("s3://lab-models/m.pt2", "0" * 64),
                            messages_per_job=25)
    plan = plan_workload(dev, w, Burst(200)).patterns["scaledjob"]
    fetch = round(catalogue.model_fetch_seconds())
    hit = round(catalogue.model_cache_hit_seconds())
    assert plan.stages["model_fetch"] == fetch == round(catalogue.MODEL_BYTES_ASSUMED
                                                        / catalogue.MODEL_FETCH_BYTES_PER_S)
    assert plan.stages["model_cache_hit"] == hit > 0
    assert plan.model_fetches == 8  # one per node: 8 Jobs of 25 on 8 one-GPU nodes
    assert plan.time_to_last_result_s == 30 + COLD_NODE + fetch + 45 + 25 * 8
    # Without the NVMe RAID0 the cache sits on the gp3 root volume: its 125 MiB/s bounds the cache hit.
    assert catalogue.model_cache_hit_seconds(on_nvme=False) > catalogue.model_cache_hit_seconds()
    # The built-in model is in the image: nothing to fetch.
    assert plan_workload(dev, workload(dev, "slides")).patterns["scaledjob"].stages["model_fetch"] == 0

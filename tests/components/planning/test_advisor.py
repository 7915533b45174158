"""Tests of the advisor (`plan-burst --deadline/--budget`): the issue's done-when (the ranked
configurations for dev `slides`, whose config lines, applied to the stack file and planned again, give the same
figures), the pruned search against a brute force, the budget and both-goal rankings, what bounds an unmeetable goal,
and the CLI's table, JSON and one-line errors."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from components.__main__ import main
from components.config import ModelSource, StackConfig, parse_config
from components.config.files import read_stack_config
from components.planning import Burst, advise, plan_workload
from components.planning.advisor import _Search
from components.planning.report import config_fragment
from components.spec.validation import ConfigError

ROOT = Path(__file__).resolve().parents[3]
AT = datetime(2026, 12, 7, 9, 0, tzinfo=timezone.utc)  # a Monday
BURST = Burst(200, AT)


@pytest.fixture(scope="module")
def dev() -> StackConfig:
    return parse_config(read_stack_config("dev", ROOT), stack="dev")


@pytest.fixture(scope="module")
def three_hours(dev):
    return advise(dev, "slides", BURST, deadline_s=3 * 3600, top=8)


def apply_lines(fragment: str, stack_file: Path = ROOT / "Pulumi.dev.yaml") -> StackConfig:
    """The stack file with the printed lines merged in (workload keys into the workload's mapping, stack keys
    replaced, `# remove gpuburst:KEY` removed), parsed as `plan-burst` parses it."""
    doc = yaml.safe_load(stack_file.read_text(encoding="utf-8"))
    config = doc["config"]
    for key, value in ((yaml.safe_load(fragment) or {}).get("config") or {}).items():
        if key == "gpuburst:workloads":
            for name, keys in value.items():
                config[key][name].update(keys)
        else:
            config[key] = value
    for key in re.findall(r"# remove (gpuburst:\w+)", fragment):
        config.pop(key)
    return parse_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}, stack="dev")


def slides(cfg: StackConfig):
    return next(w for w in cfg.workloads if w.name == "slides")


def test_a_goal_is_required(dev):
    with pytest.raises(ConfigError, match="^--deadline: None is not valid"):
        advise(dev, "slides", BURST)


# --------------------------------------------------------------------------------------------------------------------
# The done-when: dev slides, 200 at 09:00, a 3 h deadline.
# --------------------------------------------------------------------------------------------------------------------

def test_three_hours_ranks_configurations_that_meet_it_cheapest_first(three_hours):
    a = three_hours
    assert a.options and a.meeting >= len(a.options) > 1
    assert all(o.time_to_last_result_s <= 3 * 3600 for o in a.options)
    costs = [o.cost_usd for o in a.options]
    assert costs == sorted(costs)
    # As configured (one message per Job) it meets the deadline too, at many times the cheapest option's cost.
    assert a.current.messages_per_job == 1 and a.current.time_to_last_result_s <= 3 * 3600
    assert a.current.cost_usd > 3 * a.options[0].cost_usd
    best = a.options[0]
    # The cheapest: one Job takes all 200 slides, paying one node start and one model load.
    assert (best.pattern, best.jobs_at_once, best.messages_per_job, best.warm_floor) == ("scaledjob", 1, 200, 0)
    assert best.workload_keys["messagesPerJob"] == 200 and not best.stack_keys
    # With one Job the chooser's warm model ties with one consumer (a tie goes to the consumer), so the pattern is
    # written down: the lines must give the configuration priced, not the chooser's pick.
    assert best.workload_keys["pattern"] == "scaledjob"


def test_setting_the_first_ones_lines_and_planning_again_gives_the_same_figures(three_hours):
    best = three_hours.options[0]
    cfg = apply_lines(config_fragment("dev", "slides", best))
    assert slides(cfg).messages_per_job == 200
    wp = plan_workload(cfg, slides(cfg), BURST)
    plan = wp.patterns[wp.pattern]
    assert wp.pattern == best.pattern
    assert (plan.time_to_first_result_s, plan.time_to_last_result_s) == (best.time_to_first_result_s,
                                                                         best.time_to_last_result_s)
    assert plan.cost_usd == pytest.approx(best.cost_usd) == pytest.approx(best.plan.cost_usd)
    # ... and the advisor, asked again on the changed stack, finds it as configured.
    again = advise(cfg, "slides", BURST, deadline_s=3 * 3600)
    assert again.current.cost_usd == pytest.approx(best.cost_usd)
    assert again.options[0].cost_usd == pytest.approx(best.cost_usd) and not again.options[0].workload_keys


def test_a_warm_floors_lines_give_the_same_times_and_its_window_is_costed(dev):
    a = advise(dev, "slides", BURST, deadline_s=300, top=20)
    floored = next(o for o in a.options if o.warm_floor)
    warm = floored.stack_keys["warmGpus"]
    assert warm["count"] == floored.warm_floor and warm["timezone"] == "UTC"
    assert warm["end"] == "1 9 * * 1" and warm["start"].endswith(" 8 * * 1")  # Monday, up before 09:00
    cfg = apply_lines(config_fragment("dev", "slides", floored))
    wp = plan_workload(cfg, slides(cfg), BURST)
    plan = wp.patterns["scaledjob"]
    assert plan.warm_floor_nodes == floored.warm_floor
    assert (plan.time_to_first_result_s, plan.time_to_last_result_s) == (floored.time_to_first_result_s,
                                                                         floored.time_to_last_result_s)
    assert plan.cost_usd == pytest.approx(floored.plan.cost_usd)
    # plan-burst charges a floor node to the burst only while it serves; the advisor holds it from the window's
    # start until consolidated, so the floor costs more than the burst's share.
    assert floored.cost_usd > plan.cost_usd


def test_the_search_is_quick_deterministic_and_reports_its_size(dev, three_hours):
    a = three_hours
    assert a.seconds < 10 and 0 < a.simulations <= a.evaluated < a.space
    b = advise(dev, "slides", BURST, deadline_s=3 * 3600, top=8)
    assert [(o.key(), o.cost_usd, o.time_to_last_result_s) for o in a.options] == \
        [(o.key(), o.cost_usd, o.time_to_last_result_s) for o in b.options]
    assert (a.simulations, a.evaluated, a.space, a.meeting) == (b.simulations, b.evaluated, b.space, b.meeting)


def test_no_listed_option_is_matched_or_beaten_by_one_listed_before_it(dev):
    everything = advise(dev, "slides", BURST, deadline_s=3 * 3600, top=400, undominated=False).options
    listed = advise(dev, "slides", BURST, deadline_s=3 * 3600, top=400).options
    assert listed[0].key() == everything[0].key() and len(listed) < len(everything)
    for i, o in enumerate(listed):
        assert not any(k.cost_usd <= o.cost_usd and k.time_to_first_result_s <= o.time_to_first_result_s
                       and k.time_to_last_result_s <= o.time_to_last_result_s for k in listed[:i])
    # what was left out is matched or beaten by something listed
    keys = {o.key() for o in listed}
    for o in everything:
        if o.key() not in keys:
            assert any(k.cost_usd <= o.cost_usd + 1e-9 and k.time_to_first_result_s <= o.time_to_first_result_s
                       and k.time_to_last_result_s <= o.time_to_last_result_s for k in listed)


def test_a_type_that_cannot_be_selected_alone_is_left_out_with_the_reason(three_hours):
    # dev admits two types that host the pod; choosing g5.2xlarge would leave it alone (the diversity rule).
    assert any(n.startswith("g5.2xlarge: not searched") and "gpu-pod-effective-diversity" in n
               for n in three_hours.notes)
    assert {o.instance_type for o in three_hours.options} == {"g4dn.2xlarge"}


def test_a_pricier_type_and_on_demand_carry_their_stack_wide_lines(dev):
    cfg = dataclasses.replace(dev, gpu_instance_types=("g4dn.2xlarge", "g5.2xlarge", "g6.2xlarge"))
    a = advise(cfg, "slides", Burst(40, AT), budget_usd=5.0, top=400, undominated=False)
    g6 = next(o for o in a.options if o.instance_type == "g6.2xlarge" and o.capacity_type == "spot")
    assert g6.stack_keys["gpuInstanceTypes"] == ["g5.2xlarge", "g6.2xlarge"]  # g4dn would be picked before it
    od = next(o for o in a.options if o.capacity_type == "on-demand" and o.pattern == "scaledjob")
    assert od.stack_keys["gpuCapacityTypes"] == ["on-demand"]
    assert "gpuburst:gpuCapacityTypes: [on-demand]  # stack-wide" in config_fragment("dev", "slides", od)
    cheaper = apply_lines(config_fragment("dev", "slides", g6))
    assert plan_workload(cheaper, slides(cheaper), Burst(40, AT)).patterns["scaledjob"].instance_type == "g6.2xlarge"


# --------------------------------------------------------------------------------------------------------------------
# The pruned search finds what a brute force over the whole space finds.
# --------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("items,gpu_limit,load,per,types,model", [
    (13, 3, 45, 8, ("g4dn.2xlarge", "g5.2xlarge"), False),
    (24, 4, 10, 30, ("g4dn.2xlarge", "g5.2xlarge"), False),
    (14, 8, 45, 8, ("g4dn.12xlarge", "g5.12xlarge"), False),  # 4 GPUs, 4 Jobs per node: fill the nodes
    (12, 3, 20, 15, ("g4dn.2xlarge", "g5.2xlarge", "g6.2xlarge"), True),  # a lab's model: fetch, then cache hits
])
def test_the_pruned_search_finds_the_brute_forces_best(dev, items, gpu_limit, load, per, types, model):
    source = ModelSource("s3://lab-models/m.pt2", "0" * 64) if model else None
    w = dataclasses.replace(slides(dev), model_load_s=load, seconds_per_item=per, max_replicas=gpu_limit,
                            model=source)
    cfg = dataclasses.replace(dev, gpu_limit=gpu_limit, gpu_instance_types=types, workloads=(w,) + dev.workloads[1:])
    burst = Burst(items, AT)
    brute = _Search(cfg, w, burst, None)
    everything = []
    for shape in brute.shapes("scaledjob"):
        for floor in range(shape.max_nodes + 1):
            for jobs in range(1, shape.max_nodes * shape.node.pods_per_node + 1):
                for per_job in range(1, items + 1):
                    everything += brute.option("scaledjob", shape, floor, jobs, per_job)
    for shape in brute.shapes("consumer"):
        everything += brute.option("consumer", shape, 0, 1, 1)
    assert not model or brute.shapes("scaledjob")[0].stages["model_fetch"] > 0
    times = sorted({o.time_to_last_result_s for o in everything})
    for deadline in times[::max(1, len(times) // 6)]:
        best = min(o.cost_usd for o in everything if o.time_to_last_result_s <= deadline)
        assert advise(cfg, "slides", burst, deadline_s=deadline).options[0].cost_usd == pytest.approx(best)
    costs = sorted({o.cost_usd for o in everything})
    for budget in costs[::max(1, len(costs) // 6)]:
        best = min(o.time_to_last_result_s for o in everything if o.cost_usd <= budget)
        assert advise(cfg, "slides", burst, budget_usd=budget).options[0].time_to_last_result_s == best


# --------------------------------------------------------------------------------------------------------------------
# Budget, both goals, and what bounds a goal nothing meets.
# --------------------------------------------------------------------------------------------------------------------

def test_a_budget_ranks_the_fastest_within_it(dev, three_hours):
    a = advise(dev, "slides", BURST, budget_usd=0.30)
    assert a.options and all(o.cost_usd <= 0.30 for o in a.options)
    times = [o.time_to_last_result_s for o in a.options]
    assert times == sorted(times)
    # The money buys time: faster than the cheapest configuration, which costs less.
    assert a.options[0].time_to_last_result_s < three_hours.options[0].time_to_last_result_s
    assert a.options[0].cost_usd > three_hours.options[0].cost_usd


def test_both_goals_give_the_cheapest_that_meets_the_deadline_within_the_budget(dev):
    deadline_only = advise(dev, "slides", BURST, deadline_s=600)
    both = advise(dev, "slides", BURST, deadline_s=600, budget_usd=deadline_only.options[0].cost_usd + 1e-6)
    assert both.options[0].cost_usd == pytest.approx(deadline_only.options[0].cost_usd)
    assert all(o.time_to_last_result_s <= 600 and o.cost_usd <= deadline_only.options[0].cost_usd + 1e-6
               for o in both.options)
    none = advise(dev, "slides", BURST, deadline_s=600, budget_usd=deadline_only.options[0].cost_usd / 2)
    assert not none.options and none.bound.startswith("Nothing the stack allows fits the budget of $")
    assert "that meets the deadline of 600 s" in none.bound


def test_an_impossible_deadline_names_inference_as_the_bound(dev):
    a = advise(dev, "slides", BURST, deadline_s=200)
    assert not a.options and a.meeting == 0 and "\n" not in a.bound
    # 8 GPUs (gpuLimit 8) x 25 slides x 8 s: the fastest finishes at poll 30 + load 45 + 200 = 275 s on a warm floor.
    assert "The fastest configuration, 8 Jobs at once of 25 messages" in a.bound and "275 s" in a.bound
    assert "inference bounds it" in a.bound and "gpuLimit 8" in a.bound
    assert "The first result cannot come before 83 s (1 min 23 s): KEDA's poll 30 s + node start 0 s" in a.bound


def test_without_a_time_no_floor_is_searched_and_node_start_can_bound_it(dev):
    w = dataclasses.replace(slides(dev), seconds_per_item=1.0, model_load_s=5)
    cfg = dataclasses.replace(dev, workloads=(w,) + dev.workloads[1:])
    a = advise(cfg, "slides", Burst(8), deadline_s=60)
    assert any(n.startswith("warm floor: not searched") for n in a.notes)
    assert "node start bounds it" in a.bound and "give --burst a time to search one" in a.bound


def test_a_budget_nothing_fits_names_what_the_money_goes_to(dev):
    a = advise(dev, "slides", BURST, budget_usd=0.05)
    assert not a.options and "fits the budget of $0.0500" in a.bound and "inference bounds it" in a.bound


def test_ordered_work_is_searched_as_the_consumer_only(dev):
    a = advise(dev, "studies", Burst(20, AT), deadline_s=3600)
    assert {o.pattern for o in a.options} == {"consumer"}
    assert a.options[0].cost_usd == pytest.approx(a.options[0].plan.usd_per_hour * 24)  # its node, all day


# --------------------------------------------------------------------------------------------------------------------
# The command line.
# --------------------------------------------------------------------------------------------------------------------

def test_cli_prints_the_ranked_table_with_config_lines(capsys):
    assert main(["plan-burst", "--stack", "dev", "--workload", "slides", "--burst", "200@2026-12-07T09:00",
                 "--deadline", "3h"]) == 0
    out = capsys.readouterr().out
    assert "slides: burst of 200 at 2026-12-07T09:00:00+00:00; goal: last result within 10,800 s" in out
    assert re.search(r"search: [\d,]+ burst-model runs priced as [\d,]+ configurations \(of [\d,]+ in the space\) "
                     r"in \d+\.\d\d s", out)
    rows = re.findall(r"^\s+(\d+)\s+(scaledjob|consumer)\s+(\d+)\s+(\d+)\s.*?(\d+\.\d{4})\s+\d+\.\d{5}$", out, re.M)
    assert [int(r[0]) for r in rows] == list(range(1, len(rows) + 1)) and len(rows) >= 2
    assert [float(r[4]) for r in rows] == sorted(float(r[4]) for r in rows)
    assert "  #1\n    config:\n      gpuburst:workloads:\n        slides:\n          messagesPerJob: 200\n" in out


def test_cli_json_carries_the_same(capsys, dev):
    args = ["plan-burst", "--workload", "slides", "--burst", "200@2026-12-07T09:00", "--deadline", "10m"]
    assert main(args + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["advice"]["slides"]
    assert doc["ranked_by"] == "cost" and doc["deadline_s"] == 600 and doc["bound"] is None
    same = advise(dev, "slides", BURST, deadline_s=600)
    first, best = doc["options"][0], same.options[0]
    assert first["rank"] == 1 and first["cost_usd"] == round(best.cost_usd, 6)
    assert first["config"] == {"gpuburst:workloads": {"slides": best.workload_keys},
                               **{f"gpuburst:{k}": v for k, v in best.stack_keys.items()}}
    assert first["yaml"].startswith("config:\n  gpuburst:workloads:")
    assert first["time_to_last_result_s"] == first["plan"]["time_to_last_result_s"]
    assert {"simulations", "evaluated", "space", "seconds"} <= set(doc["search"])
    assert doc["as_configured"]["config"] == {} and doc["as_configured"]["messages_per_job"] == 1


@pytest.mark.parametrize("extra,message", [
    (["--trace", "examples/trace-monday.csv"], "--trace: 'examples/trace-monday.csv' is not valid: not with"),
    (["--warm"], "--warm: 'True' is not valid: not with --deadline/--budget"),
    (["--burst", "5@2026-12-07T10:00"], "--burst: ['200@2026-12-07T09:00', '5@2026-12-07T10:00'] is not valid"),
    (["--top", "0"], "--top: 0 is not valid: a whole number >= 1"),
    (["--budget", "lots"], "--budget: 'lots' is not valid"),
])
def test_cli_refusals_are_one_line(capsys, extra, message):
    args = ["plan-burst", "--workload", "slides", "--burst", "200@2026-12-07T09:00", "--deadline", "3h", *extra]
    if extra[0] == "--trace":
        args = [a for a in args if a not in ("--burst", "200@2026-12-07T09:00")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("plan-burst: " + message) and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_cli_in_the_project_folder():
    proc = subprocess.run([sys.executable, "-m", "components", "plan-burst", "--stack", "dev", "--workload", "slides",
                           "--burst", "200@2026-12-07T09:00", "--deadline", "3h"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "cheapest first" in proc.stdout and "messagesPerJob: 200" in proc.stdout

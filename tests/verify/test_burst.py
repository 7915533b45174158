"""burst: the measured timeline from recorded Kubernetes objects and result summaries, the prediction, the budget and
the verdict; the probe slide the worker must accept; the live flow against SQS/S3 on a real moto_server."""
from __future__ import annotations

import io
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import boto3
import pytest
from verify_fakes import NOW, FakeClock, FakeKube, items, load

from components.config import BurstBudget, parse_config
from components.synth.synth import read_stack_config
from components.verify import burst, burst_budget, burst_probes, burst_timeline, cli
from components.verify.aws import Aws
from components.verify.context import Context
from components.verify.model import VerifySettings, Workload

ROOT = Path(__file__).resolve().parents[2]
SENT = NOW  # the recorded burst was sent at 2026-11-02T10:00:00Z


def _results(*pairs):
    """ProbeResults from (summary fixture or None, written at HH:MM:SS or None)."""
    out = []
    for i, (name, at) in enumerate(pairs):
        summary = load(f"burst/{name}") if name else None
        written = datetime.fromisoformat(f"2026-11-02T{at}+00:00") if at else None
        out.append(burst_probes.ProbeResult(f"burst-1a2b3c4d-{i + 1}", written, summary))
    return out


def _cold(**kw):
    return burst_timeline.measured_timeline(SENT, items("burst/jobs_cold.json"), items("burst/pods_cold.json"),
                                   items("burst/nodeclaims.json"), items("burst/events_cold.json"),
                                   _results(("summary_1.json", "10:04:36"), ("summary_2.json", "10:04:45")), **kw)


def _warm():
    return burst_timeline.measured_timeline(SENT, items("burst/jobs_warm.json"), items("burst/pods_warm.json"),
                                   items("burst/nodeclaims.json"), items("burst/events_warm.json"),
                                   _results(("summary_1.json", "10:01:23")))


PRED = burst_budget.Prediction("slides", "scaledjob", 2, {"poll": 30.0, "nodeclaim": 13.0, "ec2_ready": 40.0,
                                                   "gpu_registered": 36.0, "image_pull": 121.0, "model_load": 45.0,
                                                   "per_item": 8.0}, 293.0, 293.0, 293.0, 293.0)
"""A planner prediction as recorded (catalogue stage defaults, dev stack, 2 probes), so the verdict tests do not
move when the catalogue's stage figures do."""


@pytest.fixture(scope="module")
def dev_config():
    return parse_config(read_stack_config("dev", ROOT), stack="dev")


# --- the measured timeline -------------------------------------------------------------------------------------------

def test_cold_burst_maps_every_stage_to_the_planner_names():
    t = _cold()
    assert t.stages == {"poll": 31.0, "nodeclaim": 2.0, "ec2_ready": 49.0, "gpu_registered": 18.0,
                        "image_pull": 125.1, "model_load": 43.1, "per_item": 10.95}
    assert (t.time_to_first_result_s, t.time_to_last_result_s, t.results, t.probes) == (276.0, 285.0, 2, 2)
    assert not t.warm_node and t.problems == ()
    # the NodeClaim from 08:10 is not the burst's: only the two launched after the probes count
    assert sorted(n.nodeclaim for n in t.nodes if n.cold) == ["gpu-q5t7w", "gpu-x8v2c"]
    a = next(n for n in t.nodes if n.nodeclaim == "gpu-x8v2c")
    assert (a.created_s, a.launched_s, a.registered_s, a.initialized_s) == (33.0, 36.0, 80.0, 98.0)
    pod = next(p for p in t.pods if p.name == "slides-7k2xq-hm4pz")
    assert (pod.scheduled_s, pod.pull_s, pod.image_cached, pod.started_s) == (99.0, 118.2, False, 222.0)


def test_preexisting_uids_decide_which_nodeclaims_are_cold():
    t = _cold(preexisting_nodeclaims={"nc-gpu-x8v2c", "nc-gpu-warm1"})
    assert [n.nodeclaim for n in t.nodes if n.cold] == ["gpu-q5t7w"]
    assert any(n.startswith("warm node ip-10-0-33-7.ec2.internal") for n in t.notes)


def test_warm_node_has_no_node_stages_and_a_cached_image():
    t = _warm()
    assert t.warm_node
    assert {k: t.stages[k] for k in ("nodeclaim", "ec2_ready", "gpu_registered")} == dict.fromkeys(
        ("nodeclaim", "ec2_ready", "gpu_registered"))
    assert t.stages["poll"] == 30.0 and t.stages["image_pull"] == 0.0
    assert t.time_to_first_result_s == t.time_to_last_result_s == 83.0
    assert any(n.startswith("warm node ip-10-0-12-34.ec2.internal: no node stages (NodeClaim gpu-warm1 up before")
               for n in t.notes)
    assert "image already present on machine (cached) for every probe pod" in t.notes


def test_pod_never_scheduled_is_a_clear_problem_not_a_crash():
    t = burst_timeline.measured_timeline(SENT, items("burst/jobs_pending.json"), items("burst/pods_pending.json"),
                                items("burst/nodeclaims_pending.json"), items("burst/events_pending.json"),
                                _results((None, None), (None, None)), waited_s=600)
    assert t.time_to_first_result_s is None and t.time_to_last_result_s is None
    assert t.problems[0].startswith("pod slides-p3nd1-c7v2m: never scheduled within 600 s (PodScheduled=False, "
                                    "reason Unschedulable: 0/3 nodes are available: 1 Insufficient nvidia.com/gpu")
    assert "NodeClaim gpu-p3nd1: not Registered within 600 s (Launched at +36 s)" in t.problems
    assert t.problems[-1] == ("2 of 2 probe(s) wrote no result within 600 s: burst-1a2b3c4d-1, "
                              "burst-1a2b3c4d-2")
    assert t.stages["nodeclaim"] == 2.0 and t.stages["ec2_ready"] is None


def test_no_job_at_all_is_named():
    t = burst_timeline.measured_timeline(SENT, [], [], [], [], _results((None, None)), waited_s=90)
    assert t.problems == ("the ScaledJob created no Job for the burst within 90 s",
                          "1 of 1 probe(s) wrote no result within 90 s: burst-1a2b3c4d-1")


@pytest.mark.parametrize("text,seconds", [("1m58.2s", 118.2), ("850ms", 0.85), ("1h2m3s", 3723.0), ("2s", 2.0),
                                          ("", None), ("soon", None)])
def test_go_durations(text, seconds):
    assert burst_timeline.go_duration_s(text) == (pytest.approx(seconds) if seconds is not None else None)


def test_pull_duration_prefers_the_time_including_waiting():
    pulled = burst_timeline.pull_duration_s
    assert pulled('Successfully pulled image "x" in 2m4.9s (2m5.1s including waiting). Image size: '
                  '4203471040 bytes.') == pytest.approx(125.1)
    assert pulled('Successfully pulled image "x" in 850ms. Image size: 1 bytes.') == pytest.approx(0.85)


# --- prediction, budget, verdict -------------------------------------------------------------------------------------

def test_prediction_is_the_planners_for_the_probe_burst(dev_config):
    from components.planning import Burst, plan_workload

    p = burst_budget.predicted(dev_config, "slides", 2)
    plan = plan_workload(dev_config, dev_config.workloads[0], Burst(2)).patterns["scaledjob"]
    assert p.pattern == "scaledjob" and p.items == 2
    assert p.time_to_first_result_s == plan.time_to_first_result_s
    assert p.stages["image_pull"] == plan.stages["image_pull"] and p.stages["model_load"] == plan.stages["model_load"]
    assert burst_budget.default_workload(dev_config) == "slides"
    with pytest.raises(Exception, match="--burst-workload: 'nope'"):
        burst_budget.predicted(dev_config, "nope", 2)


def test_a_labs_model_is_predicted_with_its_fetch_as_the_worker_measures_it(dev_config):
    import dataclasses

    from components.config.stack import ModelSource
    from components.planning import Burst, plan_workload

    model = ModelSource(uri="s3://lab-models/net.pt2", sha256="a" * 64)
    cfg = dataclasses.replace(dev_config, workloads=tuple(
        dataclasses.replace(w, model=model) if w.name == "slides" else w for w in dev_config.workloads))
    plan = plan_workload(cfg, cfg.workloads[0], Burst(2)).patterns["scaledjob"]
    assert plan.stages["model_fetch"] > 0
    p = burst_budget.predicted(cfg, "slides", 2)
    assert p.stages["model_load"] == plan.stages["model_load"] + plan.stages["model_fetch"]


def test_budget_from_config_flags_or_the_cold_prediction(dev_config):
    p = burst_budget.predicted(dev_config, "slides", 2)
    default = burst_budget.budget_for(None, p)
    assert default.first_result_s == pytest.approx(round(p.cold_first_result_s * 1.5, 1))
    assert "no gpuburst:burstBudget" in default.source and "x 1.5" in default.source
    from_config = burst_budget.budget_for(BurstBudget(240, 270), p)
    assert (from_config.first_result_s, from_config.last_result_s, from_config.source) == (240, 270,
                                                                                           "gpuburst:burstBudget")
    flags = burst_budget.budget_for(BurstBudget(240, 270), p, last_override=500)
    assert (flags.first_result_s, flags.last_result_s) == (240, 500) and flags.source.startswith("--burst-")


def test_cold_burst_within_the_default_budget_passes_and_prints_the_timeline():
    p = PRED
    ok, lines = burst_budget.judge(_cold(), p, burst_budget.budget_for(None, p))
    assert ok, lines
    row = next(line for line in lines if line.startswith("ec2_ready"))
    assert row.split() == ["ec2_ready", "49.0", "s", "40.0", "s", "(+9", "s)"]
    row = next(line for line in lines if line.startswith("image_pull"))
    assert row.split()[1:] == ["125", "s", "(2m05s)", "121", "s", "(2m01s)", "(+4", "s)"]
    assert any(line.startswith("first result") and "within budget" in line for line in lines)
    assert any("planner's cold prediction x 1.5" in line for line in lines)


def test_budget_fail_names_first_and_last_result_and_the_stage_that_overran_most():
    p = PRED
    ok, lines = burst_budget.judge(_cold(), p, burst_budget.budget_for(BurstBudget(240, 270), p))
    assert not ok
    assert lines[0] == "time to first result 276 s exceeds the budget of 240 s by 36 s"
    assert lines[1] == "time to last result 285 s exceeds the budget of 270 s by 15 s"
    # ec2_ready 49 s vs 40 s is the largest overrun (image_pull +4, per_item +3, poll +1)
    assert lines[2] == "stage that overran its prediction most: ec2_ready 49 s vs 40 s predicted (+9 s)"


def test_warm_node_verdict_says_warm_node_and_cached():
    p = PRED
    ok, lines = burst_budget.judge(_warm(), p, burst_budget.budget_for(None, p))
    assert ok
    for stage in ("nodeclaim", "ec2_ready", "gpu_registered"):
        assert "warm node" in next(line for line in lines if line.startswith(stage))
    assert "0 s (cached)" in next(line for line in lines if line.startswith("image_pull"))


def test_missing_results_fail_with_the_problems():
    p = PRED
    t = burst_timeline.measured_timeline(SENT, items("burst/jobs_pending.json"), items("burst/pods_pending.json"),
                                items("burst/nodeclaims_pending.json"), items("burst/events_pending.json"),
                                _results((None, None), (None, None)), waited_s=600)
    ok, lines = burst_budget.judge(t, p, burst_budget.budget_for(None, p))
    assert not ok
    assert lines[0].startswith("time to first result: none within the wait")
    assert any(line.startswith("problem: pod slides-p3nd1-c7v2m: never scheduled within 600 s") for line in lines)


# --- the probe slide -------------------------------------------------------------------------------------------------

def test_probe_slide_opens_in_the_worker_at_half_a_micron(tmp_path):
    from worker.slides.detect import open_slide

    path = tmp_path / "probe.tif"
    path.write_bytes(burst_probes.probe_tiff(seed=3))
    assert path.stat().st_size < 4 * 2**20
    with open_slide(path) as slide:
        assert (slide.width, slide.height) == (1024, 1024)
        assert slide.mpp_x == pytest.approx(0.5) and slide.mpp_y == pytest.approx(0.5)
        assert len(slide.levels) >= 2
        assert slide.analysis_level(0.5, 0.25) is slide.levels[0]  # the built-in model's 0.5 µm/px: no resampling
        centre = slide.read_region(slide.levels[0], 384, 384, 256, 256)
        assert centre.shape[:2] == (256, 256) and centre[..., 1].mean() < 200  # tissue (pink/purple), not glass


def test_probe_message_is_the_worker_contract_and_not_a_keda_probe():
    from worker.messages import parse_message
    from worker.verify_probe import verify_probe_id

    p = burst_probes.make_probes("0a1b2c3d-aaaa-4bbb-8ccc-000000000000", 2, slides_bucket="gpuburst-dev-slides",
                          slides_prefix="slides/", results_bucket="gpuburst-dev-results", results_prefix="results")
    m = parse_message(p[1].body())
    assert str(m.slide) == ("s3://gpuburst-dev-slides/slides/gpuburst-verify/0a1b2c3d-aaaa-4bbb-8ccc-000000000000/"
                            "burst-0a1b2c3d-2.tif")
    assert str(m.summary_uri) == f"s3://gpuburst-dev-results/{p[1].summary_key}"
    assert p[1].summary_key.startswith("results/gpuburst-verify/")
    # the worker acknowledges (deletes unprocessed) anything with keda's attribute; a burst probe must be processed
    msg = {"Body": p[0].body(), "MessageAttributes": {burst_probes.BURST_ATTRIBUTE: {"StringValue": "x",
                                                                              "DataType": "String"}}}
    assert verify_probe_id(msg) is None


# --- the live flow: SQS and S3 on a real moto_server, the cluster in a FakeKube --------------------------------------

_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def _shift(obj, delta: timedelta):
    """A recorded object with every timestamp moved by delta (the burst replayed at another time)."""
    if isinstance(obj, dict):
        return {k: _shift(v, delta) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shift(v, delta) for v in obj]
    if isinstance(obj, str) and _ISO.match(obj):
        t = datetime.fromisoformat(obj[:-1] + "+00:00") + delta
        return t.strftime("%Y-%m-%dT%H:%M:%SZ")
    return obj


class WorldClock(FakeClock):
    """A FakeClock whose sleeps let the world (KEDA, Karpenter, the worker) act at given simulated times."""

    def __init__(self, start, acts):
        super().__init__(start)
        self.acts = sorted(acts, key=lambda a: a[0])

    def sleep(self, seconds):
        super().sleep(seconds)
        while self.acts and self.acts[0][0] <= self.t:
            self.acts.pop(0)[1]()


RESULT_AT_S = 280
"""When the fake worker writes the results, seconds after the burst (S3 stamps them with the real time)."""


def _world(tmp_path, *, worker=True, busy=False):
    s3, sqs = boto3.client("s3"), boto3.client("sqs")
    for b in ("gpuburst-dev-slides", "gpuburst-dev-results"):
        s3.create_bucket(Bucket=b)
    url = sqs.create_queue(QueueName="gpuburst-dev-slides")["QueueUrl"]
    if busy:
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"slide": "s3://a-bucket/x.svs", "output": "s3://b/o/"}))
    sj = load("scaledjob_ready.json")
    sj["spec"]["triggers"][0]["metadata"]["queueURL"] = url
    warm_nc = [nc for nc in items("burst/nodeclaims.json") if nc["metadata"]["name"] == "gpu-warm1"]
    kube = FakeKube(scaled_jobs=[sj], nodeclaims=warm_nc)
    # S3 stamps LastModified with the real time: start the simulated clock so that the results land at ~280 s.
    start = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=RESULT_AT_S)
    delta = start - NOW
    seen = {}

    def keda_and_karpenter():
        kube.jobs += _shift(items("burst/jobs_cold.json"), delta)
        kube.pods += _shift(items("burst/pods_cold.json"), delta)
        kube.nodeclaims += [_shift(nc, delta) for nc in items("burst/nodeclaims.json")
                            if nc["metadata"]["name"] != "gpu-warm1"]
        kube.events += _shift(items("burst/events_cold.json"), delta)

    def the_worker():
        from worker.slides.detect import open_slide

        for i in range(2):
            msgs = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], MaxNumberOfMessages=1)["Messages"]
            m = msgs[0]
            body = json.loads(m["Body"])
            seen.setdefault("attrs", []).append(m.get("MessageAttributes"))
            bucket, key = body["slide"][5:].split("/", 1)
            local = tmp_path / f"probe{i}.tif"
            local.write_bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
            with open_slide(local) as slide:
                seen.setdefault("mpp", []).append(slide.mpp_x)
            out_bucket, out_key = body["output"][5:].split("/", 1)
            summary = load(f"burst/summary_{i + 1}.json")
            summary["slide_id"] = body["slide_id"]
            for suffix in (".overlay.ome.tif", ".preview.png"):
                s3.put_object(Bucket=out_bucket, Key=f"{out_key}{body['slide_id']}{suffix}", Body=b"x")
            s3.put_object(Bucket=out_bucket, Key=f"{out_key}{body['slide_id']}.json", Body=json.dumps(summary))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    acts = [(31, keda_and_karpenter)] + ([(RESULT_AT_S - 5, the_worker)] if worker else [])
    return url, kube, WorldClock(start, acts), seen


def _settings(url, **kw):
    base = dict(namespace="gpuburst", workloads=[Workload("slides", url)], slides_bucket="gpuburst-dev-slides",
                results_bucket="gpuburst-dev-results", results_prefix="results/", stack="dev",
                pulumi_dir=str(ROOT), poll_interval_s=5, probe_extra_s=60, burst_probes=2)
    base.update(kw)
    return VerifySettings(**base)


def _leftovers(url):
    s3, sqs = boto3.client("s3"), boto3.client("sqs")
    keys = [o["Key"] for b in ("gpuburst-dev-slides", "gpuburst-dev-results")
            for o in s3.list_objects_v2(Bucket=b).get("Contents", [])]
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return keys, int(a["ApproximateNumberOfMessages"]) + int(a["ApproximateNumberOfMessagesNotVisible"])


def test_live_burst_measures_judges_and_cleans_up(aws, tmp_path):
    url, kube, clock, seen = _world(tmp_path)
    ctx = Context(settings=_settings(url, burst_first_result_s=420, burst_last_result_s=480), kube=kube,
                  clock=clock, aws_factory=lambda region: Aws(region))
    r = burst.run(ctx)
    assert r.status == "pass", r
    first = float(re.search(r"first result (\d+) s", r.summary).group(1))
    assert RESULT_AT_S - 3 <= first <= RESULT_AT_S + 3
    assert seen["mpp"] == [pytest.approx(0.5)] * 2  # the worker's own reader opened both probe slides
    assert all(burst_probes.BURST_ATTRIBUTE in a for a in seen["attrs"])
    ev = "\n".join(r.evidence)
    assert re.search(r"^ec2_ready\s+49\.0 s\s", ev, re.M), ev
    assert "NodeClaim gpu-x8v2c" in ev and "warm node" not in ev  # gpu-warm1 existed before: not a burst node
    assert "every probe message left the queue by +" in ev
    assert _leftovers(url) == ([], 0)
    assert clock.t < RESULT_AT_S + 10  # it stopped waiting once every result was there


def test_live_burst_nobody_answers_fails_within_the_bounded_wait_and_cleans_up(aws, tmp_path):
    url, kube, clock, _ = _world(tmp_path, worker=False)
    ctx = Context(settings=_settings(url, burst_last_result_s=100, burst_first_result_s=90), kube=kube, clock=clock,
                  aws_factory=lambda region: Aws(region))
    r = burst.run(ctx)
    assert r.status == "fail"
    assert r.summary.startswith("time to first result: none within the wait (budget 90 s)")
    assert 160 <= clock.t <= 161  # last-result budget + probe margin, never more
    ev = "\n".join(r.evidence)
    assert "2 of 2 probe(s) wrote no result within 160 s" in ev
    assert "cleanup: 2 probe message(s) still queued deleted by receipt handle" in ev
    assert _leftovers(url) == ([], 0)


def test_live_burst_refuses_a_busy_queue_and_sends_nothing(aws, tmp_path):
    url, kube, clock, _ = _world(tmp_path, busy=True)
    r = burst.run(Context(settings=_settings(url), kube=kube, clock=clock, aws_factory=lambda region: Aws(region)))
    assert r.status == "fail" and "is not idle (1 visible" in r.summary
    keys, queued = _leftovers(url)
    assert keys == [] and queued == 1 and clock.t == 0


def test_without_a_stack_config_the_check_fails_before_any_cost(clock):
    r = burst.run(Context(settings=VerifySettings(), kube=FakeKube(), clock=clock))
    assert r.status == "fail" and r.summary.startswith("no stack config for the prediction")


# --- the command line ------------------------------------------------------------------------------------------------

def test_check_burst_selects_only_it():
    out = io.StringIO()
    rc = cli.main(["--check", "burst", "--json"], kube=FakeKube(), clock=FakeClock(), stdout=out)
    results = json.loads(out.getvalue())["results"]
    assert [r["name"] for r in results] == ["burst"]
    assert rc == 1 and results[0]["summary"].startswith("no stack config")


def test_burst_is_opt_in_and_help_says_so():
    p = cli.build_parser()
    text = " ".join(p.format_help().split())
    assert "burst (opt-in: --check burst)" in text and "it costs GPU time" in text
    args = p.parse_args(["--check", "burst", "--burst-probes", "3", "--burst-workload", "slides",
                         "--burst-first-result-s", "200", "--slides-bucket", "sb", "--stack-file", "x.yaml"])
    s = cli.settings_from(args, {"slidesBucket": "from-stack"}, ".")
    assert (s.only, s.burst_probes, s.burst_workload, s.burst_first_result_s, s.slides_bucket, s.stack_file) == (
        ("burst",), 3, "slides", 200.0, "sb", "x.yaml")
    assert cli.settings_from(p.parse_args([]), {"slidesBucket": "from-stack"}, ".").slides_bucket == "from-stack"


def test_live_burst_a_refused_call_mid_run_is_error_and_still_cleans_up(aws, tmp_path):
    from components.verify.kube import KubeError

    url, kube, clock, _ = _world(tmp_path, worker=False)

    looks = []

    def forbidden(k, ns):  # the first look (before sending) is allowed; the RBAC change lands mid-run
        looks.append(ns)
        if len(looks) > 1:
            raise KubeError(f"list jobs in {ns}: 403 Forbidden: jobs.batch is forbidden")
    kube.on_list_jobs = forbidden
    r = burst.run(Context(settings=_settings(url), kube=kube, clock=clock, aws_factory=lambda region: Aws(region)))
    assert r.status == "error", r
    assert r.summary == ("the burst could not be measured: KubeError: list jobs in gpuburst: 403 Forbidden: jobs.batch "
                         "is forbidden")
    assert _leftovers(url) == ([], 0)

"""karpenter-health: the controller's own log since its start, and NodeClaims stuck before Initialized."""
from __future__ import annotations

import copy
from datetime import timedelta

import pytest
from verify_fakes import AMI_ERROR, NOW, FakeApiServer, FakeKube, karpenter_console_log, load, stuck_nodeclaim

from components.verify import karpenter_health as kh
from components.verify.context import Context
from components.verify.kube import connect
from components.verify.model import VerifySettings

POD = "karpenter-7d8f9c6b5-x2k9d"
ERROR = "resolving AMIs: no amis exist"


def _kube(log="karpenter_controller_ami_errors.log", **kw):
    return FakeKube(pods=[load("pod_karpenter_controller.json")], logs={POD: load(log)}, **kw)


def _run(kube, clock):
    return kh.run(Context(settings=VerifySettings(), kube=kube, clock=clock))


def _nodeclaim(name="gpu-x7k2p", minutes_old=20, initialized=False):
    created = (NOW - timedelta(minutes=minutes_old)).strftime("%Y-%m-%dT%H:%M:%SZ")
    conds = [{"type": "Launched", "status": "True"}, {"type": "Registered", "status": "True"},
             {"type": "Initialized", "status": "True" if initialized else "Unknown"}]
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "creationTimestamp": created,
                         "labels": {"karpenter.sh/nodepool": "gpu", "node.kubernetes.io/instance-type": "g5.xlarge"}},
            "status": {"conditions": conds, "nodeName": "ip-10-0-12-34.ec2.internal"}}


def test_fifteen_reconcile_errors_fail_naming_the_pod_the_nodeclass_and_the_error(clock):
    r = _run(_kube(), clock)
    assert r.status == "fail"
    for part in (f"kube-system/{POD}", "EC2NodeClass gpu", ERROR, "x15", "nodeclass.status"):
        assert part in r.summary, part
    first = next(e for e in r.evidence if e.strip().startswith("first:"))
    last = next(e for e in r.evidence if e.strip().startswith("last:"))
    assert '"2026-11-02T09:45:30.100Z"' in first and '"2026-11-02T09:59:30.114Z"' in last
    assert '"message":"Reconciler error"' in first and f'"error":"{ERROR}"' in first
    assert all(len(e) < kh.QUOTE_CHARS + 20 for e in (first, last))  # trimmed
    assert any("15 ERROR line(s)" in e and "understood (32 JSON)" in e for e in r.evidence)


def test_a_healthy_log_passes_with_a_one_line_summary(clock):
    r = _run(_kube("karpenter_controller_healthy.log", nodeclaims=[_nodeclaim(initialized=True)]), clock)
    assert r.status == "pass", r.summary
    assert POD in r.summary and "no ERROR line" in r.summary and "1 NodeClaim(s)" in r.summary
    assert "\n" not in r.summary


def test_errors_before_the_start_do_not_count():
    log = load("karpenter_controller_ami_errors.log")
    pod = load("pod_karpenter_controller.json")
    since = NOW - timedelta(minutes=5)  # 09:55: the last five errors only
    r = kh.judge_karpenter_health("kube-system", [pod], {POD: log}, [], [], NOW, since=since)
    assert r.status == "fail" and "x5" in r.summary and "since 2026-11-02T09:55:00+00:00" in r.summary
    later = kh.judge_karpenter_health("kube-system", [pod], {POD: log}, [], [], NOW, since=NOW)
    assert later.status == "pass"


def test_errors_are_grouped_by_controller_and_error():
    lines = [
        '{"level":"ERROR","time":"2026-11-02T09:50:00Z","logger":"controller","message":"Reconciler error",'
        '"controller":"nodepool.readiness","NodePool":{"name":"gpu"},"error":"EC2NodeClass not ready"}',
        '{"level":"ERROR","time":"2026-11-02T09:51:00Z","logger":"controller","message":"Reconciler error",'
        '"controller":"nodepool.readiness","NodePool":{"name":"gpu"},"error":"EC2NodeClass not ready"}',
        '{"level":"ERROR","time":"2026-11-02T09:52:00Z","logger":"controller","message":"could not launch nodeclaim",'
        '"controller":"nodeclaim.lifecycle","NodeClaim":{"name":"gpu-abcde"},"error":"InsufficientInstanceCapacity"}',
        "2026-11-02T09:53:00.000Z\tERROR\tcontroller\tReconciler error\t{\"controller\":\"nodepool.readiness\","
        "\"NodePool\":{\"name\":\"gpu\"},\"error\":\"EC2NodeClass not ready\"}",
        '{"level":"INFO","time":"2026-11-02T09:54:00Z","message":"fine"}',
        "not json at all",
    ]
    r = kh.judge_karpenter_health("kube-system", [load("pod_karpenter_controller.json")], {POD: "\n".join(lines)},
                                  [], [], NOW)
    assert r.status == "fail"
    assert r.summary.startswith("4 ERROR line(s) since its start: 'EC2NodeClass not ready' x3 on NodePool gpu "
                                "(controller nodepool.readiness, +1 more error group(s))")
    assert any("6 log line(s) read" in e and "5 understood (4 JSON, 1 console)" in e and "1 not understood" in e
               for e in r.evidence)
    assert any("controller nodeclaim.lifecycle (NodeClaim gpu-abcde)" in e for e in r.evidence)


def test_a_nodeclaim_stuck_before_initialized_fails_with_its_event_reasons(clock):
    events = [{"metadata": {"namespace": "default"}, "type": "Warning", "reason": "FailedInitialization",
               "message": "nvidia.com/gpu not registered", "count": 7,
               "involvedObject": {"kind": "NodeClaim", "name": "gpu-x7k2p"}}]
    kube = _kube("karpenter_controller_healthy.log", nodeclaims=[_nodeclaim(), _nodeclaim("gpu-young", 2)],
                 events=events)
    r = _run(kube, clock)
    assert r.status == "fail"
    assert r.summary == ("1 NodeClaim(s) stuck past 900 s: gpu-x7k2p (no instance, never Initialized: "
                         "status Unknown, no reason)")
    stuck = next(e for e in r.evidence if e.startswith("NodeClaim gpu-x7k2p"))
    assert "(NodePool gpu, g5.xlarge, instance none launched, age 20m00s)" in stuck
    assert "Initialized=Unknown" in stuck and "Warning FailedInitialization x7" in stuck
    assert any(e.startswith("NodeClaim gpu-young") and "not Initialized" not in e for e in r.evidence)


def test_no_controller_pod_fails(clock):
    r = _run(FakeKube(), clock)
    assert r.status == "fail" and "no Karpenter controller pod in namespace kube-system" in r.summary


def test_the_container_start_counts_not_the_pod_creation():
    pod = copy.deepcopy(load("pod_karpenter_controller.json"))
    pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] = "2026-11-02T09:58:00Z"  # restarted
    r = kh.judge_karpenter_health("kube-system", [pod], {POD: load("karpenter_controller_ami_errors.log")}, [], [],
                                  NOW)
    assert "x2" in r.summary  # 09:58:30 and 09:59:30


def test_run_over_the_wire_reads_the_log_nodeclaims_and_events(tmp_path, clock):
    kube = _kube(nodeclaims=[_nodeclaim()])
    with FakeApiServer(kube) as server:
        live = connect(str(server.kubeconfig(tmp_path)), connect_timeout_s=2)
        r = _run(live, clock)
        requests = list(server.requests)
    assert r.status == "fail" and "EC2NodeClass gpu" in r.summary and "gpu-x7k2p" in r.summary
    assert f"GET /api/v1/namespaces/kube-system/pods/{POD}/log" in requests
    assert "GET /apis/karpenter.sh/v1/nodeclaims" in requests and "GET /api/v1/namespaces/default/events" in requests


def test_the_since_setting_reaches_the_check_and_the_command_line_parses_it(clock, tmp_path):
    from components.verify import cli

    all_errors = _run(_kube(), clock)
    assert all_errors.status == "fail" and "x15" in all_errors.summary
    since = kh.run(Context(settings=VerifySettings(since=NOW - timedelta(minutes=5)), kube=_kube(), clock=clock))
    assert since.status == "fail" and "x5" in since.summary and "since 2026-11-02T09:55:00+00:00" in since.summary
    args = cli.build_parser().parse_args(["--since", "2026-11-02T09:55:00Z"])
    assert cli.settings_from(args, {}, str(tmp_path)).since == NOW - timedelta(minutes=5)
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--since", "2026-11-02 09:55"])  # no zone: refused, never guessed


# --- every layout Karpenter's log is written in (the seed's incident: console lines passed as health) ---------------

@pytest.mark.parametrize("columns", [(), ("logger",), ("logger", "caller")],
                         ids=["no logger column", "logger", "logger and caller"])
def test_twelve_reconcile_errors_in_each_console_layout_fail_naming_the_nodeclass_and_the_error(clock, columns):
    kube = FakeKube(pods=[load("pod_karpenter_controller.json")], logs={POD: karpenter_console_log(columns)})
    r = _run(kube, clock)
    assert r.status == "fail", r
    assert r.summary.startswith(f"12 ERROR line(s) since its start: {AMI_ERROR!r} x12 on EC2NodeClass gpu "
                                "(controller nodeclass)"), r.summary
    assert "26 log line(s) read since 2026-11-02T09:45:05+00:00 (the container start): 26 understood (26 " \
           "console), 0 not understood; 12 ERROR line(s)" in r.evidence[0]
    first = next(e for e in r.evidence if e.strip().startswith("first:"))
    assert '"time":"2026-11-02T09:48:30.100Z"' in first and '"EC2NodeClass":{"name":"gpu"}' in first
    assert "caller" not in first and "reconcileID" not in first  # noise left out of the quote


def test_a_log_of_only_unreadable_lines_is_an_error_never_a_pass(clock):
    text = "\n".join(["time=2026-11-02T09:48:30Z level=error msg=\"Reconciler error\" EC2NodeClass=gpu",
                      "E1102 09:48:30.100000       1 controller.go:347] Reconciler error", "\t", ""] * 4)
    r = _run(FakeKube(pods=[load("pod_karpenter_controller.json")], logs={POD: text}), clock)
    assert r.status == "error", r
    assert r.summary.startswith(f"could not read kube-system/{POD}'s log: none of its 8 line(s) is JSON or zap's "
                                "console layout")
    assert "8 log line(s) read" in r.evidence[1] and "0 understood (no entry), 8 not understood" in r.evidence[1]


def test_unreadable_lines_that_mention_an_error_keep_a_healthy_log_from_passing(clock):
    text = load("karpenter_controller_healthy.log") + "panic: runtime error: invalid memory address\n"
    r = _run(FakeKube(pods=[load("pod_karpenter_controller.json")], logs={POD: text}), clock)
    assert r.status == "error" and "1 line(s) not understood mention an error" in r.summary, r
    harmless = load("karpenter_controller_healthy.log") + "a line of some other layout\n"
    r = _run(FakeKube(pods=[load("pod_karpenter_controller.json")], logs={POD: harmless}), clock)
    assert r.status == "pass", r
    assert any("1 not understood" in e for e in r.evidence)
    assert any(e.startswith("  not understood (first of 1): 'a line of some other layout'") for e in r.evidence)


def test_defects_outrank_an_unreadable_pod_in_the_status_but_both_are_shown(clock):
    second = copy.deepcopy(load("pod_karpenter_controller.json"))
    second["metadata"]["name"] = "karpenter-7d8f9c6b5-other"
    kube = FakeKube(pods=[load("pod_karpenter_controller.json"), second],
                    logs={POD: karpenter_console_log(("logger",)), "karpenter-7d8f9c6b5-other": "garbage\n"})
    r = _run(kube, clock)
    assert r.status == "fail" and "12 ERROR line(s)" in r.summary
    assert r.evidence[0].startswith("kube-system/karpenter-7d8f9c6b5-other's log: none of its 1 line(s)")


def test_a_stuck_nodeclaim_names_its_instance_its_reason_and_the_step_it_never_reached(clock):
    kube = _kube("karpenter_controller_healthy.log", nodeclaims=[stuck_nodeclaim()])
    r = _run(kube, clock)
    assert r.status == "fail"
    assert r.summary == ("1 NodeClaim(s) stuck past 900 s: gpu-x7k2p (i-0a1b2c3d4e5f60718, never "
                         "Registered: NodeNotFound)")
    line = next(e for e in r.evidence if e.startswith("NodeClaim gpu-x7k2p"))
    assert "instance i-0a1b2c3d4e5f60718" in line
    assert "Registered=Unknown (NodeNotFound: Node not registered with cluster)" in line
    assert line.endswith("— stuck: never Registered after 900 s")


def test_ten_stuck_nodeclaims_and_errors_keep_the_summary_short_with_the_counts_first(clock):
    claims = [stuck_nodeclaim(f"gpu-{i:05d}", instance=f"i-0{i:016x}") for i in range(10)]
    kube = FakeKube(pods=[load("pod_karpenter_controller.json")], nodeclaims=claims,
                    logs={POD: karpenter_console_log(("logger", "caller"))})
    r = _run(kube, clock)
    assert r.status == "fail" and len(r.summary) <= 200, r.summary
    assert r.summary.startswith("12 ERROR line(s) since its start: ")
    assert r.summary.endswith(" | 10 NodeClaim(s) stuck past 900 s: gpu-00000 (i-00000000000000000, never "
                              "Registered: NodeNotFound) +9 more")
    assert sum(1 for e in r.evidence if "— stuck: never Registered" in e) == 10  # every one, with its instance

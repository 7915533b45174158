"""keda: the operator's version, TriggerAuthentications against the live CRD, ScaledJob health, and the probe."""
from __future__ import annotations

import io
import json

import boto3
import pytest
from verify_fakes import NOW, FakeKube, items, load, load_crd

from components import catalogue
from components.verify import keda, keda_identity, keda_probe
from components.verify.aws import Aws
from components.verify.context import Context
from components.verify.model import VerifySettings

TA_2_20 = "keda-v2.20.2-triggerauthentications.yaml"
CTA_2_20 = "keda-v2.20.2-clustertriggerauthentications.yaml"


@pytest.fixture
def ta_crd(upstream_crds):
    """The KEDA 2.20.2 TriggerAuthentication CRD, standing for the CRD read from the cluster."""
    return load_crd(upstream_crds, TA_2_20)


def test_aws_eks_against_the_2_20_crd_fails_with_both_pieces_of_evidence(ta_crd):
    problems, evidence = keda.judge_trigger_authentication(load("triggerauthentication_aws_eks.json"), ta_crd,
                                                           "2.20.2")
    # The live enum still accepts aws-eks ...
    assert "aws-eks" in keda.provider_enum(keda.served_schema(ta_crd, "v1alpha1"))
    assert any("live CRD triggerauthentications.keda.sh (v1alpha1) accepts it" in e for e in evidence)
    # ... and the catalogue refuses it, with its reason.
    assert len(problems) == 1
    assert "TriggerAuthentication gpuburst/keda-aws" in problems[0]
    assert problems[0].endswith(catalogue.keda_provider_problem("aws-eks", "2.20.2"))


def test_removed_provider_fails_the_live_schema(ta_crd):
    problems, _ = keda.judge_trigger_authentication(load("triggerauthentication_aws_kiam.json"), ta_crd, "2.20.2")
    assert any("schema: spec.podIdentity.provider: 'aws-kiam' is not one of" in p for p in problems)
    assert any("not accepted by KEDA 2.20.2" in p for p in problems)


def test_aws_provider_with_role_arn_is_valid(ta_crd):
    problems, evidence = keda.judge_trigger_authentication(load("triggerauthentication_aws.json"), ta_crd, "2.20.2")
    assert problems == []
    assert any("valid against the live CRD" in e for e in evidence)


def test_unserved_api_version_fails(ta_crd):
    ta = load("triggerauthentication_aws.json")
    ta["apiVersion"] = "keda.sh/v1beta1"
    problems, _ = keda.judge_trigger_authentication(ta, ta_crd, "2.20.2")
    assert problems and "not served" in problems[0]


def test_cluster_trigger_authentication_is_judged_by_its_own_crd(upstream_crds):
    cta = load("triggerauthentication_aws_eks.json")
    cta["kind"] = "ClusterTriggerAuthentication"
    del cta["metadata"]["namespace"]
    problems, _ = keda.judge_trigger_authentication(cta, load_crd(upstream_crds, CTA_2_20), "2.20.2")
    assert problems and problems[0].startswith("ClusterTriggerAuthentication keda-aws")


def test_scaledjob_ready_false_trigger_error_fails_naming_it():
    problems, _ = keda.scaledjob_problems(load("scaledjob_trigger_error.json"), [], [], {"keda-aws"}, set())
    assert problems == ["ScaledJob gpuburst/slides: Ready=False reason TriggerError: Triggers defined in ScaledJob "
                        "are not working correctly"]


def test_healthy_scaledjob_has_no_problems():
    problems, evidence = keda.scaledjob_problems(load("scaledjob_ready.json"), [], [], {"keda-aws"}, set())
    assert problems == []
    assert "Ready=True (ScaledJobReady)" in evidence[0]


def test_recent_warning_events_and_operator_errors_fail_a_ready_scaledjob():
    sj = load("scaledjob_ready.json")
    warnings = keda.recent_warnings(items("events_scaledjob_warnings.json"), "ScaledJob", "slides", NOW, 900)
    assert [w["reason"] for w in warnings] == ["KEDAScalerFailed"]  # last week's is not recent, Normal is not one
    lines = keda.operator_errors(load("keda_operator.log"), "gpuburst", "slides")
    assert len(lines) == 2
    problems, _ = keda.scaledjob_problems(sj, warnings, lines, {"keda-aws"}, set())
    assert any("Warning event KEDAScalerFailed x58" in p for p in problems)
    assert any("keda-operator logged 2 error(s)" in p and "no role found" in p for p in problems)


def test_missing_trigger_authentication_is_named():
    problems, _ = keda.scaledjob_problems(load("scaledjob_ready.json"), [], [], set(), set())
    assert problems == ["ScaledJob gpuburst/slides: trigger authenticationRef TriggerAuthentication 'keda-aws' "
                        "does not exist"]


def test_paused_scaledjob_fails():
    sj = load("scaledjob_ready.json")
    sj["metadata"]["annotations"] = {"autoscaling.keda.sh/paused": "true"}
    problems, _ = keda.scaledjob_problems(sj, [], [], {"keda-aws"}, set())
    assert problems and "paused" in problems[0]


def test_operator_version_from_labels_and_image():
    found = keda.workload_versions(load("deployment_keda_2.20.2.json"), "keda")
    assert set(found.values()) == {"2.20.2"} and len(found) == 3


def test_static_judgement_of_the_whole_namespace(ta_crd):
    version, problems, evidence, per_sj = keda.judge_keda_static(
        [load("deployment_keda_2.20.2.json")], ta_crd, None, [load("triggerauthentication_aws.json")], [],
        [load("scaledjob_ready.json")], [], "", NOW, 900, "gpuburst")
    assert version == "2.20.2" and problems == [] and per_sj == {"slides": []}


def test_old_operator_fails_the_catalogue(ta_crd):
    dep = load("deployment_keda_2.20.2.json")
    for k in ("app.kubernetes.io/version", "helm.sh/chart"):
        dep["metadata"]["labels"].pop(k)
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/kedacore/keda:2.15.1"
    _, problems, _, _ = keda.judge_keda_static([dep], ta_crd, None, [], [], [load("scaledjob_ready.json")], [], "",
                                               NOW, 900, "gpuburst")
    assert catalogue.keda_version_problem("2.15.1") in problems


# --- the probe, against SQS on a real moto_server -------------------------------------------------------------------

def _keda_job(sj, name="slides-x7p2q", started=False):
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": "gpuburst", "uid": "uid-" + name,
                        "labels": {"scaledjob.keda.sh/name": sj["metadata"]["name"]},
                        "ownerReferences": [{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob", "controller": True,
                                             "name": sj["metadata"]["name"], "uid": sj["metadata"]["uid"]}]},
           "spec": {}, "status": {"active": 1}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name + "-pod", "namespace": "gpuburst", "labels": {"job-name": name}},
           "spec": {}, "status": {"phase": "Running" if started else "Pending", "containerStatuses": [
               {"name": "worker",
                "state": {"running": {}} if started else {"waiting": {"reason": "ContainerCreating"}}}]}}
    return job, pod


def _setup(sqs, *, fifo=False, old_job=True):
    name = "gpuburst-dev-slides" + (".fifo" if fifo else "")
    attrs = {"FifoQueue": "true"} if fifo else {}
    url = sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
    sj = load("scaledjob_ready.json")
    sj["spec"]["triggers"][0]["metadata"]["queueURL"] = url
    kube = FakeKube(scaled_jobs=[sj])
    if old_job:  # a Job from yesterday must not count as the probe's
        job, _ = _keda_job(sj, "slides-old00")
        kube.jobs.append(job)
    return url, sj, kube


class NoReceiveAws(Aws):
    """The real Aws (on moto) whose calls that could touch a message other than verify's own fail the test: SQS
    cannot limit ReceiveMessage, DeleteMessage or ChangeMessageVisibility to one message, so the probe never makes
    them. Records the SQS calls it does make."""

    calls: list[str] = []

    def queue_attributes(self, queue_url, names):
        NoReceiveAws.calls.append("sqs:GetQueueAttributes")
        return super().queue_attributes(queue_url, names)

    def send_message(self, *a, **kw):
        NoReceiveAws.calls.append("sqs:SendMessage")
        return super().send_message(*a, **kw)

    def receive_messages(self, *a, **kw):
        raise AssertionError("the keda probe received from a work queue")

    def delete_message(self, *a, **kw):
        raise AssertionError("the keda probe deleted a message")

    def release_message(self, *a, **kw):
        raise AssertionError("the keda probe changed a message's visibility")


def _ctx(kube, clock):
    NoReceiveAws.calls = []
    return Context(settings=VerifySettings(namespace="gpuburst", poll_interval_s=5, probe_extra_s=60), kube=kube,
                   clock=clock, aws_factory=lambda region: NoReceiveAws(region))


def _keda_creates_job_on_look(kube, sj, look, started=False):
    state = {"n": 0}

    def hook(k, ns):
        state["n"] += 1
        if state["n"] == look:
            job, pod = _keda_job(sj, started=started)
            k.jobs.append(job)
            k.pods.append(pod)
    kube.on_list_jobs = hook


def _visible(sqs, url):
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return int(a["ApproximateNumberOfMessages"]) + int(a["ApproximateNumberOfMessagesNotVisible"])


def test_probe_creates_a_job_and_both_are_left_for_the_worker(aws, clock):
    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    _keda_creates_job_on_look(kube, sj, look=3)  # look 1 = before the probe; KEDA reacts a poll later
    ctx = _ctx(kube, clock)
    ok, verdict, evidence = keda_probe._probe(ctx, sj, keda_probe.sqs_triggers(sj)[0])
    assert ok, evidence
    assert "Job slides-x7p2q appeared" in verdict
    assert NoReceiveAws.calls == ["sqs:GetQueueAttributes", "sqs:SendMessage"]  # nothing else, ever
    assert _visible(sqs, url) == 1  # the probe, for the Job's worker to acknowledge
    assert any(e.startswith("probe ") and "left on" in e and "for the worker to acknowledge" in e for e in evidence)
    assert any("Job gpuburst/slides-x7p2q: left to run" in e for e in evidence)
    assert kube.deleted == []  # its worker is what takes the probe off the queue


def test_probe_message_is_marked_for_the_worker(aws, clock):
    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    seen: dict = {}

    def look_like_the_worker(k, ns):
        if not seen:  # the first look after sending, before cleanup: what would the worker receive?
            msgs = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], VisibilityTimeout=0)
            seen.update((msgs.get("Messages") or [{}])[0])

    kube.on_list_jobs = lambda k, ns: look_like_the_worker(k, ns) if kube.jobs_listed_once else \
        setattr(kube, "jobs_listed_once", True)
    kube.jobs_listed_once = False
    keda_probe._probe(_ctx(kube, clock), sj, keda_probe.sqs_triggers(sj)[0])
    probe_id = seen["MessageAttributes"][keda_probe.PROBE_ATTRIBUTE]["StringValue"]
    assert json.loads(seen["Body"]) == {"verify_probe": probe_id}
    assert _visible(sqs, url) == 1


def test_no_job_after_the_deadline_fails_and_the_probe_waits_for_a_worker(aws, clock):
    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    ok, verdict, evidence = keda_probe._probe(_ctx(kube, clock), sj, keda_probe.sqs_triggers(sj)[0])
    assert not ok
    assert verdict == (f"ScaledJob gpuburst/slides: created no Job within 90 s (pollingInterval 30 s + margin) of a "
                       f"probe message on {url}")
    assert 90 <= clock.t <= 91
    assert _visible(sqs, url) == 1  # the next worker KEDA starts acknowledges it; verify never receives
    assert kube.deleted == []


def test_busy_queue_real_work_is_never_received_and_nothing_is_deleted(aws, clock):
    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"slide": "s3://slides/a.tif", "output": "s3://r/o/"}))
    _keda_creates_job_on_look(kube, sj, look=2)
    ok, _, evidence = keda_probe._probe(_ctx(kube, clock), sj, keda_probe.sqs_triggers(sj)[0])
    assert ok
    assert any("for the worker to acknowledge" in e for e in evidence)
    assert any("left to run" in e for e in evidence) and kube.deleted == []
    msgs = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["ApproximateReceiveCount"],
                               MessageAttributeNames=["All"])["Messages"]
    real = [m for m in msgs if keda_probe.PROBE_ATTRIBUTE not in (m.get("MessageAttributes") or {})]
    assert len(real) == 1 and real[0]["Attributes"]["ApproximateReceiveCount"] == "1"  # verify never received it
    assert len(msgs) == 2  # the probe stays for the worker to acknowledge


def test_probe_consumed_by_a_started_worker_leaves_the_job_running(aws, clock):
    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    state = {"n": 0}

    def hook(k, ns):
        state["n"] += 1
        if state["n"] == 2:  # KEDA made a Job; its worker took the probe and acknowledged it (deleted it)
            for m in sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"]).get("Messages", []):
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            job, pod = _keda_job(sj, started=True)
            k.jobs.append(job)
            k.pods.append(pod)
            probe_id = m["MessageAttributes"][keda_probe.PROBE_ATTRIBUTE]["StringValue"]
            k.logs[pod["metadata"]["name"]] = f"level=info event=verify.probe detail=verify probe {probe_id} " \
                                              "acknowledged\n"
    kube.on_list_jobs = hook
    ok, _, evidence = keda_probe._probe(_ctx(kube, clock), sj, keda_probe.sqs_triggers(sj)[0])
    assert ok
    assert _visible(sqs, url) == 0  # the worker acknowledged it
    assert any("pod slides-x7p2q-pod logged `verify probe" in e and "by its message" in e for e in evidence)
    assert kube.deleted == []


def test_fifo_queue_probe_uses_its_own_message_group(aws, clock):
    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs, fifo=True)
    groups = []

    def hook(k, ns):
        if not groups:
            for m in sqs.receive_message(QueueUrl=url, AttributeNames=["MessageGroupId"],
                                         VisibilityTimeout=0).get("Messages", []):
                groups.append(m["Attributes"]["MessageGroupId"])
    kube.on_list_jobs = hook
    keda_probe._probe(_ctx(kube, clock), sj, keda_probe.sqs_triggers(sj)[0])
    assert groups and groups[0].startswith("gpuburst-verify-")


def test_run_end_to_end_aws_eks_fails_and_healthy_passes(aws, clock, upstream_crds):
    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    kube.deployments = [load("deployment_keda_2.20.2.json")]
    kube.crds = {keda.TA_CRD: load_crd(upstream_crds, TA_2_20), keda.CTA_CRD: load_crd(upstream_crds, CTA_2_20)}
    kube.tas = [load("triggerauthentication_aws_eks.json")]
    _keda_creates_job_on_look(kube, sj, look=3)
    r = keda.run(_ctx(kube, clock))
    assert r.status == "fail"
    assert r.summary.startswith("TriggerAuthentication gpuburst/keda-aws: podIdentity.provider 'aws-eks' is deprecated")

    url, sj, kube2 = url, sj, kube
    kube2.tas = [load("triggerauthentication_aws.json")]
    _keda_creates_job_on_look(kube2, sj, look=3)
    kube2.jobs = [j for j in kube2.jobs if j["metadata"]["name"] == "slides-old00"]
    r = keda.run(_ctx(kube2, clock))
    assert r.status == "pass", r
    assert "created a Job for a probe message" in r.summary


def test_run_skips_the_probe_of_an_unhealthy_scaledjob(aws, clock, upstream_crds):
    kube = FakeKube(scaled_jobs=[load("scaledjob_trigger_error.json")],
                    deployments=[load("deployment_keda_2.20.2.json")],
                    crds=[load_crd(upstream_crds, TA_2_20)], tas=[load("triggerauthentication_aws.json")])
    r = keda.run(_ctx(kube, clock))
    assert r.status == "fail" and "TriggerError" in r.summary
    assert any("probe not sent" in e for e in r.evidence)
    assert clock.t == 0


def test_scaledjob_watching_a_queue_outside_the_stack_fails(aws, clock, upstream_crds):
    from components.verify.model import Workload

    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    kube.deployments = [load("deployment_keda_2.20.2.json")]
    kube.crds = {keda.TA_CRD: load_crd(upstream_crds, TA_2_20)}
    kube.tas = [load("triggerauthentication_aws.json")]
    _keda_creates_job_on_look(kube, sj, look=3)
    ctx = _ctx(kube, clock)
    ctx.settings.workloads = [Workload("slides", "https://sqs.us-east-1.amazonaws.com/123456789012/the-real-one")]
    r = keda.run(ctx)
    assert r.status == "fail"
    assert r.summary.startswith(f"ScaledJob gpuburst/slides watches {url}, which is not one of the stack's queues")


# --- a probe that cannot be confused ----------------------------------------------------------------------------------

def test_the_probe_ignores_a_foreign_job(aws, clock):
    """Jobs that appear after the send but are not the ScaledJob's own (a hand-made Job with KEDA's label, a Job of
    a same-named ScaledJob that was recreated, a Job created before the send) never count as the probe's."""
    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    state = {"n": 0}

    def hook(k, ns):
        state["n"] += 1
        if state["n"] == 2:
            by_hand, _ = _keda_job(sj, "slides-byhand")
            del by_hand["metadata"]["ownerReferences"]  # only the label
            other, _ = _keda_job(sj, "slides-other")
            other["metadata"]["ownerReferences"][0]["uid"] = "uid-of-a-deleted-scaledjob"
            early, _ = _keda_job(sj, "slides-early")
            early["metadata"]["creationTimestamp"] = "2026-11-02T09:59:50Z"  # 10 s before the send (NOW)
            k.jobs += [by_hand, other, early]
    kube.on_list_jobs = hook
    ok, verdict, _ = keda_probe._probe(_ctx(kube, clock), sj, keda_probe.sqs_triggers(sj)[0])
    assert not ok and "created no Job within 90 s" in verdict
    assert kube.deleted == []  # nobody else's Job is touched


def test_a_job_created_just_after_the_send_counts(aws, clock):
    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    state = {"n": 0}

    def hook(k, ns):
        state["n"] += 1
        if state["n"] == 2:
            job, pod = _keda_job(sj, "slides-fresh")
            job["metadata"]["creationTimestamp"] = "2026-11-02T10:00:01Z"
            k.jobs.append(job)
            k.pods.append(pod)
    kube.on_list_jobs = hook
    ok, verdict, _ = keda_probe._probe(_ctx(kube, clock), sj, keda_probe.sqs_triggers(sj)[0])
    assert ok and "Job slides-fresh appeared" in verdict


def test_activation_threshold_is_explained_and_no_probe_is_sent(aws, clock):
    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    sj["spec"]["triggers"][0]["metadata"]["activationQueueLength"] = "1"
    ok, verdict, evidence = keda_probe._probe(_ctx(kube, clock), sj, keda_probe.sqs_triggers(sj)[0])
    assert ok is None
    assert verdict.startswith("ScaledJob gpuburst/slides: activationQueueLength 1: the queue would hold 1 message(s)")
    assert _visible(sqs, url) == 0 and clock.t == 0  # nothing sent, nothing waited for


def test_activation_below_the_queue_length_with_the_probe_still_probes():
    sj = load("scaledjob_ready.json")
    trigger = dict(keda_probe.sqs_triggers(sj)[0], activation=1)
    assert keda_probe.probe_blocked(sj, trigger, {"ApproximateNumberOfMessages": "1"}, []) is None
    trigger["in_flight"] = False
    assert keda_probe.probe_blocked(sj, trigger, {"ApproximateNumberOfMessagesNotVisible": "3"}, []) is not None


def test_a_scaledjob_at_max_replicas_is_explained_not_failed(aws, clock, upstream_crds):
    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs, old_job=False)
    for i in range(sj["spec"]["maxReplicaCount"]):
        job, _ = _keda_job(sj, f"slides-busy{i}")
        kube.jobs.append(job)
    done, _ = _keda_job(sj, "slides-done")
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    kube.jobs.append(done)
    kube.deployments = [load("deployment_keda_2.20.2.json")]
    kube.crds = {keda.TA_CRD: load_crd(upstream_crds, TA_2_20)}
    kube.tas = [load("triggerauthentication_aws.json")]
    kube.scaled_jobs = [sj]
    r = keda.run(_ctx(kube, clock))
    assert r.status == "skipped", r
    assert r.summary.startswith("ScaledJob gpuburst/slides: at maxReplicaCount 4 (4 of its Jobs running")
    assert _visible(sqs, url) == 0
    kube.jobs = kube.jobs[1:]  # one finished: room for the probe's Job again
    assert keda_probe.probe_blocked(sj, keda_probe.sqs_triggers(sj)[0], {}, kube.jobs) is None


def test_a_refused_sqs_call_of_the_probe_is_error_not_fail(aws, clock, upstream_crds):
    from components.verify.aws import AwsError

    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    kube.deployments = [load("deployment_keda_2.20.2.json")]
    kube.crds = {keda.TA_CRD: load_crd(upstream_crds, TA_2_20)}
    kube.tas = [load("triggerauthentication_aws.json")]

    class Refused(Aws):
        def send_message(self, *a, **kw):
            raise AwsError("sqs:SendMessage", url, "AccessDenied", "not authorized")
    ctx = _ctx(kube, clock)
    ctx.aws_factory = lambda region: Refused(region)
    r = keda.run(ctx)
    assert r.status == "error", r
    assert "could not run: sqs:SendMessage" in r.summary and "AccessDenied" in r.summary


# --- identityOwner, live ----------------------------------------------------------------------------------------------

def _with_owner(trigger_owner, ta_owner=None, role=True):
    sj = load("scaledjob_ready.json")
    sj["spec"]["triggers"][0]["metadata"]["identityOwner"] = trigger_owner
    ta = load("triggerauthentication_aws.json")
    if not role:
        ta["spec"]["podIdentity"].pop("roleArn", None)
    if ta_owner:
        ta["spec"]["podIdentity"]["identityOwner"] = ta_owner
    return sj, ta


def test_identity_owner_mismatch_fails_naming_both(ta_crd):
    sj, ta = _with_owner("operator", "workload", role=False)
    _, problems, _, per_sj = keda.judge_keda_static([load("deployment_keda_2.20.2.json")], ta_crd, None, [ta], [],
                                                    [sj], [], "", NOW, 900, "gpuburst")
    assert len(problems) == 1 and per_sj["slides"] == problems
    assert problems[0].startswith("ScaledJob gpuburst/slides: trigger 0 metadata.identityOwner 'operator' is ignored "
                                  "by KEDA 2.20.2: TriggerAuthentication gpuburst/keda-aws (provider 'aws') decides, "
                                  "and it uses workload — not 'keda'")


def test_identity_owner_against_a_role_arn_fails():
    sj, ta = _with_owner("keda")
    problems, _ = keda_identity.identity_owner_problems([sj], [ta], [], "2.20.2")
    assert "it uses role arn:aws:iam::" in problems["slides"][0]


def test_identity_owner_that_agrees_is_only_noted():
    sj, ta = _with_owner("pod", "workload", role=False)
    problems, evidence = keda_identity.identity_owner_problems([sj], [ta], [], "2.20.2")
    assert problems == {} and any("deprecated since KEDA 2.13" in e for e in evidence)
    sj, ta = _with_owner("keda", role=False)  # neither roleArn nor identityOwner: KEDA's default, keda
    assert keda_identity.identity_owner_problems([sj], [ta], [], "2.20.2")[0] == {}


def test_identity_owner_before_provider_aws_existed_is_not_judged():
    sj, ta = _with_owner("operator", "workload", role=False)
    assert keda_identity.identity_owner_problems([sj], [ta], [], "2.12.1") == ({}, [])


def test_interrupt_during_the_probe_wait_removes_the_lease_and_writes_the_json(aws, clock, upstream_crds, tmp_path):
    from components.verify import cli

    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    kube.deployments = [load("deployment_keda_2.20.2.json")]
    kube.crds = {keda.TA_CRD: load_crd(upstream_crds, TA_2_20)}
    kube.tas = [load("triggerauthentication_aws.json")]

    def ctrl_c(seconds):
        assert _visible(sqs, url) == 1  # the probe is out
        raise KeyboardInterrupt
    clock.sleep = ctrl_c
    rc = cli.main(["--check", "keda", "--json", str(tmp_path / "v.json"), "--region", "us-east-1"], kube=kube,
                  clock=clock, aws_factory=lambda region: Aws(region), stdout=io.StringIO(), stderr=io.StringIO())
    assert rc == 130
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["schema"] == "gpuburst.verify/v1" and doc["run"]["interrupted"] is True
    assert kube.leases == {}
    assert _visible(sqs, url) == 1  # the probe stays for the worker: verify never receives from a work queue


# --- the probe never touches a real message (the drill: verify's role could receive and delete work) --------------

@pytest.mark.parametrize("when", ["waiting before verify", "arriving while the probe's Job runs"])
def test_verify_check_keda_leaves_a_real_messages_receive_count_and_visibility_unchanged(aws, clock, upstream_crds,
                                                                                          tmp_path, when):
    """`verify --check keda` on the real command line, SQS on moto: a real work message keeps
    ApproximateReceiveCount 0 and stays visible. The second case is the race the old clean-up lost: the queue was
    idle, the probe's worker acknowledged the probe, and a real message came in before verify's clean-up receive."""
    from components.verify import cli

    sqs = boto3.client("sqs")
    url, sj, kube = _setup(sqs)
    kube.deployments = [load("deployment_keda_2.20.2.json")]
    kube.crds = {keda.TA_CRD: load_crd(upstream_crds, TA_2_20)}
    kube.tas = [load("triggerauthentication_aws.json")]
    work = json.dumps({"slide": "s3://gpuburst-dev-slides/slides/a.svs", "output": "s3://r/results/a/"})
    if when.startswith("waiting"):
        real_id = sqs.send_message(QueueUrl=url, MessageBody=work)["MessageId"]
    looks = {"n": 0, "real": None}

    def keda_and_a_worker(k, ns):
        looks["n"] += 1
        if looks["n"] != 2:
            return
        if not when.startswith("waiting"):
            # the probe's worker acknowledges the probe (the only message), then real work arrives
            for m in sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"]).get("Messages", []):
                assert keda_probe.PROBE_ATTRIBUTE in m["MessageAttributes"]
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            looks["real"] = sqs.send_message(QueueUrl=url, MessageBody=work)["MessageId"]
        job, pod = _keda_job(sj)
        k.jobs.append(job)
        k.pods.append(pod)
    kube.on_list_jobs = keda_and_a_worker
    out = io.StringIO()
    rc = cli.main(["--check", "keda", "--json", "--queue-url", url, "--region", "us-east-1"], kube=kube, clock=clock,
                  aws_factory=lambda region: Aws(region), stdout=out, stderr=io.StringIO())
    result = json.loads(out.getvalue())["results"][0]
    assert (rc, result["status"]) == (0, "pass"), result
    real_id = looks["real"] or real_id
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessagesNotVisible"] == "0"  # nothing hidden by a receive
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"],
                              MessageAttributeNames=["All"], VisibilityTimeout=0)["Messages"]
    real = [m for m in got if m["MessageId"] == real_id]
    assert len(real) == 1, got  # visible at once: its visibility was never changed
    assert real[0]["Attributes"]["ApproximateReceiveCount"] == "1"  # this receive is its first: verify never had it
    assert real[0]["Body"] == work

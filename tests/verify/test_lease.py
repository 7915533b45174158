"""lease.py: the run lock (a coordination.k8s.io/v1 Lease): taken, waited for, refused naming the holder, taken
over when expired, renewed, released."""
from __future__ import annotations

from datetime import timedelta

import pytest
from verify_fakes import NOW, FakeKube

from components.verify.lease import LEASE_NAME, LockHeld, RunLock, lease_body, lease_expired, micro_time


def _held_by(kube: FakeKube, holder: str, renewed_s_ago: float, duration_s: int = 60) -> None:
    kube.create_lease("gpuburst", lease_body("gpuburst", holder, duration_s, NOW - timedelta(seconds=renewed_s_ago)))


def _lock(kube, clock, **kw) -> RunLock:
    return RunLock(kube, "gpuburst", "ci-runner/42/abc", clock=clock, duration_s=60, poll_s=5, **kw)


def test_free_namespace_creates_the_lease_and_release_deletes_it(clock):
    kube = FakeKube()
    lock = _lock(kube, clock)
    lock.acquire()
    lease = kube.leases[("gpuburst", LEASE_NAME)]
    assert lease["spec"]["holderIdentity"] == "ci-runner/42/abc"
    assert lease["spec"]["leaseDurationSeconds"] == 60 and lease["spec"]["renewTime"] == micro_time(NOW)
    lock.release()
    assert ("gpuburst", LEASE_NAME) not in kube.leases
    assert kube.lease_writes == ["create gpuburst/gpuburst-verify ci-runner/42/abc", "delete gpuburst/gpuburst-verify"]


def test_a_live_lease_of_another_run_is_refused_at_once_naming_the_holder(clock):
    kube = FakeKube()
    _held_by(kube, "laptop/7/other", renewed_s_ago=10)
    with pytest.raises(LockHeld, match=r"holder 'laptop/7/other'.*leaseDurationSeconds 60.*waited 0 s") as e:
        _lock(kube, clock).acquire()
    assert "kubectl -n gpuburst delete lease gpuburst-verify" in str(e.value)
    assert kube.leases[("gpuburst", LEASE_NAME)]["spec"]["holderIdentity"] == "laptop/7/other"
    assert clock.sleeps == []


def test_waits_up_to_the_bound_then_refuses(clock):
    kube = FakeKube()
    _held_by(kube, "laptop/7/other", renewed_s_ago=0, duration_s=3600)
    with pytest.raises(LockHeld, match="waited 30 s"):
        _lock(kube, clock, wait_s=30).acquire()
    assert sum(clock.sleeps) == pytest.approx(30) and len(clock.sleeps) == 6


def test_waits_and_takes_the_lease_when_the_other_run_lets_go(clock):
    kube = FakeKube()
    _held_by(kube, "laptop/7/other", renewed_s_ago=0, duration_s=3600)
    real_sleep = clock.sleep

    def sleep(s):
        real_sleep(s)
        if clock.t >= 10:
            kube.leases.pop(("gpuburst", LEASE_NAME), None)  # the other run finished
    clock.sleep = sleep
    lock = _lock(kube, clock, wait_s=60)
    lock.acquire()
    assert kube.leases[("gpuburst", LEASE_NAME)]["spec"]["holderIdentity"] == "ci-runner/42/abc"
    assert 10 <= clock.t < 20


def test_an_expired_lease_is_taken_over(clock):
    kube = FakeKube()
    _held_by(kube, "killed/9/gone", renewed_s_ago=61)
    lock = _lock(kube, clock)
    lock.acquire()
    spec = kube.leases[("gpuburst", LEASE_NAME)]["spec"]
    assert spec["holderIdentity"] == "ci-runner/42/abc" and spec["leaseTransitions"] == 1
    assert any("taken over from an expired holder" in n and "killed/9/gone" in n for n in lock.notes)


def test_expiry_rule():
    lease = lease_body("gpuburst", "a", 60, NOW)
    assert not lease_expired(lease, NOW + timedelta(seconds=60))
    assert lease_expired(lease, NOW + timedelta(seconds=61))
    lease["spec"]["holderIdentity"] = ""
    assert lease_expired(lease, NOW)


def test_renew_moves_renew_time_and_a_lost_lease_is_not_overwritten(clock):
    kube = FakeKube()
    lock = _lock(kube, clock)
    lock.acquire()
    clock.sleep(20)
    lock.renew()
    assert kube.leases[("gpuburst", LEASE_NAME)]["spec"]["renewTime"] == micro_time(NOW + timedelta(seconds=20))
    kube.leases[("gpuburst", LEASE_NAME)]["spec"]["holderIdentity"] = "thief/1/x"
    with pytest.raises(LockHeld, match="was lost"):
        lock.renew()
    lock.release()  # not ours any more: left alone
    assert kube.leases[("gpuburst", LEASE_NAME)]["spec"]["holderIdentity"] == "thief/1/x"


def test_a_stale_write_conflicts_like_the_api(clock):
    from components.verify.kube import KubeConflict

    kube = FakeKube()
    _held_by(kube, "a/1/x", renewed_s_ago=0)
    stale = kube.get_lease("gpuburst", LEASE_NAME)
    kube.replace_lease("gpuburst", LEASE_NAME, lease_body("gpuburst", "a/1/x", 60, NOW, stale))
    with pytest.raises(KubeConflict):
        kube.replace_lease("gpuburst", LEASE_NAME, lease_body("gpuburst", "b/2/y", 60, NOW, stale))


def test_the_background_thread_renews_the_lease_until_release(clock):
    import time

    kube = FakeKube()
    lock = RunLock(kube, "gpuburst", "ci-runner/42/abc", clock=clock, duration_s=3)
    lock.acquire()
    clock.sleep(30)  # verify's own clock moved on: a renewal must write the new time
    lock.start_renewing()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and kube.leases[("gpuburst", LEASE_NAME)]["spec"]["renewTime"] == micro_time(NOW):
        time.sleep(0.05)
    assert kube.leases[("gpuburst", LEASE_NAME)]["spec"]["renewTime"] == micro_time(NOW + timedelta(seconds=30))
    lock.release()
    assert kube.leases == {} and not lock._thread.is_alive()

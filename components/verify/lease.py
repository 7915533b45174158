"""The run lock of `verify`: a coordination.k8s.io/v1 Lease in the workload namespace that one verify at a time holds,
renewed while it runs and removed at the end, so two runs never probe the same ScaledJobs at once."""
from __future__ import annotations

import os
import socket
import threading
from datetime import datetime, timezone
from typing import Any

from .model import Clock, parse_time

LEASE_NAME = "gpuburst-verify"
"""Name of the Lease (namespace: the settings' namespace, where the ScaledJobs are)."""


class LockHeld(Exception):
    """Another verify holds the lease and did not let go within the wait: one line naming the holder."""


def holder_identity(run_id: str) -> str:
    """`host/pid/run id`: who holds the lease, enough to find the other run (a CI runner's host name, its pid)."""
    return f"{socket.gethostname()}/{os.getpid()}/{run_id}"


def micro_time(t: datetime) -> str:
    """A MicroTime as the API writes it (`2026-11-02T10:00:00.000000Z`)."""
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_expired(lease: dict[str, Any], now: datetime) -> bool:
    """True when nobody holds the lease, or its holder has not renewed it within leaseDurationSeconds (a run that
    was killed with SIGKILL leaves such a lease behind; it is taken over, not waited for)."""
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity"):
        return True
    renewed = parse_time(spec.get("renewTime") or spec.get("acquireTime"))
    if renewed is None:
        return True
    return (now - renewed).total_seconds() > int(spec.get("leaseDurationSeconds") or 0)


def describe_holder(lease: dict[str, Any]) -> str:
    """`holder H, renewed T, leaseDurationSeconds D` for the one-line refusal."""
    spec = lease.get("spec") or {}
    return (f"holder {spec.get('holderIdentity')!r}, renewed {spec.get('renewTime') or spec.get('acquireTime')}, "
            f"leaseDurationSeconds {spec.get('leaseDurationSeconds')}")


def lease_body(namespace: str, holder: str, duration_s: int, now: datetime,
               previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Lease verify writes: a new one, or `previous` taken over or renewed (its resourceVersion kept, so a
    concurrent writer makes the API answer 409 instead of two runs both believing they hold it)."""
    spec = dict((previous or {}).get("spec") or {})
    md: dict[str, Any] = {"name": LEASE_NAME, "namespace": namespace,
                          "labels": {"app.kubernetes.io/managed-by": "gpuburst-verify"}}
    version = ((previous or {}).get("metadata") or {}).get("resourceVersion")
    if version:
        md["resourceVersion"] = version
    if spec.get("holderIdentity") != holder:
        spec["acquireTime"] = micro_time(now)
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if previous else 0)
    spec.update({"holderIdentity": holder, "leaseDurationSeconds": int(duration_s), "renewTime": micro_time(now)})
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": md, "spec": spec}


class RunLock:
    """Take the lease (waiting up to `wait_s` for another holder), renew it every third of its duration from a
    background thread, and delete it on release (only while this run still holds it)."""

    kube: Any
    namespace: str
    holder: str
    clock: Clock
    duration_s: int
    wait_s: float
    poll_s: float

    def __init__(self, kube: Any, namespace: str, holder: str, *, clock: Clock, duration_s: int = 60,
                 wait_s: float = 0.0, poll_s: float = 5.0) -> None:
        self.kube, self.namespace, self.holder, self.clock = kube, namespace, holder, clock
        self.duration_s, self.wait_s, self.poll_s = duration_s, wait_s, poll_s
        self.lease: dict[str, Any] | None = None
        self.notes: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        """Hold the lease, or raise LockHeld naming the other holder once `wait_s` has passed."""
        from .kube import KubeConflict

        start = self.clock.monotonic()
        conflicts = 0
        while True:
            current = self.kube.get_lease(self.namespace, LEASE_NAME)
            now = self.clock.now()
            try:
                if current is None:
                    self.lease = self.kube.create_lease(self.namespace, lease_body(
                        self.namespace, self.holder, self.duration_s, now))
                    self.notes.append(f"lease {self.namespace}/{LEASE_NAME} created for {self.holder}")
                    return
                holder = (current.get("spec") or {}).get("holderIdentity")
                if holder == self.holder or lease_expired(current, now):
                    self.lease = self.kube.replace_lease(self.namespace, LEASE_NAME, lease_body(
                        self.namespace, self.holder, self.duration_s, now, current))
                    self.notes.append(f"lease {self.namespace}/{LEASE_NAME} taken over from an expired holder "
                                      f"({describe_holder(current)})" if holder and holder != self.holder else
                                      f"lease {self.namespace}/{LEASE_NAME} taken by {self.holder}")
                    return
            except KubeConflict:
                conflicts += 1  # someone wrote it between our read and our write: read again (a few times)
                if conflicts > 5:
                    raise
                continue
            waited = self.clock.monotonic() - start
            if waited >= self.wait_s:
                raise LockHeld(f"another verify holds the lease {self.namespace}/{LEASE_NAME} "
                               f"({describe_holder(current)}); waited {int(waited)} s (--lock-wait-s "
                               f"{self.wait_s:g}) — let it finish, or delete the lease if that run is gone: "
                               f"kubectl -n {self.namespace} delete lease {LEASE_NAME}")
            self.clock.sleep(min(self.poll_s, max(0.0, self.wait_s - waited)))

    def renew(self) -> None:
        """Write a fresh renewTime (the lease read back first, so a takeover by another run is not overwritten)."""
        current = self.kube.get_lease(self.namespace, LEASE_NAME)
        if current is None or (current.get("spec") or {}).get("holderIdentity") != self.holder:
            raise LockHeld(f"lease {self.namespace}/{LEASE_NAME} was lost (now "
                           f"{describe_holder(current) if current else 'deleted'})")
        self.lease = self.kube.replace_lease(self.namespace, LEASE_NAME, lease_body(
            self.namespace, self.holder, self.duration_s, self.clock.now(), current))

    def start_renewing(self) -> None:
        """Renew every third of leaseDurationSeconds (wall time) until release; a failed renewal is noted."""
        def loop() -> None:
            while not self._stop.wait(max(1.0, self.duration_s / 3)):
                try:
                    self.renew()
                except Exception as e:  # noqa: BLE001 - a renewal must never kill the run; it is reported
                    self.notes.append(f"lease renewal failed: {type(e).__name__}: {e}")
        self._thread = threading.Thread(target=loop, name="gpuburst-verify-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and delete the lease when this run still holds it; never raises (a note says why not)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.lease is None:
            return
        try:
            current = self.kube.get_lease(self.namespace, LEASE_NAME)
            if current is not None and (current.get("spec") or {}).get("holderIdentity") == self.holder:
                self.kube.delete_lease(self.namespace, LEASE_NAME)
                self.notes.append(f"lease {self.namespace}/{LEASE_NAME} deleted")
            else:
                self.notes.append(f"lease {self.namespace}/{LEASE_NAME} not deleted: no longer ours")
        except Exception as e:  # noqa: BLE001 - the lease expires by itself; the run's verdict stands
            self.notes.append(f"lease {self.namespace}/{LEASE_NAME} not deleted ({type(e).__name__}: {e}); it "
                              f"expires after {self.duration_s} s")
        self.lease = None

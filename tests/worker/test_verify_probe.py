"""The verify probe: the worker and `python -m components verify` name its SQS message attribute the same."""
from __future__ import annotations

from components.verify.keda_probe import PROBE_ATTRIBUTE
from worker.verify_probe import VERIFY_PROBE_ATTRIBUTE


def test_the_worker_and_verify_use_one_probe_attribute():
    assert VERIFY_PROBE_ATTRIBUTE == PROBE_ATTRIBUTE == "gpuburst-verify"

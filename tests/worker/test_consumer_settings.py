"""ConsumerSettings: settings that cannot work are refused with one line naming the setting."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sqs_helpers import consumer_settings  # noqa: E402

from worker.slides.limits import SlideLimits  # noqa: E402


@pytest.mark.parametrize("kw,fragment", [
    (dict(visibility_timeout_s=10, visibility_extension_interval_s=10), "visibility_extension_interval_s=10"),
    (dict(visibility_timeout_s=0), "visibility_timeout_s=0"),
    (dict(wait_time_s=21), "wait_time_s=21"),
    (dict(mode="batch"), "mode='batch'"),
    (dict(precision="half"), "precision='half': must be one of auto, fp32, bf16, fp16"),
    (dict(slide_limits=SlideLimits(max_levels=0)), r"max_levels=0 \(SLIDE_MAX_LEVELS\): must be a whole number"),
])
def test_settings_are_validated(kw, fragment):
    with pytest.raises(ValueError, match=fragment):
        consumer_settings("http://q", **kw).validate()


def test_the_slide_limits_default_to_the_documented_defaults():
    assert consumer_settings("http://q").slide_limits == SlideLimits()


def test_precision_choices_are_the_devices():
    from worker.consumer_settings import PRECISIONS
    from worker.device import PRECISIONS as DEVICE_PRECISIONS

    assert PRECISIONS == DEVICE_PRECISIONS and consumer_settings("http://q").precision == "auto"

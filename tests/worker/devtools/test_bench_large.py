"""The large-slide benchmark's figures on small slides: every case measured in fresh processes, peak memory reported
(no timing is asserted: speed is for the benchmark to print, not for a test to time)."""
from __future__ import annotations

import json

import pytest

from worker.devtools.bench_large import CASES, MPP_UM, LargeCase, _fit, run_large

pytestmark = pytest.mark.slow  # fresh processes: two writers and two workers


@pytest.fixture(scope="module")
def result():
    cases = (LargeCase(2048, 0.3, seed=5), LargeCase(4096, 0.5, seed=5))
    return run_large(device="cpu", precision="fp32", cases=cases, rounds=1, log=lambda msg: None)


def test_every_case_has_its_figures(result):
    assert json.loads(json.dumps(result)) == result
    rows = result["cases"]
    assert [(r["side_px"], r["tissue_fraction"]) for r in rows] == [(2048, 0.3), (4096, 0.5)]
    for r in rows:
        assert r["mpp_um"] == MPP_UM and r["analysis_px"] == r["side_px"] // 2  # read at 0.5 µm/px, 2 x 2 averaged
        assert 0 < r["tiles"] <= r["tiles_total"] == (r["side_px"] // 2 // 256) ** 2
        assert r["seconds"] > 0 and r["seconds_per_tile"] == pytest.approx(r["seconds"] / r["tiles"], rel=1e-3)
        assert r["cpu_s"] > 0 and r["seconds_rounds"] == [r["seconds"]]
        assert r["precision"] == "fp32"  # the precision asked for reached the child
        assert r["write_s"] > 0 and r["file_mb"] > 0
    assert rows[1]["tiles"] > rows[0]["tiles"]
    assert len(result["table"]) == 1 + len(rows) and result["table"][1].startswith("2k 30%")
    assert set(result["time_vs_tiles"]) == set(result["cpu_time_vs_tiles"]) == {"fixed_s", "per_tile_s", "r2"}


def test_peak_memory_is_measured_per_case_in_the_child(result):
    for r in result["cases"]:
        # the child's own peak, not this test process's: above its footprint at the start of the slide (model
        # loaded), below a few GiB
        assert 0 < r["rss_at_start_mb"] <= r["peak_rss_mb"] < 4096
        assert r["peak_measured"].startswith(("during the slide", "whole process"))
        assert 0 < r["write_peak_rss_mb"] < 1024
    peaks = [r["peak_rss_mb"] for r in result["cases"]]
    assert result["peak_rss_mb"] == {"min": min(peaks), "max": max(peaks),
                                     "spread": round(max(peaks) - min(peaks), 1)}


def test_the_full_run_reaches_32k_at_quarter_micron():
    assert max(c.side_px for c in CASES) >= 32768 and any(c.side_px == 32768 for c in CASES)
    assert len({(c.side_px, c.tissue_fraction) for c in CASES}) >= 3


def test_the_straight_line_fit():
    assert _fit([100, 200, 400], [2.0, 3.0, 5.0]) == {"fixed_s": 1.0, "per_tile_s": 0.01, "r2": 1.0}
    assert _fit([100, 100], [1.0, 2.0])["per_tile_s"] is None

"""The benchmark's JSON: every figure present and consistent with the others (timing targets are not tested)."""
from __future__ import annotations

import json

import pytest

from worker.devtools.bench import QUICK, BenchConfig, run_bench


@pytest.fixture(scope="module")
def result():
    tiny = BenchConfig(slide_px=2048, tissue_fraction=0.3, seed=3, cold_slides=2, cold_slide_px=1024, repeats=1)
    return run_bench(quick=True, device="cpu", config=tiny, log=lambda msg: None)


def test_keys_and_json(result):
    assert set(result) >= {
        "device", "quick", "config", "note", "slide", "pipeline", "naive", "speedup", "read_only_s", "compute_only_s",
        "pipeline_efficiency", "agreement_with_naive", "skipped_tiles_foreground_px", "cold_start", "targets",
        "rounds_s", "machine", "fresh_process",
    }
    assert json.loads(json.dumps(result)) == result
    assert result["device"].startswith("cpu (") and result["quick"] is True
    assert result["config"]["cold_slides"] == 2 and "1 timing rounds and 2 cold-start messages" in result["note"]


def test_internal_consistency(result):
    p, n = result["pipeline"], result["naive"]
    assert result["speedup"] == pytest.approx(n["seconds_per_slide"] / p["seconds_per_slide"])
    assert result["pipeline_efficiency"] == pytest.approx(
        max(result["read_only_s"], result["compute_only_s"]) / p["seconds_per_slide"]
    )
    assert p["tiles_per_s"] == pytest.approx(p["tiles"] / p["seconds_per_slide"])
    assert n["tiles_per_s"] == pytest.approx(n["tiles"] / n["seconds_per_slide"])
    assert n["tiles"] == result["slide"]["tiles_total"] == 64
    assert 0 < p["tiles"] == result["slide"]["tiles_tissue"] < n["tiles"]
    assert p["seconds_per_slide"] == p["timings_s"]["total"]
    assert p["compute_workers"] >= 1 and (p["reader_threads"] > 0) == (p["read_by"] == "reader threads")
    for key, figure in (("pipeline", p["seconds_per_slide"]), ("naive", n["seconds_per_slide"]),
                        ("read", result["read_only_s"]), ("compute", result["compute_only_s"])):
        assert figure == pytest.approx(min(result["rounds_s"][key]), abs=1e-4)  # each figure is its best round
    t = result["targets"]
    assert t["speedup_met"] == (result["speedup"] >= t["speedup"])
    assert t["pipeline_efficiency_met"] == (result["pipeline_efficiency"] >= t["pipeline_efficiency"])


def test_pipeline_agrees_with_the_naive_loop(result):
    assert result["agreement_with_naive"] > 0.999  # same model and pixels, so the same classes
    assert result["skipped_tiles_foreground_px"] == 0  # tissue skipping lost no structure


def test_cold_start_figures(result):
    c = result["cold_start"]
    assert c["messages"] == 2
    assert c["persistent_per_message_s"] == pytest.approx(c["persistent_s"] / 2)
    assert c["fresh_process_per_message_s"] == pytest.approx(c["fresh_process_s"] / 2)
    assert c["fresh_over_persistent"] == pytest.approx(c["fresh_process_s"] / c["persistent_s"])
    assert c["fresh_process_s"] > c["persistent_s"]  # each fresh process imports torch and loads the model


def test_fresh_process_figures(result):
    f = result["fresh_process"]
    assert f["runs"] == result["config"]["repeats"] == 1
    assert f["fixed_beyond_torch_s"] == pytest.approx(
        f["interpreter_s"] + f["imports_s"] + f["model_load_s"] + f["first_tile_s"], abs=1e-3)
    assert 0 < f["model_load_s"] < f["to_first_tile_s"] < f["process_s"]


def test_quick_config_is_the_documented_one():
    assert (QUICK.slide_px, QUICK.tissue_fraction, QUICK.cold_slides, QUICK.repeats) == (8192, 0.3, 4, 2)

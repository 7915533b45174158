"""A fresh process's fixed cost: the phases of `python -m worker infer` measured from outside, and their sums."""
from __future__ import annotations

import pytest

from worker.devtools.startup import TARGETS_S, fresh_process_figures, one_fresh_process

pytestmark = pytest.mark.slow  # fresh interpreters


@pytest.fixture(scope="module")
def slide(tmp_path_factory):
    from worker.devtools.synthetic import write_synthetic_slide

    return write_synthetic_slide(tmp_path_factory.mktemp("startup") / "s.ome.tif", 1024, 1024, 0.5, 0.3, seed=2)


def test_the_phases_add_up_and_the_targets_are_judged_on_them(slide):
    r = fresh_process_figures(slide, "cpu", runs=1)
    phases = ("interpreter_s", "import_torch_s", "imports_s", "model_load_s", "first_tile_s")
    assert all(r[k] > 0 for k in phases), r
    assert r["fixed_beyond_torch_s"] == pytest.approx(sum(r[k] for k in phases) - r["import_torch_s"], abs=1e-3)
    assert r["to_first_tile_s"] == pytest.approx(sum(r[k] for k in phases), abs=1e-3)
    assert r["to_first_tile_s"] < r["process_s"]  # the outputs are written after the first tile
    assert r["runs"] == 1 and r["fixed_beyond_torch_s_runs"] == [r["fixed_beyond_torch_s"]]
    assert r["targets_met"] == {k: r[k] < v for k, v in TARGETS_S.items()}


def test_a_child_that_fails_is_an_error_naming_why(tmp_path):
    with pytest.raises(RuntimeError, match=r"exit 2.*no such file or folder"):
        one_fresh_process(tmp_path / "missing.tif", "cpu", tmp_path)

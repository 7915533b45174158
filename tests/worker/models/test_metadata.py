"""A model's gpuburst.json: every broken rule is one line naming the key and its value."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/worker: model_helpers

from model_helpers import GOOD, assert_one_line_error, save_program  # noqa: E402

from worker.models.metadata import META_FILE  # noqa: E402


@pytest.mark.parametrize("meta, fragment", [
    (None, f"no {META_FILE} inside the archive"),
    ("{oops", f"{META_FILE} inside the archive is not JSON"),
    ("[1, 2]", f"{META_FILE} inside the archive must be a JSON object, not list"),
    ({"input_mpp_um": 0.5}, "classes is missing"),
    ({**GOOD, "classes": "background,a,b"}, "classes='background,a,b': must be a list of non-empty class names"),
    ({**GOOD, "classes": ["background", ""]}, "classes=['background', '']: must be a list of non-empty class names"),
    ({"classes": GOOD["classes"]}, "input_mpp_um is missing: give the µm per pixel the model analyses at"),
    ({**GOOD, "input_mpp_um": 0.0}, "input_mpp_um=0.0: must be the µm per pixel"),
    ({**GOOD, "input_mpp_um": 25}, "input_mpp_um=25: must be"),
    ({**GOOD, "input_mpp_um": "0.5"}, "input_mpp_um='0.5': must be"),
    ({**GOOD, "input_mpp_um": True}, "input_mpp_um=True: must be"),
    ({**GOOD, "tile_size": 0}, "tile_size=0: must be a whole number of pixels"),
    ({**GOOD, "tile_size": 256.0}, "tile_size=256.0: must be a whole number of pixels"),
    ({**GOOD, "output_stride": 3}, "tile_size=256: must be a multiple of output_stride=3"),
    ({**GOOD, "normalisation": {"mean": [0.5] * 4}},
     "normalisation={'mean': [0.5, 0.5, 0.5, 0.5]}: mean must be a list of 3 numbers"),
    ({**GOOD, "normalisation": {"std": [0.2, 0.2, -1]}},
     "normalisation={'std': [0.2, 0.2, -1]}: std must be 3 numbers > 0"),
    ({**GOOD, "normalisation": {"mu": [0, 0, 0]}},
     "normalisation={'mu': [0, 0, 0]}: must be {\"mean\": [r, g, b], \"std\": [r, g, b]}"),
    ({**GOOD, "normalisation": [0.5, 0.25]}, "normalisation=[0.5, 0.25]: must be"),
    ({**GOOD, "colors": [[0, 0, 0], [1, 2, 3]]}, "colors=[[0, 0, 0], [1, 2, 3]]: has 2 entries for 3 classes"),
    ({**GOOD, "colors": [[0, 0, 0], [1, 2, 300], [0, 0, 0]]},
     "colors=[[0, 0, 0], [1, 2, 300], [0, 0, 0]]: must be a list of [r, g, b] with whole numbers 0-255"),
    ({**GOOD, "name": 7}, "name=7: must be a non-empty string"),
    ({**GOOD, "arch": {"width": 8}}, "arch={'width': 8}: given without architecture"),
])
def test_bad_metadata_is_one_line_naming_the_key_and_value(program, tmp_path, meta, fragment):
    assert_one_line_error(save_program(program, tmp_path / "m.pt2", meta),
                          f"{META_FILE}: {fragment}" if isinstance(meta, dict) else fragment)

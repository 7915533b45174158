"""One-line logging: the worker's events at their level, libraries' records and Python warnings only at DEBUG."""
from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from worker.logfmt import event, one_line, setup_logging

ROOT = Path(__file__).resolve().parents[2]
BPAEC = ROOT.parent / "shared" / "real-slides" / "dicom-bpaec"


@pytest.fixture
def logging_restored():
    """setup_logging replaces the root handlers; put pytest's back (and Python warnings) afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    logging.captureWarnings(False)  # an earlier in-process setup_logging may have left logging believing it captures
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
    logging.captureWarnings(False)


def _emit() -> None:
    logging.getLogger("worker.consumer").info(event("slide.done", slide_id="S-1", seconds=1.5))
    logging.getLogger("wsidicom.geometry").warning("Orientation [-1, 0, 0, 0, -1, 0] is not orthogonal")
    logging.getLogger().warning("a library logging on the root logger")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a library's UserWarning", UserWarning, stacklevel=1)


def test_at_info_only_the_workers_own_events_are_printed(capsys, logging_restored):
    setup_logging("INFO")
    _emit()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].endswith("INFO    slide.done slide_id=S-1 seconds=1.50"), lines


def test_at_debug_libraries_speak_as_debug_lines_naming_logger_and_level(capsys, logging_restored):
    setup_logging("DEBUG")
    _emit()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4, lines
    assert "INFO    slide.done" in lines[0]
    assert lines[1].endswith("DEBUG   wsidicom.geometry WARNING: Orientation [-1, 0, 0, 0, -1, 0] is not orthogonal")
    assert lines[2].endswith("DEBUG   root WARNING: a library logging on the root logger")
    assert "DEBUG   py.warnings WARNING: " in lines[3] and "UserWarning: a library's UserWarning" in lines[3]


def test_one_line_collapses_whitespace_and_cuts():
    assert one_line(ValueError("a\n  b\tc")) == "a b c"
    assert one_line(ValueError("x" * 300), 20) == "x" * 17 + "..."


@pytest.mark.slow
@pytest.mark.skipif(not BPAEC.is_dir(), reason=f"{BPAEC} is absent: the real scanner slides are shared data, not part "
                                               "of the repository")
def test_a_refused_dicom_series_is_one_line_on_stderr(tmp_path):
    # wsidicom warns nine times about this series' orientation and frames; the user sees only the worker's refusal.
    r = subprocess.run([sys.executable, "-m", "worker", "infer", str(BPAEC), "--out", str(tmp_path / "o"),
                        "--device", "cpu"], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert r.returncode == 1
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stderr.startswith(f"python -m worker infer: error: {BPAEC}: no pyramid level near the model's 0.5 µm/px")

"""The infer command's progress bar: plain text, one line per update on a stream that is not a terminal."""
from __future__ import annotations

import io

from worker.progress_bar import ProgressBar


def test_progress_bar_plain_text():
    buf = io.StringIO()
    bar = ProgressBar("S1", stream=buf, min_interval_s=0)
    bar(0, 10)
    bar(10, 10)
    bar.close()
    lines = buf.getvalue().splitlines()
    assert lines[-1].startswith("S1 [##############################] 100.0%  10/10 tiles")
    bar("not", "numbers")  # ignored, never raises

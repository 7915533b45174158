"""A plain-text progress bar on stderr for `python -m worker infer` (no tqdm)."""
from __future__ import annotations

import sys
import time
from typing import Any


class ProgressBar:
    """A plain-text progress bar on stderr (no tqdm): `[#####.....]  52%  1234/2368 tiles  12.3 s`."""

    def __init__(self, label: str, stream: Any = None, width: int = 30, min_interval_s: float = 0.2) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.min_interval_s = min_interval_s
        self.t0 = time.monotonic()
        self._last = 0.0
        self._shown = False
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, done: Any = None, total: Any = None, *args: Any, **kwargs: Any) -> None:
        done = kwargs.get("done", done)
        total = kwargs.get("total", total)
        if not isinstance(done, (int, float)) or not isinstance(total, (int, float)) or total <= 0:
            return
        now = time.monotonic()
        if done < total and now - self._last < self.min_interval_s:
            return
        if not self._tty and done < total and now - self._last < 5.0:
            return  # logs and pipes get a line every 5 s, not a redraw
        self._last = now
        frac = min(max(done / total, 0.0), 1.0)
        filled = int(round(frac * self.width))
        line = (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {100 * frac:5.1f}%  "
                f"{int(done)}/{int(total)} tiles  {now - self.t0:6.1f} s")
        self.stream.write(("\r" + line) if self._tty else (line + "\n"))
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """End the bar's line."""
        if self._shown and self._tty:
            self.stream.write("\n")
            self.stream.flush()

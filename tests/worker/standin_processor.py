"""Test-only slide processors: a fast, controllable stand-in for process_slide, and a wrapper slowing the real one."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _sleep(seconds: float, progress: Callable[..., None] | None, step_s: float = 0.05) -> None:
    """Sleep in small steps, calling progress(done, total) between them like a tile loop would."""
    end = time.monotonic() + seconds
    n = max(1, int(seconds / step_s))
    i = 0
    while time.monotonic() < end:
        time.sleep(min(step_s, max(0.0, end - time.monotonic())))
        i += 1
        if progress is not None:
            progress(min(i, n), n)


def snapshot(slide_path: Path) -> dict[str, bytes]:
    """The input as the processor saw it: {relative path: content} of every file under a folder, or {name: content}."""
    p = Path(slide_path)
    if p.is_dir():
        return {f.relative_to(p).as_posix(): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}
    return {p.name: p.read_bytes()}


class StandIn:
    """Writes the three result files with a tiny summary; can sleep, fail, or skip a file. Records every call.

    The slide path may be a file or (a multi-file slide) a folder; `inputs` records, per call, (path, is a folder,
    snapshot()) taken before the scratch copy is cleaned up.
    """

    def __init__(self, delay_s: float = 0.0, *, fail: BaseException | None = None, skip_suffix: str | None = None,
                 interruptible: bool = True, during: Callable[[str], None] | None = None,
                 areas: dict[str, float] | None = None,
                 fail_with: Callable[[Path], BaseException] | None = None) -> None:
        self.delay_s = delay_s
        self.fail = fail
        self.fail_with = fail_with
        self.skip_suffix = skip_suffix
        self.interruptible = interruptible
        self.during = during
        self.areas = areas or {"tumour": 100.0, "stroma": 50.0}
        self.calls: list[str] = []
        self.inputs: list[tuple[Path, bool, dict[str, bytes]]] = []
        self.lock = threading.Lock()

    def __call__(self, slide_path: Path, out_dir: Path, slide_id: str, progress: Callable[..., None]) -> dict:
        seen = snapshot(slide_path)
        with self.lock:
            self.calls.append(slide_id)
            self.inputs.append((Path(slide_path), Path(slide_path).is_dir(), seen))
        if self.interruptible:
            _sleep(self.delay_s, progress)
        else:
            time.sleep(self.delay_s)
        if self.during is not None:
            self.during(slide_id)
        if self.fail is not None:
            raise self.fail
        if self.fail_with is not None:
            raise self.fail_with(Path(slide_path))
        # The keys process_slide's summary has (a subset).
        summary: dict[str, Any] = {"slide_id": slide_id, "tiles_seen": 4, "tissue_fraction": 0.25,
                                   "tissue_area_um2": sum(self.areas.values()), "classes": ["background", *self.areas],
                                   "class_area_um2": {"background": 1e6, **self.areas},
                                   "input_bytes": sum(len(b) for b in seen.values())}
        files = {".overlay.ome.tif": b"II*\x00overlay", ".preview.png": b"\x89PNG preview",
                 ".json": json.dumps(summary).encode()}
        for suffix, data in files.items():
            if suffix != self.skip_suffix:
                (out_dir / f"{slide_id}{suffix}").write_bytes(data)
        return summary


def slow_before(seconds: float) -> Callable[[Callable], Callable]:
    """Wrap a real processor so it spends `seconds` (calling progress) before it starts: a deterministic window."""
    def wrap(real: Callable) -> Callable:
        def processor(slide_path: Path, out_dir: Path, slide_id: str, progress: Callable[..., None]) -> dict:
            _sleep(seconds, progress)
            return real(slide_path, out_dir, slide_id, progress)
        return processor
    return wrap

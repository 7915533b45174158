"""The large-slide benchmark: 32k x 32k px and larger at 0.25 µm/px, each slide processed by a fresh process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from worker.devtools.startup import REPO_ROOT, child_env

#: Pixel size of the large slides: a 40x scan, read by the built-in 20x model area-averaged 2 x 2 on the fly.
MPP_UM = 0.25
#: Seconds one child (writing or processing one slide) may take before it is killed.
CHILD_TIMEOUT_S = 1800


@dataclass(frozen=True)
class LargeCase:
    """One slide of the large-slide benchmark."""

    side_px: int
    """Width and height of the square synthetic slide at 0.25 µm/px, in pixels."""
    tissue_fraction: float
    """Fraction of the slide covered by tissue (0-1, exclusive)."""
    seed: int = 17
    """Seed of the synthetic slide (default 17)."""

    @property
    def name(self) -> str:
        return f"{self.side_px // 1024}k {self.tissue_fraction:.0%}"


#: The full run (`bench --large`): two sizes at 30 % tissue around the 32k slide, and the 32k slide with twice the
#: tissue, so tissue tiles vary ~8x across sizes and fractions.
CASES = (LargeCase(16384, 0.3), LargeCase(32768, 0.3), LargeCase(32768, 0.6), LargeCase(49152, 0.3))
#: `bench --large --quick`: the same measurement on small slides, in seconds.
QUICK_CASES = (LargeCase(4096, 0.3), LargeCase(8192, 0.3))


def _proc_status(field: str) -> float | None:
    """A /proc/self/status field in MiB (VmRSS, VmHWM), or None where there is no /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS: Linux's clear_refs "5"; False where refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_mib() -> float:
    """This process's peak RSS in MiB: VmHWM, else getrusage's ru_maxrss (KiB on Linux)."""
    hwm = _proc_status("VmHWM")
    if hwm is not None:
        return hwm
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cpu_s() -> float:
    """CPU seconds this process has used, all threads, user and system: on a machine shared with other work, a
    steadier measure of the work done than the wall time."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_write(path: str, case: LargeCase) -> dict:
    """In a fresh process: write the case's slide tile by tile; its seconds, size on disk and peak RSS."""
    from worker.devtools.synthetic import write_synthetic_slide

    t0 = time.perf_counter()
    write_synthetic_slide(path, case.side_px, case.side_px, MPP_UM, case.tissue_fraction, case.seed)
    return {"write_s": round(time.perf_counter() - t0, 2), "file_mb": round(os.path.getsize(path) / 2**20, 1),
            "write_peak_rss_mb": round(_peak_mib(), 1)}


def child_process(slide: str, out: str, device: str, precision: str) -> dict:
    """In a fresh process: load the model, then process one slide as the consumer does; tiles, seconds and the
    peak RSS while the slide was processed (the process's peak reset after the model load)."""
    from worker.device import check_precision, select_device
    from worker.inference import InferenceSettings
    from worker.models.loading import load_model
    from worker.pipeline import PipelineSettings, process_slide

    dev = select_device(device)
    check_precision(precision, dev)
    model = load_model(None, dev)
    settings = PipelineSettings(inference=InferenceSettings(precision=precision))
    start_mb = _proc_status("VmRSS") or _peak_mib()
    reset = _reset_peak()
    cpu0 = _cpu_s()
    summary = process_slide(slide, out, model, slide_id="large", settings=settings)
    return {"tiles": summary["tiles_seen"], "tiles_total": summary["tiles_total"],
            "seconds": summary["timings_s"]["total"], "inference_s": summary["timings_s"]["analyse"],
            "cpu_s": round(_cpu_s() - cpu0, 2),
            "analysis_px": summary["analysis"]["width"], "precision": summary["inference"]["precision"],
            "rss_at_start_mb": round(start_mb, 1), "peak_rss_mb": round(_peak_mib(), 1),
            "peak_measured": "during the slide (VmHWM reset after the model load)" if reset
            else "whole process (VmHWM could not be reset)"}


def _run_child(args: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-m", "worker.devtools.bench_large", *args], cwd=REPO_ROOT, env=child_env(),
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"bench --large child {args[0]} failed (exit {proc.returncode}): {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _fit(xs: list[float], ys: list[float]) -> dict:
    """Least squares y = fixed + per_tile * x, and r² (None when the x values do not vary)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if n < 2 or sxx == 0:
        return {"fixed_s": None, "per_tile_s": None, "r2": None}
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss = sum((y - my) ** 2 for y in ys)
    r2 = 1 - sum((y - a - b * x) ** 2 for x, y in zip(xs, ys)) / ss if ss else 1.0
    return {"fixed_s": round(a, 3), "per_tile_s": round(b, 5), "r2": round(r2, 4)}


def table(rows: list[dict]) -> list[str]:
    """The figures as a person reads them, one line per case."""
    out = [f"{'case':<10} {'slide px':<15}{'tiles':>6} {'seconds':>8} {'s/tile':>8} {'CPU s/tile':>11} "
           f"{'peak RSS MiB':>13} {'write s':>8} {'write peak MiB':>15}"]
    for r in rows:
        out.append(f"{r['case']:<10} {r['side_px']:>6} x {r['side_px']:<6d}{r['tiles']:>6} {r['seconds']:>8.1f} "
                   f"{r['seconds_per_tile']:>8.4f} {r['cpu_s'] / max(r['tiles'], 1):>11.4f} "
                   f"{r['peak_rss_mb']:>13.0f} {r['write_s']:>8.1f} {r['write_peak_rss_mb']:>15.0f}")
    return out


def run_large(quick: bool = False, device: str = "auto", precision: str = "auto", *,
              cases: tuple[LargeCase, ...] | None = None, rounds: int | None = None, log=None) -> dict:
    """Write each case's slide (a fresh process, tile by tile), process it `rounds` times (each in another fresh
    process: default 2, 1 with `quick`), delete it; return the figures: per case tiles, the fastest round's seconds
    (which filters out other processes sharing the machine) and CPU seconds, the highest peak RSS, straight-line fits
    of seconds and CPU seconds on tiles, and the spread of peak memory across cases."""
    from worker.device import check_precision, select_device

    check_precision(precision, select_device(device))  # refuse a precision this device cannot run before writing
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    cases = cases or (QUICK_CASES if quick else CASES)
    rounds = max(1, rounds or (1 if quick else 2))
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gpuburst-bench-large-") as tmp:
        for case in cases:
            slide = Path(tmp) / f"large-{case.side_px}-{int(case.tissue_fraction * 100)}.ome.tif"
            say(f"bench --large: writing {case.side_px} x {case.side_px} px at {MPP_UM} µm/px, "
                f"{case.tissue_fraction:.0%} tissue")
            written = _run_child(["--write", str(slide), json.dumps(asdict(case))])
            say(f"bench --large: processing it {rounds}x, each in a fresh process ({written['file_mb']} MiB on disk)")
            runs = [_run_child(["--process", str(slide), str(Path(tmp) / "out"), device, precision])
                    for _ in range(rounds)]
            slide.unlink()
            ran = {**min(runs, key=lambda r: r["seconds"]), "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
                   "seconds_rounds": [r["seconds"] for r in runs]}
            rows.append({"case": case.name, **asdict(case), "mpp_um": MPP_UM, **written, **ran,
                         "seconds_per_tile": round(ran["seconds"] / max(ran["tiles"], 1), 5)})
    peaks = [r["peak_rss_mb"] for r in rows]
    lines = table(rows)
    for line in lines:
        say(line)
    return {
        "quick": bool(quick),
        "cases": rows,
        "table": lines,
        "time_vs_tiles": _fit([r["tiles"] for r in rows], [r["seconds"] for r in rows]),
        "cpu_time_vs_tiles": _fit([r["tiles"] for r in rows], [r["cpu_s"] for r in rows]),
        "peak_rss_mb": {"min": min(peaks), "max": max(peaks), "spread": round(max(peaks) - min(peaks), 1)},
        "how": "each slide is written by one fresh process (tile by tile, never whole in memory) and processed by "
               "another, which loads the model, resets its peak RSS and processes the slide as the consumer does",
    }


if __name__ == "__main__":  # the children run_large starts
    mode = sys.argv[1]
    if mode == "--write":
        result = child_write(sys.argv[2], LargeCase(**json.loads(sys.argv[3])))
    elif mode == "--process":
        result = child_process(*sys.argv[2:6])
    else:
        raise SystemExit(f"usage: python -m worker.devtools.bench_large --write|--process ...; got {mode!r}")
    print(json.dumps(result))

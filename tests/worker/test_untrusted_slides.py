"""Crafted slide bombs through `python -m worker infer` in a fresh process each: refused in one line, exit 1, with
the process's peak RSS under 1 GiB (measured by wait4), and OpenSlide, wsidicom and pydicom never imported (each
replaced by a package that records its import and fails it)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "slides"))

from crafted import deflate_bomb, dicom, lzw_bomb, tiled_rgb  # noqa: E402

ROOT = HERE.parents[1]
pytestmark = pytest.mark.slow
PEAK_RSS_LIMIT = 1 << 30
TIMEOUT_S = 120
FORBIDDEN = ("openslide", "wsidicom", "pydicom")

BOMBS = [  # id, craft(path) -> the slide, the refusal after "<path>: "
    ("deflate-1GiB-tiles", lambda p: tiled_rgb(p / "deflate.tif", 2048, 2048, 512, compression=8,
                                               stream=deflate_bomb(1 << 30)),
     "level 0 tile (0, 0) decodes to more than the 786,432 bytes its 512 × 512 px × 3 samples declare (a "
     "decompression bomb or a damaged file)"),
    ("lzw-256MiB-tiles", lambda p: tiled_rgb(p / "lzw.tif", 2048, 2048, 512, compression=5,
                                             stream=lzw_bomb(256 << 20)),
     "level 0 tile (0, 0) decodes to more than the 786,432 bytes its 512 × 512 px × 3 samples declare (a "
     "decompression bomb or a damaged file)"),
    ("1e6px-square-in-64px-tiles", lambda p: tiled_rgb(p / "mega.tif", 10**6, 10**6, 64, table_at=16),
     "directory 0 declares 1000000 × 1000000 px (1.0e12 px) over the limit of 4.0e10 px (SLIDE_MAX_PIXELS)"),
    ("bigtiff-1e9-tiles", lambda p: tiled_rgb(p / "big.tif", 512_000, 512_000, 16, bigtiff=True, table_at=16),
     "directory 0 declares 512000 × 512000 px (2.6e11 px) over the limit of 4.0e10 px (SLIDE_MAX_PIXELS)"),
    ("bigtiff-1e9-tile-count", lambda p: tiled_rgb(p / "lying.tif", 2048, 2048, 512, bigtiff=True, table_at=16,
                                                   count=10**9),
     "directory 0 declares 1,000,000,000 TileOffsets for the 16 tiles of its 2048 × 2048 px (a damaged or crafted "
     "file)"),
    ("4e10px-in-16px-tiles", lambda p: tiled_rgb(p / "tiny-tiles.tif", 200_000, 200_000, 16, table_at=16),
     "directory 0 declares 156,250,000 tiles (200000 × 200000 px in 16 × 16 px tiles) over the limit of 2,097,152 "
     "(SLIDE_MAX_TILES)"),
    ("dicom-1e7-frames", lambda p: dicom(p / "frames.dcm", frames=10**7, rows=16, columns=16, total=(50_000, 51_200)),
     "the instance (VOLUME) declares 10,000,000 frames over the limit of 2,097,152 (SLIDE_MAX_TILES)"),
]


@pytest.fixture(scope="module")
def forbidden(tmp_path_factory) -> dict[str, str]:
    """An environment whose PYTHONPATH shadows OpenSlide, wsidicom and pydicom with packages that write
    <record>/<name> and raise ImportError when imported."""
    root = tmp_path_factory.mktemp("forbidden")
    packages, record = root / "packages", root / "imported"
    record.mkdir()
    for name in FORBIDDEN:
        (packages / name).mkdir(parents=True)
        (packages / name / "__init__.py").write_text(
            f"import pathlib\npathlib.Path({str(record)!r}, {name!r}).write_text('imported')\n"
            f"raise ImportError('{name} must not be reached: the slide is refused before any library reads it')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(packages), str(ROOT)]), "RECORD": str(record)}
    for var in [v for v in env if v.startswith("SLIDE_MAX") or v == "SLIDE_MIN_TILE_PX"]:
        del env[var]  # the defaults are under test
    return env


LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_pid, status, usage = os.wait4(pid, 0)
with open(os.environ["PEAK_RSS_FILE"], "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status) % 256)
"""
"""Forks the worker from a small process and reports that child's own peak RSS. On Linux a child's ru_maxrss starts
from the RSS of the process it was forked from (exec keeps the larger high-water mark), so a worker forked straight
from a pytest process that has grown to a gigabyte over a long run would report the pytest process's size."""


def _infer(slide: Path, out: Path, env: dict[str, str]) -> tuple[int, str, int]:
    """Run `python -m worker infer` on `slide`; (exit code, stderr, peak RSS in bytes of that process alone)."""
    log = out.parent / f"{slide.name}.stderr"
    peak = out.parent / f"{slide.name}.peak-rss"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, sys.executable, "-m", "worker", "infer",
                                 str(slide), "--out", str(out), "--device", "cpu"], cwd=ROOT,
                                env={**env, "PEAK_RSS_FILE": str(peak)}, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)  # its own process group: a timeout kills launcher and worker
    try:
        proc.wait(timeout=TIMEOUT_S)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        raise
    return proc.returncode, log.read_text(), int(peak.read_text()) * 1024  # Linux reports KiB


def test_the_forbidden_packages_do_fail_their_import(forbidden):
    # The control: were any code path to import one of them, the refusal below would not be the reader's line.
    r = subprocess.run([sys.executable, "-c", "import openslide"], env=forbidden, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "openslide must not be reached" in r.stderr
    assert (Path(forbidden["RECORD"]) / "openslide").is_file()
    (Path(forbidden["RECORD"]) / "openslide").unlink()


@pytest.mark.parametrize("name, craft, line", BOMBS, ids=[b[0] for b in BOMBS])
def test_a_slide_bomb_is_refused_in_one_line_under_1_gib_without_openslide(tmp_path, forbidden, name, craft, line,
                                                                          record_property):
    slide = craft(tmp_path)
    assert slide.stat().st_size < 1_100_000
    code, stderr, peak = _infer(slide, tmp_path / "out", forbidden)
    record_property("peak_rss_mib", round(peak / 2**20, 1))
    print(f"{name}: peak RSS {peak / 2**20:.0f} MiB")  # shown with -s: the figures docs/worker.md quotes
    assert code == 1, stderr
    assert stderr.strip().splitlines() == [f"python -m worker infer: error: {slide}: {line}"]
    assert peak < PEAK_RSS_LIMIT
    assert sorted(p.name for p in Path(forbidden["RECORD"]).iterdir()) == []
    assert list((tmp_path / "out").glob("*")) == []  # no output of any kind

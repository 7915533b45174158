"""The bounded TIFF structure reader: what each real slide's directories declare and who reads it, every crafted
header refused in one line from its counts alone (pixels, tile sides, tile counts, bytes of structure, directories,
loops, lying counts, data past the end) in a few MiB, before tifffile or OpenSlide is called."""
from __future__ import annotations

import struct
import sys
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tifffile

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crafted import LONG, SHORT, RawTiff, honest_tile, long, short, tiled_rgb  # noqa: E402
from shared_slides import REAL, needs_real_slides  # noqa: E402
from test_limits import LIFTED  # noqa: E402

from worker.slides import SlideError, SlideLimitError, SlideLimits, open_slide  # noqa: E402
from worker.slides.tiff_structure import flavour, read_tiff_structure  # noqa: E402

REAL_TIFFS = [  # file, flavour, directories, tiles or strips of directory 0, header bytes
    ("CMU-1-Small-Region.svs", "svs", 4, 130, 5082),
    ("tcga-cr-7395-01a-01-ts1.svs", "svs", 3, 252, 7198),
    ("OS-1-detail.ome.tif", "ome", 1, 9, 1742),
    ("OS-2-ndpi.ome.tif", "ome", 1, 25, 1868),
    ("test3-TRITC-2-560.ndpi", "ndpi", 6, 1, 33074),
]


@needs_real_slides
@pytest.mark.parametrize("name, kind, ndirs, units, header", REAL_TIFFS, ids=[r[0] for r in REAL_TIFFS])
def test_real_slides_walk_within_the_defaults_to_the_same_figures_tifffile_reads(name, kind, ndirs, units, header):
    st = read_tiff_structure(REAL / name, SlideLimits())
    assert (flavour(st), len(st.directories), st.directories[0].units, st.header_bytes) == (kind, ndirs, units, header)
    with tifffile.TiffFile(REAL / name, is_ndpi=False) as tif:
        for d, page in zip(st.directories, tif.pages):
            assert (d.width, d.height) == (page.imagewidth, page.imagelength)
            offs, counts = np.asarray(page.dataoffsets), np.asarray(page.databytecounts)
            assert d.data_end == int((offs + counts)[counts > 0].max())  # what the chunked read found
    assert st.size >= max(d.data_end for d in st.directories)


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
    except SlideError:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


HEADERS = [  # name, how it is crafted, the refusal (after "<path>: "), its type
    ("1e12 px in 64 px tiles", lambda p: tiled_rgb(p, 10**6, 10**6, 64, table_at=16),
     "directory 0 declares 1000000 × 1000000 px (1.0e12 px) over the limit of 4.0e10 px (SLIDE_MAX_PIXELS)",
     SlideLimitError),
    ("BigTIFF 1e9 tiles", lambda p: tiled_rgb(p, 512_000, 512_000, 16, bigtiff=True, table_at=16),
     "directory 0 declares 512000 × 512000 px (2.6e11 px) over the limit of 4.0e10 px (SLIDE_MAX_PIXELS)",
     SlideLimitError),
    ("4e10 px in 16 px tiles", lambda p: tiled_rgb(p, 200_000, 200_000, 16, table_at=16),
     "directory 0 declares 156,250,000 tiles (200000 × 200000 px in 16 × 16 px tiles) over the limit of 2,097,152 "
     "(SLIDE_MAX_TILES)", SlideLimitError),
    ("8 px tiles", lambda p: tiled_rgb(p, 1024, 1024, 8, table_at=16),
     "directory 0 declares tiles of 8 × 8 px under the minimum of 16 px per side (SLIDE_MIN_TILE_PX)",
     SlideLimitError),
    ("16384 px tiles", lambda p: tiled_rgb(p, 32768, 32768, 16384, table_at=16),
     "directory 0 declares tiles of 16384 × 16384 px over the limit of 8192 px per side (SLIDE_MAX_TILE_PX)",
     SlideLimitError),
    ("BigTIFF lying count", lambda p: tiled_rgb(p, 2048, 2048, 512, bigtiff=True, table_at=16, count=10**9),
     "directory 0 declares 1,000,000,000 TileOffsets for the 16 tiles of its 2048 × 2048 px (a damaged or crafted "
     "file)", SlideError),
]


@pytest.mark.parametrize("name, craft, line, kind", HEADERS, ids=[h[0] for h in HEADERS])
def test_a_crafted_header_is_refused_from_its_counts_in_a_few_mib(tmp_path, monkeypatch, name, craft, line, kind):
    p = craft(tmp_path / "bomb.tif")
    assert p.stat().st_size < 1000  # the tables it declares were never written
    opened = []
    monkeypatch.setattr(tifffile.TiffFile, "__init__", lambda *a, **k: opened.append(a))
    with pytest.raises(kind) as info:
        open_slide(p)
    assert str(info.value) == f"{p}: {line}" and type(info.value) is kind
    assert opened == []  # tifffile never saw it
    assert _peak_bytes(lambda: read_tiff_structure(p, SlideLimits())) < 1 << 20


def test_the_structure_bytes_are_counted_from_declared_counts_before_any_is_read(tmp_path):
    # A 2048 px slide whose ImageDescription claims 100 MB somewhere past the end of a 300-byte file.
    t = RawTiff()
    t.directory([(256, LONG, 1, long(2048)), (257, LONG, 1, long(2048)), (270, 2, 100_000_000, 16),
                 (322, SHORT, 1, short(512)), (323, SHORT, 1, short(512)), (324, LONG, 16, 16),
                 (325, LONG, 16, 16)])
    p = t.save(tmp_path / "desc.tif")
    with pytest.raises(SlideLimitError) as info:
        read_tiff_structure(p, SlideLimits())
    assert str(info.value) == (f"{p}: directory 0 ImageDescription: 100,000,000 values × 1 byte: 100,000,084 bytes "
                               f"(95.4 MiB) of structure in all, over the limit of 64 MiB (SLIDE_MAX_HEADER_BYTES)")
    with pytest.raises(SlideError, match=r"truncated: the file is \d+ bytes but directory 0's ImageDescription "
                                         r"would end at byte 100,000,016"):
        read_tiff_structure(p, replace(LIFTED, max_header_bytes=2**30))


def test_a_loop_in_the_chain_is_refused_not_followed(tmp_path):
    t = RawTiff()
    first = t.directory([(256, LONG, 1, long(64)), (257, LONG, 1, long(64))])
    struct.pack_into("<I", t.buf, first + 2 + 12 * 2, first)  # its next-directory offset points back at itself
    p = t.save(tmp_path / "loop.tif")
    with pytest.raises(SlideError) as info:
        read_tiff_structure(p, SlideLimits())
    assert str(info.value) == (f"{p}: directory 1 loops back to the directory at byte {first:,} (a damaged or "
                               f"crafted file)")


def test_too_many_directories_are_refused_after_walking_only_that_many(tmp_path):
    t = RawTiff()
    prev = None
    for _ in range(50):
        at = t.directory([(256, LONG, 1, long(16)), (257, LONG, 1, long(16))], first=prev is None)
        if prev is not None:
            struct.pack_into("<I", t.buf, prev + 2 + 12 * 2, at)
        prev = at
    p = t.save(tmp_path / "chain.tif")
    assert len(read_tiff_structure(p, replace(LIFTED, max_tiff_directories=50)).directories) == 50
    with pytest.raises(SlideLimitError) as info:
        read_tiff_structure(p, replace(LIFTED, max_tiff_directories=49))
    assert str(info.value) == f"{p}: chains more image directories than the limit of 49 (SLIDE_MAX_TIFF_DIRS)"


def test_image_data_past_the_end_is_a_truncated_file(tmp_path):
    p = tiled_rgb(tmp_path / "cut.tif", 1024, 1024, 512, stream=honest_tile(512, "deflate"))
    data = p.read_bytes()
    (table,) = [d.entries[324].value_at for d in read_tiff_structure(p, SlideLimits()).directories]
    patched = bytearray(data)
    struct.pack_into("<I", patched, table, len(data) - 10)  # tile 0 now starts 10 bytes before the end
    p.write_bytes(bytes(patched))
    with pytest.raises(SlideError, match=rf"truncated: the file is {len(data):,} bytes but its image data runs to "):
        open_slide(p)


def test_an_honest_crafted_slide_opens_and_reads_what_tifffile_reads(tmp_path):
    p = tiled_rgb(tmp_path / "ok.tif", 1024, 1024, 512, stream=honest_tile(512, "deflate"))
    with open_slide(p) as s, tifffile.TiffFile(p) as tif:
        assert s.reader == "tifffile"
        np.testing.assert_array_equal(s.read_region(s.levels[0], 0, 0, 1024, 1024), tif.pages[0].asarray())


def _tagged(path: Path, extra: list) -> Path:
    t = RawTiff()
    t.directory([(256, LONG, 1, long(64)), (257, LONG, 1, long(64)), *extra])
    t.blob(bytes(64))  # room for NDPI's 8-byte next offset and high-bits block (zeros: none, and no high bits)
    return t.save(path)


def _ascii(text: str) -> tuple[int, bytes]:
    data = text.encode() + b"\x00"
    return len(data), data


FLAVOURS = [  # what the first directory holds, the flavour (None: a plain TIFF, tifffile's)
    ([(65420, LONG, 1, long(1)), (271, 2, *_ascii("Hamamatsu"))], "ndpi"),
    ([(65420, LONG, 1, long(1))], None),  # the NDPI flag without Make: tifffile's is_ndpi says no
    ([(270, 2, *_ascii('<?xml version="1.0"?><scn xmlns="http://www.leica-microsystems.com/scn/2010/10/01"></scn>'))],
     "scn"),
    ([(305, 2, *_ascii("Philips DP v1.0")), (270, 2, *_ascii("<DataObject ObjectType=\"DPUfsImport\"></DataObject>"))],
     "philips"),
    ([(700, 1, *_ascii('<x:xmpmeta><iScan Magnification="40"/></x:xmpmeta>'))], "bif"),
    ([(305, 2, *_ascii("MedScan")), (270, 2, *_ascii("OverlapsXY=64 64"))], "trestle"),
    ([(305, 2, *_ascii("PerkinElmer-QPI"))], "qpi"),
    ([(270, 2, *_ascii("Aperio Image Library v12.0.15 |AppMag = 20|MPP = 0.499"))], "svs"),
    ([(270, 2, *_ascii('<?xml version="1.0"?><OME xmlns="http://www.openmicroscopy.org/Schemas/OME/2016-06"></OME>'))],
     "ome"),
    ([(270, 2, *_ascii("a plain description"))], None),
]


@pytest.mark.parametrize("extra, kind", FLAVOURS, ids=[str(f[1]) + str(i) for i, f in enumerate(FLAVOURS)])
def test_the_reader_is_chosen_from_the_first_directorys_tags(tmp_path, extra, kind):
    entries = [(tag, typ, count, value) for tag, typ, count, value in extra]
    assert flavour(read_tiff_structure(_tagged(tmp_path / "v.tif", entries), SlideLimits())) == kind

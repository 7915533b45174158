"""Write class-map overlays as tiled, lossless, pyramidal OME-TIFF (band by band) and a small PNG preview."""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence
from xml.sax.saxutils import escape, quoteattr

import imagecodecs
import numpy as np
import tifffile

OME_NS = "http://www.openmicroscopy.org/Schemas/OME/2016-06"
MICRO = "µ"  # U+00B5: the OME schema's UnitsLength spelling; "um" is rejected by the schema
CLASSES_NAMESPACE = "https://github.com/gpuburst/gpuburst/overlay/classes"
COLORS_NAMESPACE = "https://github.com/gpuburst/gpuburst/overlay/colors"
PROVENANCE_NAMESPACE = "https://github.com/gpuburst/gpuburst/overlay/provenance"


@dataclass(frozen=True)
class OverlaySettings:
    """How the overlay OME-TIFF and the preview are written."""

    tile: int = 256
    """Side of the overlay's square TIFF tiles, in overlay pixels (default 256, a multiple of 16)."""
    compression: str = "zlib"
    """Lossless codec for the label tiles: "zlib" (Adobe deflate) or "lzw" (default "zlib"); never JPEG."""
    level_factor: int = 4
    """Each pyramid level is this much smaller than the one above, 2 or 4 (default 4)."""
    bigtiff: bool | None = None
    """True/False forces the format; None writes BigTIFF only past ~1.8 GB of pixels (default None)."""
    preview_max_side: int = 1024
    """Longest side of the PNG preview, in pixels (default 1024)."""
    preview_alpha: float = 0.5
    """Opacity of class colours over the slide thumbnail in the preview, 0-1 (default 0.5)."""

    def __post_init__(self) -> None:
        if self.compression not in ("zlib", "lzw"):
            raise ValueError(f"overlay compression={self.compression!r}: expected 'zlib' or 'lzw' (labels must be lossless)")
        if self.level_factor not in (2, 4):
            raise ValueError(f"overlay level_factor={self.level_factor}: expected 2 or 4")
        if self.tile % 16 or self.tile <= 0:
            raise ValueError(f"overlay tile={self.tile}: must be a positive multiple of 16")


@dataclass
class OverlayResult:
    """What writing the overlay measured and produced."""

    path: Path
    levels: list[tuple[int, int]]  # (width, height) per level, level 0 first
    class_pixels: list[int]  # level-0 pixels per class
    preview_labels: np.ndarray  # a small level (<= 2048 px a side) for the preview
    bigtiff: bool
    write_s: float  # time spent encoding and writing, excluding waiting for the class maps
    produce_s: float  # time spent waiting for the bands (the inference feeding the writer)
    extra: dict = field(default_factory=dict)


def level_sizes(width: int, height: int, tile: int, factor: int) -> list[tuple[int, int]]:
    """Sizes of the overlay pyramid: factor**k smaller until a level fits one tile, always at least two levels."""
    sizes = [(width, height)]
    d = 1
    while max(sizes[-1]) > tile or len(sizes) < 2:
        d *= factor
        sizes.append((-(-width // d), -(-height // d)))
    return sizes


def _num(v: float) -> str:
    return f"{v:.10g}"


def build_ome_xml(
    *,
    name: str,
    width: int,
    height: int,
    mpp_x: float,
    mpp_y: float,
    classes: Sequence[str],
    colors: Sequence[Sequence[int]] | None = None,
    description: str = "",
    provenance: dict[str, str] | None = None,
) -> str:
    """OME-XML for a single-channel uint8 class map with PhysicalSizeX/Y in µm and class names as a MapAnnotation."""
    maps = [(CLASSES_NAMESPACE, {str(i): c for i, c in enumerate(classes)})]
    if colors:
        maps.append((COLORS_NAMESPACE, {str(i): "#%02x%02x%02x" % tuple(c[:3]) for i, c in enumerate(colors)}))
    if provenance:
        maps.append((PROVENANCE_NAMESPACE, {str(k): str(v) for k, v in provenance.items()}))
    refs = "".join(f'<AnnotationRef ID="Annotation:{i}"/>' for i in range(len(maps)))
    annotations = "".join(
        f'<MapAnnotation ID="Annotation:{i}" Namespace={quoteattr(ns)}><Value>'
        + "".join(f"<M K={quoteattr(k)}>{escape(v)}</M>" for k, v in values.items())
        + "</Value></MapAnnotation>"
        for i, (ns, values) in enumerate(maps)
    )
    desc = f"<Description>{escape(description)}</Description>" if description else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<OME xmlns="{OME_NS}" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
        f'xsi:schemaLocation="{OME_NS} {OME_NS}/ome.xsd" Creator="gpuburst worker">'
        f'<Image ID="Image:0" Name={quoteattr(name)}>{desc}'
        f'<Pixels ID="Pixels:0" DimensionOrder="XYCZT" Type="uint8" SignificantBits="8" '
        f'SizeX="{width}" SizeY="{height}" SizeC="1" SizeZ="1" SizeT="1" '
        f'PhysicalSizeX="{_num(mpp_x)}" PhysicalSizeXUnit="{MICRO}m" '
        f'PhysicalSizeY="{_num(mpp_y)}" PhysicalSizeYUnit="{MICRO}m">'
        '<Channel ID="Channel:0:0" Name="class" SamplesPerPixel="1"/>'
        '<TiffData IFD="0" PlaneCount="1"/>'
        f"</Pixels>{refs}</Image>"
        f"<StructuredAnnotations>{annotations}</StructuredAnnotations>"
        "</OME>"
    )


class _Spool:
    """Rows of one reduced level appended to a temporary file, read back in bands: memory stays one band."""

    def __init__(self, directory: str, width: int):
        fd, self.path = tempfile.mkstemp(prefix="overlay-level-", suffix=".raw", dir=directory)
        self.file = os.fdopen(fd, "w+b")
        self.width = width
        self.rows = 0

    def append(self, rows: np.ndarray) -> None:
        if rows.size:
            self.file.write(np.ascontiguousarray(rows).tobytes())
            self.rows += rows.shape[0]

    def read(self, y: int, n: int) -> np.ndarray:
        self.file.flush()
        self.file.seek(y * self.width)
        data = self.file.read(n * self.width)
        return np.frombuffer(data, np.uint8).reshape(n, self.width)

    def close(self) -> None:
        self.file.close()
        os.unlink(self.path)


def write_overlay(
    path: str | Path,
    bands: Iterable[np.ndarray],
    *,
    width: int,
    height: int,
    mpp_x: float,
    mpp_y: float,
    classes: Sequence[str],
    colors: Sequence[Sequence[int]] | None = None,
    name: str = "overlay",
    description: str = "",
    provenance: dict[str, str] | None = None,
    settings: OverlaySettings | None = None,
) -> OverlayResult:
    """Write a pyramidal OME-TIFF class map from `bands` (uint8, `tile` rows x width each, the last may be shorter).

    Level 0 is written as the bands arrive (they may be produced lazily by the inference); reduced levels are
    nearest-sampled from level 0 on the way, spooled to temporary files beside `path`, and written afterwards as
    SubIFDs. `mpp_x`/`mpp_y` are the µm per pixel of level 0. The OME-XML goes to tifffile as UTF-8 bytes.
    """
    s = settings or OverlaySettings()
    path = Path(path)
    sizes = level_sizes(width, height, s.tile, s.level_factor)
    ncls = len(classes)
    counts = np.zeros(max(ncls, 256), np.int64)
    bigtiff = s.bigtiff if s.bigtiff is not None else sum(w * h for w, h in sizes) > 1.8e9
    xml = build_ome_xml(
        name=name, width=width, height=height, mpp_x=mpp_x, mpp_y=mpp_y, classes=classes, colors=colors,
        description=description, provenance=provenance,
    )
    produce_s = 0.0
    t_start = time.perf_counter()
    T = s.tile
    # A small level 0 is kept whole for the preview; a large one is only ever seen one band at a time.
    keep0 = np.zeros((height, width), np.uint8) if max(width, height) <= 2048 else None

    def options(k: int) -> dict:
        d = s.level_factor**k
        return dict(
            dtype=np.uint8,
            photometric="minisblack",
            tile=(T, T),
            compression=s.compression,
            resolution=(1e4 / (mpp_x * d), 1e4 / (mpp_y * d)),
            resolutionunit="CENTIMETER",
            maxworkers=1,  # label tiles encode in microseconds; threads would only buffer more tiles
        )

    with tempfile.TemporaryDirectory(prefix=".overlay-", dir=path.parent) as spool_dir:
        spools = [_Spool(spool_dir, w) for w, _ in sizes[1:]]
        try:

            def level0_tiles() -> Iterator[np.ndarray]:
                nonlocal produce_s
                y = 0
                it = iter(bands)
                while y < height:
                    t0 = time.perf_counter()
                    band = next(it, None)
                    produce_s += time.perf_counter() - t0
                    want = min(T, height - y)
                    if band is None or band.shape != (want, width):
                        got = None if band is None else band.shape
                        raise ValueError(f"overlay band at row {y}: got shape {got}, expected {(want, width)}")
                    counts[:] += np.bincount(band.ravel(), minlength=counts.size)[: counts.size]
                    if keep0 is not None:
                        keep0[y : y + want] = band
                    rows = np.arange(y, y + want)
                    for k, spool in enumerate(spools, start=1):
                        d = s.level_factor**k
                        spool.append(band[rows % d == 0, ::d])
                    for x in range(0, width, T):
                        yield band[:, x : x + T]
                    y += want

            def spooled_tiles(spool: _Spool, h: int) -> Iterator[np.ndarray]:
                for y in range(0, h, T):
                    band = spool.read(y, min(T, h - y))
                    for x in range(0, spool.width, T):
                        yield band[:, x : x + T]

            with tifffile.TiffWriter(path, bigtiff=bigtiff, ome=False) as tif:
                tif.write(
                    level0_tiles(),
                    shape=(height, width),
                    subifds=len(sizes) - 1,
                    description=xml.encode("utf-8"),  # UTF-8 bytes: a str with "µ" is refused (7-bit ASCII)
                    metadata=None,
                    software="gpuburst",
                    **options(0),
                )
                for k, (spool, (w, h)) in enumerate(zip(spools, sizes[1:]), start=1):
                    if spool.rows != h:
                        raise RuntimeError(f"overlay level {k}: spooled {spool.rows} rows, expected {h}")
                    tif.write(spooled_tiles(spool, h), shape=(h, w), subfiletype=1, metadata=None, **options(k))
            if keep0 is not None:
                preview = keep0
            else:  # the finest reduced level small enough to hold (a few MB at most)
                pick = next((i for i, (w, h) in enumerate(sizes) if i and max(w, h) <= 2048), len(sizes) - 1)
                preview = spools[pick - 1].read(0, sizes[pick][1]).copy()
        finally:
            for spool in spools:
                spool.close()
    total = time.perf_counter() - t_start
    return OverlayResult(
        path=path,
        levels=sizes,
        class_pixels=[int(c) for c in counts[:ncls]],
        preview_labels=preview,
        bigtiff=bigtiff,
        write_s=total - produce_s,
        produce_s=produce_s,
        extra={"unknown_class_pixels": int(counts[ncls:].sum())},
    )


def colorize(labels: np.ndarray, colors: Sequence[Sequence[int]]) -> np.ndarray:
    """RGB image of a class map (class 0 black); classes past the colour table are white."""
    lut = np.full((256, 3), 255, np.uint8)
    lut[: len(colors)] = np.asarray(colors, np.uint8)[:, :3]
    return lut[labels]


def render_preview(
    thumbnail: np.ndarray, labels: np.ndarray, colors: Sequence[Sequence[int]], *, alpha: float = 0.5, max_side: int = 1024
) -> np.ndarray:
    """Class colours blended over the slide thumbnail (class 0 left clear), at most `max_side` pixels a side."""
    h, w = thumbnail.shape[:2]
    scale = min(1.0, max_side / max(h, w))
    ph, pw = max(int(round(h * scale)), 1), max(int(round(w * scale)), 1)

    def pick(n_in: int, n_out: int) -> np.ndarray:  # nearest sample positions, pixel centres
        return np.minimum((np.arange(n_out) + 0.5) * n_in / n_out, n_in - 1).astype(np.int64)

    out = np.ascontiguousarray(thumbnail[..., :3] if (ph, pw) == (h, w) else thumbnail[pick(h, ph)[:, None], pick(w, pw)[None, :], :3])
    lab = labels[pick(labels.shape[0], ph)[:, None], pick(labels.shape[1], pw)[None, :]]
    fg = lab > 0
    if fg.any():  # blend only where there is a class to show: most of a slide is background
        a = int(round(min(max(alpha, 0.0), 1.0) * 256))
        col = colorize(lab[fg], colors).astype(np.uint16)
        if np.shares_memory(out, thumbnail):  # never paint over the caller's thumbnail
            out = out.copy()
        out[fg] = ((out[fg].astype(np.uint16) * (256 - a) + col * a + 128) >> 8).astype(np.uint8)
    return out


def write_png(path: str | Path, rgb: np.ndarray) -> Path:
    """Write an RGB uint8 image as PNG (imagecodecs), via a temporary file and os.replace."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    # Level 1: a preview is written once per slide and read by people; fast beats a few % smaller.
    tmp.write_bytes(imagecodecs.png_encode(np.ascontiguousarray(rgb), level=1))
    os.replace(tmp, path)
    return path

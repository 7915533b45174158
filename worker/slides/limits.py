"""Limits on what an untrusted slide may declare (SlideLimits), checked from its headers before any pixel is decoded.

Slides are clinical files from outside the worker; a header can declare a level of 10^12 pixels or a 10 GB tile in a
file of one megabyte (a decompression bomb). Every reader hands what the header declares to these checks first, so
such a file is refused in one line (`SlideLimitError`, permanent: dead-lettered at once) instead of filling the
pod's memory, being evicted and retried. The defaults admit the largest slides real scanners write, with headroom.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from worker.slides.codec_headers import declared_size
from worker.slides.errors import SlideLimitError

MIB, GIB = 2**20, 2**30

#: The environment variable of each SlideLimits field (read by `SlideLimits.from_env`).
ENV = {
    "max_pixels": "SLIDE_MAX_PIXELS",
    "max_tile_side_px": "SLIDE_MAX_TILE_PX",
    "max_decoded_bytes": "SLIDE_MAX_DECODED_BYTES",
    "max_levels": "SLIDE_MAX_LEVELS",
    "max_file_bytes": "SLIDE_MAX_FILE_BYTES",
    "max_tiff_directories": "SLIDE_MAX_TIFF_DIRS",
    "max_tiles": "SLIDE_MAX_TILES",
    "min_tile_side_px": "SLIDE_MIN_TILE_PX",
    "max_header_bytes": "SLIDE_MAX_HEADER_BYTES",
}
_BYTE_FIELDS = ("max_decoded_bytes", "max_file_bytes", "max_header_bytes")
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


@dataclass(frozen=True)
class SlideLimits:
    """What one slide may declare before the worker refuses it; each field has an environment variable (`ENV`)."""

    max_pixels: int = 40_000_000_000
    """Most pixels (width x height) any pyramid level may declare; level 0 is the largest (env SLIDE_MAX_PIXELS).
    Default 4.0e10 px. The largest real slides: CAMELYON16's 40x TIFFs, 97,792 x 221,184 px = 2.2e10 px (OpenSlide's
    properties quoted in Bayer-Group/tiffslide#77, NKI-AI/dlup#40); a 40x NDPI of 118,784 x 102,400 px = 1.2e10 px
    (libvips/pyvips#97); the whole scan area of a 75 x 25 mm glass slide (about 55 x 25 mm) at 40x, 0.25 µm/px, is
    220,000 x 100,000 px = 2.2e10 px. 4.0e10 leaves 1.8x headroom over them; an 80x scan of a whole slide needs more."""
    max_tile_side_px: int = 8192
    """Longest side in pixels of one stored tile (env SLIDE_MAX_TILE_PX). Default 8192, twice the largest real ones:
    Hamamatsu tiled TIFF 4096 x 16 (openslide/openslide#188), NDPI restart-interval rows 4096 x 8 (pyvips#97), Aperio
    240-256, CAMELYON16 and Philips 512, DICOM 256-1024. Not applied to strips, nor to OpenSlide's Hamamatsu rows (one
    JPEG restart interval, which may span the level's whole width, e.g. 3968 x 8 in the NDPI sample): their
    decoded size is bounded by max_decoded_bytes instead."""
    max_decoded_bytes: int = 256 * MIB
    """Most bytes one decoded unit may declare: a tile, a strip, or OpenSlide's decode unit, as width x height x
    samples x bytes per sample (OpenSlide decodes into 4-byte ARGB) (env SLIDE_MAX_DECODED_BYTES). Default 256 MiB:
    the cap on one compressed strip this worker always had, and exactly a maximal 8192 x 8192 RGBA tile; real units
    are 0.2-3 MiB (a 1024 x 1024 RGB tile is 3 MiB). Several units are in flight at once (reader threads, prefetch),
    so this bounds the memory a slide can ask for per unit, not in all."""
    max_levels: int = 32
    """Most pyramid levels a slide may declare (env SLIDE_MAX_LEVELS). Default 32: a x2 pyramid from a level 0 at
    max_pixels down to one 256 px tile has 11 levels, down to 1 px 19; real files have 1-12 (the NDPI sample 7 with
    the levels OpenSlide adds, a 118,784 px NDPI 11, CAMELYON16 10)."""
    max_file_bytes: int = 64 * GIB
    """Most bytes one slide may take on disk: the S3 object, the file, or for a folder (a DICOM series, an MRXS with
    its data) all its files together; checked from the S3 listing before the download too (env
    SLIDE_MAX_FILE_BYTES). Default 64 GiB, the same as a slide prefix's cap (ConsumerSettings.max_prefix_bytes):
    real slides are 0.1-5 GB compressed (a 40x SVS 1-4 GB, an MRXS up to ~10 GB); scratch space must hold one."""
    max_tiff_directories: int = 1024
    """Most image directories (IFDs, SubIFDs aside) one TIFF-structured file may chain, counted by walking the
    chain only up to this many, before tifffile parses the directories (env SLIDE_MAX_TIFF_DIRS). Default 1024:
    real slides have 1-12 (an SVS: its levels plus thumbnail, label and macro; an NDPI its levels and macro), a
    z-stacked NDPI about a hundred; a million tiny directories would take tifffile minutes and gigabytes."""
    max_tiles: int = 2_097_152
    """Most tiles or strips one image may declare: a TIFF directory's tile (or strip) grid, a DICOM instance's
    frames (env SLIDE_MAX_TILES). Default 2,097,152 (2^21): a level at max_pixels in Aperio's 240 px tiles has
    694,445, in 256 px tiles 610,352, the Hamamatsu TIFF's 4096 x 16 px tiles 610,352; CAMELYON16's 97,792 x
    221,184 px level 0 in 512 px tiles has 82,632, the DICOM sample's largest instance 27 frames. Each tile costs the
    readers a table entry (8-16 bytes in the file, more once parsed), so a header declaring 10^8 tiles of 16 px,
    inside the pixel limit, would fill gigabytes before a pixel is read; 3x the largest real grid is refused first."""
    min_tile_side_px: int = 16
    """Shortest side in pixels a stored tile may have: TIFF TileWidth/TileLength, a multi-frame DICOM instance's
    Rows/Columns (env SLIDE_MIN_TILE_PX). Default 16: the TIFF 6.0 specification requires tile sides that are
    multiples of 16 (Section 15, TileWidth), and the narrowest real tiles are Hamamatsu's 4096 x 16. Strips (one
    row may be a strip) and single-frame DICOM images are not tiles and are not held to it; with max_tiles this
    keeps a level from being cut into millions of tiny tiles."""
    max_header_bytes: int = 64 * MIB
    """Most bytes of a slide's structure, read before any pixel: a TIFF's directory entries and the values they
    point at (tile offset and byte-count arrays, descriptions, XMP, ...) in all its directories together; a DICOM
    file's (or series') elements before its pixel data (env SLIDE_MAX_HEADER_BYTES). Default 64 MiB: the offset
    and byte-count arrays of a max_tiles grid in BigTIFF are 2^21 x 16 bytes = 32 MiB; the real slides' TIFF
    structures are 1.7-33 KB (CMU-1-Small-Region.svs 5.1 KB, the NDPI 33 KB), the DICOM sample's 10 instances 1.75
    MB together (an ICC profile per optical path in each); CAMELYON16's pyramid, ~110,000 tiles x 8 bytes in
    classic TIFF, about 0.9 MB. Counted from the declared counts, before any value is read, so refusing a header
    that declares 10^9 tiles costs a few KiB."""

    def validate(self) -> None:
        """Raise ValueError (one line naming the field and its environment variable) for a limit that is no number
        >= 1."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{f.name}={value!r} ({ENV[f.name]}): must be a whole number >= 1")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SlideLimits:
        """The defaults, overridden by whichever SLIDE_MAX_* variables are set (and not empty); ValueError (one line
        naming the variable and its value) for a value that is not a whole number >= 1. Sizes in bytes may carry a
        unit: 256MiB, 64GiB, 64Gi, 500MB."""
        env = os.environ if environ is None else environ
        values: dict[str, int] = {}
        for name, var in ENV.items():
            raw = env.get(var)
            if raw is None or raw.strip() == "":
                continue
            values[name] = _parse(var, raw, name in _BYTE_FIELDS)
        limits = cls(**values)
        limits.validate()
        return limits

    # -- the checks, each from what a header declares ----------------------------------------------------------
    def check_file(self, path: Path | str) -> None:
        """Refuse a slide that takes more than max_file_bytes on disk (a file, a folder, an index with its data)."""
        try:
            size = slide_bytes(Path(path))
        except OSError:  # missing or unreadable: the reader reports that in its own words
            return
        refusal = self.size_refusal(size)
        if refusal is not None:
            raise SlideLimitError(f"{path}: {refusal}")

    def size_refusal(self, size_bytes: int) -> str | None:
        """Why a slide of `size_bytes` is refused (one line, no path), or None when it is within max_file_bytes."""
        if size_bytes <= self.max_file_bytes:
            return None
        return (f"the slide is {_size(size_bytes)} over the limit of {_limit(self.max_file_bytes)} "
                f"({ENV['max_file_bytes']})")

    def check_levels(self, path: Path | str, count: int) -> None:
        """Refuse a slide declaring more than max_levels pyramid levels."""
        if count > self.max_levels:
            raise SlideLimitError(f"{path}: declares {count} pyramid levels over the limit of {self.max_levels} "
                                  f"({ENV['max_levels']})")

    def check_level(self, path: Path | str, index: int | str, width: int, height: int) -> None:
        """Refuse a level (`index`: a level number, or where the image is, e.g. "directory 3") declaring more than
        max_pixels pixels."""
        if width * height > self.max_pixels:
            raise SlideLimitError(f"{path}: {_at(index)} declares {width} × {height} px ({_sci(width * height)} px) "
                                  f"over the limit of {_sci(self.max_pixels)} px ({ENV['max_pixels']})")

    def check_tile_sides(self, path: Path | str, index: int | str, width: int, height: int, *,
                         kind: str = "tiles") -> None:
        """Refuse tiles longer than max_tile_side_px or shorter than min_tile_side_px on a side."""
        if max(width, height) > self.max_tile_side_px:
            raise SlideLimitError(f"{path}: {_at(index)} declares {kind} of {width} × {height} px over the limit "
                                  f"of {self.max_tile_side_px} px per side ({ENV['max_tile_side_px']})")
        if min(width, height) < self.min_tile_side_px:
            raise SlideLimitError(f"{path}: {_at(index)} declares {kind} of {width} × {height} px under the minimum "
                                  f"of {self.min_tile_side_px} px per side ({ENV['min_tile_side_px']})")

    def check_tile_count(self, path: Path | str, index: int | str, count: int, kind: str, detail: str = "") -> None:
        """Refuse an image declaring more than max_tiles tiles, strips or frames (`kind`); `detail` says how the
        count arises ("2048 × 2048 px in 16 × 16 px tiles")."""
        if count > self.max_tiles:
            how = f" ({detail})" if detail else ""
            raise SlideLimitError(f"{path}: {_at(index)} declares {count:,} {kind}{how} over the limit of "
                                  f"{self.max_tiles:,} ({ENV['max_tiles']})")

    def check_header_bytes(self, path: Path | str, what: str, total_bytes: int) -> None:
        """Refuse a slide whose structure (`what` tipped it over: "directory 0 TileOffsets: 10^9 values of 8
        bytes") adds up to more than max_header_bytes, counted before any of it is read."""
        if total_bytes > self.max_header_bytes:
            raise SlideLimitError(f"{path}: {what}: {_size(total_bytes)} of structure in all, over the limit of "
                                  f"{_limit(self.max_header_bytes)} ({ENV['max_header_bytes']})")

    def check_unit(self, path: Path | str, index: int | str, width: int, height: int, samples: int,
                   bytes_per_sample: int, *, kind: str = "tiles", check_side: bool = True) -> None:
        """Refuse a level whose decode unit (`kind`: tiles, strips, ...) is over max_tile_side_px on a side (when
        `check_side`) or over max_decoded_bytes decoded."""
        if check_side and max(width, height) > self.max_tile_side_px:
            raise SlideLimitError(f"{path}: {_at(index)} declares {kind} of {width} × {height} px over the limit "
                                  f"of {self.max_tile_side_px} px per side ({ENV['max_tile_side_px']})")
        if not self.unit_fits(width, height, samples, bytes_per_sample):
            size = width * height * samples * bytes_per_sample
            hint = "; re-save it tiled" if kind == "strips" else ""
            raise SlideLimitError(
                f"{path}: {_at(index)} declares {kind} of {width} × {height} px × {_n(samples, 'sample')} × "
                f"{_n(bytes_per_sample, 'byte')} ({_human(size)} decoded each) "
                f"over the limit of {_limit(self.max_decoded_bytes)} ({ENV['max_decoded_bytes']}){hint}")

    def check_stored(self, path: Path | str, index: int | str, stored_bytes: int) -> None:
        """Refuse a level one of whose stored (compressed) tiles or strips is over twice max_decoded_bytes: it is
        read whole into memory before it is decoded. Twice, as incompressible pixels grow a little when compressed
        (zlib by a few bytes per 16 KiB, JPEG of noise at high quality by more)."""
        if stored_bytes > 2 * self.max_decoded_bytes:
            raise SlideLimitError(f"{path}: {_at(index)} declares a stored tile or strip of {_size(stored_bytes)} "
                                  f"over the limit of {_limit(2 * self.max_decoded_bytes)}, twice "
                                  f"{ENV['max_decoded_bytes']}")

    def unit_fits(self, width: int, height: int, samples: int, bytes_per_sample: int) -> bool:
        """Whether one decoded unit of that shape is within max_decoded_bytes."""
        return width * height * samples * bytes_per_sample <= self.max_decoded_bytes

    def check_stream(self, path: Path | str, what: str, compression: int, data: bytes, width: int,
                     height: int, *, min_height: int | None = None) -> None:
        """Refuse a JPEG or JPEG 2000 tile or strip (`what`, e.g. "level 0 tile (3, 4)") whose own header declares
        another size than the `width` x `height` the file declares for it (a last strip may hold from `min_height`
        rows): the decoder allocates what the stream says, so a larger one is a bomb, and a smaller one would be
        analysed as what it is not."""
        d = declared_size(compression, data)
        if d is None:
            return
        low = height if min_height is None else min_height
        if d.width > width or d.height > height:
            relation = "more than"
        elif d.width < width or d.height < low:
            relation = "fewer than"
        else:
            return
        raise SlideLimitError(f"{path}: {what}: its {d.codec} data declares {d.width} × {d.height} px, {relation} "
                              f"the {width} × {height} px the file declares for it (a decompression bomb or a "
                              f"damaged file)")


def slide_bytes(path: Path) -> int:
    """Bytes a slide takes on disk: a file; a folder's files (all depths, links not followed); an .mrxs index with
    its data folder beside it; a .vms index with the other files of its folder."""
    if path.is_dir():
        return _tree_bytes(path)
    size = path.stat().st_size
    suffix = path.suffix.lower()
    if suffix == ".mrxs" and path.with_suffix("").is_dir():
        size += _tree_bytes(path.with_suffix(""))
    elif suffix == ".vms":
        size = _tree_bytes(path.parent)
    return size


def _tree_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            p = Path(root, name)
            if not p.is_symlink():
                total += p.stat().st_size
    return total


_current: contextvars.ContextVar[SlideLimits | None] = contextvars.ContextVar("slide_limits", default=None)


def current_limits() -> SlideLimits:
    """The limits readers apply when given none: those of the innermost `use_limits` block, else the environment's
    (`SlideLimits.from_env`, which raises ValueError for a bad value)."""
    limits = _current.get()
    return limits if limits is not None else SlideLimits.from_env()


@contextlib.contextmanager
def use_limits(limits: SlideLimits) -> Iterator[SlideLimits]:
    """Apply `limits` to every slide opened in this block (in this thread or task), e.g. the consumer's settings
    around one message."""
    token = _current.set(limits)
    try:
        yield limits
    finally:
        _current.reset(token)


def parse_bytes(var: str, raw: str) -> int:
    """Bytes from the environment variable `var`: a whole number >= 1, or one with a unit (256MiB, 64GiB, 64Gi,
    500MB, 1.5GiB); ValueError, one line naming the variable and the value."""
    return _parse(var, raw, True)


def _parse(var: str, raw: str, is_bytes: bool) -> int:
    """A whole number >= 1 from an environment value: 40000000000, 40_000_000_000, 4e10; with a unit for bytes."""
    text = raw.strip().replace("_", "")
    unit = 1
    if is_bytes:
        m = re.fullmatch(r"(.*?)\s*([kmgt]i?)?b?", text, re.IGNORECASE)
        if m and m.group(1):
            text, unit = m.group(1), _UNITS[(m.group(2) or "").lower()]
    example = "268435456, 256MiB or 64GiB" if is_bytes else "40000000000 or 4e10"
    try:
        number = float(text) * unit if re.search(r"[.eE]", text) else int(text) * unit
    except ValueError:
        number = None
    if number is None or number != number or number in (float("inf"), float("-inf")) or number != int(number) \
            or number < 1:
        raise ValueError(f"{var}={raw!r}: must be a whole number >= 1 (e.g. {example})")
    return int(number)


def _at(index: int | str) -> str:
    """"level 3" for a level number; a place given in words ("directory 0", "instance 5_0") as it is."""
    return f"level {index}" if isinstance(index, int) else index


def _sci(n: float) -> str:
    """4.0e10, 1.0e12: a count in scientific notation, as a person writes it."""
    mantissa, exponent = f"{n:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _size(n: int) -> str:
    """2,000 bytes (2 KiB): a size exactly, and roughly in binary units once it is over 1 KiB."""
    return f"{n:,} bytes ({_human(n)})" if n >= 1024 else f"{n:,} bytes"


def _limit(n: int) -> str:
    """256 MiB, 64 GiB when a limit is a whole number of a binary unit; else exactly, 1,999 bytes."""
    for unit, size in (("TiB", 2**40), ("GiB", GIB), ("MiB", MIB), ("KiB", 2**10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n:,} bytes"


def _human(n: int) -> str:
    """Bytes in binary units: 256 MiB, 64 GiB, 1.5 GiB."""
    for unit, size in (("TiB", 2**40), ("GiB", GIB), ("MiB", MIB), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"

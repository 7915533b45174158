"""What the tifffile reader asks of one tifffile page: usable pixels, a codec it decodes with a bound, JPEG colour
spaces for the direct decode, and a few words on an image it refuses."""
from __future__ import annotations

import numpy as np
import tifffile

from worker.slides.codec_headers import JPEG2000_COMPRESSIONS, JPEG_COMPRESSIONS
from worker.slides.tile_decode import BOUNDED_CODECS, NAMES

# Tiles and strips of these codecs carry their own pixel size, checked against the file's before decoding; the
# others are decoded here into a buffer of the declared size (tile_decode), or (1) used as stored.
SIZED_STREAMS = JPEG_COMPRESSIONS | JPEG2000_COMPRESSIONS
_DECODABLE = SIZED_STREAMS | set(BOUNDED_CODECS) | {1}


def codec_refusal(page) -> str | None:
    """Why the reader will not decode this page (a compression it cannot decode with a bound on its output: WebP,
    JPEG XL, ...; YCbCr stored without JPEG, which tifffile would hand back unconverted), or None."""
    compression = int(page.compression)
    if compression not in _DECODABLE:
        return (f"compression {compression} ({NAMES.get(compression, 'unknown')}) is not one this worker decodes "
                f"with a bound on its output (none, LZW, deflate, PackBits, ZSTD, JPEG, JPEG 2000)")
    if int(page.photometric) == 6 and compression not in SIZED_STREAMS:
        return "YCbCr pixels stored without JPEG compression are not read"
    return None


def jpeg_colorspaces(page) -> tuple | None:
    try:
        if (
            page.compression == 7 and page.is_tiled and page.samplesperpixel == 3 and page.bitspersample == 8
            and page.planarconfig == 1 and not page.extrasamples and page.fillorder == 1
        ):
            return tifffile.tifffile.jpeg_decode_colorspace(
                page.photometric, page.planarconfig, page.extrasamples, page.is_jfif
            )
    except Exception:  # noqa: BLE001 - anything odd: let tifffile decode it
        pass
    return None


def is_usable(page) -> bool:
    """8-bit RGB (or YCbCr JPEG) with 3-4 samples, or 8-bit single-channel grayscale."""
    try:
        if page.dtype != np.uint8:
            return False
        if page.samplesperpixel in (3, 4) and int(page.photometric) in (2, 6):  # RGB, YCbCr (JPEG)
            return True
        return page.samplesperpixel == 1 and int(page.photometric) in (0, 1)  # MINISWHITE/MINISBLACK
    except Exception:  # noqa: BLE001
        return False


def planes(series, page) -> int:
    """Images stacked in a series beyond one (channels, z, time): a multi-channel stack is not one RGB image."""
    try:
        n = int(np.prod(series.shape))
        return max(1, n // max(1, page.imagewidth * page.imagelength * page.samplesperpixel))
    except Exception:  # noqa: BLE001
        return 1


def describe_page(page, series) -> str:
    """A few words on what an image is, for the refusal of a slide that is not RGB: dtype, samples, channels."""
    try:
        photometric = page.photometric.name if hasattr(page.photometric, "name") else str(page.photometric)
        shape = "x".join(str(n) for n in series.shape)
        axes = getattr(series, "axes", "")
        return f"{page.dtype} {photometric} {shape} {axes}".strip()
    except Exception:  # noqa: BLE001
        return "an unreadable image"

"""Whole-slide images from real scanners behind one `Slide` interface, plus tissue detection on them.

`open_slide(path)` picks the reader from the content: tifffile (generic/OME-TIFF, Aperio SVS), OpenSlide (NDPI,
MRXS, SCN, BIF, VMS, Philips TIFF) or wsidicom (DICOM WSI, a folder of instances). What a slide may declare is
bounded by `SlideLimits` (limits.py), checked from its headers before any pixel is decoded. Names are imported
lazily (PEP 562), so `worker.slides.limits` costs the consumer no numpy, tifffile or OpenSlide.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "Colour": "worker.slides.colour", "classify": "worker.slides.colour",
    "virtual_brightfield_lut": "worker.slides.colour",
    "open_slide": "worker.slides.detect",
    "DicomSlide": "worker.slides.dicom_slide",
    "SlideError": "worker.slides.errors", "SlideLimitError": "worker.slides.errors",
    "SlideLimits": "worker.slides.limits", "current_limits": "worker.slides.limits",
    "use_limits": "worker.slides.limits",
    "OpenSlideSlide": "worker.slides.openslide_slide",
    "MPP_FLAG": "worker.slides.slide", "MPP_PLAUSIBLE_UM": "worker.slides.slide", "Level": "worker.slides.slide",
    "Slide": "worker.slides.slide", "TileCache": "worker.slides.slide", "area_downsample": "worker.slides.slide",
    "TiffSlide": "worker.slides.tiff_slide",
    "TissueSettings": "worker.slides.tissue", "dilate": "worker.slides.tissue", "tissue_mask": "worker.slides.tissue",
    "tissue_tiles": "worker.slides.tissue",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'worker.slides' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

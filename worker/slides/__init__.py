"""Whole-slide images from real scanners behind one `Slide` interface, plus tissue detection on them.

`open_slide(path)` picks the reader from the content: tifffile (generic/OME-TIFF, Aperio SVS), OpenSlide (NDPI,
MRXS, SCN, BIF, VMS, Philips TIFF) or wsidicom (DICOM WSI, a folder of instances).
"""
from worker.slides.colour import Colour, classify, virtual_brightfield_lut
from worker.slides.detect import open_slide
from worker.slides.dicom_slide import DicomSlide
from worker.slides.openslide_slide import OpenSlideSlide
from worker.slides.slide import MPP_FLAG, MPP_PLAUSIBLE_UM, Level, Slide, SlideError, TileCache, area_downsample
from worker.slides.tiff_slide import TiffSlide
from worker.slides.tissue import TissueSettings, dilate, tissue_mask, tissue_tiles

__all__ = [
    "MPP_FLAG", "MPP_PLAUSIBLE_UM", "Colour", "DicomSlide", "Level", "OpenSlideSlide", "Slide", "SlideError",
    "TiffSlide", "TileCache", "TissueSettings", "area_downsample", "classify", "dilate", "open_slide",
    "tissue_mask", "tissue_tiles", "virtual_brightfield_lut",
]

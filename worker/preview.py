"""The slide preview a person looks at: the slide and its class map side by side, the classes in colours that stand
out from any stain, and a legend of the class names with their areas."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from worker.overlay import render_preview

STAIN_OD = {
    "hematoxylin": (0.65, 0.70, 0.29),
    "eosin": (0.07, 0.99, 0.11),
    "DAB": (0.27, 0.57, 0.78),
}
"""Optical density per unit of each stain in R, G, B: Ruifrok & Johnston, "Quantification of histochemical staining
by color deconvolution", Anal Quant Cytol Histol 23(4):291-299, 2001 (scikit-image's `rgb_from_hed`). A pixel stained
with concentrations c is 255 * exp(-sum(c_i * OD_i)) in each channel (Beer-Lambert)."""

MIN_STAIN_DELTA_E = 50.0
"""The least CIE76 colour difference (ΔE*ab) between a class colour and any colour a stain mixture can take
(`stain_gamut`). A just noticeable difference is about 2.3 (Sharma, Digital Color Imaging Handbook, 2003); 50 is this
module's choice, a difference of hue rather than shade: the old built-in blue (40, 90, 230) is 28 from hematoxylin and
the old red (230, 60, 40) 45 from a DAB brown, which is how they hid in the stain."""

MIN_CLASS_DELTA_E = 30.0
"""The least ΔE*ab between two classes' display colours, so no two classes read as one."""

CONTRAST_COLORS: tuple[tuple[int, int, int], ...] = (
    (255, 230, 0),   # yellow: ΔE 77 from the nearest stain colour (a pale DAB brown)
    (0, 200, 60),    # green: 88
    (0, 255, 255),   # cyan: 51 (from white: on the greyed slide it is the most saturated thing there)
    (255, 140, 0),   # orange: 54 (a dark DAB brown)
    (150, 255, 0),   # lime: 101
)
"""Class colours no H&E, H-DAB or E-DAB mixture takes (each at least MIN_STAIN_DELTA_E from `stain_gamut`), in the
order classes 1, 2, ... get them; tests/worker/test_preview.py measures each."""

GREY_LIFT = 0.55
"""How much of the slide's darkness the class-map panel keeps: its slide is grey, lifted towards white so a class
colour over it is the strongest thing in the panel (0 = white, 1 = the slide's own grey; default 0.55)."""

BACKGROUND = (255, 255, 255)
TEXT = (20, 20, 20)
GAP = 16
"""Pixels between the panels and around them."""


def _srgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    """CIE L*a*b* (D65) of sRGB colours (..., 3) in 0-255 (IEC 61966-2-1 transfer, CIE 15 formulas)."""
    c = np.asarray(rgb, np.float64) / 255.0
    c = np.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)
    m = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                  [0.0193339, 0.1191920, 0.9503041]])
    xyz = c @ m.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


def stain_gamut(steps: int = 31, max_concentration: float = 3.0) -> np.ndarray:
    """RGB colours (N x 3, 0-255) of hematoxylin with eosin and of hematoxylin with DAB, each from 0 (unstained,
    white) to `max_concentration` (near black), on a `steps` x `steps` grid: what a stained slide can look like."""
    od = {k: np.asarray(v) for k, v in STAIN_OD.items()}
    c = np.linspace(0.0, max_concentration, steps)
    a, b = np.meshgrid(c, c, indexing="ij")
    mixes = [a[..., None] * od["hematoxylin"] + b[..., None] * od[other] for other in ("eosin", "DAB")]
    return (255.0 * np.exp(-np.concatenate([m.reshape(-1, 3) for m in mixes]))).round()


_GAMUT_LAB = _srgb_to_lab(stain_gamut())


def stain_distance(color: Sequence[int]) -> float:
    """The least ΔE*ab (CIE76) between `color` and any colour of `stain_gamut`."""
    return float(np.sqrt(((_GAMUT_LAB - _srgb_to_lab(np.asarray(color[:3]))) ** 2).sum(-1)).min())


def color_distance(a: Sequence[int], b: Sequence[int]) -> float:
    """ΔE*ab (CIE76) between two RGB colours."""
    return float(np.sqrt(((_srgb_to_lab(np.asarray(a[:3])) - _srgb_to_lab(np.asarray(b[:3]))) ** 2).sum()))


def display_colors(colors: Sequence[Sequence[int]]) -> list[tuple[int, int, int]]:
    """The colour each class is drawn in: the model's own where it stands out from every stain and from the
    classes before it, else the next CONTRAST_COLORS entry that does. Class 0 (background) is never drawn."""
    out: list[tuple[int, int, int]] = []
    spare = iter(CONTRAST_COLORS)
    for i, c in enumerate(colors):
        rgb = tuple(int(v) for v in c[:3])
        if i == 0:
            out.append(rgb)
            continue
        ok = stain_distance(rgb) >= MIN_STAIN_DELTA_E and all(color_distance(rgb, o) >= MIN_CLASS_DELTA_E
                                                               for o in out[1:])
        if not ok:
            rgb = next((p for p in spare if all(color_distance(p, o) >= MIN_CLASS_DELTA_E for o in out[1:])),
                       CONTRAST_COLORS[(i - 1) % len(CONTRAST_COLORS)])
        out.append(rgb)
    return out


@dataclass(frozen=True)
class LegendEntry:
    """One class in the preview's legend."""

    name: str
    """The class name (the model's)."""
    color: tuple[int, int, int]
    """The colour it is drawn in (RGB 0-255)."""
    area_mm2: float
    """Its area on the slide, in mm² (its overlay pixels times their physical size)."""
    tissue_percent: float | None
    """Its area as a percentage of the slide's tissue area; None when the tissue area is unknown or 0."""

    def label(self) -> str:
        """The legend's text for this class."""
        share = f" ({self.tissue_percent:.1f} % of tissue)" if self.tissue_percent is not None else ""
        return f"{self.name}: {self.area_mm2:.3g} mm²{share}"


@dataclass
class Preview:
    """The rendered preview and what it shows."""

    rgb: np.ndarray
    """The image, H x W x 3 uint8."""
    legend: list[LegendEntry]
    """The legend's classes, in class order (background left out)."""
    boxes: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    """Where each part is, as (left, top, right, bottom) pixels: "slide", "classes", "legend", and "swatch:<name>"
    for each class's colour square."""


def legend_entries(classes: Sequence[str], colors: Sequence[Sequence[int]], class_area_um2: Sequence[float],
                   tissue_area_um2: float | None) -> list[LegendEntry]:
    """A LegendEntry per class but the background (class 0), with its area in mm² and its share of the tissue."""
    out = []
    for i, name in enumerate(classes):
        if i == 0:
            continue
        area = float(class_area_um2[i]) if i < len(class_area_um2) else 0.0
        percent = 100.0 * area / tissue_area_um2 if tissue_area_um2 else None
        out.append(LegendEntry(str(name), tuple(int(v) for v in colors[i][:3]), area / 1e6, percent))
    return out


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)  # Pillow's bundled scalable font (needs FreeType)
    except (TypeError, ValueError, OSError, ImportError):
        return ImageFont.load_default()


def render_slide_preview(thumbnail: np.ndarray, labels: np.ndarray, classes: Sequence[str],
                         colors: Sequence[Sequence[int]], *, class_area_um2: Sequence[float],
                         tissue_area_um2: float | None, alpha: float = 0.85, max_side: int = 1024,
                         title: str = "") -> Preview:
    """The slide (left) and its class map (right: the slide greyed and lifted, each class painted over it in
    `display_colors(colors)` at `alpha`), each at most `max_side` pixels a side, above a legend of the class names
    with their areas (`class_area_um2` per class, in µm²) and their share of `tissue_area_um2`."""
    from PIL import Image, ImageDraw

    shown = display_colors(colors)
    slide = render_preview(thumbnail, labels, shown, alpha=0.0, max_side=max_side)  # the slide alone, resampled
    luminance = slide.astype(np.float32) @ np.array([0.2126, 0.7152, 0.0722], np.float32)
    grey = 255.0 - (255.0 - luminance) * GREY_LIFT
    base = np.repeat(grey.round().astype(np.uint8)[..., None], 3, axis=2)
    painted = render_preview(base, labels, shown, alpha=alpha, max_side=max_side)
    legend = legend_entries(classes, shown, class_area_um2, tissue_area_um2)

    ph, pw = slide.shape[:2]
    text_px = max(12, min(18, max(pw, 240) // 40))
    font, small = _font(text_px + 2), _font(text_px)
    row = text_px + 10
    caption = row
    legend_h = GAP + row * (len(legend) + 1) + GAP
    width = max(2 * pw + 3 * GAP, 460)
    height = GAP + caption + ph + legend_h
    image = Image.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(image)
    top = GAP + caption
    boxes = {"slide": (GAP, top, GAP + pw, top + ph), "classes": (2 * GAP + pw, top, 2 * GAP + 2 * pw, top + ph)}
    image.paste(Image.fromarray(slide), boxes["slide"][:2])
    image.paste(Image.fromarray(painted), boxes["classes"][:2])
    draw.text((GAP, GAP), "slide", fill=TEXT, font=font)
    draw.text((2 * GAP + pw, GAP), "classes" + (f" ({title})" if title else ""), fill=TEXT, font=font)
    y = top + ph + GAP
    boxes["legend"] = (GAP, y, width - GAP, height - GAP)
    draw.text((GAP, y), "Classes: area on the slide, share of the tissue", fill=TEXT, font=font)
    for entry in legend:
        y += row
        swatch = (GAP, y + 2, GAP + text_px, y + 2 + text_px)
        draw.rectangle(swatch, fill=entry.color, outline=TEXT)
        boxes[f"swatch:{entry.name}"] = swatch
        _superscript_text(draw, (GAP + text_px + 8, y), entry.label(), small, _font(max(8, text_px * 2 // 3)))
    return Preview(np.asarray(image, np.uint8), legend, boxes)


def _superscript_text(draw, xy: tuple[int, int], text: str, font, small_font) -> None:
    """`text` with each "²" drawn as a raised small "2": Pillow's bundled font has no glyph for U+00B2."""
    x, y = xy
    for i, part in enumerate(text.split("²")):
        if i:
            draw.text((x, y - 2), "2", fill=TEXT, font=small_font)
            x += draw.textlength("2", font=small_font) + 1
        draw.text((x, y), part, fill=TEXT, font=font)
        x += draw.textlength(part, font=font)

"""What kind of image a slide holds (brightfield RGB, fluorescence, one channel) and how it becomes brightfield RGB."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Haematoxylin's optical density per RGB channel (Ruifrok & Johnston 2001, normalised): a fluorescence signal is
# drawn as if it were that much haematoxylin, so bright signal becomes purple on white, like a nuclear stain.
_HAEMATOXYLIN_OD = np.array([0.650, 0.704, 0.286])
# Optical density of the strongest signal (99.5th percentile): dark purple, not black (transmission ~ 0.1-0.5).
_MAX_OD = 2.2
# A brightfield scan's background is glass (bright); a fluorescence scan's is dark. Mean of a slide's brightest
# common level (its median pixel) below this is a dark-background image.
DARK_BACKGROUND = 100


@dataclass
class Colour:
    """How a slide's stored samples relate to the brightfield RGB the model expects."""

    kind: str = "brightfield RGB"
    """What was found: "brightfield RGB", "fluorescence RGB" or "fluorescence, single channel" (default
    "brightfield RGB")."""
    samples: int = 3
    """Samples per stored pixel (default 3)."""
    conversion: str | None = None
    """How pixels are converted before analysis, in words; None when they are used as stored (default None)."""
    lut: np.ndarray | None = field(default=None, repr=False)
    """(256, 3) uint8 table from the signal (max over channels) to RGB; None when no conversion (default None)."""
    stats: dict = field(default_factory=dict)
    """The figures the decision was made on: background and signal levels (0-255)."""

    def convert(self, raw: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Stored samples (h, w, C) to brightfield RGB in `out` (h, w, 3)."""
        if self.lut is None:
            if raw.shape[-1] == 1:
                out[:] = raw
            else:
                out[:] = raw[..., :3]
            return out
        signal = raw[..., 0] if raw.shape[-1] == 1 else raw[..., :3].max(axis=-1)
        np.take(self.lut, signal, axis=0, out=out)
        return out

    def describe(self) -> dict:
        return {"found": self.kind, "samples_per_pixel": self.samples, "converted": self.conversion,
                **({"levels_0_255": self.stats} if self.stats else {})}


def virtual_brightfield_lut(background: float, signal_high: float) -> np.ndarray:
    """The (256, 3) table drawing fluorescence as brightfield: Beer-Lambert, signal as haematoxylin density.

    Intensities at or below `background` become white (glass); `signal_high` and above get the darkest purple.
    """
    span = max(float(signal_high) - float(background), 1.0)
    s = np.clip((np.arange(256, dtype=np.float64) - background) / span, 0.0, 1.0)
    rgb = 255.0 * np.exp(-np.outer(s * _MAX_OD, _HAEMATOXYLIN_OD))
    return np.clip(np.round(rgb), 0, 255).astype(np.uint8)


def classify(sample: np.ndarray, *, fluorescence_hint: bool | None = None) -> Colour:
    """Decide from a raw sample of the slide (h, w, C uint8) what it is and how to convert it.

    Dark background (median brightness below DARK_BACKGROUND), or a reader's own word that it is fluorescence:
    fluorescence, converted to virtual brightfield. A single channel on a bright background is a grayscale
    brightfield scan: it is left as is (Colour.kind says so) and the caller refuses it, since stain colour is gone.
    """
    channels = sample.shape[-1]
    signal = sample[..., 0] if channels == 1 else sample[..., :3].max(axis=-1)
    flat = signal.reshape(-1)
    background = float(np.median(flat))
    dark = background < DARK_BACKGROUND if fluorescence_hint is None else bool(fluorescence_hint)
    if not dark:
        kind = "brightfield RGB" if channels >= 3 else "brightfield, single channel (grayscale)"
        return Colour(kind=kind, samples=channels, stats={"median": round(background, 1)})
    high = float(np.percentile(flat, 99.5))
    kind = "fluorescence RGB" if channels >= 3 else "fluorescence, single channel"
    lut = virtual_brightfield_lut(background, max(high, background + 8.0))
    what = "the brightest channel" if channels >= 3 else "the channel"
    conversion = (
        f"{kind} converted to virtual brightfield: {what} drawn as haematoxylin density (Beer-Lambert), "
        f"background {background:.0f} -> white, {high:.0f} and above -> darkest; the built-in model was not "
        f"trained on such images"
    )
    return Colour(kind=kind, samples=channels, conversion=conversion, lut=lut,
                  stats={"median": round(background, 1), "p99_5": round(high, 1)})

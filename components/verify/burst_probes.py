"""The burst check's probe slides and their messages: a small real slide written on the fly, one message per probe,
and how a probe is recognised."""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..spec.verify_admission import PROBE_FOLDER

BURST_ATTRIBUTE = "gpuburst-verify-burst"
"""String message attribute on every burst probe (value: the run's id). Not keda.PROBE_ATTRIBUTE: the worker
deletes a message carrying that one unprocessed, and a burst probe must be processed like real work."""


PROBE_SIDE_PX = 1024
"""Side of the square probe slide, pixels (full resolution)."""


PROBE_MPP_UM = 0.5
"""Pixel size of the probe slide, µm per pixel (the built-in model's input resolution, 20x)."""


MAX_PROBES = 50
"""Most probe slides one run may send."""


OUTPUT_SUFFIXES = (".overlay.ome.tif", ".preview.png", ".json")
"""The worker's result files per slide (worker/messages.py OUTPUT_SUFFIXES); the summary (.json) is written last."""


def probe_tiff(seed: int = 0, side_px: int = PROBE_SIDE_PX, mpp_um: float = PROBE_MPP_UM, tile: int = 256) -> bytes:
    """A small calibrated pyramidal tiled TIFF (zlib, 2 levels as SubIFDs, X/YResolution in CENTIMETER) with an
    H&E-like tissue blob and nuclei, generated here so the installed package needs no `worker` import."""
    import numpy as np
    import tifffile

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side_px, 0:side_px].astype(np.float32) / side_px
    angle = np.arctan2(yy - 0.5, xx - 0.5)
    edge = 0.33 + 0.04 * np.sin(5 * angle + seed) + 0.02 * np.sin(11 * angle)
    tissue = np.hypot(xx - 0.5, (yy - 0.5) * 1.2) < edge
    img = np.empty((side_px, side_px, 3), np.float32)
    img[:] = (246, 244, 247)  # glass
    img[tissue] = (222, 150, 192)  # eosin pink
    centres = rng.uniform(0.2, 0.8, size=(400, 2)) * side_px
    r_px = 3.5 / mpp_um  # nuclei ~7 µm across
    for cx, cy in centres:
        if not tissue[int(cy), int(cx)]:
            continue
        x0, x1 = int(max(0, cx - r_px - 1)), int(min(side_px, cx + r_px + 2))
        y0, y1 = int(max(0, cy - r_px - 1)), int(min(side_px, cy + r_px + 2))
        sub_y, sub_x = np.mgrid[y0:y1, x0:x1]
        disc = (sub_x - cx) ** 2 + (sub_y - cy) ** 2 <= r_px ** 2
        img[y0:y1, x0:x1][disc] = (92, 52, 128)  # haematoxylin purple
    img += rng.normal(0, 6, img.shape).astype(np.float32) * tissue[..., None]
    level0 = np.clip(img, 0, 255).astype(np.uint8)
    f = 4
    level1 = level0.reshape(side_px // f, f, side_px // f, f, 3).mean(axis=(1, 3)).round().astype(np.uint8)
    per_cm = 1e4 / mpp_um
    buf = io.BytesIO()
    with tifffile.TiffWriter(buf) as tif:
        tif.write(level0, photometric="rgb", tile=(tile, tile), compression="zlib", subifds=1,
                  resolution=(per_cm, per_cm), resolutionunit="CENTIMETER", software="gpuburst verify burst probe")
        tif.write(level1, photometric="rgb", tile=(tile, tile), compression="zlib", subfiletype=1,
                  resolution=(per_cm / f, per_cm / f), resolutionunit="CENTIMETER")
    return buf.getvalue()


def _folder(prefix: str) -> str:
    prefix = prefix or ""
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


@dataclass(frozen=True)
class Probe:
    """One probe slide of a run: where it is uploaded, where its results go, and its message body."""

    probe_id: str
    """The slide_id of the probe (`burst-<run 8 hex>-<i>`), also the name of its result files."""
    slides_bucket: str
    """Bucket of the probe slide."""
    slide_key: str
    """Key of the probe slide: `<slides prefix>gpuburst-verify/<run>/<probe_id>.tif`."""
    results_bucket: str
    """Bucket of its results."""
    output_key: str
    """Key prefix of its results: `<results prefix>gpuburst-verify/<run>/`."""

    @property
    def summary_key(self) -> str:
        """The result summary's key (the worker's commit marker)."""
        return f"{self.output_key}{self.probe_id}.json"

    @property
    def result_keys(self) -> list[str]:
        """Every result file the worker writes for it."""
        return [f"{self.output_key}{self.probe_id}{s}" for s in OUTPUT_SUFFIXES]

    def body(self) -> str:
        """The message body in the worker's contract (worker/messages.py: slide, output, slide_id)."""
        return json.dumps({"output": f"s3://{self.results_bucket}/{self.output_key}",
                           "slide": f"s3://{self.slides_bucket}/{self.slide_key}", "slide_id": self.probe_id},
                          sort_keys=True)


def make_probes(run_id: str, n: int, *, slides_bucket: str, slides_prefix: str, results_bucket: str,
                results_prefix: str) -> list[Probe]:
    """The run's N probes (pure)."""
    short = run_id.replace("-", "")[:8]
    slides = f"{_folder(slides_prefix)}{PROBE_FOLDER}{run_id}/"
    output = f"{_folder(results_prefix)}{PROBE_FOLDER}{run_id}/"
    return [Probe(f"burst-{short}-{i + 1}", slides_bucket, f"{slides}burst-{short}-{i + 1}.tif", results_bucket,
                  output) for i in range(n)]


def is_burst_probe(message: dict[str, Any], run_id: str) -> bool:
    """True when a received SQS message is one of this run's probes (by its message attribute)."""
    attr = (message.get("MessageAttributes") or {}).get(BURST_ATTRIBUTE) or {}
    return attr.get("StringValue") == run_id


@dataclass(frozen=True)
class ProbeResult:
    """What S3 held for one probe when verify last looked."""

    probe_id: str
    """The probe's slide_id."""
    written_at: datetime | None = None
    """S3 LastModified of its result summary; None = no summary. Default None."""
    summary: dict[str, Any] | None = None
    """The summary JSON (with `stages_s`); None = none. Default None."""

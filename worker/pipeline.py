"""Process one slide end to end: tissue detection, batched inference on tissue tiles, overlay, preview and JSON."""
from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from worker.device import describe_device
from worker.inference import InferenceSettings, InferenceStats, TileJob, iter_class_maps
from worker.models.loaded_model import LoadedModel
from worker.overlay import OverlaySettings, write_overlay, write_png
from worker.preview import display_colors, render_slide_preview
from worker.slides import Level, Slide, TissueSettings, dilate, open_slide, tissue_mask, tissue_tiles

WORKER_VERSION = "0.1.0"


@dataclass(frozen=True)
class PipelineSettings:
    """Everything process_slide can be told; the defaults suit 0.25-0.5 µm brightfield scans."""

    mpp_um: float | None = None
    """Pixel size override in µm per pixel, used when the slide carries no (or a wrong) calibration (default None:
    read it from the file and refuse the slide if absent)."""
    mpp_tolerance: float = 0.25
    """Largest relative difference between the model's input_mpp_um and a stored level's pixel size for that level
    to be analysed as it is (default 0.25). Otherwise the nearest finer level is area-averaged down to exactly
    input_mpp_um; a slide coarser than input_mpp_um by more than this is refused (never upsampled)."""
    skip_background: bool = True
    """Run the model only on tiles that meet tissue (default True); False analyses every tile."""
    tissue: TissueSettings = TissueSettings()
    """How tissue is found on a low-resolution level (default TissueSettings(): saturation >= 0.07 at 1/64)."""
    inference: InferenceSettings = InferenceSettings()
    """Batching, reader threads, read-ahead, CPU threads and mixed precision (default InferenceSettings(): chosen
    per device)."""
    overlay: OverlaySettings = OverlaySettings()
    """Overlay tiling, codec, pyramid and preview (default OverlaySettings(): 256 px zlib tiles, levels / 4)."""


def overlay_name(slide_id: str) -> str:
    return f"{slide_id}.overlay.ome.tif"


def preview_name(slide_id: str) -> str:
    return f"{slide_id}.preview.png"


def summary_name(slide_id: str) -> str:
    return f"{slide_id}.json"


def _check_slide_id(slide_id: str) -> None:
    bad = not isinstance(slide_id, str) or not slide_id or slide_id in (".", "..") or len(slide_id) > 200
    if bad or any(c in slide_id for c in '/\\\0') or slide_id.startswith("."):
        raise ValueError(f"slide_id {slide_id!r}: must be a plain file-name stem "
                         "(no '/', '\\', leading '.', <= 200 chars)")


def _model_facts(model: LoadedModel) -> dict:
    """The summary's `model`: name, version and the file's sha256, where it came from and how long fetching took;
    a local path by its file name only (no machine paths in results), an S3 model by its URI."""
    facts = {"name": model.name, "version": model.version, "sha256": model.sha256 or None,
             "source": Path(model.source).name, "from": model.origin or None, "fetch_s": round(model.fetch_s, 3)}
    if model.source.startswith("s3://"):
        facts["uri"] = model.source
    return facts


def choose_level(slide: Slide, model: LoadedModel, tolerance: float) -> Level:
    """The level to analyse at the model's input_mpp_um: a stored level within `tolerance`, else one area-averaged
    on the fly from the nearest finer stored level (level 0 when the model has no scale). Never upsamples: a slide
    coarser than the model needs (beyond the tolerance) is refused with SlideError."""
    return slide.analysis_level(model.input_mpp_um, tolerance)


def _bands(
    maps: Iterable[tuple[TileJob, np.ndarray]], width: int, height: int, out_tile: int, band: int
) -> Iterator[np.ndarray]:
    """Turn row-major (job, class map) pairs into overlay bands of `band` rows; unanalysed tiles stay 0."""
    buf = np.zeros((band + out_tile, width), np.uint8)  # room for a tile that straddles the band's end
    it = iter(maps)
    nxt = next(it, None)
    for y0 in range(0, height, band):
        y1 = min(y0 + band, height)
        while nxt is not None and nxt[0].ty * out_tile < y1:
            job, m = nxt
            oy, ox = job.ty * out_tile - y0, job.tx * out_tile
            h, w = min(out_tile, height - job.ty * out_tile), min(out_tile, width - ox)
            buf[oy : oy + h, ox : ox + w] = m[:h, :w]
            nxt = next(it, None)
        yield buf[: y1 - y0].copy()
        buf[:out_tile] = buf[band : band + out_tile]
        buf[out_tile:] = 0
    if nxt is not None:
        raise RuntimeError(f"class map for tile ({nxt[0].tx}, {nxt[0].ty}) lies outside the {width}x{height} overlay")


def process_slide(
    slide_path,
    out_dir,
    model: LoadedModel,
    *,
    slide_id: str,
    settings: PipelineSettings | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Analyse one slide and write `<slide_id>.overlay.ome.tif`, `.preview.png` and, last, `.json` into out_dir.

    Returns the summary that is also in the JSON. `progress(done, total)` is called as tissue tiles finish.
    Raises SlideError (one line naming the file) when the input is not a usable slide.
    """
    s = settings or PipelineSettings()
    _check_slide_id(slide_id)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    partial = [out_dir / f".{slide_id}.overlay.partial", out_dir / f".{slide_id}.json.partial"]
    try:
        with open_slide(slide_path, mpp_um=s.mpp_um) as slide, contextlib.ExitStack() as stack:
            timings["open"] = time.perf_counter() - t_start
            level = choose_level(slide, model, s.mpp_tolerance)
            lmx, lmy = slide.level_mpp(level)
            T, stride = model.tile_size, model.output_stride

            t0 = time.perf_counter()
            thumb, dsx, dsy = slide.thumbnail(level, s.tissue.thumbnail_downsample)
            mask = tissue_mask(thumb, s.tissue)
            if s.skip_background:
                grid = tissue_tiles(dilate(mask, s.tissue.dilate), dsx, dsy, level.width, level.height, T)
            else:
                grid = np.ones((-(-level.height // T), -(-level.width // T)), bool)
            jobs = [TileJob(int(tx), int(ty), int(tx) * T, int(ty) * T) for ty, tx in zip(*np.nonzero(grid))]
            timings["tissue"] = time.perf_counter() - t0

            side = max(level.width, level.height)
            preview_thumb = None
            if side / max(thumb.shape[:2]) > 1.5 * side / s.overlay.preview_max_side:
                # The tissue thumbnail is smaller than the preview wants: read a finer one (a few dozen tiles), now,
                # beside the inference, rather than after the last tile while the other cores idle.
                preview_pool = stack.enter_context(ThreadPoolExecutor(1, "slide-preview"))
                preview_thumb = preview_pool.submit(slide.thumbnail, level, max(side / s.overlay.preview_max_side, 1.0))

            ow, oh = -(-level.width // stride), -(-level.height // stride)
            omx, omy = lmx * stride, lmy * stride  # overlay pixel size: same physical extent as the slide
            stats = InferenceStats()
            maps = iter_class_maps(slide, level, model, jobs, s.inference, stats, progress)
            t0 = time.perf_counter()
            result = write_overlay(
                partial[0],
                _bands(maps, ow, oh, T // stride, s.overlay.tile),
                width=ow,
                height=oh,
                mpp_x=omx,
                mpp_y=omy,
                classes=model.classes,
                colors=display_colors(model.colors),  # as the preview draws them: apart from any stain
                name=f"{slide_id} class map",
                description=(
                    f"Class map of {slide.name} by {model.name} {model.version}; pixel values are class indices; "
                    f"one pixel is {omx:.4g} x {omy:.4g} µm."
                ),
                provenance={
                    "slide": slide.name,
                    "slide_id": slide_id,
                    "model": f"{model.name} {model.version}",
                    "slide_mpp_um": f"{slide.mpp_x:.6g} x {slide.mpp_y:.6g} ({slide.mpp_source})",
                    "analysed_level": str(level.index),
                    "analysis_mpp_um": f"{lmx:.6g} x {lmy:.6g}"
                    + (f" (area-averaged {level.factor:.4g}x on the fly)" if level.source is not None else ""),
                    "slide_format": f"{slide.format} via {slide.reader}",
                    "worker": WORKER_VERSION,
                },
                settings=s.overlay,
            )
            # Wall time of reading, inference and the overlay together (they overlap): the "inference" stage.
            timings["analyse"] = time.perf_counter() - t0
            os.replace(partial[0], out_dir / overlay_name(slide_id))

            tissue_fraction = float(mask.mean()) if mask.size else 0.0
            slide_area = slide.width * slide.height * slide.mpp_x * slide.mpp_y
            px_area = omx * omy

            t0 = time.perf_counter()
            preview_thumb = thumb if preview_thumb is None else preview_thumb.result()[0]
            preview = render_slide_preview(
                preview_thumb, result.preview_labels, model.classes, model.colors,
                class_area_um2=[n * px_area for n in result.class_pixels],
                tissue_area_um2=tissue_fraction * slide_area, alpha=s.overlay.preview_alpha,
                max_side=s.overlay.preview_max_side, title=f"{model.name} {model.version}",
            )
            write_png(out_dir / preview_name(slide_id), preview.rgb)
            preview_s = time.perf_counter() - t0

            used = s.inference.resolved(model.device)
            summary = {
                "slide_id": slide_id,
                "slide": slide.name,
                "width": slide.width,
                "height": slide.height,
                "mpp_um": slide.mpp_x,
                "mpp_um_y": slide.mpp_y,
                "mpp_source": slide.mpp_source,
                "input": slide.describe(),
                "analysis": {
                    "level": level.index,
                    "downsample": level.downsample,
                    "width": level.width,
                    "height": level.height,
                    "mpp_um": lmx,
                    "mpp_um_y": lmy,
                    "resampled": (
                        f"area-averaged {level.factor:.4g}x from level {level.index} "
                        f"({slide.level_mpp(level.source)[0]:.4g} µm/px)" if level.source is not None else None
                    ),
                    "model_mpp_um": model.input_mpp_um,
                    "tile_size": T,
                    "colour_conversion": slide.colour.conversion,
                },
                "tiles_total": int(grid.size),
                "tiles_seen": len(jobs),
                "tissue_fraction": round(tissue_fraction, 6),
                "tissue_area_um2": round(tissue_fraction * slide_area, 1),
                "classes": list(model.classes),
                "class_pixels": dict(zip(model.classes, result.class_pixels)),
                "class_area_um2": {c: round(n * px_area, 1) for c, n in zip(model.classes, result.class_pixels)},
                "units": {
                    "mpp_um": "µm per pixel",
                    "class_area_um2": "µm²",
                    "tissue_area_um2": "µm²",
                    "class_pixels": f"overlay pixels of {omx:.4g} µm × {omy:.4g} µm",
                    "timings_s": "seconds; analyse is the wall time of reading, inference and the overlay, which "
                                 "overlap; read and infer are their busy times, summed over threads",
                },
                "overlay": {
                    "file": overlay_name(slide_id),
                    "width": ow,
                    "height": oh,
                    "levels": len(result.levels),
                    "mpp_um": omx,
                    "mpp_um_y": omy,
                    "downsample": level.downsample * stride,
                    "bigtiff": result.bigtiff,
                },
                "preview": preview_name(slide_id),
                "model": _model_facts(model),
                "device": describe_device(model.device),
                "inference": {
                    "batch_size": used.batch_size,
                    "reader_threads": used.reader_threads,
                    "torch_threads": used.torch_threads if model.device.type == "cpu" else None,
                    "compute_workers": used.compute_workers,
                    "amp": used.amp,
                    # What ran: the dtype (fp32 where amp is off), what was asked for, and whose forward.
                    "precision": "fp32" if used.amp == "off" else used.amp,
                    "precision_requested": used.precision,
                    "path": stats.path,
                    "batches": stats.batches,
                },
                "timings_s": {
                    "open": round(timings["open"], 4),
                    "tissue": round(timings["tissue"], 4),
                    "analyse": round(timings["analyse"], 4),
                    "read": round(stats.read_s, 4),
                    "infer": round(stats.infer_s, 4),
                    "wait_for_tiles": round(stats.wait_s, 4),
                    "write": 0.0,
                    "total": 0.0,
                },
                "worker_version": WORKER_VERSION,
            }
        summary["timings_s"]["write"] = round(result.write_s + preview_s, 4)
        summary["timings_s"]["total"] = round(time.perf_counter() - t_start, 4)
        # The JSON is the completion marker: written last, atomically.
        data = json.dumps(summary, indent=2, ensure_ascii=False).encode("utf-8")
        partial[1].write_bytes(data)
        os.replace(partial[1], out_dir / summary_name(slide_id))
        return summary
    finally:
        for p in partial:
            if p.exists():
                p.unlink()

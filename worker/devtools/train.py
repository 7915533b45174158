"""Train the built-in net at 0.5 µm/px on synthetic slides, then package it (`python -m worker.devtools.train`)."""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from worker.devtools.synthetic import CLASSES, SyntheticSpec, write_synthetic_slide
from worker.models.export import package_model
from worker.models.loaded_model import DEFAULT_COLORS, LoadedModel
from worker.models.loading import BUILTIN_WEIGHTS, load_model
from worker.models.tinyseg import TINYSEG_NORMALISATION, build_builtin
from worker.slides import open_slide

MPP = 0.5  # µm per pixel the built-in net analyses at: 20x, the scale most published models use
TILE = 256
STRIDE = 4
NAME, VERSION = "gpuburst-tinyseg", "2.0.0"


@dataclass(frozen=True)
class TrainSettings:
    """What the training run does; the defaults train in well under ten minutes on 2 CPU cores."""

    steps: int = 1600
    """Optimiser steps (default 1600)."""
    batch: int = 24
    """Crops per step (default 24)."""
    crop: int = 128
    """Side of a training crop in pixels at 0.5 µm/px, a multiple of 4 (default 128: 64 µm; the net is fully
    convolutional)."""
    lr: float = 3e-3
    """Peak learning rate of AdamW, decayed by a cosine (default 3e-3)."""
    seed: int = 0
    """Seed for slides, sampling and initial weights (default 0)."""
    slides_20x: int = 2
    """Training slides written at 0.5 µm/px and read as they are, seeds seed+1 ... (default 2)."""
    slides_40x: int = 2
    """Training slides written at 0.25 µm/px, read at full resolution and downsampled 2x by area averaging (what
    the worker feeds the net from a 40x scan), seeds after the 20x ones (default 2)."""
    slide_px: int = 3072
    """Side of each training slide in pixels at 0.5 µm/px, i.e. slide_px / 2 µm (default 3072: 1.5 mm; the 40x
    slides are written with twice as many pixels per side)."""
    tissue_fraction: float = 0.4
    """Fraction of each training slide covered by tissue (default 0.4)."""
    regions: int = 1500
    """256 px regions (at 0.5 µm/px) sampled from the training slides, shared equally (default 1500)."""
    threads: int = 2
    """torch CPU threads (default 2)."""
    heldout_seed: int = 9001
    """Seed of the held-out evaluation slide at 0.5 µm/px (default 9001, never trained on); seed + 1 is the
    held-out 40x slide."""
    heldout_px: int = 4096
    """Side of the held-out slides in pixels at 0.5 µm/px (default 4096: 2 mm)."""


def downsample_area(rgb: np.ndarray, factor: int) -> np.ndarray:
    """uint8 H/f x W/f x 3 from uint8 H x W x 3 by area averaging: the mean of each f x f block, rounded."""
    if factor == 1:
        return rgb
    h, w = rgb.shape[0] // factor, rgb.shape[1] // factor
    blocks = rgb[: h * factor, : w * factor].reshape(h, factor, w, factor, 3)
    total = blocks.sum(axis=(1, 3), dtype=np.uint32)
    return ((total + factor * factor // 2) // (factor * factor)).astype(np.uint8)


def _factor(spec: SyntheticSpec) -> int:
    """Full-resolution pixels per 0.5-µm pixel along each axis (1 for a 20x slide, 2 for a 40x one)."""
    f = MPP / spec.mpp_um
    if abs(f - round(f)) > 1e-9 or round(f) < 1:
        raise ValueError(f"mpp_um={spec.mpp_um}: the training reads slides at {MPP} µm/px or a whole multiple finer")
    return int(round(f))


def _read(slide, level, spec: SyntheticSpec, x: int, y: int, out: np.ndarray) -> np.ndarray:
    """The TILE x TILE region at (x, y) on the 0.5-µm grid: read as it is, or read at full resolution and
    downsampled by area, as the worker feeds the net from a finer scan. Its labels: spec.render at the 0.5-µm
    grid's output pixels (render takes full-resolution coordinates of that spec)."""
    f = _factor(spec)
    if f == 1:
        slide.read_region(level, x, y, TILE, TILE, out=out)
    else:
        out[:] = downsample_area(slide.read_region(level, x * f, y * f, TILE * f, TILE * f), f)
    return spec.render(x * f, y * f, TILE // STRIDE, TILE // STRIDE, STRIDE * f, rgb=False).labels


def _regions(slide_path: Path, spec: SyntheticSpec, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n random 256 px regions at 0.5 µm/px read through the worker's own slide reader (so JPEG artefacts match
    inference), with their stride-4 label maps."""
    f = _factor(spec)
    gw, gh = spec.width // f, spec.height // f  # slide size on the 0.5-µm grid
    imgs = np.empty((n, TILE, TILE, 3), np.uint8)
    labs = np.empty((n, TILE // STRIDE, TILE // STRIDE), np.uint8)
    ty, tx = np.nonzero(spec.tissue(64 * f))  # 64-px cells of the 0.5-µm grid
    with open_slide(slide_path) as slide:
        level = slide.levels[0]
        for i in range(n):
            if len(ty) and rng.random() < 0.85:  # mostly tissue, some glass and edges
                k = rng.integers(len(ty))
                x = int(tx[k] * 64 + rng.integers(-TILE, 64))
                y = int(ty[k] * 64 + rng.integers(-TILE, 64))
            else:
                x, y = int(rng.integers(0, gw - TILE + 1)), int(rng.integers(0, gh - TILE + 1))
            x = int(np.clip(x, 0, gw - TILE)) // STRIDE * STRIDE
            y = int(np.clip(y, 0, gh - TILE)) // STRIDE * STRIDE
            labs[i] = _read(slide, level, spec, x, y, imgs[i])
    return imgs, labs


def iou_per_class(pred: np.ndarray, truth: np.ndarray, n_classes: int) -> list[float | None]:
    """Intersection over union per class (None where the class is absent from both)."""
    out: list[float | None] = []
    for c in range(n_classes):
        p, t = pred == c, truth == c
        union = int((p | t).sum())
        out.append(None if union == 0 else float((p & t).sum()) / union)
    return out


def evaluate(model: LoadedModel, slide_path: Path, spec: SyntheticSpec) -> dict:
    """Per-class IoU of `model` (run as the worker runs it: `prepare`, then its module in float32) over every tile
    of a held-out synthetic slide whose centre is tissue, at 0.5 µm/px (stride-4 class maps)."""
    f = _factor(spec)
    preds, truths = [], []
    with open_slide(slide_path) as slide, torch.inference_mode():
        level = slide.levels[0]
        coords = list(zip(*np.nonzero(spec.tissue(TILE * f))))  # a tile counts when its centre is tissue
        for i in range(0, len(coords), 16):
            chunk = coords[i : i + 16]
            imgs = np.empty((len(chunk), TILE, TILE, 3), np.uint8)
            truths.extend(_read(slide, level, spec, int(tx) * TILE, int(ty) * TILE, imgs[k])
                          for k, (ty, tx) in enumerate(chunk))
            logits = model.module(model.prepare(torch.from_numpy(imgs)))
            preds.append(logits.argmax(1).to(torch.uint8).numpy())
    n = len(CLASSES)
    pred = np.concatenate(preds) if preds else np.zeros((0, TILE // STRIDE, TILE // STRIDE), np.uint8)
    truth = np.stack(truths) if truths else pred.copy()
    ious = iou_per_class(pred, truth, n)
    return {
        "heldout_seed": spec.seed,
        "slide_mpp_um": spec.mpp_um,
        "analysed_mpp_um": MPP,
        "tiles": len(pred),
        "iou": {name: (None if v is None else round(v, 4)) for name, v in zip(CLASSES, ious)},
        "pixel_accuracy": round(float((pred == truth).mean()), 4) if len(pred) else None,
    }


def _spec(px_at_mpp: int, mpp_um: float, tissue: float, seed: int) -> SyntheticSpec:
    f = int(round(MPP / mpp_um))
    return SyntheticSpec(px_at_mpp * f, px_at_mpp * f, mpp_um, tissue, seed)


def _write(spec: SyntheticSpec, path: Path) -> Path:
    return write_synthetic_slide(path, spec.width, spec.height, spec.mpp_um, spec.tissue_fraction, spec.seed)


def train(out: Path, settings: TrainSettings = TrainSettings(), log=print) -> dict:
    """Train the built-in net at 0.5 µm/px, evaluate the packaged model on held-out slides, and write it to `out`
    as a torch.export program (`package_model`) whose metadata carries the training report. Returns the report."""
    s = settings
    if s.crop % STRIDE or not STRIDE <= s.crop <= TILE:
        raise ValueError(f"crop={s.crop}: must be a multiple of {STRIDE} from {STRIDE} to {TILE}")
    if s.slide_px < TILE or s.heldout_px < TILE:
        raise ValueError(f"slide_px={s.slide_px}, heldout_px={s.heldout_px}: both must be >= {TILE}")
    if s.slides_20x + s.slides_40x < 1 or s.regions < 1:
        raise ValueError(f"slides_20x={s.slides_20x}, slides_40x={s.slides_40x}, regions={s.regions}: "
                         "need a slide and a region")
    threads_before = torch.get_num_threads()
    torch.manual_seed(s.seed)
    torch.set_num_threads(s.threads)
    rng = np.random.default_rng(s.seed)
    t0 = time.perf_counter()
    common = dict(
        classes=list(CLASSES), input_mpp_um=MPP, tile_size=TILE, output_stride=STRIDE,
        normalisation=TINYSEG_NORMALISATION, colors=[list(c) for c in DEFAULT_COLORS[: len(CLASSES)]],
        name=NAME, version=VERSION,
    )
    try:
        with tempfile.TemporaryDirectory(prefix="gpuburst-train-") as tmp:
            specs = [_spec(s.slide_px, MPP, s.tissue_fraction, s.seed + 1 + k) for k in range(s.slides_20x)]
            specs += [_spec(s.slide_px, MPP / 2, s.tissue_fraction, s.seed + 1 + s.slides_20x + k)
                      for k in range(s.slides_40x)]
            imgs, labs = [], []
            per = -(-s.regions // len(specs))
            for k, spec in enumerate(specs):
                path = _write(spec, Path(tmp) / f"train{k}.ome.tif")
                a, b = _regions(path, spec, per, rng)
                imgs.append(a)
                labs.append(b)
                path.unlink()
            imgs_np, labs_np = np.concatenate(imgs), np.concatenate(labs)
            del imgs, labs
            counts = np.bincount(labs_np.ravel(), minlength=len(CLASSES)).astype(np.float64)
            # Inverse-sqrt-frequency class weights: nuclei and vessels are a few % of pixels.
            weights = torch.tensor((counts.sum() / np.maximum(counts, 1)) ** 0.5, dtype=torch.float32)
            weights = weights / weights[0].item()
            data_s = time.perf_counter() - t0
            log(f"data: {len(imgs_np)} regions from {s.slides_20x} slides at {MPP} µm/px and {s.slides_40x} at "
                f"{MPP / 2} µm/px (downsampled 2x) in {data_s:.1f}s, class pixels {counts.astype(int).tolist()}")

            net = build_builtin({"n_classes": len(CLASSES)})
            net.train()
            net = net.to(memory_format=torch.channels_last)
            opt = torch.optim.AdamW(net.parameters(), lr=s.lr, weight_decay=1e-4)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=s.lr, total_steps=s.steps, pct_start=0.1)
            t1 = time.perf_counter()
            cs, q = s.crop, s.crop // STRIDE
            for step in range(s.steps):
                idx = rng.integers(0, len(imgs_np), s.batch)
                ox, oy = rng.integers(0, (TILE - cs) // STRIDE + 1, 2)
                x = imgs_np[idx, oy * STRIDE : oy * STRIDE + cs, ox * STRIDE : ox * STRIDE + cs]
                y = labs_np[idx, oy : oy + q, ox : ox + q]
                k = int(rng.integers(4))  # rotations and flips: structures have no preferred orientation
                x, y = np.rot90(x, k, axes=(1, 2)), np.rot90(y, k, axes=(1, 2))
                if rng.random() < 0.5:
                    x, y = x[:, :, ::-1], y[:, :, ::-1]
                xt = torch.from_numpy(np.ascontiguousarray(x)).float()  # N x H x W x 3, 0-255
                # Mild colour jitter (gain and offset per channel): real stains vary from lab to lab.
                gain = torch.empty(s.batch, 1, 1, 3).uniform_(0.92, 1.08)
                offset = torch.empty(s.batch, 1, 1, 3).uniform_(-0.04, 0.04) * 255.0
                xt = TINYSEG_NORMALISATION.apply((xt * gain + offset).clamp_(0, 255))  # as the worker normalises
                yt = torch.from_numpy(np.ascontiguousarray(y)).long()
                loss = F.cross_entropy(net(xt), yt, weight=weights)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                if step % 100 == 0 or step == s.steps - 1:
                    log(f"step {step:5d}/{s.steps} loss {loss.item():.4f} ({time.perf_counter() - t1:.0f}s)")
            train_s = time.perf_counter() - t1
            del imgs_np, labs_np
            net.eval()

            # Evaluate the packaged file, loaded as the worker loads it: what ships is what was measured.
            candidate = load_model(package_model(net, Path(tmp) / "candidate.pt2", **common), "cpu")
            held = _spec(s.heldout_px, MPP, 0.3, s.heldout_seed)
            report = evaluate(candidate, _write(held, Path(tmp) / "heldout.ome.tif"), held)
            held40 = _spec(s.heldout_px, MPP / 2, 0.3, s.heldout_seed + 1)
            report40 = evaluate(candidate, _write(held40, Path(tmp) / "heldout40.ome.tif"), held40)
        total_s = time.perf_counter() - t0
        log("held-out (0.5 µm/px slide): " + json.dumps(report))
        log("held-out (0.25 µm/px slide, downsampled 2x): " + json.dumps(report40))
        training = {
            "settings": asdict(s),
            "torch": str(torch.__version__),
            "data": (
                f"synthetic slides (worker.devtools.synthetic): {s.slides_20x} written at {MPP} µm/px and "
                f"{s.slides_40x} at {MPP / 2} µm/px read at full resolution and downsampled 2x by area averaging, "
                f"{s.slide_px * MPP:g} µm "
                f"per side, {s.tissue_fraction:.0%} tissue; {s.regions} regions of {TILE} px at {MPP} µm/px"
            ),
            "heldout": report,
            "heldout_40x": report40,
            "data_seconds": round(data_s, 1),
            "train_seconds": round(train_s, 1),
            "total_seconds": round(total_s, 1),
        }
        package_model(net, out, **common, extra={"training": training})
    finally:
        torch.set_num_threads(threads_before)
    log(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB) in {time.perf_counter() - t0:.0f}s")
    return training


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m worker.devtools.train", description=__doc__)
    p.add_argument("--out", type=Path, default=BUILTIN_WEIGHTS, help=f"model file to write (default {BUILTIN_WEIGHTS})")
    p.add_argument("--steps", type=int, default=TrainSettings.steps)
    p.add_argument("--seed", type=int, default=TrainSettings.seed)
    p.add_argument("--threads", type=int, default=TrainSettings.threads)
    a = p.parse_args(argv)
    train(a.out, TrainSettings(steps=a.steps, seed=a.seed, threads=a.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Train the built-in segmentation net on synthetic slides and write its weights (`python -m worker.train --out PATH`)."""
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

from worker.model import BUILTIN_WEIGHTS, DEFAULT_COLORS, build_builtin
from worker.slides import open_slide
from worker.synthetic import CLASSES, SyntheticSpec, write_synthetic_slide


@dataclass(frozen=True)
class TrainSettings:
    """What the training run does; the defaults train in a few minutes on 2 CPU cores."""

    steps: int = 1200
    """Optimiser steps (default 1200)."""
    batch: int = 24
    """Crops per step (default 24)."""
    crop: int = 128
    """Side of a training crop in pixels at 0.25 µm (default 128; the net is fully convolutional)."""
    lr: float = 3e-3
    """Peak learning rate of AdamW, decayed by a cosine (default 3e-3)."""
    seed: int = 0
    """Seed for slides, sampling and initial weights (default 0)."""
    train_slides: int = 3
    """Synthetic training slides, seeds seed+1 ... (default 3)."""
    slide_size: int = 6144
    """Side of each synthetic slide in pixels (default 6144)."""
    regions: int = 1000
    """256 px regions sampled from the training slides (default 1000)."""
    threads: int = 2
    """torch CPU threads (default 2)."""
    heldout_seed: int = 9001
    """Seed of the held-out evaluation slide (default 9001, never used for training)."""


MPP = 0.25
TILE = 256
STRIDE = 4


def _regions(slide_path: Path, spec: SyntheticSpec, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n random 256 px regions read through the worker's own slide reader (so JPEG artefacts match inference)."""
    imgs = np.empty((n, TILE, TILE, 3), np.uint8)
    labs = np.empty((n, TILE // STRIDE, TILE // STRIDE), np.uint8)
    tissue = spec.tissue(64)
    ty, tx = np.nonzero(tissue)
    with open_slide(slide_path) as slide:
        level = slide.levels[0]
        for i in range(n):
            if rng.random() < 0.85:  # mostly tissue, some glass and edges
                k = rng.integers(len(ty))
                x = int(tx[k] * 64 + rng.integers(-TILE, 64))
                y = int(ty[k] * 64 + rng.integers(-TILE, 64))
            else:
                x, y = (int(v) for v in rng.integers(0, spec.width - TILE, 2))
            x = int(np.clip(x, 0, spec.width - TILE)) // STRIDE * STRIDE
            y = int(np.clip(y, 0, spec.height - TILE)) // STRIDE * STRIDE
            slide.read_region(level, x, y, TILE, TILE, out=imgs[i])
            labs[i] = spec.render(x, y, TILE // STRIDE, TILE // STRIDE, STRIDE, rgb=False).labels
    return imgs, labs


def _to_input(imgs: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(imgs).permute(0, 3, 1, 2).float().div_(255.0).contiguous(memory_format=torch.channels_last)


def iou_per_class(pred: np.ndarray, truth: np.ndarray, n_classes: int) -> list[float | None]:
    """Intersection over union per class (None where the class is absent from both)."""
    out: list[float | None] = []
    for c in range(n_classes):
        p, t = pred == c, truth == c
        union = int((p | t).sum())
        out.append(None if union == 0 else float((p & t).sum()) / union)
    return out


def evaluate(net: torch.nn.Module, slide_path: Path, spec: SyntheticSpec) -> dict:
    """Per-class IoU of `net` over every tissue tile of a held-out synthetic slide (stride-4 class maps)."""
    net.eval()
    preds, truths = [], []
    with open_slide(slide_path) as slide, torch.inference_mode():
        level = slide.levels[0]
        tissue = spec.tissue(TILE)  # a tile counts when its centre is tissue
        coords = list(zip(*np.nonzero(tissue)))
        for i in range(0, len(coords), 32):
            chunk = coords[i : i + 32]
            imgs = np.stack([slide.read_region(level, int(tx) * TILE, int(ty) * TILE, TILE, TILE) for ty, tx in chunk])
            preds.append(net(_to_input(imgs)).argmax(1).to(torch.uint8).numpy())
            truths.extend(
                spec.render(int(tx) * TILE, int(ty) * TILE, TILE // STRIDE, TILE // STRIDE, STRIDE, rgb=False).labels
                for ty, tx in chunk
            )
    pred = np.concatenate(preds)
    truth = np.stack(truths)
    ious = iou_per_class(pred, truth, len(CLASSES))
    return {
        "heldout_seed": spec.seed,
        "tiles": len(pred),
        "iou": {name: (None if v is None else round(v, 4)) for name, v in zip(CLASSES, ious)},
        "pixel_accuracy": round(float((pred == truth).mean()), 4),
    }


def train(out: Path, settings: TrainSettings = TrainSettings(), log=print) -> dict:
    """Train the built-in net, evaluate it on a held-out slide, write {"state_dict", "meta"} to `out`."""
    s = settings
    torch.manual_seed(s.seed)
    torch.set_num_threads(s.threads)
    rng = np.random.default_rng(s.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpuburst-train-") as tmp:
        imgs, labs = [], []
        per = -(-s.regions // s.train_slides)
        for k in range(s.train_slides):
            spec = SyntheticSpec(s.slide_size, s.slide_size, MPP, 0.4, s.seed + 1 + k)
            path = write_synthetic_slide(Path(tmp) / f"train{k}.ome.tif", spec.width, spec.height, MPP, 0.4, spec.seed)
            a, b = _regions(path, spec, per, rng)
            imgs.append(a)
            labs.append(b)
        imgs_np, labs_np = np.concatenate(imgs), np.concatenate(labs)
        counts = np.bincount(labs_np.ravel(), minlength=len(CLASSES)).astype(np.float64)
        # Inverse-sqrt-frequency class weights: nuclei and vessels are ~1-3 % of pixels.
        weights = torch.tensor((counts.sum() / np.maximum(counts, 1)) ** 0.5, dtype=torch.float32)
        weights = weights / weights[0].item()
        log(f"data: {len(imgs_np)} regions from {s.train_slides} slides in {time.perf_counter() - t0:.1f}s, "
            f"class pixels {counts.astype(int).tolist()}")

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
            xt = _to_input(np.ascontiguousarray(x))
            # Mild colour jitter: real stains vary from lab to lab.
            xt = (xt * torch.empty(s.batch, 3, 1, 1).uniform_(0.92, 1.08) + torch.empty(s.batch, 3, 1, 1).uniform_(-0.04, 0.04)).clamp_(0, 1)
            yt = torch.from_numpy(np.ascontiguousarray(y)).long()
            loss = F.cross_entropy(net(xt), yt, weight=weights)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if step % 100 == 0 or step == s.steps - 1:
                log(f"step {step:5d}/{s.steps} loss {loss.item():.4f} ({time.perf_counter() - t1:.0f}s)")
        train_s = time.perf_counter() - t1

        held = SyntheticSpec(4096, 4096, MPP, 0.3, s.heldout_seed)
        held_path = write_synthetic_slide(Path(tmp) / "heldout.ome.tif", held.width, held.height, MPP, 0.3, held.seed)
        report = evaluate(net, held_path, held)
    report.update(train_seconds=round(train_s, 1), total_seconds=round(time.perf_counter() - t0, 1))
    log("held-out: " + json.dumps(report))

    meta = {
        "name": "gpuburst-tinyseg",
        "version": "1.0.0",
        "classes": list(CLASSES),
        "tile_size": TILE,
        "output_stride": STRIDE,
        "input_mpp_um": MPP,
        "colors": [list(c) for c in DEFAULT_COLORS[: len(CLASSES)]],
        "arch": {"n_classes": len(CLASSES)},
        "training": {"settings": asdict(s), "torch": str(torch.__version__), "heldout": report},
    }
    net.eval()
    state = {k: v.detach().clone().contiguous() for k, v in net.state_dict().items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(out.name + ".tmp")
    torch.save({"state_dict": state, "meta": meta}, tmp_out)
    tmp_out.replace(out)
    log(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB)")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m worker.train", description=__doc__)
    p.add_argument("--out", type=Path, default=BUILTIN_WEIGHTS, help=f"weights file to write (default {BUILTIN_WEIGHTS})")
    p.add_argument("--steps", type=int, default=TrainSettings.steps)
    p.add_argument("--seed", type=int, default=TrainSettings.seed)
    p.add_argument("--threads", type=int, default=TrainSettings.threads)
    a = p.parse_args(argv)
    train(a.out, TrainSettings(steps=a.steps, seed=a.seed, threads=a.threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Deterministic synthetic H&E-like whole-slide images (pyramidal tiled TIFF/OME-TIFF) with known ground truth."""
from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tifffile

# Index 0 is background (glass and plain tissue); the built-in model is trained on exactly these classes.
CLASSES: tuple[str, ...] = ("background", "nuclei", "vessel")
NUCLEI, VESSEL = 1, 2

_CELL = 64  # full-resolution pixels per cell of the coarse tissue field
_BUCKET = 512  # full-resolution pixels per spatial-index bucket for structures
_NOISE = 512  # side of the tiling noise texture, in pixels

# RGB of the glass, of eosin-stained tissue, of the two structure kinds (drawn like H&E; values are 0-255).
_GLASS = np.array([246, 244, 247], np.float32)
_COLOURS = np.array(
    [
        [246, 244, 247],  # 0 glass
        [222, 150, 192],  # 1 tissue (eosin pink)
        [92, 52, 128],  # 2 nuclei (haematoxylin purple)
        [244, 206, 222],  # 3 vessel (lighter, elongated)
    ],
    np.float32,
)
_NOISE_AMPLITUDE = np.array([0.0, 9.0, 11.0, 6.0], np.float32)


@dataclass(frozen=True)
class SyntheticSpec:
    """Everything that determines a synthetic slide's pixels; equal specs render equal pixels."""

    width: int
    """Full-resolution width in pixels."""
    height: int
    """Full-resolution height in pixels."""
    mpp_um: float = 0.25
    """Pixel size at full resolution, in µm per pixel (default 0.25, a 40x scan); structure sizes are physical."""
    tissue_fraction: float = 0.3
    """Fraction of the slide area covered by tissue (default 0.3)."""
    seed: int = 0
    """Seed of every random choice (default 0)."""

    def __post_init__(self) -> None:
        if self.width < 16 or self.height < 16:
            raise ValueError(f"synthetic slide size {self.width}x{self.height}: both sides must be >= 16 px")
        if not 0.0 < self.tissue_fraction < 1.0:
            raise ValueError(f"tissue_fraction={self.tissue_fraction}: must be between 0 and 1 (exclusive)")
        if not self.mpp_um > 0:
            raise ValueError(f"mpp_um={self.mpp_um}: must be > 0")

    def render(self, x: int, y: int, w: int, h: int, step: int = 1, *, rgb: bool = True) -> Region:
        """Render the w x h region whose pixel (i, j) samples full-resolution point
        (x + (i+.5)*step, y + (j+.5)*step)."""
        return _render(_layout(self), x, y, w, h, step, rgb)

    def labels(self, downsample: int) -> np.ndarray:
        """Ground-truth class map (uint8, CLASSES indices) at `downsample`; shape ceil(h/ds) x ceil(w/ds)."""
        return self._plane(downsample, "labels")

    def tissue(self, downsample: int) -> np.ndarray:
        """Ground-truth tissue mask (bool) at `downsample`; shape ceil(h/ds) x ceil(w/ds)."""
        return self._plane(downsample, "tissue")

    def _plane(self, downsample: int, what: str) -> np.ndarray:
        w, h = -(-self.width // downsample), -(-self.height // downsample)
        out = np.zeros((h, w), np.uint8 if what == "labels" else bool)
        band = 512  # rendered in bands so that test-size masks never need a full-resolution buffer
        for y0 in range(0, h, band):
            bh = min(band, h - y0)
            region = self.render(0, y0 * downsample, w, bh, downsample, rgb=False)
            out[y0 : y0 + bh] = getattr(region, what)
        return out


@dataclass
class Region:
    """A rendered region: RGB pixels (or None), class labels and the tissue mask, all the same height x width."""

    rgb: np.ndarray | None
    labels: np.ndarray
    tissue: np.ndarray


@dataclass
class _Layout:
    field: np.ndarray  # coarse tissue field, float32 (rows, cols), cell centres at (j + .5) * _CELL
    threshold: float  # field > threshold is tissue
    kind: np.ndarray  # per structure: NUCLEI or VESSEL (vessels first, so nuclei are drawn over them)
    geom: np.ndarray  # per structure: cx, cy, semi-axis a, semi-axis b, cos, sin (full-resolution px)
    buckets: dict[tuple[int, int], np.ndarray]  # (bx, by) -> indices of structures whose box touches the bucket
    noise: np.ndarray  # (2, _NOISE, _NOISE) float32 texture, unit variance


@functools.lru_cache(maxsize=8)
def _layout(spec: SyntheticSpec) -> _Layout:
    rng = np.random.default_rng([spec.seed, 0x5EED])
    rows, cols = -(-spec.height // _CELL) + 1, -(-spec.width // _CELL) + 1
    # Tissue: a few large anisotropic Gaussian pieces, made lobed by a smooth low-frequency noise.
    yy = (np.arange(rows, dtype=np.float32) + 0.5) * _CELL / spec.height
    xx = (np.arange(cols, dtype=np.float32) + 0.5) * _CELL / spec.width
    gy, gx = np.meshgrid(yy, xx, indexing="ij")
    field = np.zeros((rows, cols), np.float32)
    for _ in range(int(rng.integers(2, 5))):
        cy, cx = rng.uniform(0.25, 0.75, 2)
        sy, sx = rng.uniform(0.10, 0.22, 2)
        theta = rng.uniform(0, math.pi)
        dx, dy = gx - cx, gy - cy
        u = (dx * math.cos(theta) + dy * math.sin(theta)) / sx
        v = (-dx * math.sin(theta) + dy * math.cos(theta)) / sy
        field += rng.uniform(0.7, 1.0) * np.exp(-0.5 * (u * u + v * v))
    coarse = rng.normal(0.0, 1.0, (7, 7)).astype(np.float32)
    field += 0.25 * _bilinear(coarse, gy * 6, gx * 6)
    inside = field[: -(-spec.height // _CELL), : -(-spec.width // _CELL)]
    threshold = float(np.quantile(inside, 1.0 - spec.tissue_fraction))

    # Structures, sized in µm so that a slide at another resolution shows the same physical objects.
    um = 1.0 / spec.mpp_um  # pixels per µm
    tissue_um2 = spec.tissue_fraction * spec.width * spec.height * spec.mpp_um**2
    n_clusters = max(1, int(tissue_um2 / 70.0**2))
    n_vessels = max(1, int(tissue_um2 / 110.0**2))

    def centres(n: int) -> np.ndarray:
        want = np.empty((0, 2))
        for _ in range(20):  # rejection sampling: keep centres that fall inside tissue
            cand = rng.uniform((0, 0), (spec.width, spec.height), (int(n / spec.tissue_fraction * 1.5) + 8, 2))
            f = _bilinear(field, cand[:, 1] / _CELL - 0.5, cand[:, 0] / _CELL - 0.5)
            want = np.concatenate([want, cand[f > threshold + 0.02]])
            if len(want) >= n:
                break
        return want[:n]

    vessels = centres(n_vessels)
    nv = len(vessels)
    va = rng.uniform(15, 40, nv) * um
    vb = rng.uniform(2.5, 5.0, nv) * um
    vt = rng.uniform(0, math.pi, nv)
    clusters = centres(n_clusters)
    per = rng.integers(4, 12, len(clusters))
    cc = np.repeat(clusters, per, axis=0)
    nn = len(cc)
    spread = np.repeat(rng.uniform(8, 18, len(clusters)), per) * um
    rad = spread * np.sqrt(rng.uniform(0, 1, nn))
    ang = rng.uniform(0, 2 * math.pi, nn)
    ncx, ncy = cc[:, 0] + rad * np.cos(ang), cc[:, 1] + rad * np.sin(ang)
    na = rng.uniform(2.5, 4.5, nn) * um
    nb = na * rng.uniform(0.7, 1.0, nn)
    nt = rng.uniform(0, math.pi, nn)

    kind = np.concatenate([np.full(nv, VESSEL, np.uint8), np.full(nn, NUCLEI, np.uint8)])
    theta = np.concatenate([vt, nt])
    geom = np.stack(
        [
            np.concatenate([vessels[:, 0], ncx]),
            np.concatenate([vessels[:, 1], ncy]),
            np.concatenate([va, na]),
            np.concatenate([vb, nb]),
            np.cos(theta),
            np.sin(theta),
        ],
        axis=1,
    )
    lists: dict[tuple[int, int], list[int]] = {}
    for i, (cx, cy, a, *_rest) in enumerate(geom):
        for by in range(int((cy - a) // _BUCKET), int((cy + a) // _BUCKET) + 1):
            for bx in range(int((cx - a) // _BUCKET), int((cx + a) // _BUCKET) + 1):
                lists.setdefault((bx, by), []).append(i)
    buckets = {k: np.asarray(v, np.int64) for k, v in lists.items()}

    noise = rng.normal(0.0, 1.0, (2, _NOISE, _NOISE)).astype(np.float32)
    # A little spatial correlation makes the texture look like stained fibres rather than sensor noise.
    noise = (noise + np.roll(noise, 1, 1) + np.roll(noise, 1, 2) + np.roll(noise, (1, 1), (1, 2))) / 2.0
    return _Layout(field, threshold, kind, geom, buckets, noise)


def _bilinear(grid: np.ndarray, r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Sample `grid` at fractional (row, col) positions, clamped at the borders."""
    r = np.clip(r, 0, grid.shape[0] - 1)
    c = np.clip(c, 0, grid.shape[1] - 1)
    r0 = np.minimum(r.astype(np.int64), grid.shape[0] - 2) if grid.shape[0] > 1 else np.zeros_like(r, np.int64)
    c0 = np.minimum(c.astype(np.int64), grid.shape[1] - 2) if grid.shape[1] > 1 else np.zeros_like(c, np.int64)
    fr, fc = r - r0, c - c0
    r1 = np.minimum(r0 + 1, grid.shape[0] - 1)
    c1 = np.minimum(c0 + 1, grid.shape[1] - 1)
    top = grid[r0, c0] * (1 - fc) + grid[r0, c1] * fc
    bottom = grid[r1, c0] * (1 - fc) + grid[r1, c1] * fc
    return (top * (1 - fr) + bottom * fr).astype(np.float32)


def _render(lay: _Layout, x: int, y: int, w: int, h: int, step: int, want_rgb: bool) -> Region:
    px = x + (np.arange(w, dtype=np.float64) + 0.5) * step
    py = y + (np.arange(h, dtype=np.float64) + 0.5) * step
    # Coarse cells that influence the region: if none exceeds the threshold the region is plain glass.
    u = px / _CELL - 0.5
    v = py / _CELL - 0.5
    r0, r1 = max(int(v[0]) - 1, 0), min(int(v[-1]) + 2, lay.field.shape[0] - 1)
    c0, c1 = max(int(u[0]) - 1, 0), min(int(u[-1]) + 2, lay.field.shape[1] - 1)
    if lay.field[r0 : r1 + 1, c0 : c1 + 1].max() <= lay.threshold:
        labels = np.zeros((h, w), np.uint8)
        rgb = np.broadcast_to(_GLASS.astype(np.uint8), (h, w, 3)).copy() if want_rgb else None
        return Region(rgb, labels, np.zeros((h, w), bool))

    # Separable bilinear interpolation of the coarse field: along x for the needed rows, then along y.
    sub = lay.field[r0 : r1 + 1]
    uc = np.clip(u, 0, lay.field.shape[1] - 1)
    ci = np.minimum(uc.astype(np.int64), lay.field.shape[1] - 2)
    cf = (uc - ci).astype(np.float32)
    along_x = sub[:, ci] * (1 - cf) + sub[:, ci + 1] * cf
    vc = np.clip(v, r0, r1) - r0
    ri = np.minimum(vc.astype(np.int64), max(along_x.shape[0] - 2, 0))
    ri1 = np.minimum(ri + 1, along_x.shape[0] - 1)
    rf = (vc - ri).astype(np.float32)[:, None]
    field = along_x[ri] * (1 - rf) + along_x[ri1] * rf
    tissue = field > lay.threshold

    labels = np.zeros((h, w), np.uint8)
    bx0, bx1 = int(px[0] // _BUCKET) - 1, int(px[-1] // _BUCKET) + 1
    by0, by1 = int(py[0] // _BUCKET) - 1, int(py[-1] // _BUCKET) + 1
    cells = ((bx, by) for by in range(by0, by1 + 1) for bx in range(bx0, bx1 + 1))
    found = [lay.buckets[k] for k in cells if k in lay.buckets]
    if found:
        for i in np.unique(np.concatenate(found)):  # ascending: vessels first, nuclei drawn over them
            cx, cy, a, b, cs, sn = lay.geom[i]
            i0 = max(int(math.ceil((cx - a - x) / step - 0.5)), 0)
            i1 = min(int(math.floor((cx + a - x) / step - 0.5)), w - 1)
            j0 = max(int(math.ceil((cy - a - y) / step - 0.5)), 0)
            j1 = min(int(math.floor((cy + a - y) / step - 0.5)), h - 1)
            if i0 > i1 or j0 > j1:
                continue
            dx = (px[i0 : i1 + 1] - cx)[None, :]
            dy = (py[j0 : j1 + 1] - cy)[:, None]
            uu = (dx * cs + dy * sn) / a
            vv = (dy * cs - dx * sn) / b
            inside = uu * uu + vv * vv <= 1.0
            labels[j0 : j1 + 1, i0 : i1 + 1][inside] = lay.kind[i]
    labels[~tissue] = 0  # structures exist only inside tissue

    rgb = None
    if want_rgb:
        # 0 glass, 1 tissue, 2 nuclei, 3 vessel: look up colour and texture amplitude per pixel.
        look = np.where(labels == NUCLEI, 2, np.where(labels == VESSEL, 3, tissue.astype(np.uint8)))
        ix = (np.floor(px).astype(np.int64) % _NOISE)[None, :]
        iy = (np.floor(py).astype(np.int64) % _NOISE)[:, None]
        n0 = lay.noise[0][iy, ix]
        n1 = lay.noise[1][iy, ix]
        amp = _NOISE_AMPLITUDE[look]
        # Denser tissue stains slightly darker, as thick sections do.
        shade = 1.0 - 0.10 * np.clip((field - lay.threshold) / 0.5, 0.0, 1.0) * (look == 1)
        out = _COLOURS[look] * shade[..., None]
        out += (amp * n0)[..., None]
        out[..., 0] += amp * 0.5 * n1
        out[..., 2] -= amp * 0.5 * n1
        rgb = np.clip(out, 0, 255).astype(np.uint8)
    return Region(rgb, labels, tissue)


def pyramid_downsamples(width: int, height: int, tile: int, factor: int = 4) -> list[int]:
    """Downsample of each pyramid level: factor**k until a level fits in one tile, always at least two levels."""
    out = [1]
    while max(-(-width // out[-1]), -(-height // out[-1])) > tile or len(out) < 2:
        out.append(out[-1] * factor)
    return out


def write_synthetic_slide(
    path: str | Path,
    width: int = 16384,
    height: int = 16384,
    mpp_um: float = 0.25,
    tissue_fraction: float = 0.3,
    seed: int = 0,
    tile: int = 256,
    compression: str = "jpeg",
    ome: bool = True,
    *,
    level_factor: int = 4,
    pyramid: str = "subifds",
    jpeg_quality: int = 90,
    calibrated: bool = True,
) -> Path:
    """Write a pyramidal tiled (OME-)TIFF like a scanner does, tile by tile, and return its path.

    Levels are SubIFDs of level 0 (`pyramid="subifds"`, the default) or further top-level pages
    (`pyramid="pages"`), each `level_factor` (2 or 4) smaller than the previous one, at least two.
    The calibration goes into OME PhysicalSizeX/Y (unit µm) when `ome`, and into XResolution/YResolution
    with ResolutionUnit CENTIMETER on every level; `calibrated=False` leaves both out (for tests).
    No full-resolution level is ever held in memory: tifffile pulls rendered tiles from generators.
    """
    spec = SyntheticSpec(int(width), int(height), float(mpp_um), float(tissue_fraction), int(seed))
    path = Path(path)
    if level_factor not in (2, 4):
        raise ValueError(f"level_factor={level_factor}: expected 2 or 4")
    if pyramid not in ("subifds", "pages"):
        raise ValueError(f"pyramid={pyramid!r}: expected 'subifds' or 'pages'")
    if ome and pyramid == "pages":
        raise ValueError("pyramid='pages' writes a plain TIFF: OME-TIFF pyramids are SubIFDs (use ome=False)")
    if tile % 16:
        raise ValueError(f"tile={tile}: must be a multiple of 16 (TIFF tiles)")
    compression = compression.lower()
    if compression not in ("jpeg", "zlib", "lzw", "none"):
        raise ValueError(f"compression={compression!r}: expected 'jpeg', 'zlib', 'lzw' or 'none'")
    downsamples = pyramid_downsamples(spec.width, spec.height, tile, level_factor)
    _layout(spec)  # build the layout once, before the writer starts pulling tiles

    def tiles(ds: int) -> Iterator[np.ndarray]:
        lw, lh = -(-spec.width // ds), -(-spec.height // ds)
        for ty in range(0, lh, tile):
            for tx in range(0, lw, tile):
                yield spec.render(tx * ds, ty * ds, min(tile, lw - tx), min(tile, lh - ty), ds).rgb

    # BigTIFF once the uncompressed pixels could pass classic TIFF's 4 GiB offsets (with margin).
    bigtiff = spec.width * spec.height * 3 * 4 // 3 > 2**31
    common: dict = dict(
        dtype=np.uint8,
        photometric="rgb",
        tile=(tile, tile),
        compression=None if compression == "none" else compression,
        compressionargs={"level": jpeg_quality} if compression == "jpeg" else None,
        maxworkers=2,  # encode in threads (imagecodecs releases the GIL) ...
        buffersize=16 * 2**20,  # ... but buffer only ~16 MB of tiles so memory stays flat
    )

    def resolution(ds: int) -> dict:
        if not calibrated:
            return {"resolutionunit": "NONE"}
        per_cm = 1e4 / (spec.mpp_um * ds)
        return {"resolution": (per_cm, per_cm), "resolutionunit": "CENTIMETER"}

    if ome:
        metadata: dict | None = {"axes": "YXS", "Name": path.name.split(".")[0]}
        if calibrated:
            metadata.update(
                PhysicalSizeX=spec.mpp_um, PhysicalSizeXUnit="µm", PhysicalSizeY=spec.mpp_um, PhysicalSizeYUnit="µm"
            )
    else:
        metadata = None
    nsub = len(downsamples) - 1 if pyramid == "subifds" else 0
    with tifffile.TiffWriter(path, bigtiff=bigtiff, ome=ome) as tif:
        tif.write(
            tiles(1),
            shape=(spec.height, spec.width, 3),
            subifds=nsub or None,
            metadata=metadata,
            software="gpuburst synthetic",
            **resolution(1),
            **common,
        )
        for ds in downsamples[1:]:
            tif.write(
                tiles(ds),
                shape=(-(-spec.height // ds), -(-spec.width // ds), 3),
                subfiletype=1,
                metadata=None,
                **resolution(ds),
                **common,
            )
    return path

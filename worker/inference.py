"""Batched tile inference with tile reading and decoding overlapped with the model's compute."""
from __future__ import annotations

import contextlib
import math
import os
import queue
import threading
import time
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from worker.model import LoadedModel, TinySegNet
from worker.slides import Level, Slide


CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"  # "<quota> <period>" in µs, or "max <period>" when unlimited


def cpu_count() -> int:
    """CPUs this process may use: its CPU affinity, capped by a cgroup v2 CPU quota (a pod's CPU limit).

    A pod limited to 2 CPUs on a 64-core node still sees 64 cores; running 64 torch threads there makes every
    parallel region wait for threads the quota has parked, which is far slower than using 2.
    """
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    try:
        with open(CGROUP_CPU_MAX) as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota visible: the affinity is the limit
    return max(n, 1)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 in hardware (AVX512-BF16 or AMX), where CPU autocast to bf16 pays off."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


@dataclass(frozen=True)
class InferenceSettings:
    """How tiles are batched, read ahead and computed."""

    batch_size: int = 0
    """Tiles per model call; 0 picks 32 on CUDA and 4 on CPU (default 0). On CPU (2 cores, bf16, one batch per
    compute worker) 2, 4 and 8 measured within noise of each other and 1 ~10 % slower: a 256 px tile is already a
    large enough unit of work for one core."""
    reader_threads: int = 0
    """Threads reading and decoding tiles ahead of the model (default 0). 0 picks min(8, CPUs) on CUDA; on CPU with
    several compute workers it stays 0: each worker reads its own batch, then computes it (on a few cores reader
    threads only take turns with the compute threads, and a tile decoded by the thread that computes it is still
    in that core's cache: measured 2-4 % faster than 2 reader threads on 2 cores); with one compute worker,
    min(2, CPUs)."""
    prefetch_batches: int = 3
    """Batches read ahead of the model (queued ahead of the workers where they read their own); bounds memory at
    (prefetch + 2) x batch tiles on CUDA and (prefetch + compute_workers) x batch tiles on CPU (default 3)."""
    torch_threads: int = 0
    """torch intra-op threads on CPU, shared out among the compute workers; 0 uses every CPU of the process
    (default 0). Restored afterwards."""
    compute_workers: int = 0
    """Batches computed at once on CPU, each by its own thread with torch_threads / compute_workers intra-op
    threads; 0 picks min(4, CPUs) on CPU and 1 on CUDA (default 0). Separate single-threaded batches keep the
    cores busy where one batch over all cores stalls at every layer whenever a reader thread takes a core."""
    amp: str = "auto"
    """Mixed precision: "auto", "bf16", "fp16" or "off" (default "auto"). On CUDA "auto" is bf16 where supported,
    else fp16. On CPU "auto" is bf16 only where the processor computes bf16 natively (AVX512-BF16 or AMX: 2-3x
    faster convolutions for this net, measured), else float32; fp16 is CUDA-only. On CPU the built-in net runs as
    a CpuNet in that dtype (weights converted once, no autocast); other models run under autocast."""

    def resolved(self, device: torch.device) -> "InferenceSettings":
        """These settings with every 0/"auto" replaced by the concrete choice for `device`."""
        cuda = device.type == "cuda"
        amp = self.amp
        if amp not in ("auto", "bf16", "fp16", "off"):
            raise ValueError(f"amp={amp!r}: expected 'auto', 'bf16', 'fp16' or 'off'")
        if not cuda:
            native_bf16 = cpu_has_native_bf16()
            amp = "bf16" if amp in ("auto", "bf16") and native_bf16 else "off"
        elif amp == "auto":
            amp = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        workers = 1 if cuda else (self.compute_workers or min(4, cpu_count()))
        readers = self.reader_threads or (min(8, cpu_count()) if cuda else 0 if workers > 1 else min(2, cpu_count()))
        return InferenceSettings(
            batch_size=self.batch_size or (32 if cuda else 4),
            reader_threads=readers,
            prefetch_batches=max(self.prefetch_batches, 1),
            torch_threads=self.torch_threads or cpu_count(),
            compute_workers=workers,
            amp=amp,
        )


@dataclass
class InferenceStats:
    """Where the time went (stages overlap, so they can add up to more than the wall time)."""

    tiles: int = 0
    batches: int = 0
    read_s: float = 0.0  # reader threads' busy time: pread + decode, summed over threads
    infer_s: float = 0.0  # model time: upload, forward, argmax, download, summed over compute threads
    wait_s: float = 0.0  # compute waiting for decoded tiles: well above zero means reading is the bottleneck


@dataclass(frozen=True)
class TileJob:
    """One model tile: grid position and top-left pixel on the analysed level."""

    tx: int
    ty: int
    x: int
    y: int


@contextlib.contextmanager
def torch_threads(n: int):
    """Run the block with `n` torch intra-op threads, then restore the previous number."""
    before = torch.get_num_threads()
    if n and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


class CpuNet:
    """The built-in TinySegNet re-expressed for CPU inference: the same function, computed with less work.

    * The model's input normalisation (x / 255 - mean_c) / std_c per channel c is folded into the stem convolution
      (exact: that convolution has no padding), so a uint8 tile converts straight to the compute dtype (0-255 are
      exact in bfloat16) and the elementwise passes over every input pixel disappear.
    * The head's 3x3 convolution over cat(fine, upsample2x(context)) is split by input channels (convolution is
      linear): its fine part stays a 3x3 convolution at 1/4, and its context part, a 3x3 convolution over a
      nearest-upsampled image, equals a 4x4 stride-2 transposed convolution over the context itself at 1/8 (each
      output pixel's 3x3 window meets 2x2 context pixels). That is 40 % fewer multiply-adds in the head (~14 % of
      the net), and no upsampled or concatenated copy of the context is made. In float32 the result matches the
      module to ~1e-6.
    * Weights are held in the compute dtype (bfloat16 where the CPU computes it natively): no per-call autocast
      casts of weights and activations.
    * Each ReLU, and the sum of the head's two parts, runs inside a convolution (oneDNN post-ops) instead of as
      another pass over the activations, and the convolution weights are pre-packed into oneDNN's layout once per
      batch size, not reordered at every call.

    Built once per model and process (`cpu_net`), checked there against the model's own float32 forward. It holds
    converted copies of the weights taken then: a module changed in place afterwards needs a new LoadedModel.
    """

    def __init__(
        self,
        net: torch.nn.Module,
        dtype: torch.dtype,
        tile_size: int,
        mean: Sequence[float] = (0.0, 0.0, 0.0),
        std: Sequence[float] = (1.0, 1.0, 1.0),
    ):
        """`mean`/`std`: the input normalisation per RGB channel on the [0, 1] scale (default 0 and 1: x / 255)."""
        self.dtype = dtype
        self.tile_size = tile_size
        self._mean = torch.tensor([float(v) for v in mean], dtype=torch.float64)
        self._std = torch.tensor([float(v) for v in std], dtype=torch.float64)
        if self._mean.shape != (3,) or self._std.shape != (3,) or not bool((self._std > 0).all()):
            raise ValueError(f"mean={list(mean)}, std={list(std)}: expected 3 values each, std > 0")
        self._stem = [self._conv(blk, first=(i == 0)) for i, blk in enumerate(net.stem)]
        self._context = [self._conv(blk) for blk in net.context]
        head, last = self._conv(net.head[0]), net.head[1]
        if not isinstance(last, torch.nn.Conv2d) or last.kernel_size != (1, 1):
            raise TypeError("head[1] is not a 1x1 Conv2d")
        if (head["kernel"], head["padding"], head["stride"], head["dilation"]) != ([3, 3], [1, 1], [1, 1], [1, 1]):
            raise TypeError("head[0] is not a 3x3 'same' convolution")
        self._last = self._conv_spec(last, relu=False)
        # Split the head by its input channels: cat(fine, context) -> fine part + context part.
        w = net.head[0][0].weight.detach().to("cpu", torch.float64)
        fine_ch = self._stem[-1]["weight"].shape[0]
        w_fine, w_ctx = w[:, :fine_ch], w[:, fine_ch:]
        self._head_fine = dict(head, weight=w_fine.to(dtype).contiguous(memory_format=torch.channels_last))
        # Output row 2i+a, kernel row u reads upsampled row 2i+a+u-1, i.e. context row i + (a+u-1)//2. As a
        # transposed convolution (stride 2, padding 1, kernel 4) that context row i+d feeds output row 2i+a through
        # kernel row 2(-d) + a + 1.
        wt = torch.zeros(w_ctx.shape[1], w_ctx.shape[0], 4, 4, dtype=torch.float64)  # in, out, kh, kw
        for a in (0, 1):
            for b in (0, 1):
                for u in range(3):
                    for v in range(3):
                        du, dv = (a + u - 1) // 2, (b + v - 1) // 2
                        wt[:, :, a + 1 - 2 * du, b + 1 - 2 * dv] += w_ctx[:, :, u, v].T
        self._ctx_up = wt.to(dtype).contiguous(memory_format=torch.channels_last)
        self._fused = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_convolution_pointwise")
        self._pack = self._fused and hasattr(torch.ops.mkldnn, "_reorder_convolution_weight")
        transposed_ops = ("_reorder_convolution_transpose_weight", "_convolution_transpose_pointwise")
        self._pack_transposed = self._fused and all(hasattr(torch.ops.mkldnn, op) for op in transposed_ops)
        self._packed: dict[int, list] = {}  # batch size -> weight per convolution, packed for it
        self._warm: set[int] = set()  # batch sizes run once already

    def _conv(self, blk: torch.nn.Module, first: bool = False) -> dict:
        # A ConvBNReLU whose BatchNorm was folded: [Conv2d, Identity, ReLU].
        conv, bn, act = blk[0], blk[1], blk[2]
        nn = torch.nn
        if not (isinstance(conv, nn.Conv2d) and isinstance(bn, nn.Identity) and isinstance(act, nn.ReLU)):
            raise TypeError("not a folded Conv-BN-ReLU block")
        return self._conv_spec(conv, relu=True, raw_input=first)

    def _conv_spec(self, conv: torch.nn.Conv2d, relu: bool, raw_input: bool = False) -> dict:
        if conv.groups != 1 or conv.padding_mode != "zeros" or isinstance(conv.padding, str) or conv.bias is None:
            raise TypeError("unsupported convolution")
        w, b = conv.weight.detach().to("cpu", torch.float64), conv.bias.detach().to("cpu", torch.float64)
        if raw_input:
            if any(conv.padding):
                raise TypeError("the stem convolution pads its input: the input scaling cannot be folded into it")
            if w.shape[1] != 3:
                raise TypeError("the stem convolution does not take 3 input channels")
            # conv((x / 255 - mean_c) / std_c) = conv'(x) with w'[:, c] = w[:, c] / (255 std_c) and
            # b' = b - sum over c, kh, kw of w[:, c] * mean_c / std_c; computed in float64, rounded once.
            inv = 1.0 / self._std
            b = b - (w.sum(dim=(2, 3)) * (self._mean * inv)).sum(dim=1)
            w = w * (inv / 255.0).view(1, 3, 1, 1)
        return {
            "weight": w.to(self.dtype).contiguous(memory_format=torch.channels_last), "bias": b.to(self.dtype),
            "kernel": list(conv.kernel_size), "padding": list(conv.padding), "stride": list(conv.stride),
            "dilation": list(conv.dilation), "relu": relu,
        }

    def _weights(self, n: int) -> list:
        """The convolution weights (stem..., context..., head's fine part, last, head's context part), packed for
        batch size n."""
        packed = self._packed.get(n)
        if packed is None:
            specs = [*self._stem, *self._context]
            side = self.tile_size
            sides = []
            for spec in specs:  # input side of each convolution
                sides.append(side)
                k, p, s, d = spec["kernel"][0], spec["padding"][0], spec["stride"][0], spec["dilation"][0]
                side = (side + 2 * p - d * (k - 1) - 1) // s + 1
            fine_side = sides[len(self._stem)] if self._context else side
            specs += [self._head_fine, self._last]
            sides += [fine_side, fine_side]
            packed = []
            for spec, side in zip(specs, sides):
                w = spec["weight"]
                if self._pack:  # the input size only steers oneDNN's choice of weight layout
                    w = torch.ops.mkldnn._reorder_convolution_weight(
                        w, spec["padding"], spec["stride"], spec["dilation"], 1, [n, w.shape[1], side, side]
                    )
                packed.append(w)
            w = self._ctx_up
            if self._pack_transposed:
                w = torch.ops.mkldnn._reorder_convolution_transpose_weight(
                    w, [1, 1], [0, 0], [2, 2], [1, 1], 1, [n, w.shape[0], fine_side // 2, fine_side // 2]
                )
            packed.append(w)
            self._packed[n] = packed  # a race only packs twice: both results are the same
        return packed

    def _run(self, x: torch.Tensor, w: torch.Tensor, spec: dict, add: torch.Tensor | None = None) -> torch.Tensor:
        """relu(conv(x) + add) (relu and add as the spec says), as one oneDNN call where torch has it."""
        if self._fused:
            unary = "relu" if spec["relu"] else "none"
            args = (spec["padding"], spec["stride"], spec["dilation"], 1)
            if add is None:
                return torch.ops.mkldnn._convolution_pointwise(x, w, spec["bias"], *args, unary, [], "")
            return torch.ops.mkldnn._convolution_pointwise.binary(
                x, add, w, spec["bias"], *args, "add", None, unary if spec["relu"] else None, [], ""
            )
        y = F.conv2d(x, w, spec["bias"], spec["stride"], spec["padding"], spec["dilation"])
        if add is not None:
            y = y.add_(add)
        return y.relu_() if spec["relu"] else y

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits (N x C x T/s x T/s) for x: N x 3 x T x T, raw 0-255 RGB values in `dtype`, channels_last."""
        packed = self._weights(x.shape[0])
        weights = iter(packed)
        for spec in self._stem:
            x = self._run(x, next(weights), spec)
        fine = x
        for spec in self._context:
            x = self._run(x, next(weights), spec)
        if 2 * x.shape[-2] != fine.shape[-2] or 2 * x.shape[-1] != fine.shape[-1]:
            raise RuntimeError("the context branch is not at half the resolution of the fine one")
        if self._pack_transposed:
            ctx_part = torch.ops.mkldnn._convolution_transpose_pointwise(
                x, packed[-1], None, [1, 1], [0, 0], [2, 2], [1, 1], 1, "none", [], ""
            )
        else:
            ctx_part = F.conv_transpose2d(x, self._ctx_up, None, stride=2, padding=1)
        x = self._run(fine, next(weights), self._head_fine, add=ctx_part)
        return self._run(x, next(weights), self._last)

    def warm(self, n: int) -> None:
        """Run one blank batch of n tiles, once per size and process: oneDNN builds its kernels for a shape on its
        first call, which would otherwise stall the first batch of the first slide."""
        if n in self._warm:
            return
        with torch.inference_mode():
            x = torch.zeros(n, 3, self.tile_size, self.tile_size, dtype=self.dtype)
            self.logits(x.contiguous(memory_format=torch.channels_last))
        self._warm.add(n)

    def __call__(self, batch: np.ndarray) -> torch.Tensor:
        """uint8 class maps (N x T/s x T/s) for a uint8 N x T x T x 3 batch."""
        # NHWC -> NCHW is a view with channels_last strides; the dtype conversion keeps that layout.
        x = torch.from_numpy(batch).permute(0, 3, 1, 2).to(self.dtype)
        return self.logits(x).argmax(1).to(torch.uint8)


_CPU_NETS: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = weakref.WeakKeyDictionary()
_CPU_NETS_LOCK = threading.Lock()


def cpu_net(model: LoadedModel, amp: str) -> CpuNet | None:
    """The CpuNet of `model` computing in bfloat16 (amp "bf16") or float32, or None where it does not apply.

    It applies to an eager TinySegNet on CPU (the built-in model, or any .pt2 whose metadata names that
    architecture), with the model's normalisation folded in. It is built once per model and process (later slides
    reuse it, kernels and packed weights warm) and only kept if its float32 twin computes the model's own float32
    logits on prepared input (within 1e-3) on a random tile: any other net, or a changed forward, falls back to the
    plain module.
    """
    net = model.module
    if model.device.type != "cpu" or type(net) is not TinySegNet:
        return None
    dtype = torch.bfloat16 if amp == "bf16" else torch.float32
    key = (dtype, tuple(model.normalisation.mean), tuple(model.normalisation.std))
    with _CPU_NETS_LOCK:
        built = _CPU_NETS.setdefault(net, {})
        if key not in built:
            built[key] = _build_cpu_net(model, dtype)
        return built[key]


def _build_cpu_net(model: LoadedModel, dtype: torch.dtype) -> CpuNet | None:
    T = model.tile_size
    norm = {"mean": model.normalisation.mean, "std": model.normalisation.std}
    try:
        check = CpuNet(model.module, torch.float32, T, **norm)
        rgb = torch.randint(0, 256, (1, T, T, 3), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
        with torch.inference_mode():
            want = model.module(model.prepare(rgb))
            got = check.logits(rgb.permute(0, 3, 1, 2).float())  # channels_last strides, as __call__ passes it
        tolerance = 1e-3 * max(1.0, float(want.abs().max()))
        if got.shape != want.shape or not torch.allclose(got, want, rtol=0, atol=tolerance):
            return None
        fast = check if dtype == torch.float32 else CpuNet(model.module, dtype, T, **norm)
        fast.warm(1)
    except Exception:  # noqa: BLE001 - not the net this was written for, or an op this torch lacks: the plain
        return None  # module computes it
    return fast


class Predictor:
    """Runs a LoadedModel on uint8 RGB tile batches (N x T x T x 3) and returns uint8 class maps."""

    def __init__(self, model: LoadedModel, settings: InferenceSettings | None = None):
        self.model = model
        self.device = model.device
        self.settings = (settings or InferenceSettings()).resolved(self.device)
        if model.max_batch is not None and self.settings.batch_size > model.max_batch:
            # The model file accepts no larger batch (its exported batch dimension's range).
            from dataclasses import replace

            self.settings = replace(self.settings, batch_size=model.max_batch)
        amp = self.settings.amp
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # batches have one shape: let cuDNN pick the fastest kernels
        self._amp = (
            (lambda: torch.autocast(self.device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16))
            if amp in ("bf16", "fp16")
            else contextlib.nullcontext
        )
        self._cpu_net = cpu_net(model, amp) if self.device.type == "cpu" else None
        if self._cpu_net is not None:
            self._cpu_net.warm(self.settings.batch_size)  # once per process and batch size

    def launch(self, batch: np.ndarray) -> torch.Tensor:
        """Start the model on `batch`; returns the class map tensor (on the device, possibly still computing)."""
        if self._cpu_net is not None:
            with torch.inference_mode():
                return self._cpu_net(batch)
        x = torch.from_numpy(batch)
        if self.device.type != "cpu":
            x = x.to(self.device, non_blocking=True)  # upload uint8 (4x fewer bytes), convert on the device
        # NHWC -> NCHW with channels_last strides (the layout convolutions prefer), normalised as the model says.
        x = self.model.prepare(x)
        with torch.inference_mode(), self._amp():
            logits = self.model.module(x)
            return logits.argmax(1).to(torch.uint8)

    def predict(self, batch: np.ndarray) -> np.ndarray:
        """Class maps (N x T/s x T/s, uint8) for a batch, synchronously."""
        with torch.inference_mode():
            return self.launch(batch).cpu().numpy()


def iter_class_maps(
    slide: Slide,
    level: Level,
    model: LoadedModel,
    jobs: Sequence[TileJob],
    settings: InferenceSettings | None = None,
    stats: InferenceStats | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[tuple[TileJob, np.ndarray]]:
    """Yield (job, class map) in job order; tiles are read `prefetch_batches` ahead in reader threads.

    Memory is bounded by the batch buffers, whatever the number of jobs. On CUDA the class maps of a batch are
    downloaded while the next batch computes.
    """
    pred = Predictor(model, settings)
    s = pred.settings
    stats = stats if stats is not None else InferenceStats()
    if pred.device.type == "cpu" and s.compute_workers > 1:
        yield from _iter_cpu_workers(slide, level, pred, jobs, stats, progress)
        return
    total = len(jobs)
    t = model.tile_size
    cuda = pred.device.type == "cuda"
    nbuf = s.prefetch_batches + 2  # in flight + the one computing + the one downloading
    free: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()
    for _ in range(nbuf):
        if cuda:  # pinned host memory makes the upload asynchronous
            free.put(torch.empty((s.batch_size, t, t, 3), dtype=torch.uint8, pin_memory=True).numpy())
        else:
            free.put(np.empty((s.batch_size, t, t, 3), np.uint8))

    def read(chunk: Sequence[TileJob], buf: np.ndarray) -> tuple[Sequence[TileJob], np.ndarray, float]:
        t0 = time.perf_counter()
        for i, job in enumerate(chunk):
            slide.read_region(level, job.x, job.y, t, t, out=buf[i])
        return chunk, buf, time.perf_counter() - t0

    chunks = iter([jobs[i : i + s.batch_size] for i in range(0, total, s.batch_size)])
    done = 0
    if progress:
        progress(0, total)

    def finish(item) -> Iterator[tuple[TileJob, np.ndarray]]:
        nonlocal done
        chunk, out, buf, event = item
        t0 = time.perf_counter()
        if event is not None:
            event.synchronize()
        maps = out.numpy() if not cuda else out.numpy().copy()
        free.put(buf)
        stats.infer_s += time.perf_counter() - t0
        for job, m in zip(chunk, maps):
            yield job, m
        done += len(chunk)
        stats.tiles = done
        if progress:
            progress(done, total)

    with torch_threads(s.torch_threads if not cuda else 0), ThreadPoolExecutor(s.reader_threads, "tile-reader") as pool:
        inflight: deque = deque()

        def submit() -> None:
            chunk = next(chunks, None)
            if chunk is not None:
                inflight.append(pool.submit(read, chunk, free.get()))

        for _ in range(s.prefetch_batches):
            submit()
        pending = None
        try:
            while inflight:
                t0 = time.perf_counter()
                chunk, buf, read_s = inflight.popleft().result()
                stats.wait_s += time.perf_counter() - t0
                stats.read_s += read_s
                submit()
                t0 = time.perf_counter()
                cls = pred.launch(buf[: len(chunk)])
                if cuda:
                    host = torch.empty(cls.shape, dtype=torch.uint8, pin_memory=True)
                    host.copy_(cls, non_blocking=True)
                    event = torch.cuda.Event()
                    event.record()
                    item = (chunk, host, buf, event)
                else:
                    item = (chunk, cls, buf, None)
                stats.infer_s += time.perf_counter() - t0
                stats.batches += 1
                if pending is not None:
                    yield from finish(pending)
                pending = item
            if pending is not None:
                yield from finish(pending)
        finally:
            for f in inflight:  # consumer stopped early: drop what was queued
                f.cancel()


def _iter_cpu_workers(
    slide: Slide,
    level: Level,
    pred: Predictor,
    jobs: Sequence[TileJob],
    stats: InferenceStats,
    progress: Callable[[int, int], None] | None,
) -> Iterator[tuple[TileJob, np.ndarray]]:
    """iter_class_maps on CPU with several batches computed at once, each on one worker thread.

    With reader_threads == 0 each worker reads its own batch and then computes it; otherwise reader threads
    read batches ahead of the workers.
    """
    s = pred.settings
    t = pred.model.tile_size
    total = len(jobs)
    depth = s.prefetch_batches + s.compute_workers  # batches being read, computed or queued for either
    free: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()
    for _ in range(depth):
        free.put(np.empty((s.batch_size, t, t, 3), np.uint8))
    chunks = iter([jobs[i : i + s.batch_size] for i in range(0, total, s.batch_size)])

    def read(chunk: Sequence[TileJob], buf: np.ndarray) -> float:
        t0 = time.perf_counter()
        for i, job in enumerate(chunk):
            slide.read_region(level, job.x, job.y, t, t, out=buf[i])
        return time.perf_counter() - t0

    def compute(chunk: Sequence[TileJob], buf: np.ndarray, reading) -> tuple:
        # Both pools are FIFO and get batches in the same order, so the read this waits for is never stuck
        # behind a compute task: no deadlock, and results come out in job order.
        t0 = time.perf_counter()
        read_s = reading.result()
        t1 = time.perf_counter()
        maps = pred.predict(buf[: len(chunk)])
        return chunk, buf, maps, read_s, time.perf_counter() - t1, t1 - t0

    def read_and_compute(chunk: Sequence[TileJob], buf: np.ndarray) -> tuple:
        read_s = read(chunk, buf)
        t1 = time.perf_counter()
        maps = pred.predict(buf[: len(chunk)])
        return chunk, buf, maps, read_s, time.perf_counter() - t1, 0.0

    done = 0
    if progress:
        progress(0, total)
    per_worker = max(1, s.torch_threads // s.compute_workers)
    with contextlib.ExitStack() as stack:
        # torch_threads first: the worker threads, started after it, take its thread count on their first op.
        stack.enter_context(torch_threads(per_worker))
        readers = stack.enter_context(ThreadPoolExecutor(s.reader_threads, "tile-reader")) if s.reader_threads else None
        workers = stack.enter_context(ThreadPoolExecutor(s.compute_workers, "tile-compute"))
        inflight: deque = deque()

        def submit() -> None:
            chunk = next(chunks, None)
            if chunk is not None:
                buf = free.get()
                if readers is None:
                    inflight.append((None, workers.submit(read_and_compute, chunk, buf)))
                else:
                    reading = readers.submit(read, chunk, buf)
                    inflight.append((reading, workers.submit(compute, chunk, buf, reading)))

        for _ in range(depth):
            submit()
        try:
            while inflight:
                chunk, buf, maps, read_s, infer_s, wait_s = inflight[0][1].result()
                inflight.popleft()
                stats.wait_s += wait_s
                stats.read_s += read_s
                stats.infer_s += infer_s
                stats.batches += 1
                free.put(buf)
                submit()
                for job, m in zip(chunk, maps):
                    yield job, m
                done += len(chunk)
                stats.tiles = done
                if progress:
                    progress(done, total)
        finally:
            for reading, computing in inflight:  # consumer stopped early or a batch failed: drop the rest
                computing.cancel()
                if reading is not None:
                    reading.cancel()

"""Batched tile inference with tile reading and decoding overlapped with the model's compute."""
from __future__ import annotations

import contextlib
import queue
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from worker.cpu_net import cpu_net
from worker.cpus import cpu_count, cpu_has_native_bf16, torch_threads
from worker.models.loaded_model import LoadedModel
from worker.precisions import PRECISIONS
from worker.slides import Level, Slide


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
    a CpuNet in that dtype (weights converted once, no autocast); other models run under autocast. A `precision`
    other than "auto" overrides it."""
    precision: str = "auto"
    """The dtype asked for (flag --precision, env PRECISION): "auto" (default) leaves the choice to `amp`; "fp32" runs
    the model's own float32 forward, neither autocast nor the CpuNet's re-expression of the net, so the class map
    equals a plain eager float32 forward tile for tile; "bf16" and "fp16" run that dtype wherever they are asked,
    without the fallback `amp` makes (bf16 on a CPU without native bf16 is emulated; fp16 on a CPU needs native
    fp16: worker.device.check_precision refuses it at start otherwise)."""

    def resolved(self, device: torch.device) -> InferenceSettings:
        """These settings with every 0/"auto" replaced by the concrete choice for `device`."""
        cuda = device.type == "cuda"
        amp = self.amp
        if amp not in ("auto", "bf16", "fp16", "off"):
            raise ValueError(f"amp={amp!r}: expected 'auto', 'bf16', 'fp16' or 'off'")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision={self.precision!r}: expected one of {', '.join(PRECISIONS)}")
        if self.precision != "auto":
            amp = {"fp32": "off", "bf16": "bf16", "fp16": "fp16"}[self.precision]
        elif not cuda:
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
            precision=self.precision,
        )


@dataclass
class InferenceStats:
    """Where the time went (stages overlap, so they can add up to more than the wall time)."""

    tiles: int = 0
    batches: int = 0
    read_s: float = 0.0  # reader threads' busy time: pread + decode, summed over threads
    infer_s: float = 0.0  # model time: upload, forward, argmax, download, summed over compute threads
    wait_s: float = 0.0  # compute waiting for decoded tiles: well above zero means reading is the bottleneck
    path: str = ""  # how the model ran: "module" (its own forward) or "cpu fast path" (the CpuNet)


@dataclass(frozen=True)
class TileJob:
    """One model tile: grid position and top-left pixel on the analysed level."""

    tx: int
    ty: int
    x: int
    y: int


def ieee_float32_on_cuda() -> None:
    """Make float32 mean IEEE float32 on CUDA for this process: torch lets cuDNN run float32 convolutions as TF32
    (10 bits of mantissa, like fp16's) on Ampere and later GPUs by default, which `--precision fp32` must not."""
    # torch's newer per-operator flags where it has them (mixed with the legacy allow_tf32 flags, torch raises).
    conv, matmul = getattr(torch.backends.cudnn, "conv", None), torch.backends.cuda.matmul
    if conv is not None and hasattr(conv, "fp32_precision"):
        conv.fp32_precision = "ieee"
        if hasattr(matmul, "fp32_precision"):
            matmul.fp32_precision = "ieee"
    else:  # an older torch
        torch.backends.cudnn.allow_tf32 = False
        matmul.allow_tf32 = False


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
            if self.settings.precision == "fp32":
                ieee_float32_on_cuda()
        self._amp = (
            (lambda: torch.autocast(self.device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16))
            if amp in ("bf16", "fp16")
            else contextlib.nullcontext
        )
        # fp32 asked for means the model's own forward, exactly: not the CpuNet, whose re-expressed head and folded
        # normalisation round differently (~1e-6 in the logits).
        fast = self.device.type == "cpu" and self.settings.precision != "fp32"
        self._cpu_net = cpu_net(model, amp) if fast else None
        self.path = "cpu fast path" if self._cpu_net is not None else "module"
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
    stats.path = pred.path
    if pred.device.type == "cpu" and s.compute_workers > 1:
        yield from _iter_cpu_workers(slide, level, pred, jobs, stats, progress)
        return
    t = model.tile_size
    cuda = pred.device.type == "cuda"
    # in flight + the one computing + the one downloading; pinned host memory makes the upload asynchronous
    free = _buffers(s.prefetch_batches + 2, s.batch_size, t, pinned=cuda)

    def read(chunk: Sequence[TileJob], buf: np.ndarray) -> tuple[Sequence[TileJob], np.ndarray, float]:
        return chunk, buf, _read_batch(slide, level, t, chunk, buf)

    chunks = _batches(jobs, s.batch_size)
    tally = _Tally(len(jobs), stats, progress)

    def finish(item) -> Iterator[tuple[TileJob, np.ndarray]]:
        chunk, out, buf, event = item
        t0 = time.perf_counter()
        if event is not None:
            event.synchronize()
        maps = out.numpy() if not cuda else out.numpy().copy()
        free.put(buf)
        stats.infer_s += time.perf_counter() - t0
        yield from tally.emit(chunk, maps)

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
    depth = s.prefetch_batches + s.compute_workers  # batches being read, computed or queued for either
    free = _buffers(depth, s.batch_size, t)
    chunks = _batches(jobs, s.batch_size)

    def read(chunk: Sequence[TileJob], buf: np.ndarray) -> float:
        return _read_batch(slide, level, t, chunk, buf)

    def compute(chunk: Sequence[TileJob], buf: np.ndarray, reading=None) -> tuple:
        """Read the batch here (`reading` None), or wait for its read by a reader thread; then compute it."""
        # Both pools are FIFO and get batches in the same order, so the read this waits for is never stuck
        # behind a compute task: no deadlock, and results come out in job order.
        t0 = time.perf_counter()
        if reading is None:
            read_s, waited = read(chunk, buf), 0.0
        else:
            read_s = reading.result()
            waited = time.perf_counter() - t0
        t1 = time.perf_counter()
        maps = pred.predict(buf[: len(chunk)])
        return chunk, buf, maps, read_s, time.perf_counter() - t1, waited

    tally = _Tally(len(jobs), stats, progress)
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
                    inflight.append((None, workers.submit(compute, chunk, buf)))
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
                yield from tally.emit(chunk, maps)
        finally:
            for reading, computing in inflight:  # consumer stopped early or a batch failed: drop the rest
                computing.cancel()
                if reading is not None:
                    reading.cancel()


def _batches(jobs: Sequence[TileJob], size: int) -> Iterator[Sequence[TileJob]]:
    """`jobs` in batches of `size`, in order (the last one may be shorter)."""
    return iter([jobs[i : i + size] for i in range(0, len(jobs), size)])


def _buffers(n: int, batch: int, tile: int, pinned: bool = False) -> queue.SimpleQueue[np.ndarray]:
    """`n` free uint8 batch buffers (batch x tile x tile x 3), in pinned host memory when `pinned`."""
    free: queue.SimpleQueue[np.ndarray] = queue.SimpleQueue()
    for _ in range(n):
        if pinned:
            free.put(torch.empty((batch, tile, tile, 3), dtype=torch.uint8, pin_memory=True).numpy())
        else:
            free.put(np.empty((batch, tile, tile, 3), np.uint8))
    return free


def _read_batch(slide: Slide, level: Level, tile: int, chunk: Sequence[TileJob], buf: np.ndarray) -> float:
    """Read the tiles of `chunk` into the rows of `buf`; returns the seconds it took."""
    t0 = time.perf_counter()
    for i, job in enumerate(chunk):
        slide.read_region(level, job.x, job.y, tile, tile, out=buf[i])
    return time.perf_counter() - t0


class _Tally:
    """The tail both pipelines share: yields a batch's (job, class map) pairs in job order and counts them into
    `stats.tiles` and `progress(done, total)`, which it calls with 0 done first."""

    def __init__(self, total: int, stats: InferenceStats, progress: Callable[[int, int], None] | None) -> None:
        self.total, self.stats, self.progress, self.done = total, stats, progress, 0
        if progress:
            progress(0, total)

    def emit(self, chunk: Sequence[TileJob], maps: Iterable[np.ndarray]) -> Iterator[tuple[TileJob, np.ndarray]]:
        for job, m in zip(chunk, maps):
            yield job, m
        self.done += len(chunk)
        self.stats.tiles = self.done
        if self.progress:
            self.progress(self.done, self.total)

"""Batched tile inference with tile reading and decoding overlapped with the model's compute."""
from __future__ import annotations

import contextlib
import math
import os
import queue
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from worker.model import LoadedModel
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
    """Tiles per model call; 0 picks 32 on CUDA and 4 on CPU (default 0). On CPU larger batches gained nothing
    (measured 1-16 on 2 cores: within noise, 16 slowest), since a 256 px tile already keeps the cores busy."""
    reader_threads: int = 0
    """Threads reading and decoding tiles; 0 picks min(8, CPUs) on CUDA and min(2, CPUs) on CPU, where the model
    needs the cores and decoding is ~10 % of the work (default 0)."""
    prefetch_batches: int = 3
    """Batches read ahead of the model; bounds memory at (prefetch + 2) x batch tiles (default 3)."""
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
    faster convolutions for this net, measured), else float32; fp16 is CUDA-only."""

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
        return InferenceSettings(
            batch_size=self.batch_size or (32 if cuda else 4),
            reader_threads=self.reader_threads or min(8 if cuda else 2, cpu_count()),
            prefetch_batches=max(self.prefetch_batches, 1),
            torch_threads=self.torch_threads or cpu_count(),
            compute_workers=1 if cuda else (self.compute_workers or min(4, cpu_count())),
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


class Predictor:
    """Runs a LoadedModel on uint8 RGB tile batches (N x T x T x 3) and returns uint8 class maps."""

    def __init__(self, model: LoadedModel, settings: InferenceSettings | None = None):
        self.model = model
        self.device = model.device
        self.settings = (settings or InferenceSettings()).resolved(self.device)
        amp = self.settings.amp
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # batches have one shape: let cuDNN pick the fastest kernels
        self._amp = (
            (lambda: torch.autocast(self.device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16))
            if amp in ("bf16", "fp16")
            else contextlib.nullcontext
        )

    def launch(self, batch: np.ndarray) -> torch.Tensor:
        """Start the model on `batch`; returns the class map tensor (on the device, possibly still computing)."""
        x = torch.from_numpy(batch)
        if self.device.type != "cpu":
            x = x.to(self.device, non_blocking=True)  # upload uint8 (4x fewer bytes), convert on the device
        # NHWC -> NCHW is a view with channels_last strides: no copy, and the layout convolutions prefer.
        x = x.permute(0, 3, 1, 2).float().div_(255.0)
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
    """iter_class_maps on CPU with several batches computed at once, each on one worker thread."""
    s = pred.settings
    t = pred.model.tile_size
    total = len(jobs)
    depth = s.prefetch_batches + s.compute_workers  # batches being read or computed
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

    done = 0
    if progress:
        progress(0, total)
    per_worker = max(1, s.torch_threads // s.compute_workers)
    with (
        torch_threads(per_worker),
        ThreadPoolExecutor(s.reader_threads, "tile-reader") as readers,
        ThreadPoolExecutor(s.compute_workers, "tile-compute") as workers,
    ):
        inflight: deque = deque()

        def submit() -> None:
            chunk = next(chunks, None)
            if chunk is not None:
                buf = free.get()
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
                reading.cancel()

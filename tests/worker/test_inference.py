"""Batched inference: same answers as one tile at a time, in order, reading in threads ahead of bounded depth."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from worker.devtools.synthetic import write_synthetic_slide
from worker.inference import InferenceSettings, InferenceStats, Predictor, TileJob, iter_class_maps
from worker.models.loading import load_model
from worker.slides import open_slide

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model():
    return load_model(None, CPU)


@pytest.fixture(scope="module")
def slide_path(tmp_path_factory):
    return write_synthetic_slide(tmp_path_factory.mktemp("inf") / "s.ome.tif", 1280, 1024, tissue_fraction=0.5, seed=8)


def _jobs(n_across=5, n_down=4, t=256):
    return [TileJob(tx, ty, tx * t, ty * t) for ty in range(n_down) for tx in range(n_across)]


@pytest.mark.parametrize("workers", [1, 2])
def test_batched_equals_one_at_a_time_and_keeps_order(model, slide_path, workers):
    jobs = _jobs()
    seen = []
    stats = InferenceStats()
    with open_slide(slide_path) as slide:
        lv = slide.levels[0]
        settings = InferenceSettings(batch_size=3, prefetch_batches=2, reader_threads=2, compute_workers=workers)
        out = list(iter_class_maps(slide, lv, model, jobs, settings, stats, lambda d, t: seen.append((d, t))))
        pred = Predictor(model)
        single = [pred.predict(slide.read_region(lv, j.x, j.y, 256, 256)[None])[0] for j in jobs]
    assert [j for j, _ in out] == jobs
    for (_, m), ref in zip(out, single):
        assert m.shape == (64, 64) and m.dtype == np.uint8
        assert (m == ref).mean() > 0.999  # same model, same pixels; batching may only reorder float sums
    assert seen[0] == (0, 20) and seen[-1] == (20, 20)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert stats.tiles == 20 and stats.batches == 7 and stats.read_s > 0 and stats.infer_s > 0


@pytest.mark.parametrize("workers", [1, 2])
def test_reading_runs_in_reader_threads_and_is_bounded(model, slide_path, workers):
    """Tiles are read off the caller's thread, never more than (prefetch + workers + 1) batches ahead of the
    consumer."""
    jobs = _jobs()
    batch, prefetch = 2, 2
    threads, reads, consumed = set(), [], [0]
    lock = threading.Lock()
    with open_slide(slide_path) as slide:
        original = slide.read_region

        def spy(level, x, y, w, h, out=None):
            with lock:
                threads.add(threading.current_thread().name)
                reads.append(consumed[0])
                ahead = len(reads) - consumed[0]
            assert ahead <= (prefetch + workers + 1) * batch, f"read {ahead} tiles ahead"
            return original(level, x, y, w, h, out=out)

        slide.read_region = spy
        settings = InferenceSettings(batch_size=batch, prefetch_batches=prefetch, reader_threads=1,
                                     compute_workers=workers)
        for _ in iter_class_maps(slide, slide.levels[0], model, jobs, settings):
            with lock:
                consumed[0] += 1
    assert threads and all(name.startswith("tile-reader") for name in threads)
    assert len(reads) == len(jobs)


def test_workers_read_their_own_batches_off_the_callers_thread_and_bounded(model, slide_path):
    """reader_threads=0 with several workers: each tile is read by a compute worker, ahead by at most the queue."""
    jobs = _jobs()
    batch, prefetch, workers = 2, 1, 2
    threads, reads, consumed = set(), [], [0]
    lock = threading.Lock()
    with open_slide(slide_path) as slide:
        original = slide.read_region

        def spy(level, x, y, w, h, out=None):
            with lock:
                threads.add(threading.current_thread().name)
                reads.append(consumed[0])
                ahead = len(reads) - consumed[0]
            assert ahead <= (prefetch + workers + 1) * batch, f"read {ahead} tiles ahead"
            return original(level, x, y, w, h, out=out)

        slide.read_region = spy
        settings = InferenceSettings(
            batch_size=batch, prefetch_batches=prefetch, reader_threads=0, compute_workers=workers
        )
        assert settings.resolved(CPU).reader_threads == 0
        out = []
        for item in iter_class_maps(slide, slide.levels[0], model, jobs, settings):
            out.append(item)
            with lock:
                consumed[0] += 1
        ref = [Predictor(model).predict(original(slide.levels[0], j.x, j.y, 256, 256)[None])[0] for j in jobs]
    assert threads and all(name.startswith("tile-compute") for name in threads)
    assert len(reads) == len(jobs) and [j for j, _ in out] == jobs
    assert all((m == r).mean() > 0.999 for (_, m), r in zip(out, ref))


@pytest.mark.parametrize("workers", [1, 2])
def test_a_read_error_surfaces_in_the_caller(model, slide_path, workers):
    with open_slide(slide_path) as slide:
        def broken(*a, **k):
            raise RuntimeError("disk on fire")

        slide.read_region = broken
        with pytest.raises(RuntimeError, match="disk on fire"):
            settings = InferenceSettings(batch_size=4, compute_workers=workers)
            list(iter_class_maps(slide, slide.levels[0], model, _jobs(), settings))


def test_no_jobs_yields_nothing_and_reports_zero(model, slide_path):
    seen = []
    with open_slide(slide_path) as slide:
        assert list(iter_class_maps(slide, slide.levels[0], model, [], progress=lambda d, t: seen.append((d, t)))) == []
    assert seen == [(0, 0)]


def test_settings_resolve_per_device(monkeypatch):
    import worker.inference as inference

    cpu = InferenceSettings().resolved(CPU)
    assert cpu.amp == ("bf16" if inference.cpu_has_native_bf16() else "off")
    assert cpu.batch_size == 4 and cpu.torch_threads >= 1
    assert cpu.compute_workers == min(4, cpu.torch_threads)
    # Several CPU workers read their own batches; a single one gets reader threads; CUDA gets up to 8 readers.
    assert cpu.reader_threads == (0 if cpu.compute_workers > 1 else min(2, inference.cpu_count()))
    assert 1 <= InferenceSettings(compute_workers=1).resolved(CPU).reader_threads <= 2
    assert InferenceSettings(compute_workers=2, reader_threads=3).resolved(CPU).reader_threads == 3
    cuda = InferenceSettings(amp="fp16").resolved(torch.device("cuda"))  # amp given: resolving asks no GPU
    assert (cuda.reader_threads, cuda.compute_workers, cuda.batch_size) == (min(8, inference.cpu_count()), 1, 32)
    assert InferenceSettings(amp="fp16").resolved(CPU).amp == "off"  # fp16 autocast is for CUDA only
    assert InferenceSettings(amp="off").resolved(CPU).amp == "off"
    monkeypatch.setattr(inference, "cpu_has_native_bf16", lambda: True)
    assert InferenceSettings().resolved(CPU).amp == "bf16"
    monkeypatch.setattr(inference, "cpu_has_native_bf16", lambda: False)
    assert InferenceSettings().resolved(CPU).amp == "off"  # emulated bf16 would be slower than float32
    with pytest.raises(ValueError, match="amp='fp8'"):
        InferenceSettings(amp="fp8").resolved(CPU)


def test_early_stop_leaves_no_threads_reading(model, slide_path):
    with open_slide(slide_path) as slide:
        it = iter_class_maps(slide, slide.levels[0], model, _jobs(), InferenceSettings(batch_size=2, compute_workers=2))
        next(it)
        it.close()  # the consumer gives up (an exception in the overlay writer, say)
    assert not [t for t in threading.enumerate() if t.name.startswith(("tile-reader", "tile-compute"))]


def test_predict_runs_without_autograd(model):
    batch = np.full((2, 256, 256, 3), 246, np.uint8)
    out = Predictor(model).predict(batch)
    assert out.shape == (2, 64, 64) and (out == 0).all()  # plain glass is background


def test_cpu_bf16_class_maps_agree_with_float32(model, slide_path):
    """bf16 autocast on CPU must not change the answer: nearly every class pixel agrees with float32."""
    import worker.inference as inference

    if not inference.cpu_has_native_bf16():
        pytest.skip("this CPU computes no bf16 in hardware, so amp='bf16' resolves to float32 here")
    assert InferenceSettings(amp="bf16").resolved(CPU).amp == "bf16"
    with open_slide(slide_path) as slide:
        fp32 = [m for _, m in iter_class_maps(slide, slide.levels[0], model, _jobs(), InferenceSettings(amp="off"))]
        bf16 = [m for _, m in iter_class_maps(slide, slide.levels[0], model, _jobs(), InferenceSettings(amp="bf16"))]
    a, b = np.concatenate([m.ravel() for m in fp32]), np.concatenate([m.ravel() for m in bf16])
    assert a.size > 0 and (a == b).mean() > 0.995

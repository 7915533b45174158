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


def test_precision_overrides_amp_and_never_falls_back(monkeypatch):
    """--precision names the dtype that runs: fp32 even where bf16 is native, bf16 even where it is emulated."""
    import worker.inference as inference

    for native in (True, False):
        monkeypatch.setattr(inference, "cpu_has_native_bf16", lambda native=native: native)
        assert InferenceSettings(precision="auto").resolved(CPU).amp == ("bf16" if native else "off")
        assert InferenceSettings(precision="fp32").resolved(CPU).amp == "off"
        assert InferenceSettings(precision="bf16").resolved(CPU).amp == "bf16"
        assert InferenceSettings(precision="fp16").resolved(CPU).amp == "fp16"  # check_precision refuses it first
        assert InferenceSettings(amp="bf16", precision="fp32").resolved(CPU).amp == "off"
    assert InferenceSettings(precision="fp32").resolved(torch.device("cuda")).amp == "off"
    assert InferenceSettings(precision="bf16").resolved(CPU).precision == "bf16"
    with pytest.raises(ValueError, match="precision='fp8'"):
        InferenceSettings(precision="fp8").resolved(CPU)


def test_fp32_runs_the_module_itself_and_auto_the_fast_path(model, monkeypatch):
    import worker.inference as inference

    monkeypatch.setattr(inference, "cpu_has_native_bf16", lambda: True)
    fp32, auto = Predictor(model, InferenceSettings(precision="fp32")), Predictor(model, InferenceSettings())
    assert (fp32._cpu_net, fp32.path) == (None, "module")
    assert auto.path == "cpu fast path" and auto._cpu_net.dtype == torch.bfloat16


@pytest.mark.parametrize("native_bf16", [True, False], ids=["bf16-cpu", "no-bf16-cpu"])
def test_fp32_overlay_is_identical_to_a_plain_eager_float32_forward(model, tmp_path, monkeypatch, native_bf16):
    """The overlay `--precision fp32` writes equals, pixel for pixel, the class map of the eager TinySegNet run in
    float32 over the same tiles: built here from the slide reader, the model's declared normalisation and
    argmax, whether or not the CPU (forced either way) would have chosen bf16 by itself."""
    import tifffile

    import worker.inference as inference
    from worker.models.tinyseg import TinySegNet
    from worker.pipeline import PipelineSettings, process_slide

    monkeypatch.setattr(inference, "cpu_has_native_bf16", lambda: native_bf16)
    slide = write_synthetic_slide(tmp_path / "p.ome.tif", 1536, 1280, mpp_um=0.5, tissue_fraction=0.5, seed=11)
    settings = PipelineSettings(skip_background=False, inference=InferenceSettings(precision="fp32"))
    summary = process_slide(slide, tmp_path / "out", model, slide_id="p", settings=settings)
    ran = summary["inference"]
    assert (ran["amp"], ran["precision"], ran["precision_requested"], ran["path"]) == ("off", "fp32", "fp32", "module")
    got = tifffile.imread(tmp_path / "out" / "p.overlay.ome.tif")

    assert type(model.module) is TinySegNet
    T, stride = model.tile_size, model.output_stride
    std = torch.tensor(model.normalisation.std, dtype=torch.float64).view(1, 3, 1, 1)
    mean = torch.tensor(model.normalisation.mean, dtype=torch.float64).view(1, 3, 1, 1)
    scale, shift = (1.0 / (255.0 * std)).float(), (-mean / std).float()
    want = np.zeros((1280 // stride, 1536 // stride), np.uint8)
    with open_slide(slide) as s, torch.inference_mode():
        level = s.analysis_level(model.input_mpp_um, 0.25)
        assert (level.width, level.height) == (1536, 1280)
        for ty in range(1280 // T):
            for tx in range(1536 // T):
                rgb = torch.from_numpy(s.read_region(level, tx * T, ty * T, T, T)[None])
                x = rgb.permute(0, 3, 1, 2).to(torch.float32) * scale + shift
                cls = model.module(x).float().argmax(1)[0].numpy().astype(np.uint8)
                want[ty * T // stride:(ty + 1) * T // stride, tx * T // stride:(tx + 1) * T // stride] = cls
    assert got.shape == want.shape and (want > 0).mean() > 0.01  # the slide has structures to get right
    assert np.array_equal(got, want), f"{int((got != want).sum())} of {want.size} overlay pixels differ"


def test_fp32_on_cuda_turns_tf32_off(model):
    """On Ampere and later GPUs torch runs float32 convolutions as TF32 unless told otherwise; fp32 tells it."""
    from dataclasses import replace

    conv, matmul, cudnn = torch.backends.cudnn.conv, torch.backends.cuda.matmul, torch.backends.cudnn
    before = (conv.fp32_precision, matmul.fp32_precision, cudnn.benchmark)
    try:
        conv.fp32_precision = "tf32"  # torch's default
        on_cuda = replace(model, device=torch.device("cuda", 0))  # built, never run: no GPU needed
        Predictor(on_cuda, InferenceSettings(precision="auto"))
        assert conv.fp32_precision == "tf32"
        Predictor(on_cuda, InferenceSettings(precision="fp32"))
        assert conv.fp32_precision == "ieee" and matmul.fp32_precision == "ieee"
    finally:
        conv.fp32_precision, matmul.fp32_precision, cudnn.benchmark = before

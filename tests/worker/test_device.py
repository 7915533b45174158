"""Device selection: the GPU self-check fails in one clear line when CUDA is unusable; "auto" falls back to CPU."""
from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from worker import device as dev
from worker.device import NoUsableGpu, describe_device, select_device

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_cpu_is_always_cpu():
    assert select_device("cpu") == torch.device("cpu")


def test_auto_falls_back_to_cpu_without_cuda(no_cuda):
    assert select_device("auto") == torch.device("cpu")
    assert select_device() == torch.device("cpu")


def test_cuda_without_gpu_raises_one_clear_line(no_cuda, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(NoUsableGpu) as info:
        select_device("cuda")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("--device cuda: this node advertises no usable NVIDIA GPU")
    assert "torch.cuda.is_available() is False" in msg
    assert "CUDA_VISIBLE_DEVICES=''" in msg
    assert "nvidia.com/gpu allocatable" in msg


def test_cuda_visible_devices_unset_is_reported(no_cuda, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(NoUsableGpu, match="CUDA_VISIBLE_DEVICES=unset"):
        select_device("cuda")


def test_cuda_hidden_in_a_fresh_process():
    """The real thing, no monkeypatching: a process with CUDA_VISIBLE_DEVICES="" sees no GPU, whatever the host."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    code = (
        "from worker.device import select_device, NoUsableGpu\n"
        "assert str(select_device('auto')) == 'cpu'\n"
        "try:\n    select_device('cuda')\nexcept NoUsableGpu as e:\n    print(e)\n"
        "else:\n    raise SystemExit('no error')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1
    assert "no usable NVIDIA GPU" in lines[0] and "CUDA_VISIBLE_DEVICES=''" in lines[0]


def test_cuda_chosen_when_usable(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert select_device("cuda") == torch.device("cuda", 0)
    assert select_device("auto") == torch.device("cuda", 0)


def test_unknown_choice_is_refused():
    with pytest.raises(ValueError, match="--device 'tpu': expected one of auto, cuda, cpu"):
        select_device("tpu")


@pytest.fixture(autouse=True)
def _no_cached_driver_version():
    """Each test looks the driver version up afresh (the worker caches it per process)."""
    dev._driver_version.cache_clear()
    yield
    dev._driver_version.cache_clear()


def test_describe_cpu():
    assert describe_device(torch.device("cpu")) == f"cpu ({torch.get_num_threads()} threads)"


def test_describe_cuda_names_gpu_memory_and_driver(monkeypatch):
    props = types.SimpleNamespace(name="NVIDIA H200", total_memory=141 * 2**30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    monkeypatch.setattr(dev.shutil, "which", lambda name: None)  # and no nvidia-smi
    text = describe_device(torch.device("cuda", 0))
    assert text == "cuda:0 NVIDIA H200 (141.0 GiB, CUDA 12.8, driver unknown)"


def test_driver_from_nvidia_smi(monkeypatch, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 570.86.15\n")
    smi.chmod(0o755)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(dev.shutil, "which", lambda name: str(smi))
    assert dev._driver_version() == "570.86.15"


def test_the_driver_version_is_looked_up_once_per_process(monkeypatch):
    looked: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(dev.shutil, "which", looked.append)  # no nvidia-smi, and each lookup recorded
    assert dev._driver_version() == dev._driver_version() == "unknown"
    assert looked == ["nvidia-smi"]


def test_precision_is_refused_where_the_device_cannot_run_it(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(dev, "cpu_has_native_fp16", lambda: False)
    with pytest.raises(dev.UnsupportedPrecision) as info:
        dev.check_precision("fp16", cpu)
    assert str(info.value).startswith("--precision fp16: this CPU computes no float16") and "\n" not in str(info.value)
    with pytest.raises(dev.UnsupportedPrecision, match="precision='half': must be one of auto, fp32, bf16, fp16"):
        dev.check_precision("half", cpu)
    monkeypatch.setattr(dev, "cpu_has_native_fp16", lambda: True)
    assert dev.check_precision("fp16", cpu) is None
    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: False)
    assert "emulated" in dev.check_precision("bf16", cpu)  # runs, slowly: said once, not refused
    monkeypatch.setattr(dev, "cpu_has_native_bf16", lambda: True)
    assert [dev.check_precision(p, cpu) for p in ("auto", "fp32", "bf16")] == [None, None, None]


def test_bf16_is_refused_on_a_gpu_without_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    with pytest.raises(dev.UnsupportedPrecision, match=r"--precision bf16: this GPU \(compute capability 7.5\)"):
        dev.check_precision("bf16", torch.device("cuda", 0))
    assert dev.check_precision("fp16", torch.device("cuda", 0)) is None


def test_infer_refuses_an_unsupported_precision_in_one_line_before_loading(monkeypatch, tmp_path, capsys):
    from worker import commands

    monkeypatch.setattr(dev, "cpu_has_native_fp16", lambda: False)
    monkeypatch.setattr("worker.models.loading.load_model", lambda *a: pytest.fail("the model was loaded"))
    slide = tmp_path / "s.svs"
    slide.write_bytes(b"not read")
    code = commands.main(["infer", str(slide), "--out", str(tmp_path / "o"), "--device", "cpu", "--precision", "fp16"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == commands.EXIT_USAGE and err[-1].startswith("python -m worker infer: error: --precision fp16:")
    monkeypatch.setenv("PRECISION", "fp64")  # the environment's value is checked as strictly as the flag's
    code = commands.main(["infer", str(slide), "--out", str(tmp_path / "o"), "--device", "cpu"])
    assert code == commands.EXIT_USAGE
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "precision='fp64': must be one of auto, fp32, bf16, fp16 (--precision or $PRECISION)")


def test_consume_refuses_an_unsupported_precision_before_touching_the_queue(monkeypatch, capsys):
    from worker import commands

    monkeypatch.setattr(dev, "cpu_has_native_fp16", lambda: False)
    monkeypatch.setattr("worker.sqs_consumer.Consumer", lambda *a, **k: pytest.fail("a consumer was built"))
    code = commands.main(["consume", "--queue-url", "http://127.0.0.1:9/123456789012/q", "--device", "cpu",
                          "--precision", "fp16"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == commands.EXIT_USAGE and err[-1].startswith("python -m worker consume: error: --precision fp16:")

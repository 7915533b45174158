"""Choose the torch device the worker computes on and describe it in one log line."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess

import torch

from worker.cpus import cpu_has_native_bf16
from worker.precisions import PRECISIONS

CHOICES = ("auto", "cuda", "cpu")


class NoUsableGpu(RuntimeError):
    """`--device cuda` was asked for on a node where torch sees no usable NVIDIA GPU."""


class UnsupportedPrecision(ValueError):
    """--precision names a dtype this device cannot compute (or no dtype at all); the message is one line."""


def cpu_has_native_fp16() -> bool:
    """Whether this CPU computes float16 in hardware (AMX-FP16 or AVX512-FP16)."""
    if getattr(torch.cpu, "_is_amx_fp16_supported", lambda: False)():
        return True
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx512_fp16" in line for line in f)
    except OSError:
        return False


def check_precision(precision: str, device: torch.device) -> str | None:
    """Refuse, before any work, a --precision `device` cannot run; returns a one-line note worth printing, or None.

    Refused (UnsupportedPrecision): an unknown value; "bf16" on a GPU without bf16 (before Ampere); "fp16" on a CPU
    without native float16, where it would be emulated slowly with float16's narrow range, and a silent fallback
    would record a dtype that did not run. "bf16" on a CPU without native bf16 runs, emulated: slower than fp32,
    numerically what was asked.
    """
    if precision not in PRECISIONS:
        raise UnsupportedPrecision(f"precision={precision!r}: must be one of {', '.join(PRECISIONS)} "
                                   "(--precision or $PRECISION)")
    device = torch.device(device)
    if device.type == "cuda" and precision == "bf16" and not torch.cuda.is_bf16_supported():
        major, minor = torch.cuda.get_device_capability(device)
        raise UnsupportedPrecision(f"--precision bf16: this GPU (compute capability {major}.{minor}) has no bf16; "
                                   "use auto, fp32 or fp16")
    if device.type == "cpu" and precision == "fp16" and not cpu_has_native_fp16():
        raise UnsupportedPrecision("--precision fp16: this CPU computes no float16 in hardware (no AMX-FP16 or "
                                   "AVX512-FP16); fp16 is for GPUs: use auto, fp32 or bf16")
    if device.type == "cpu" and precision == "bf16" and not cpu_has_native_bf16():
        return "bf16 on a CPU without native bf16 (AVX512-BF16 or AMX) is emulated: slower than fp32"
    return None


def _cuda_visible_devices() -> str:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return "unset"
    return repr(value) if value == "" else value


def _cuda_usable() -> bool:
    # is_available() can raise on a broken driver install; treat that as "no usable GPU" too.
    try:
        return bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except Exception:  # noqa: BLE001 - any driver error means the GPU is unusable
        return False


def select_device(choice: str = "auto") -> torch.device:
    """Return the device for `choice` ("auto" | "cuda" | "cpu"); "cuda" without a usable GPU raises NoUsableGpu."""
    choice = (choice or "auto").strip().lower()
    if choice not in CHOICES:
        raise ValueError(f"--device {choice!r}: expected one of {', '.join(CHOICES)}")
    if choice == "cpu":
        return torch.device("cpu")
    if _cuda_usable():
        return torch.device("cuda", torch.cuda.current_device())
    if choice == "auto":
        return torch.device("cpu")
    build = "" if torch.version.cuda else "; this torch build has no CUDA support (torch.version.cuda is None)"
    raise NoUsableGpu(
        "--device cuda: this node advertises no usable NVIDIA GPU "
        f"(torch.cuda.is_available() is False; CUDA_VISIBLE_DEVICES={_cuda_visible_devices()}{build}): "
        "check the node's AMI variant and nvidia.com/gpu allocatable"
    )


@functools.cache
def _driver_version() -> str:
    """NVIDIA driver version via pynvml if importable, else nvidia-smi if present, else "unknown"; looked up once per
    process (the driver cannot change under it), not once per slide summary that describes the device."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - pynvml missing or NVML unusable: fall through to nvidia-smi
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10, check=True,
            ).stdout.strip().splitlines()
            if out and out[0].strip():
                return out[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return "unknown"


def describe_device(device: torch.device) -> str:
    """One line for the log: GPU name, memory, CUDA and driver versions; or "cpu (N threads)"."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        mem_gib = props.total_memory / 2**30
        return (
            f"cuda:{index} {props.name} ({mem_gib:.1f} GiB, CUDA {torch.version.cuda or 'unknown'}, "
            f"driver {_driver_version()})"
        )
    return f"cpu ({torch.get_num_threads()} threads)"

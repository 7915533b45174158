"""Choose the torch device the worker computes on and describe it in one log line."""
from __future__ import annotations

import os
import shutil
import subprocess

import torch

CHOICES = ("auto", "cuda", "cpu")


class NoUsableGpu(RuntimeError):
    """`--device cuda` was asked for on a node where torch sees no usable NVIDIA GPU."""


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


def _driver_version() -> str:
    """NVIDIA driver version via pynvml if importable, else nvidia-smi if present, else "unknown"."""
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

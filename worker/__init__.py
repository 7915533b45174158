"""The gpuburst GPU worker: reads whole-slide images tile by tile, segments tissue structures, writes overlays."""
from __future__ import annotations

import importlib

# Public names, imported lazily (PEP 562) so that `import worker.messages` does not pay for importing torch.
_EXPORTS = {
    "select_device": "worker.device",
    "describe_device": "worker.device",
    "NoUsableGpu": "worker.device",
    "write_synthetic_slide": "worker.synthetic",
    "SyntheticSpec": "worker.synthetic",
    "open_slide": "worker.slides",
    "Slide": "worker.slides",
    "SlideError": "worker.slides",
    "TissueSettings": "worker.slides",
    "load_model": "worker.model",
    "LoadedModel": "worker.model",
    "ModelError": "worker.model",
    "export_torchscript": "worker.model",
    "package_model": "worker.model",
    "InferenceSettings": "worker.inference",
    "OverlaySettings": "worker.overlay",
    "process_slide": "worker.pipeline",
    "PipelineSettings": "worker.pipeline",
    "run_bench": "worker.bench",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'worker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""The gpuburst GPU worker: reads whole-slide images tile by tile, segments tissue structures, writes overlays."""
from __future__ import annotations

import importlib

# Public names, imported lazily (PEP 562) so that `import worker.messages` does not pay for importing torch.
_EXPORTS = {
    "select_device": "worker.device",
    "describe_device": "worker.device",
    "NoUsableGpu": "worker.device",
    "write_synthetic_slide": "worker.devtools.synthetic",
    "SyntheticSpec": "worker.devtools.synthetic",
    "open_slide": "worker.slides",
    "Slide": "worker.slides",
    "SlideError": "worker.slides",
    "TissueSettings": "worker.slides",
    "load_model": "worker.models.loading",
    "LoadedModel": "worker.models.loaded_model",
    "ModelError": "worker.models.loaded_model",
    "export_torchscript": "worker.models.export",
    "package_model": "worker.models.export",
    "InferenceSettings": "worker.inference",
    "OverlaySettings": "worker.overlay",
    "process_slide": "worker.pipeline",
    "PipelineSettings": "worker.pipeline",
    "run_bench": "worker.devtools.bench",
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

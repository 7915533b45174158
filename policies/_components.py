"""The components' facts this pack reads: from `components` in this repository, from `gpuburst` once installed.

Installed, the pack is the subpackage `gpuburst.policy` and the components are its parent package; in this
repository the pack is the top-level `policies` beside `components/`. Either way the rules read the catalogue and
names of the very components they judge, never a second copy. Both branches import the same names
(tests/policies/test_components_shim.py holds them equal).
"""
from __future__ import annotations

if __name__.startswith("gpuburst."):
    from .. import catalogue
    from ..rehearse.plan_model import read_facts
    from ..rehearse.scenarios import rehearse
    from ..spec import model_cache_admission, names, quantity, selector_terms, verify_admission, workload
    from ..spec.names import (
        CAPACITY_TYPE_LABEL,
        CLINICAL_SLIDES,
        DATA_CLASS_TAG,
        GPU_PRESENT_LABEL,
        GPU_RESOURCE,
        GPU_TAINT,
        GPU_TOLERATION,
        INSTANCE_TYPE_LABEL,
        NODEPOOL_LABEL,
        POOL_LABEL,
        SYSTEM_POOL,
        WORKER_LABEL,
        control_plane_log_group,
    )
    from ..spec.quantity import GI, MI, fmt_cpu, fmt_mem, parse_quantity
    from ..synth.mocks import UNKNOWN as PLAN_UNKNOWN
else:
    from components import catalogue
    from components.rehearse.plan_model import read_facts
    from components.rehearse.scenarios import rehearse
    from components.spec import model_cache_admission, names, quantity, selector_terms, verify_admission, workload
    from components.spec.names import (
        CAPACITY_TYPE_LABEL,
        CLINICAL_SLIDES,
        DATA_CLASS_TAG,
        GPU_PRESENT_LABEL,
        GPU_RESOURCE,
        GPU_TAINT,
        GPU_TOLERATION,
        INSTANCE_TYPE_LABEL,
        NODEPOOL_LABEL,
        POOL_LABEL,
        SYSTEM_POOL,
        WORKER_LABEL,
        control_plane_log_group,
    )
    from components.spec.quantity import GI, MI, fmt_cpu, fmt_mem, parse_quantity
    from components.synth.mocks import UNKNOWN as PLAN_UNKNOWN

__all__ = ["CAPACITY_TYPE_LABEL", "CLINICAL_SLIDES", "DATA_CLASS_TAG", "GI", "GPU_PRESENT_LABEL", "GPU_RESOURCE",
           "GPU_TAINT", "GPU_TOLERATION", "INSTANCE_TYPE_LABEL", "MI", "NODEPOOL_LABEL", "PLAN_UNKNOWN", "POOL_LABEL",
           "SYSTEM_POOL", "WORKER_LABEL", "catalogue", "control_plane_log_group", "fmt_cpu", "fmt_mem",
           "model_cache_admission", "names",
           "parse_quantity", "quantity", "read_facts", "rehearse", "selector_terms", "verify_admission", "workload"]

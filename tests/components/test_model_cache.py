"""The node-local model cache: a hostPath PersistentVolume of one folder, bound to one claim, and the boot script that
makes the folder writable by the worker's group only."""
from __future__ import annotations

import subprocess

import kubernetes_validate
import pytest

from components.catalogue import KUBERNETES_VERSION
from components.model_cache import (
    ModelCache,
    ModelCacheAdmission,
    ModelCacheArgs,
    cache_folder_script,
    model_cache_manifests,
)
from components.nodeclass import ec2_nodeclass_manifest
from components.spec import model_cache_admission as mca
from components.spec.names import (
    MODEL_CACHE_CLAIM,
    MODEL_CACHE_HOST_PATH,
    WORKER_UID,
    model_cache_folder_commands,
)
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks


def test_the_volume_is_one_host_folder_bound_to_one_claim_with_no_provisioner():
    pv, pvc = model_cache_manifests(namespace="gpuburst", volume_name="gpuburst-dev-model-cache", capacity_gib=40)
    assert pv["spec"]["hostPath"] == {"path": MODEL_CACHE_HOST_PATH, "type": "Directory"}
    assert pv["spec"]["claimRef"] == {"namespace": "gpuburst", "name": MODEL_CACHE_CLAIM}
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain" and pv["spec"]["storageClassName"] == ""
    assert "nodeAffinity" not in pv["spec"]  # every node's pods mount that node's own folder
    assert pvc["metadata"] == {**pvc["metadata"], "name": MODEL_CACHE_CLAIM, "namespace": "gpuburst"}
    assert pvc["spec"]["volumeName"] == "gpuburst-dev-model-cache" and pvc["spec"]["storageClassName"] == ""
    assert pv["spec"]["capacity"] == pvc["spec"]["resources"]["requests"] == {"storage": "40Gi"}
    for doc in (pv, pvc):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_a_capacity_that_is_not_a_positive_int_is_refused():
    with pytest.raises(ConfigError, match=r"^capacity_gib: 0 is not valid"):
        model_cache_manifests(namespace="gpuburst", volume_name="v", capacity_gib=0)


def test_the_boot_script_makes_the_folder_root_owned_group_writable_setgid(tmp_path):
    script = cache_folder_script(str(tmp_path / "cache"))
    assert script.startswith("#!/bin/bash\n") and f"chown root:{WORKER_UID} " in script and "chmod 2770 " in script
    assert cache_folder_script().count(MODEL_CACHE_HOST_PATH) == 3
    # The script parses as bash (running it needs root: chown).
    proc = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0, proc.stderr


def test_the_component_declares_the_volume_then_the_claim():
    res = run_under_mocks(lambda: ModelCache("cache", ModelCacheArgs(namespace="gpuburst", volume_name="v",
                                                                       capacity_gib=20)))
    (pv,) = res.monitor.by_type("kubernetes:core/v1:PersistentVolume")
    (pvc,) = res.monitor.by_type("kubernetes:core/v1:PersistentVolumeClaim")
    assert pv.urn in pvc.dependencies
    assert pvc.properties["metadata"]["name"] == MODEL_CACHE_CLAIM


def test_the_boot_script_runs_the_folder_commands_the_pack_looks_for_in_order():
    lines = cache_folder_script().splitlines()
    assert lines[:3] == ["#!/bin/bash", lines[1], "set -euo pipefail"] and lines[1].startswith("# gpuburst:")
    assert lines[3:] == list(model_cache_folder_commands()) == [
        f"mkdir -p {MODEL_CACHE_HOST_PATH}", f"chown root:{WORKER_UID} {MODEL_CACHE_HOST_PATH}",
        f"chmod 2770 {MODEL_CACHE_HOST_PATH}"]


def test_a_platform_team_with_its_own_node_class_reaches_the_script_from_the_package():
    import components

    assert "cache_folder_script" in components.__all__ and components.cache_folder_script is cache_folder_script
    assert cache_folder_script() in ec2_nodeclass_manifest(
        "gpu", node_role="r", cluster_name="c", boot_scripts=[components.cache_folder_script()])["spec"]["userData"]


def test_the_args_say_the_fixed_host_path_and_the_node_class_script():
    import inspect

    doc = inspect.getdoc(ModelCacheArgs) or ""
    assert MODEL_CACHE_HOST_PATH in doc and "cache_folder_script()" in doc
    assert "ExistingNodeClass(model_cache_folder=True)" in doc


def test_the_admission_component_declares_the_pure_policy_then_its_binding():
    res = run_under_mocks(lambda: ModelCacheAdmission("cache-admission"))
    (policy,) = res.monitor.by_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
    (binding,) = res.monitor.by_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
    assert policy.properties["spec"] == mca.admission_policy_manifest()["spec"]
    assert binding.properties["spec"] == mca.admission_binding_manifest()["spec"]
    assert policy.urn in binding.dependencies
    assert {r.type for r in res.registrations if r.parent} >= {policy.type, binding.type}


def test_the_docstrings_say_the_namespace_folder_layout():
    import inspect

    import components.model_cache as module

    assert "<namespace>/<cache_sub_path>" in (module.__doc__ or "")
    assert "<namespace>/<cache_sub_path>" in (inspect.getdoc(ModelCacheArgs) or "")

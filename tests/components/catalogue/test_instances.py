"""The catalogue's instance facts, field by field, against Karpenter v1.14.1's instance-type reference and prices."""
import re
from pathlib import Path

import pytest

from components import catalogue
from components.catalogue import (
    EXCLUDED_INSTANCE_FAMILIES,
    INSTANCE_TYPES,
    InstanceType,
    allocatable_ephemeral_gib,
    instance_type,
    instance_type_problem,
)

UPSTREAM = Path(__file__).resolve().parents[3].parent / "shared" / "upstream-karpenter"
TYPES_MD = UPSTREAM / "instance-types-v1.14.1.md"
PRICES_GO = UPSTREAM / "pricing-aws-v1.14.1.go.txt"
L = "karpenter.k8s.aws/instance-"


@pytest.fixture(scope="module")
def reference() -> dict[str, dict[str, str]]:
    """instance type -> {label or resource: value} from the reference's tables."""
    if not TYPES_MD.exists():
        pytest.skip(f"Karpenter instance-type reference not found at {TYPES_MD} (../shared/upstream-karpenter absent)")
    types = {}
    for block in re.split(r"^### `", TYPES_MD.read_text(), flags=re.M)[1:]:
        name = block.split("`", 1)[0]
        types[name] = dict(re.findall(r"^ \|([^|]+)\|([^|]*)\|$", block, flags=re.M))
    assert len(types) > 500, "the reference parsed to too few types: the parser no longer fits the file"
    return types


@pytest.fixture(scope="module")
def prices() -> dict[str, float]:
    """us-east-1 on-demand USD/h from Karpenter's generated price table."""
    if not PRICES_GO.exists():
        pytest.skip(f"Karpenter price table not found at {PRICES_GO} (../shared/upstream-karpenter absent)")
    text = PRICES_GO.read_text()
    start = text.index('"us-east-1": {')
    end = text.find("\n\t},", start)
    region = text[start:end if end > 0 else None]
    table = {k: float(v) for k, v in re.findall(r'"([a-z0-9.-]+)": ([0-9.]+)', region)}
    assert "g5.xlarge" in table
    return table


def expected(name: str, ref: dict[str, str], price: float) -> InstanceType:
    def mi(v: str, unit: str) -> int:
        assert v.endswith(unit), (name, v, unit)
        return int(v[:-len(unit)])

    eph = ref["ephemeral-storage"]
    assert eph.endswith("Gi"), (name, eph)
    return InstanceType(
        name=name, family=ref[L + "family"], vcpu=int(ref[L + "cpu"]), memory_mib=int(ref[L + "memory"]),
        gpus=int(ref[L + "gpu-count"]), gpu_name=ref[L + "gpu-name"], gpu_memory_mib=int(ref[L + "gpu-memory"]),
        compute_capability=catalogue.COMPUTE_CAPABILITY[ref[L + "gpu-name"]],
        local_nvme_gb=int(ref.get(L + "local-nvme", "0")), allocatable_cpu_m=mi(ref["cpu"], "m"),
        allocatable_memory_mib=mi(ref["memory"], "Mi"), allocatable_ephemeral_gib=float(eph[:-2]),
        allocatable_pods=int(ref["pods"]), on_demand_usd_per_hour=price)


def test_every_field_of_every_type_matches_the_reference(reference, prices):
    mismatches = []
    for name, facts in INSTANCE_TYPES.items():
        assert name in reference, f"{name} is not in Karpenter v1.14.1's instance-type reference"
        ref = reference[name]
        assert ref.get(L + "gpu-manufacturer") == "nvidia" and ref["kubernetes.io/arch"] == "amd64", name
        assert ref.get("nvidia.com/gpu") == ref[L + "gpu-count"], f"{name}: nvidia.com/gpu is not allocatable"
        want = expected(name, ref, prices[name])
        for field in InstanceType.__dataclass_fields__:
            if getattr(facts, field) != getattr(want, field):
                mismatches.append(f"{name}.{field}: catalogue {getattr(facts, field)!r}, "
                                  f"reference {getattr(want, field)!r}")
    assert not mismatches, "\n".join(mismatches)


def test_every_size_of_each_catalogued_family_is_listed(reference):
    families = {t.family for t in INSTANCE_TYPES.values()}
    assert {"g4dn", "g5", "g6", "g6e", "gr6", "p3dn", "p4d", "p5"} <= families
    in_reference = {n for n, r in reference.items() if r.get(L + "family") in families}
    assert in_reference == set(INSTANCE_TYPES), sorted(in_reference ^ set(INSTANCE_TYPES))


def test_every_nvidia_x86_family_of_the_reference_is_catalogued_or_excluded_with_a_reason(reference):
    nvidia_x86 = {r[L + "family"] for r in reference.values()
                  if r.get(L + "gpu-manufacturer") == "nvidia" and r.get("kubernetes.io/arch") == "amd64"}
    known = {t.family for t in INSTANCE_TYPES.values()} | set(EXCLUDED_INSTANCE_FAMILIES)
    assert nvidia_x86 <= known, sorted(nvidia_x86 - known)
    assert all(EXCLUDED_INSTANCE_FAMILIES.values())


def test_the_default_20_gib_root_volume_gives_the_reference_17_gib():
    assert allocatable_ephemeral_gib(catalogue.DEFAULT_ROOT_VOLUME_GIB) == 17.0
    assert all(t.allocatable_ephemeral_gib == 17.0 for t in INSTANCE_TYPES.values())


@pytest.mark.parametrize("root,allocatable", [(20, 17.0), (50, 44.0), (100, 89.0), (200, 179.0), (1000, 899.0)])
def test_ephemeral_storage_is_the_root_volume_less_1_gib_reserved_and_10_percent_eviction(root, allocatable):
    assert allocatable_ephemeral_gib(root) == pytest.approx(allocatable)


@pytest.mark.parametrize("bad", [0, -5, "20Gi", None, True])
def test_ephemeral_storage_refuses_a_non_positive_or_non_numeric_volume(bad):
    with pytest.raises(ValueError, match="root_volume_gib"):
        allocatable_ephemeral_gib(bad)


def test_lookup_and_problems():
    assert instance_type("g5.xlarge").compute_capability == (8, 6)
    assert instance_type("g4dn.xlarge").gpu_name == "t4" and instance_type("g4dn.xlarge").compute_capability == (7, 5)
    assert instance_type("p3dn.24xlarge").compute_capability == (7, 0)
    assert instance_type("m5.large") is None and instance_type(None) is None  # type: ignore[arg-type]
    assert instance_type_problem("g5.xlarge") is None
    for name, needle in (("g4ad.xlarge", "AMD"), ("g5g.xlarge", "arm64"), ("g7e.2xlarge", "595"),
                         ("m5.large", "an NVIDIA x86-64 GPU instance type in the catalogue")):
        problem = instance_type_problem(name)
        assert problem and needle in problem and name in problem and "\n" not in problem


def test_gpu_software_facts():
    assert catalogue.TORCH_CUDA["min_compute_capability"] == (7, 5)
    assert int(catalogue.AL2023_NVIDIA_DRIVER) >= int(catalogue.TORCH_CUDA["min_driver"])
    assert "v1.14.1" in catalogue.INSTANCE_FACTS_SOURCE and "2026-07-06" in catalogue.INSTANCE_FACTS_SOURCE

"""GpuBurstPlatform's arguments for what exists: an existing VPC and subnets for the cluster, and the workloads'
namespace (named, or existing and not created); bad values refused in one line before anything is registered."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components.config import parse_config
from components.existing import ExistingNetwork
from components.platform import GpuBurstPlatform
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks

ROOT = Path(__file__).resolve().parents[2]


def _config():
    raw = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8"))["config"]
    return parse_config(raw, stack="dev")


def _run(**kw):
    return run_under_mocks(lambda: GpuBurstPlatform("p", _config(), **kw))


@pytest.fixture(scope="module")
def attached():
    return _run(network=ExistingNetwork("vpc-0example", ["subnet-0a", "subnet-0b"]), namespace="lab-a",
                create_namespace=False)


def test_the_cluster_goes_into_the_given_vpc_and_subnets(attached):
    (cluster,) = attached.monitor.by_type("eks:index:Cluster")
    assert cluster.properties["vpcId"] == "vpc-0example"
    assert cluster.properties["privateSubnetIds"] == ["subnet-0a", "subnet-0b"]
    (group,) = attached.monitor.by_type("aws:eks/nodeGroup:NodeGroup")
    assert group.properties["subnetIds"] == ["subnet-0a", "subnet-0b"]


def test_the_workloads_run_in_the_given_namespace_which_is_not_created(attached):
    assert not [r for r in attached.monitor.by_type("kubernetes:core/v1:Namespace")
                if r.properties["metadata"]["name"] in ("lab-a", "gpuburst")]
    (sj,) = attached.monitor.by_type("kubernetes:keda.sh/v1alpha1:ScaledJob")
    assert sj.properties["metadata"]["namespace"] == "lab-a"
    associations = attached.monitor.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert {a.properties["namespace"] for a in associations} >= {"lab-a"}


def test_a_named_namespace_is_created_restricted():
    res = _run(namespace="lab-b")
    (ns,) = [r for r in res.monitor.by_type("kubernetes:core/v1:Namespace")
             if r.properties["metadata"]["name"] == "lab-b"]
    assert ns.properties["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("kw, field", [
    ({"namespace": "Lab_A"}, "GpuBurstPlatform namespace"),
    ({"network": {"vpc_id": "vpc-1"}}, "GpuBurstPlatform network"),
    ({"network": ExistingNetwork("vpc-1", [])}, "ExistingNetwork.private_subnet_ids"),
])
def test_bad_arguments_are_refused_before_anything_is_registered(kw, field):
    with pytest.raises(ConfigError) as e:
        _run(**kw)
    assert field in str(e.value) and "\n" not in str(e.value)

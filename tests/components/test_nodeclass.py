"""EC2NodeClass: the builder (AL2023 alias, IMDSv2, encrypted root), config errors, the upstream CRD, the resource."""
from __future__ import annotations

import copy

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml

from components import catalogue
from components.nodeclass import (
    DISCOVERY_TAG,
    Ec2NodeClass,
    Ec2NodeClassArgs,
    ec2_nodeclass_manifest,
    instance_store_policy_for,
    node_config_user_data,
    node_user_data,
)
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks
from tests.components import crd_oracle

CRD = "karpenter-v1.14.1-ec2nodeclasses.yaml"
OLDEST_CRD = "karpenter-v1.0.3-ec2nodeclasses.yaml"  # catalogue.KARPENTER_MINIMUM


def manifest(**kw):
    args = {"node_role": "burst-dev-karpenter-node", "cluster_name": "burst-dev"}
    args.update(kw)
    return ec2_nodeclass_manifest("gpu", **args)


def test_defaults_alias_imdsv2_encrypted_root_and_discovery_selectors():
    m = manifest()
    spec = m["spec"]
    assert m["apiVersion"] == "karpenter.k8s.aws/v1" and m["kind"] == "EC2NodeClass"
    assert spec["amiSelectorTerms"] == [{"alias": "al2023@latest"}]
    assert spec["metadataOptions"] == {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                                       "httpTokens": "required", "httpPutResponseHopLimit": 1}
    [root] = spec["blockDeviceMappings"]
    assert root["deviceName"] == "/dev/xvda" and root["rootVolume"] is True
    assert root["ebs"] == {"volumeSize": "100Gi", "volumeType": "gp3", "iops": 3000, "throughput": 125,
                           "encrypted": True, "deleteOnTermination": True}
    assert spec["subnetSelectorTerms"] == [{"tags": {DISCOVERY_TAG: "burst-dev"}}]
    assert spec["securityGroupSelectorTerms"] == [{"tags": {DISCOVERY_TAG: "burst-dev"}}]
    assert spec["role"] == "burst-dev-karpenter-node"
    assert "instanceProfile" not in spec and "amiFamily" not in spec and "tags" not in spec
    assert spec["instanceStorePolicy"] == "RAID0"
    assert yaml.safe_load(spec["userData"]) == {"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig",
                                                "spec": {"featureGates": {"FastImagePull": True}}}


def test_the_gpu_nodes_own_subnets_and_security_group_are_selected_by_the_tags_given():
    from components.network import GPU_NODES_TAG, GPU_SUBNETS_TAG

    spec = manifest(subnet_selector_tags={GPU_SUBNETS_TAG: "burst-dev"},
                    security_group_selector_tags={GPU_NODES_TAG: "burst-dev"})["spec"]
    # Only the subnets with no route out and only the GPU nodes' group: not the cluster's, not the system subnets.
    assert spec["subnetSelectorTerms"] == [{"tags": {"gpuburst.io/gpu-subnets": "burst-dev"}}]
    assert spec["securityGroupSelectorTerms"] == [{"tags": {"gpuburst.io/gpu-nodes": "burst-dev"}}]


def test_pinned_alias_kms_key_and_tags():
    m = manifest(ami_alias="al2023@v20250505", kms_key_id="arn:aws:kms:us-east-1:123456789012:key/abc",
                 tags={"project": "pathology"}, root_volume_gib=200, root_volume_iops=6000,
                 root_volume_throughput_mibps=500)
    spec = m["spec"]
    assert spec["amiSelectorTerms"] == [{"alias": "al2023@v20250505"}]
    assert spec["blockDeviceMappings"][0]["ebs"]["kmsKeyID"].endswith("key/abc")
    assert spec["blockDeviceMappings"][0]["ebs"]["volumeSize"] == "200Gi"
    assert spec["blockDeviceMappings"][0]["ebs"]["iops"] == 6000
    assert spec["blockDeviceMappings"][0]["ebs"]["throughput"] == 500
    assert spec["tags"] == {"project": "pathology"}


@pytest.mark.parametrize("alias", ["al2023@2025", "al2023@v2025050", "al2023@v20251399", "al2023-latest",
                                   "al2@latest", "bottlerocket@latest", "AL2023@latest", "", "al2023@latest "])
def test_bad_alias_is_a_one_line_error_naming_field_and_value(alias):
    with pytest.raises(ConfigError) as e:
        manifest(ami_alias=alias)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("ami_alias: ") and repr(alias) in msg and "al2023@latest" in msg


@pytest.mark.parametrize("kw,field", [
    ({"node_role": "arn:aws:iam::123456789012:role/x"}, "node_role"),
    ({"node_role": pulumi.Output.from_input("x")}, "node_role"),
    ({"cluster_name": ""}, "cluster_name"),
    ({"root_volume_gib": 8}, "root_volume_gib"),
    ({"root_volume_iops": 100}, "root_volume_iops"),
    ({"root_volume_throughput_mibps": 1000}, "root_volume_throughput_mibps"),  # needs 4000 IOPS
    ({"tags": {"karpenter.sh/nodepool": "x"}}, "tags"),
    ({"tags": {"kubernetes.io/cluster/burst-dev": "owned"}}, "tags"),
    ({"tags": {"team": ""}}, "tags['team']"),
    ({"subnet_selector_tags": {}}, "subnet_selector_tags"),
    ({"security_group_selector_tags": {"gpuburst.io/gpu-nodes": ""}}, "security_group_selector_tags"),
])
def test_other_config_errors(kw, field):
    with pytest.raises(ConfigError) as e:
        manifest(**kw)
    assert e.value.field == field and "\n" not in str(e.value)


@pytest.mark.parametrize("crd", [CRD, OLDEST_CRD])
@pytest.mark.parametrize("kw", [{}, {"ami_alias": "al2023@v20250505", "tags": {"project": "pathology"},
                                    "kms_key_id": "arn:aws:kms:us-east-1:123456789012:key/abc"},
                                {"subnet_selector_tags": {"gpuburst.io/gpu-subnets": "burst-dev"},
                                 "security_group_selector_tags": {"gpuburst.io/gpu-nodes": "burst-dev"}}])
def test_builder_output_passes_the_upstream_crd(upstream_crds, crd, kw):
    report = crd_oracle.check_against_crd(manifest(**kw), upstream_crds / crd)
    assert report.errors == []
    assert report.cel_evaluated > 0
    evaluable, skipped = crd_oracle.cel_inventory(upstream_crds / crd)
    print(f"{crd}: {report.cel_evaluated} CEL evaluations ({len(report.evaluated_rules)} distinct rules), "
          f"{report.cel_skipped} skipped ({len(report.skipped_rules)} distinct); "
          f"CRD has {len(evaluable)} evaluable and {len(skipped)} skipped rules")


@pytest.mark.parametrize("break_it,expected", [
    (lambda s: s["amiSelectorTerms"][0].update(alias="al2023-latest"), "improperly formatted"),
    (lambda s: s["amiSelectorTerms"].append({"id": "ami-0123"}), "mutually exclusive"),
    (lambda s: s.update(role=""), "role cannot be empty"),
    (lambda s: s.update(instanceProfile="x"), "role"),  # role and instanceProfile are exclusive
    (lambda s: s["blockDeviceMappings"][0]["ebs"].update(volumeSize="100GB"), "volumeSize"),
    (lambda s: s["metadataOptions"].update(httpTokens="sometimes"), "httpTokens"),
    (lambda s: s.update(subnetSelectorTerms=[]), "subnetSelectorTerms cannot be empty"),
    (lambda s: s.update(tags={"eks:eks-cluster-name": "x"}), "restricted tag"),
    (lambda s: s.update(metadataOption={}), "unknown field"),
])
def test_the_oracle_catches_a_broken_nodeclass(upstream_crds, break_it, expected):
    m = copy.deepcopy(manifest())
    break_it(m["spec"])
    errors = crd_oracle.validate_against_crd(m, upstream_crds / CRD)
    assert any(expected in e for e in errors), errors


def test_resource_under_mocks_is_a_child_depending_on_the_crd_chart():
    def program():
        crd_chart = k8s.helm.v4.Chart("karpenter-crd", chart="oci://example/karpenter-crd", version="1.14.1")
        Ec2NodeClass("gpu-class", Ec2NodeClassArgs(node_role="burst-dev-karpenter-node", cluster_name="burst-dev",
                                                   crd_chart=crd_chart))

    res = run_under_mocks(program, preview=True)
    [component] = res.monitor.by_type("gpuburst:index:Ec2NodeClass")
    [chart] = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    [cr] = res.monitor.by_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    assert cr.parent == component.urn
    assert chart.urn in cr.dependencies
    assert cr.properties["metadata"] == {"name": "gpu"}
    # Plain values all the way: a policy judging it during preview sees no unknowns.
    assert cr.properties["spec"] == manifest()["spec"]


# --- faster image start: the NVMe RAID0 and nodeadm's FastImagePull ---------------------------------------------

def test_fast_image_pull_user_data_is_a_nodeconfig_with_only_a_gate_nodeadm_knows():
    doc = yaml.safe_load(node_config_user_data(fast_image_pull=True))
    assert doc["apiVersion"] == "node.eks.aws/v1alpha1" and doc["kind"] == "NodeConfig"
    gates = doc["spec"]["featureGates"]
    assert set(gates) <= set(catalogue.NODECONFIG_FEATURE_GATES) and gates == {"FastImagePull": True}
    # Karpenter's generated NodeConfig wins for cluster, kubelet and labels: nothing of that is set here.
    assert set(doc["spec"]) == {"featureGates"}
    assert node_config_user_data(fast_image_pull=False) is None


def test_both_levers_can_be_turned_off():
    spec = manifest(instance_store_policy=None, fast_image_pull=False)["spec"]
    assert "instanceStorePolicy" not in spec and "userData" not in spec


def test_fast_image_pull_onto_a_slow_root_volume_is_refused_naming_the_throughput():
    with pytest.raises(ConfigError) as e:
        manifest(instance_store_policy=None, fast_image_pull=True)
    msg = str(e.value)
    assert e.value.field == "root_volume_throughput_mibps" and "125" in msg and "600" in msg and "\n" not in msg
    # With a root volume fast enough, or the images on the NVMe RAID0, it is accepted.
    spec = manifest(instance_store_policy=None, root_volume_throughput_mibps=600, root_volume_iops=3000)["spec"]
    assert "FastImagePull" in spec["userData"] and "instanceStorePolicy" not in spec


@pytest.mark.parametrize("kw,field", [({"instance_store_policy": "RAID1"}, "instance_store_policy"),
                                      ({"instance_store_policy": "raid0"}, "instance_store_policy"),
                                      ({"fast_image_pull": "yes"}, "fast_image_pull")])
def test_bad_lever_values_are_one_line_errors(kw, field):
    with pytest.raises(ConfigError) as e:
        manifest(**kw)
    assert e.value.field == field and repr(kw[field]) in str(e.value)


def test_raid0_is_asked_for_when_the_family_has_nvme():
    assert all(t.local_nvme_gb > 0 for t in catalogue.INSTANCE_TYPES.values())  # why the stack's default is RAID0
    assert instance_store_policy_for(["g4dn.xlarge", "g5.2xlarge"]) == "RAID0"
    assert instance_store_policy_for(["g5.2xlarge", "x9.unknown"]) == "RAID0"  # Karpenter applies it per instance
    assert instance_store_policy_for(["x9.unknown"]) is None


@pytest.mark.parametrize("crd", [CRD, OLDEST_CRD])
def test_the_levers_pass_the_upstream_crd(upstream_crds, crd):
    m = manifest()
    assert m["spec"]["instanceStorePolicy"] == "RAID0" and m["spec"]["userData"]
    assert crd_oracle.check_against_crd(m, upstream_crds / crd).errors == []
    broken = copy.deepcopy(m)
    broken["spec"]["instanceStorePolicy"] = "RAID5"
    assert any("instanceStorePolicy" in e for e in crd_oracle.validate_against_crd(broken, upstream_crds / crd))


def test_raid0_gives_the_schedulability_rule_the_nvme_as_ephemeral_storage():
    """Karpenter's allocatable ephemeral storage under RAID0 is the instance store ("<TotalSizeInGB>G") less the
    same reservations as a root volume; the policy pack's model must agree, or it would refuse pods that fit."""
    from components.spec.quantity import GI
    from policies.capacity import allocatable
    from policies.shapes import Shape

    t = catalogue.instance_type("g5.2xlarge")  # 450 GB NVMe
    on_root = Shape(None, "NodePool 'gpu'", {}, [], [t], root_volume_gib=100)
    on_nvme = Shape(None, "NodePool 'gpu'", {}, [], [t], root_volume_gib=100, instance_store=True)
    root_gib = allocatable(t, on_root)["ephemeral-storage"] / GI
    nvme_gib = allocatable(t, on_nvme)["ephemeral-storage"] / GI
    assert root_gib == pytest.approx(catalogue.allocatable_ephemeral_gib(100))                 # 89 GiB
    assert nvme_gib == pytest.approx(catalogue.allocatable_ephemeral_gib(450e9 / 2**30))       # ~376 GiB


def _parts(user_data: str) -> list[tuple[str, str]]:
    import email

    message = email.message_from_string(user_data)
    assert message.get_content_type() == "multipart/mixed"
    return [(part.get_content_type(), part.get_payload()) for part in message.walk() if not part.is_multipart()]


def test_boot_scripts_make_the_user_data_a_mime_document_of_the_node_config_and_each_script():
    from components.model_cache import cache_folder_script

    script = cache_folder_script()
    spec = manifest(boot_scripts=[script])["spec"]
    (kind_a, node_config), (kind_b, body) = _parts(spec["userData"])
    assert kind_a == "application/node.eks.aws" and yaml.safe_load(node_config)["spec"] == {
        "featureGates": {"FastImagePull": True}}
    assert kind_b == "text/x-shellscript" and body.strip() == script.strip()
    # Without FastImagePull the script is the only part; without scripts the user data is the plain NodeConfig.
    only = _parts(node_user_data(fast_image_pull=False, boot_scripts=[script]))
    assert [k for k, _ in only] == ["text/x-shellscript"]
    assert node_user_data(fast_image_pull=True) == node_config_user_data(fast_image_pull=True)
    assert node_user_data(fast_image_pull=False) is None


def test_a_boot_script_that_is_not_a_script_is_refused():
    with pytest.raises(ConfigError, match=r"^boot_scripts: 'mkdir /x' is not valid: a shell script starting"):
        manifest(boot_scripts=["mkdir /x"])


def test_the_multi_part_user_data_passes_the_upstream_crd(upstream_crds):
    from components.model_cache import cache_folder_script

    m = manifest(boot_scripts=[cache_folder_script()])
    assert crd_oracle.validate_against_crd(m, upstream_crds / CRD) == []


@pytest.mark.parametrize("kw,field,term", [
    ({"subnet_selector_tags": {}}, "subnet_selector_tags", "spec.subnetSelectorTerms[0] would be {tags: {}}"),
    ({"security_group_selector_tags": {}}, "security_group_selector_tags",
     "spec.securityGroupSelectorTerms[0] would be {tags: {}}"),
])
def test_an_empty_selector_term_is_refused_in_one_line_naming_the_term(kw, field, term):
    with pytest.raises(ConfigError) as e:
        manifest(**kw)
    text = str(e.value)
    assert e.value.field == field and term in text and "an empty tags map" in text
    assert "Karpenter 1.14.4 ignores such a term" in text and "\n" not in text


def test_the_component_refuses_an_empty_selector_term_naming_itself():
    with pytest.raises(ConfigError) as e:
        run_under_mocks(lambda: Ec2NodeClass("gpu", Ec2NodeClassArgs(
            node_role="KarpenterNodeRole-dev", cluster_name="dev", subnet_selector_tags={})))
    assert str(e.value).startswith("Ec2NodeClass 'gpu': subnet_selector_tags: {} is not valid")


def test_the_crd_itself_accepts_an_empty_tags_term_so_config_must_refuse_it(upstream_crds):
    # Why the rule exists: the 1.14.1 CRD's CEL lets `{tags: {}}` through, and Karpenter 1.14.4 then ignores it.
    doc = manifest()
    doc["spec"]["subnetSelectorTerms"] = [{"tags": {}}]
    assert crd_oracle.check_against_crd(doc, upstream_crds / CRD).errors == []

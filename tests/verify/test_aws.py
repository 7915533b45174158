"""aws.py against a real moto_server (and stand-in clients where moto lacks an operation): one-line errors naming
the action, the resource and AWS's code."""
from __future__ import annotations

import boto3
import pytest

from components.verify.aws import Aws, AwsError, region_from_eks_endpoint, region_from_queue_url


@pytest.mark.parametrize("url,region", [
    ("https://sqs.eu-west-1.amazonaws.com/123456789012/q", "eu-west-1"),
    ("https://sqs.us-gov-west-1.amazonaws.com/123456789012/q", "us-gov-west-1"),
    ("http://127.0.0.1:5000/123456789012/q", None),
])
def test_region_from_queue_url(url, region):
    assert region_from_queue_url(url) == region


def test_describe_images_of_an_unknown_ami_names_action_resource_code(aws):
    with pytest.raises(AwsError) as e:
        Aws("us-east-1").describe_images(["ami-0123456789abcdef0"])
    assert e.value.action == "ec2:DescribeImages" and e.value.resource == "ami-0123456789abcdef0"
    assert str(e.value).startswith("ec2:DescribeImages on ami-0123456789abcdef0: InvalidAMIID.NotFound")


def test_sqs_round_trip_with_attributes_receive_release_delete(aws):
    url = boto3.client("sqs").create_queue(QueueName="q")["QueueUrl"]
    a = Aws("us-east-1")
    a.send_message(url, "{}", {"gpuburst-verify": "u1"})
    msgs = a.receive_messages(url, attribute_names=["gpuburst-verify"], wait_s=0)
    assert msgs[0]["MessageAttributes"]["gpuburst-verify"]["StringValue"] == "u1"
    a.release_message(url, msgs[0]["ReceiptHandle"])
    again = a.receive_messages(url, attribute_names=["gpuburst-verify"], wait_s=0)
    assert len(again) == 1  # released at once, receivable again
    a.delete_message(url, again[0]["ReceiptHandle"])
    assert a.queue_attributes(url, ["ApproximateNumberOfMessages"])["ApproximateNumberOfMessages"] == "0"
    with pytest.raises(AwsError, match="sqs:DeleteMessage on .*ReceiptHandleIsInvalid"):
        a.delete_message(url, "bogus")


def test_s3_put_get_delete_and_assumed_role(aws):
    boto3.client("s3").create_bucket(Bucket="verify-bucket")
    worker = Aws("us-east-1").assume_role("arn:aws:iam::123456789012:role/w")
    worker.put_object("verify-bucket", "k", b"x")
    assert worker.get_object("verify-bucket", "k") == b"x"
    worker.delete_object("verify-bucket", "k")
    with pytest.raises(AwsError, match=r"^s3:GetObject on s3://verify-bucket/k: NoSuchKey"):
        worker.get_object("verify-bucket", "k")


@pytest.mark.parametrize("url,region", [
    ("https://0123456789ABCDEF0123456789ABCDEF.gr7.us-east-1.eks.amazonaws.com", "us-east-1"),
    ("https://0123456789ABCDEF0123456789ABCDEF.yl4.eu-west-1.eks.amazonaws.com/", "eu-west-1"),
    ("https://ABC.SK1.AP-SOUTHEAST-2.EKS.AMAZONAWS.COM", "ap-southeast-2"),
    ("http://127.0.0.1:6443", None),
    ("https://fake.example", None),
])
def test_region_from_eks_endpoint(url, region):
    assert region_from_eks_endpoint(url) == region


def test_describe_cluster_on_moto_returns_the_cluster_and_names_an_unknown_one(aws):
    boto3.client("eks").create_cluster(name="gpuburst-dev", version="1.35", roleArn="arn:aws:iam::123456789012:role/e",
                                       resourcesVpcConfig={"subnetIds": []})
    a = Aws("us-east-1")
    cluster = a.describe_cluster("gpuburst-dev")
    assert (cluster["name"], cluster["version"], cluster["platformVersion"]) == ("gpuburst-dev", "1.35", "eks.4")
    with pytest.raises(AwsError) as e:
        a.describe_cluster("gpuburst-gone")
    assert str(e.value) == ("eks:DescribeCluster on gpuburst-gone: ResourceNotFoundException (No cluster found for "
                            "name: gpuburst-gone.)")


def test_describe_cluster_versions_on_an_endpoint_without_it_is_one_line_naming_the_action(aws):
    with pytest.raises(AwsError) as e:  # moto 5.2.5 answers 404 (an HTML page) for DescribeClusterVersions
        Aws("us-east-1").describe_cluster_versions(["1.35"])
    assert str(e.value) == "eks:DescribeClusterVersions on 1.35: 404 (the endpoint does not offer the operation)"


class _Session:
    """A boto3 session stand-in whose EKS client is the given object."""

    region_name = "us-east-1"

    def __init__(self, client):
        self.eks = client

    def client(self, service, **kwargs):
        assert service == "eks"
        return self.eks


def test_describe_cluster_versions_on_an_sdk_without_it_names_the_action():
    with pytest.raises(AwsError) as e:
        Aws("us-east-1", session=_Session(object())).describe_cluster_versions(["1.35"])
    assert e.value.action == "eks:DescribeClusterVersions" and e.value.code == "UnknownOperation"
    assert str(e.value).startswith("eks:DescribeClusterVersions on 1.35: UnknownOperation (botocore ")


def test_describe_cluster_versions_follows_next_token_and_returns_the_list():
    class Eks:
        def __init__(self):
            self.calls = []

        def describe_cluster_versions(self, **kwargs):
            self.calls.append(kwargs)
            if "nextToken" not in kwargs:
                return {"clusterVersions": [{"clusterVersion": "1.34"}], "nextToken": "t1"}
            return {"clusterVersions": [{"clusterVersion": "1.35"}]}

    eks = Eks()
    found = Aws("us-east-1", session=_Session(eks)).describe_cluster_versions(["1.34", "1.35"])
    assert [v["clusterVersion"] for v in found] == ["1.34", "1.35"]
    assert eks.calls == [{"clusterVersions": ["1.34", "1.35"]},
                         {"clusterVersions": ["1.34", "1.35"], "nextToken": "t1"}]

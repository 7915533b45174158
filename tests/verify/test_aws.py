"""aws.py against a real moto_server: one-line errors naming the action, the resource and AWS's code."""
from __future__ import annotations

import boto3
import pytest

from components.verify.aws import Aws, AwsError, region_from_queue_url


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

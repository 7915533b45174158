"""The thin boto3 layer of `verify`: the few EC2, EKS, SQS, S3 and STS calls the checks make, with errors in one line.

Every failure becomes an AwsError naming the IAM action, the resource and AWS's error code, because that is what
an operator needs to fix a policy. Clients use short timeouts and the SDK's standard retry mode (2 attempts).
"""
from __future__ import annotations

import re
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from .model import CouldNotRun

_CONFIG = Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 2, "mode": "standard"})
_QUEUE_URL_REGION = re.compile(r"^https://sqs[.-]([a-z]{2}(?:-[a-z]+)+-\d)\.amazonaws\.com(?:\.cn)?/")
_EKS_ENDPOINT_REGION = re.compile(r"^https://[^/]+\.([a-z]{2}(?:-[a-z]+)+-\d)\.eks\.amazonaws\.com(?:\.cn)?"
                                  r"(?::\d+)?/?$", re.IGNORECASE)
_NO_SUCH_OPERATION = ("404", "UnknownOperationException", "InvalidAction")
"""Error codes of an endpoint that does not offer an operation (moto answers 404 for DescribeClusterVersions)."""


class AwsError(CouldNotRun):
    """One AWS call failed: `str()` is `ACTION on RESOURCE: CODE (message)`."""

    action: str
    resource: str
    code: str
    message: str

    def __init__(self, action: str, resource: str, code: str, message: str = "") -> None:
        self.action, self.resource, self.code, self.message = action, resource, code, message
        super().__init__(f"{action} on {resource}: {code}" + (f" ({message})" if message else ""))


def region_from_queue_url(url: str) -> str | None:
    """`https://sqs.eu-west-1.amazonaws.com/123/q` -> `eu-west-1`; None for other endpoints (e.g. a local one)."""
    m = _QUEUE_URL_REGION.match(url or "")
    return m.group(1) if m else None


def region_from_eks_endpoint(url: str) -> str | None:
    """`https://ABC.gr7.us-east-1.eks.amazonaws.com` -> `us-east-1`; None for other API servers (e.g. a local one)."""
    m = _EKS_ENDPOINT_REGION.match(url or "")
    return m.group(1).lower() if m else None


def _wrap(action: str, resource: str, fn: Any, **kwargs: Any) -> Any:
    try:
        return fn(**kwargs)
    except ClientError as e:
        err = e.response.get("Error", {})
        code = err.get("Code") or str(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "error"))
        raise AwsError(action, resource, code, " ".join((err.get("Message") or "").split())) from None
    except BotoCoreError as e:
        raise AwsError(action, resource, type(e).__name__, " ".join(str(e).split())) from None


class Aws:
    """EC2/EKS/SQS/S3/STS clients of one identity (the caller's, or an assumed role's) in one region."""

    session: Any
    region: str | None

    def __init__(self, region: str | None = None, session: boto3.session.Session | None = None) -> None:
        self.session = session or boto3.session.Session(region_name=region)
        self.region = region or self.session.region_name
        self._clients: dict[str, Any] = {}

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(service, region_name=self.region, config=_CONFIG)
        return self._clients[service]

    # -- STS ---------------------------------------------------------------------------------------------------
    def assume_role(self, role_arn: str, session_name: str = "gpuburst-verify") -> Aws:
        """An Aws acting as `role_arn` (sts:AssumeRole, one hour at most, no tags)."""
        out = _wrap("sts:AssumeRole", role_arn, self._client("sts").assume_role, RoleArn=role_arn,
                    RoleSessionName=session_name, DurationSeconds=900)
        c = out["Credentials"]
        session = boto3.session.Session(aws_access_key_id=c["AccessKeyId"], aws_secret_access_key=c["SecretAccessKey"],
                                        aws_session_token=c["SessionToken"], region_name=self.region)
        return Aws(self.region, session)

    # -- EC2 ---------------------------------------------------------------------------------------------------
    def describe_instances(self, instance_ids: list[str]) -> list[dict[str, Any]]:
        """The instances (flattened out of their reservations)."""
        out = _wrap("ec2:DescribeInstances", ",".join(instance_ids), self._client("ec2").describe_instances,
                    InstanceIds=list(instance_ids))
        return [i for r in out.get("Reservations", []) for i in r.get("Instances", [])]

    def describe_images(self, image_ids: list[str]) -> list[dict[str, Any]]:
        """The AMIs (Name, Description, ...) by id."""
        out = _wrap("ec2:DescribeImages", ",".join(image_ids), self._client("ec2").describe_images,
                    ImageIds=list(image_ids))
        return list(out.get("Images", []))

    # -- EKS ---------------------------------------------------------------------------------------------------
    def describe_cluster(self, name: str) -> dict[str, Any]:
        """eks:DescribeCluster: the `cluster` dict (version, platformVersion, upgradePolicy, ...)."""
        out = _wrap("eks:DescribeCluster", name, self._client("eks").describe_cluster, name=name)
        return dict(out.get("cluster") or {})

    def describe_cluster_versions(self, versions: list[str]) -> list[dict[str, Any]]:
        """eks:DescribeClusterVersions for the given minors (`["1.35"]`): the `clusterVersions` list (release and
        end-of-support dates per minor). An SDK or endpoint without the operation raises AwsError naming it."""
        action, resource = "eks:DescribeClusterVersions", ",".join(versions)
        client = self._client("eks")
        if not hasattr(client, "describe_cluster_versions"):
            import botocore

            raise AwsError(action, resource, "UnknownOperation",
                           f"botocore {botocore.__version__} does not know the operation: upgrade boto3")
        found: list[dict] = []
        kwargs: dict[str, Any] = {"clusterVersions": list(versions)}
        for _ in range(10):  # one page for a handful of minors; a few more at most
            try:
                out = _wrap(action, resource, client.describe_cluster_versions, **kwargs)
            except AwsError as e:
                if e.code in _NO_SUCH_OPERATION:
                    raise AwsError(action, resource, e.code, "the endpoint does not offer the operation") from None
                raise
            found += list(out.get("clusterVersions") or [])
            if not out.get("nextToken"):
                break
            kwargs["nextToken"] = out["nextToken"]
        return found

    # -- SQS ---------------------------------------------------------------------------------------------------
    def queue_attributes(self, queue_url: str, names: list[str]) -> dict[str, str]:
        """sqs:GetQueueAttributes."""
        out = _wrap("sqs:GetQueueAttributes", queue_url, self._client("sqs").get_queue_attributes,
                    QueueUrl=queue_url, AttributeNames=list(names))
        return dict(out.get("Attributes", {}))

    def send_message(self, queue_url: str, body: str, attributes: dict[str, str], *,
                     group_id: str | None = None, dedup_id: str | None = None) -> str:
        """sqs:SendMessage with String message attributes (and the FIFO ids when given); returns the MessageId."""
        kwargs: dict[str, Any] = {
            "QueueUrl": queue_url, "MessageBody": body,
            "MessageAttributes": {k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
        }
        if group_id is not None:
            kwargs["MessageGroupId"] = group_id
        if dedup_id is not None:
            kwargs["MessageDeduplicationId"] = dedup_id
        return _wrap("sqs:SendMessage", queue_url, self._client("sqs").send_message, **kwargs)["MessageId"]

    def receive_messages(self, queue_url: str, *, attribute_names: list[str], max_messages: int = 10,
                         visibility_timeout_s: int = 5, wait_s: int = 1) -> list[dict[str, Any]]:
        """sqs:ReceiveMessage asking for the named message attributes."""
        out = _wrap("sqs:ReceiveMessage", queue_url, self._client("sqs").receive_message, QueueUrl=queue_url,
                    MaxNumberOfMessages=max_messages, VisibilityTimeout=visibility_timeout_s,
                    WaitTimeSeconds=wait_s, MessageAttributeNames=list(attribute_names))
        return list(out.get("Messages", []))

    def delete_message(self, queue_url: str, receipt_handle: str) -> None:
        """sqs:DeleteMessage of one received message (the 'purge one': never PurgeQueue)."""
        _wrap("sqs:DeleteMessage", queue_url, self._client("sqs").delete_message, QueueUrl=queue_url,
              ReceiptHandle=receipt_handle)

    def release_message(self, queue_url: str, receipt_handle: str) -> None:
        """sqs:ChangeMessageVisibility to 0: hand a received message straight back to the queue."""
        _wrap("sqs:ChangeMessageVisibility", queue_url, self._client("sqs").change_message_visibility,
              QueueUrl=queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=0)

    # -- S3 ----------------------------------------------------------------------------------------------------
    def put_object(self, bucket: str, key: str, body: bytes) -> None:
        """s3:PutObject."""
        _wrap("s3:PutObject", f"s3://{bucket}/{key}", self._client("s3").put_object, Bucket=bucket, Key=key,
              Body=body)

    def get_object(self, bucket: str, key: str) -> bytes:
        """s3:GetObject; returns the body."""
        out = _wrap("s3:GetObject", f"s3://{bucket}/{key}", self._client("s3").get_object, Bucket=bucket, Key=key)
        return out["Body"].read()

    def delete_object(self, bucket: str, key: str) -> None:
        """s3:DeleteObject."""
        _wrap("s3:DeleteObject", f"s3://{bucket}/{key}", self._client("s3").delete_object, Bucket=bucket, Key=key)

    # -- IAM (reads only: the scaler-iam check evaluates a role's policies itself) -------------------------------
    def get_role(self, role_name: str) -> dict[str, Any]:
        """iam:GetRole: the `Role` dict (Arn, AssumeRolePolicyDocument as a dict, PermissionsBoundary, ...)."""
        out = _wrap("iam:GetRole", role_name, self._client("iam").get_role, RoleName=role_name)
        role = dict(out.get("Role") or {})
        role["AssumeRolePolicyDocument"] = policy_json(role.get("AssumeRolePolicyDocument"))
        return role

    def managed_policy_document(self, policy_arn: str) -> dict[str, Any]:
        """iam:GetPolicy + iam:GetPolicyVersion: the default version's document of a managed policy."""
        iam = self._client("iam")
        version = _wrap("iam:GetPolicy", policy_arn, iam.get_policy, PolicyArn=policy_arn)["Policy"]["DefaultVersionId"]
        out = _wrap("iam:GetPolicyVersion", policy_arn, iam.get_policy_version, PolicyArn=policy_arn,
                    VersionId=version)
        return policy_json(out["PolicyVersion"].get("Document"))

    def role_policy_documents(self, role_name: str) -> list[tuple[str, dict[str, Any]]]:
        """(where, document) of every identity policy of a role: its inline policies (iam:ListRolePolicies,
        iam:GetRolePolicy) and its attached managed policies (iam:ListAttachedRolePolicies, the default version)."""
        iam = self._client("iam")
        docs: list[tuple[str, dict]] = []
        names = _wrap("iam:ListRolePolicies", role_name, iam.list_role_policies, RoleName=role_name)
        for n in names.get("PolicyNames") or []:
            out = _wrap("iam:GetRolePolicy", f"{role_name}/{n}", iam.get_role_policy, RoleName=role_name,
                        PolicyName=n)
            docs.append((f"inline policy {n}", policy_json(out.get("PolicyDocument"))))
        attached = _wrap("iam:ListAttachedRolePolicies", role_name, iam.list_attached_role_policies,
                         RoleName=role_name)
        for p in attached.get("AttachedPolicies") or []:
            docs.append((f"managed policy {p['PolicyArn']}", self.managed_policy_document(p["PolicyArn"])))
        return docs

    # -- EKS Pod Identity --------------------------------------------------------------------------------------
    def pod_identity_role(self, cluster: str, namespace: str, service_account: str) -> str | None:
        """The roleArn of the Pod Identity association of `namespace/service_account` (eks:ListPodIdentityAssociations
        + eks:DescribePodIdentityAssociation), or None when it has none."""
        eks = self._client("eks")
        who = f"{cluster}:{namespace}/{service_account}"
        out = _wrap("eks:ListPodIdentityAssociations", who, eks.list_pod_identity_associations, clusterName=cluster,
                    namespace=namespace, serviceAccount=service_account)
        for a in out.get("associations") or []:
            d = _wrap("eks:DescribePodIdentityAssociation", who, eks.describe_pod_identity_association,
                      clusterName=cluster, associationId=a["associationId"])
            arn = (d.get("association") or {}).get("roleArn")
            if arn:
                return str(arn)
        return None


def policy_json(doc: Any) -> dict[str, Any]:
    """An IAM policy document as a dict (boto3 decodes them; a URL-encoded JSON string is decoded here)."""
    if isinstance(doc, dict):
        return doc
    if not doc:
        return {}
    import json
    from urllib.parse import unquote

    text = str(doc)
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(unquote(text))

"""Thin S3 and SQS helpers on boto3's standard configuration (so AWS_ENDPOINT_URL, profiles and IRSA all apply)."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from worker.messages import S3Uri

#: boto3 client configuration: the SDK's "standard" retry mode, and a read timeout above SQS's 20 s long poll.
CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, read_timeout=40, connect_timeout=10)

_NOT_FOUND = {"404", "NoSuchKey", "NotFound", "NoSuchBucket"}
_PRECONDITION = {"412", "PreconditionFailed", "ConditionalRequestConflict"}

CONTENT_TYPES = {".json": "application/json", ".png": "image/png", ".tif": "image/tiff", ".tiff": "image/tiff"}


def s3_client() -> Any:
    """An S3 client from the default session and standard configuration."""
    return boto3.client("s3", config=CLIENT_CONFIG)


def sqs_client() -> Any:
    """An SQS client from the default session and standard configuration."""
    return boto3.client("sqs", config=CLIENT_CONFIG)


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError ('' for anything else)."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def is_not_found(exc: BaseException) -> bool:
    """Whether an exception is S3's 'no such key/bucket'."""
    return error_code(exc) in _NOT_FOUND


def is_precondition_failed(exc: BaseException) -> bool:
    """Whether an exception is a failed conditional request (If-Match / If-None-Match)."""
    return error_code(exc) in _PRECONDITION


@dataclass(frozen=True)
class ObjectInfo:
    """What a HEAD tells about one S3 object."""

    etag: str
    """The object's ETag, quotes included, exactly as S3 returns it."""
    size_bytes: int
    """The object's size in bytes."""


def head(s3: Any, uri: S3Uri) -> ObjectInfo:
    """HEAD one object; raises ClientError (check with is_not_found) when it is absent."""
    r = s3.head_object(Bucket=uri.bucket, Key=uri.key)
    return ObjectInfo(etag=r["ETag"], size_bytes=int(r["ContentLength"]))


def get_json(s3: Any, uri: S3Uri) -> tuple[dict[str, Any], str] | None:
    """Read a JSON object and its ETag, or None when it does not exist (or is not a JSON object)."""
    try:
        r = s3.get_object(Bucket=uri.bucket, Key=uri.key)
    except ClientError as e:
        if is_not_found(e):
            return None
        raise
    try:
        data = json.loads(r["Body"].read())
    except ValueError:
        return {}, r["ETag"]
    return (data if isinstance(data, dict) else {}), r["ETag"]


def download(s3: Any, uri: S3Uri, dest: Path, *, if_match: str | None = None) -> int:
    """Stream one object to `dest` (only the version with ETag `if_match`, when given); return the bytes written."""
    kwargs: dict[str, Any] = {"Bucket": uri.bucket, "Key": uri.key}
    if if_match:
        kwargs["IfMatch"] = if_match
    r = s3.get_object(**kwargs)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as f:
        shutil.copyfileobj(r["Body"], f, length=8 * 1024 * 1024)
    return dest.stat().st_size


def upload(s3: Any, path: Path, uri: S3Uri) -> None:
    """Upload a file (multipart when large) with a content type from its suffix."""
    ctype = CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream")
    s3.upload_file(str(path), uri.bucket, uri.key, ExtraArgs={"ContentType": ctype})


def put_json_conditional(s3: Any, uri: S3Uri, data: dict[str, Any], *, replace_etag: str | None) -> None:
    """Write a JSON object only if the key is still absent (replace_etag None) or still has ETag `replace_etag`.

    Raises ClientError (check with is_precondition_failed) when another writer got there first.
    """
    body = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")
    kwargs: dict[str, Any] = {"Bucket": uri.bucket, "Key": uri.key, "Body": body, "ContentType": "application/json"}
    if replace_etag is None:
        kwargs["IfNoneMatch"] = "*"
    else:
        kwargs["IfMatch"] = replace_etag
    s3.put_object(**kwargs)


def queue_name_from_arn(arn: str) -> tuple[str, str]:
    """Split an SQS queue ARN (arn:aws:sqs:region:account:name) into (name, account id)."""
    parts = arn.split(":")
    if len(parts) != 6 or parts[2] != "sqs":
        raise ValueError(f"not an SQS queue ARN: {arn!r}")
    return parts[5], parts[4]

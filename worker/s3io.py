"""Thin S3 and SQS helpers on boto3's standard configuration (so AWS_ENDPOINT_URL, profiles and IRSA all apply)."""
from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
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

#: At most this many objects under one slide prefix (a DICOM WSI series has tens to a few thousand instances; more
#: almost certainly means a wrong prefix, such as a whole study).
MAX_PREFIX_OBJECTS = 20_000
#: Default limit on the total size of the objects under one slide prefix, in bytes (64 GiB; scratch needs that room).
DEFAULT_MAX_PREFIX_BYTES = 64 * 1024**3
#: Parallel GETs when downloading a prefix (many small DICOM instances are latency-bound, not bandwidth-bound).
PREFIX_DOWNLOAD_WORKERS = 8
# Most file systems allow 255 bytes per path segment; a longer S3 key segment cannot be written as a file.
_MAX_SEGMENT_BYTES = 255


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


class PrefixError(ValueError):
    """A slide prefix that can never be used as one slide (empty, over a limit, an unsafe key); `str()` is one line."""


class PrefixChanged(RuntimeError):
    """Objects under a slide prefix changed while it was being downloaded (transient: retry once it settles)."""


@dataclass(frozen=True)
class PrefixObject:
    """One object under a slide prefix, as ListObjectsV2 reported it."""

    key: str
    """The full object key."""
    relative: str
    """The key below the prefix ('/'-separated): the file's path inside the local download folder."""
    etag: str
    """The object's ETag, quotes included, exactly as S3 lists it (each GET is made If-Match this value)."""
    size_bytes: int
    """The object's size in bytes."""


def manifest_digest(entries: Iterable[tuple[str, str, int]]) -> str:
    """`manifest-sha256:<hex>` over (relative key, ETag, size) entries, sorted first, so listing order cannot matter.

    The entries are hashed as canonical JSON (a list of [key, etag, size]), which is unambiguous for any key text.
    """
    rows = sorted([str(k), str(e), int(n)] for k, e, n in entries)
    canonical = json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return "manifest-sha256:" + hashlib.sha256(canonical).hexdigest()


@dataclass(frozen=True)
class PrefixListing:
    """Every object under one slide prefix (folder markers skipped), sorted by relative key, and its identity."""

    prefix: S3Uri
    """The listed prefix (its key ends in '/')."""
    objects: tuple[PrefixObject, ...]
    """The objects, sorted by relative key; never empty (list_prefix refuses an empty prefix)."""

    @property
    def size_bytes(self) -> int:
        """The objects' total size in bytes."""
        return sum(o.size_bytes for o in self.objects)

    @property
    def digest(self) -> str:
        """The prefix's identity, `manifest-sha256:<hex>` over the sorted (relative key, ETag, size) list."""
        return manifest_digest((o.relative, o.etag, o.size_bytes) for o in self.objects)

    def identity(self) -> dict[str, Any]:
        """The summary's `input` facts for this prefix: `etag` (the digest), `objects` and `size_bytes`."""
        return {"etag": self.digest, "objects": len(self.objects), "size_bytes": self.size_bytes}


def safe_relative_path(relative: str, *, key: str, prefix: S3Uri) -> PurePosixPath:
    """`relative` as a path that stays inside a download folder; PrefixError (one line, naming the key) if it cannot."""
    def refuse(why: str) -> PrefixError:
        return PrefixError(f"key={key!r} under {prefix}: {why}; the prefix cannot be downloaded as one slide")

    if relative.startswith("/"):
        raise refuse("would be an absolute path (an empty segment after the prefix)")
    if "\x00" in relative:
        raise refuse("contains a NUL character")
    parts = relative.split("/")
    if ".." in parts:
        raise refuse("would escape the download folder (a '..' segment)")
    if "." in parts or "" in parts:
        raise refuse("has a '.' or empty path segment (two keys could land on one file)")
    if any(len(p.encode("utf-8")) > _MAX_SEGMENT_BYTES for p in parts):
        raise refuse(f"has a path segment over {_MAX_SEGMENT_BYTES} bytes (too long for a file name)")
    return PurePosixPath(*parts)


def list_prefix(s3: Any, prefix: S3Uri, *, max_objects: int = MAX_PREFIX_OBJECTS,
                max_total_bytes: int = DEFAULT_MAX_PREFIX_BYTES, page_size: int = 1000) -> PrefixListing:
    """List every object under `prefix` (paginated ListObjectsV2), skipping folder markers (keys ending in '/').

    Raises PrefixError (one line) when there is no object, more than `max_objects` objects, more than
    `max_total_bytes` bytes in all, or a key that cannot be a file inside a download folder; a missing bucket or a
    denied listing raises botocore's ClientError (check with is_not_found).
    """
    if not prefix.is_prefix or not prefix.key:
        raise PrefixError(f"prefix={str(prefix)!r}: must be a key prefix ending in '/' (not an object or a bucket)")
    objects: list[PrefixObject] = []
    total = 0
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=prefix.bucket, Prefix=prefix.key,
                                   PaginationConfig={"PageSize": page_size}):
        for o in page.get("Contents", []):
            key = o["Key"]
            if key.endswith("/"):  # a "folder" made by the console or a sync tool: nothing to download
                continue
            relative = key[len(prefix.key):]
            safe_relative_path(relative, key=key, prefix=prefix)
            objects.append(PrefixObject(key=key, relative=relative, etag=o["ETag"], size_bytes=int(o["Size"])))
            total += int(o["Size"])
            if len(objects) > max_objects:
                raise PrefixError(f"{prefix} holds more than {max_objects} objects (limit: {max_objects} per "
                                  "slide); is it one slide?")
            if total > max_total_bytes:
                raise PrefixError(f"{prefix} holds more than {max_total_bytes} bytes (limit: {max_total_bytes} "
                                  "bytes per slide)")
    if not objects:
        raise PrefixError(f"no objects under {prefix} (keys ending in '/' are folder markers and do not count)")
    objects.sort(key=lambda o: o.relative)
    files = {o.relative for o in objects}
    for o in objects:
        parent = o.relative.rsplit("/", 1)[0] if "/" in o.relative else ""
        while parent:
            if parent in files:
                raise PrefixError(f"key={prefix.key + parent!r} under {prefix}: is both an object and the folder of "
                                  f"{o.key!r}; the prefix cannot be downloaded as one slide")
            parent = parent.rsplit("/", 1)[0] if "/" in parent else ""
    return PrefixListing(prefix=prefix, objects=tuple(objects))


def download_prefix(s3: Any, listing: PrefixListing, dest: Path, *, workers: int = PREFIX_DOWNLOAD_WORKERS,
                    progress: Callable[[int, int], None] | None = None) -> int:
    """Download every listed object into folder `dest`, at its relative path; return the bytes written.

    Each GET is made If-Match the listed ETag, and each file's size is checked against the listing, so a prefix
    rewritten during the download raises PrefixChanged (transient) rather than yielding a mixed slide.
    `progress(done, total)` is called after each object (from the calling thread); an exception it raises stops
    the download (objects not started are skipped) and propagates.
    """
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    jobs: list[tuple[PrefixObject, Path]] = []
    for o in listing.objects:
        path = dest.joinpath(*safe_relative_path(o.relative, key=o.key, prefix=listing.prefix).parts)
        if not path.resolve().is_relative_to(root):  # defence in depth, e.g. a symlink already in dest
            raise PrefixError(f"key={o.key!r} under {listing.prefix}: would be written outside {dest}")
        jobs.append((o, path))

    def fetch(o: PrefixObject, path: Path) -> int:
        uri = S3Uri(listing.prefix.bucket, o.key)
        try:
            n = download(s3, uri, path, if_match=o.etag)
        except ClientError as e:
            if is_precondition_failed(e):
                raise PrefixChanged(f"{uri} changed during the download (ETag no longer {o.etag})") from None
            if is_not_found(e):
                raise PrefixChanged(f"{uri} was deleted during the download") from None
            raise
        if n != o.size_bytes:
            raise PrefixChanged(f"{uri}: {n} bytes read, {o.size_bytes} listed")
        return n

    total = 0
    done = 0
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="s3-prefix") as pool:
        pending: set[Future[int]] = {pool.submit(fetch, o, path) for o, path in jobs}
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    total += f.result()
                    done += 1
                    if progress is not None:
                        progress(done, len(jobs))
        except BaseException:
            for f in pending:
                f.cancel()
            raise
    return total


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

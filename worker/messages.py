"""The queue message contract: one JSON body per slide, checked against a table of rules with one-line errors."""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Suffixes of slides that are one S3 object (`slide` may name such an object directly), in the order errors list them:
#: Aperio .svs, (OME-/Philips) TIFF, Hamamatsu .ndpi, Leica .scn, Ventana .bif, a single-file DICOM .dcm.
OBJECT_SUFFIXES = (".svs", ".tif", ".tiff", ".ome.tif", ".ome.tiff", ".ndpi", ".scn", ".bif", ".dcm")

#: Suffixes of the index file of a multi-file slide (3DHISTECH .mrxs + its data folder, Hamamatsu .vms + its .jpg/.opt
#: files): such a slide is sent as the prefix that holds all its files, never as the index object alone.
MULTI_FILE_SUFFIXES = (".mrxs", ".vms")

#: Every known slide suffix, longest first: stripped (case-insensitive) from a slide's file or folder name to get its
#: default slide_id.
SLIDE_SUFFIXES = tuple(sorted(OBJECT_SUFFIXES + MULTI_FILE_SUFFIXES, key=lambda x: (-len(x), x)))

#: Names of the three result files, in upload order; the summary JSON is last because it is the commit marker.
OUTPUT_SUFFIXES = (".overlay.ome.tif", ".preview.png", ".json")

# S3 bucket names: 3-63 characters of lowercase letters, digits, dots and hyphens, starting and ending alphanumeric.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# slide_id becomes part of file names and S3 keys: no slashes, no leading dot, at most 128 characters.
_SLIDE_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
# study is used as the FIFO MessageGroupId and as a key of per-study state; SQS allows 1-128 printable ASCII.
_STUDY = re.compile(r"^[!-~]{1,128}$")
_MAX_SEQUENCE = 2**63 - 1


class ContractError(ValueError):
    """A message body that breaks the contract; `str()` is one line naming the field and the offending value."""

    def __init__(self, field: str, value: Any, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{field}={_show(value)}: {problem}")


@dataclass(frozen=True)
class S3Uri:
    """A parsed `s3://bucket/key` address."""

    bucket: str
    """The bucket name (validated against S3's naming rules)."""
    key: str
    """The object key or key prefix, without the leading slash ('' for the bucket root)."""

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def child(self, name: str) -> S3Uri:
        """The address of `name` under this prefix (the prefix must end with '/' or be empty)."""
        return S3Uri(self.bucket, self.key + name)

    @property
    def is_prefix(self) -> bool:
        """Whether this addresses a key prefix (ends in '/', or is the bucket root) rather than one object."""
        return self.key == "" or self.key.endswith("/")

    @property
    def name(self) -> str:
        """The last non-empty path segment of the key: an object's file name, or a prefix's folder name."""
        return self.key.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class SlideMessage:
    """One validated work item: which slide to read, where its three results go, and its place in a study."""

    slide: S3Uri
    """The input whole-slide image: one object with a suffix in OBJECT_SUFFIXES (.svs, .tif, .ndpi, .dcm, ...), or a
    key prefix ending in '/' holding every file of a multi-file slide (MRXS with its data folder, VMS set, DICOM
    series); see `is_prefix`."""
    output: S3Uri
    """The key prefix (ending in '/') under which `<slide_id>.overlay.ome.tif`, `.preview.png` and `.json` go."""
    slide_id: str
    """The name of this slide's results; defaults to the slide's file name (or, for a prefix, its last segment)
    without a known slide suffix (SLIDE_SUFFIXES)."""
    study: str | None = None
    """The study the slide belongs to (the FIFO MessageGroupId); None when the producer gave none."""
    sequence: int | None = None
    """The slide's position within its study (0 or more), used to detect gaps and reordering; None if not given."""

    def output_uri(self, suffix: str) -> S3Uri:
        """The S3 address of one result file (`suffix` is one of OUTPUT_SUFFIXES)."""
        return self.output.child(self.slide_id + suffix)

    @property
    def is_prefix(self) -> bool:
        """Whether `slide` is a prefix naming a multi-file slide (downloaded as a folder) rather than one object."""
        return self.slide.is_prefix

    @property
    def summary_uri(self) -> S3Uri:
        """The summary JSON's address: its presence (with the input's ETag, or for a prefix the digest of its object
        list) marks the slide as finished."""
        return self.output_uri(".json")

    def to_dict(self) -> dict[str, Any]:
        """The message as a JSON-ready dict in contract form (with slide_id filled in; a prefix keeps its '/')."""
        d: dict[str, Any] = {"slide": str(self.slide), "output": str(self.output), "slide_id": self.slide_id}
        if self.study is not None:
            d["study"] = self.study
        if self.sequence is not None:
            d["sequence"] = self.sequence
        return d


class _Raw(str):
    """Text that is not JSON (a body that failed to parse): shown with Python's quoting, which stays readable."""


def _show(value: Any, limit: int = 80) -> str:
    """A short one-line rendering of a value for error messages (JSON values as JSON, raw text quoted)."""
    if isinstance(value, _Raw):
        text = repr(str(value)[:limit])
        return text if len(value) <= limit else text + "..."
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_s3_uri(value: str) -> S3Uri:
    """Split `s3://bucket/key` into bucket and key; raise ValueError with the reason when it is not one."""
    if not value.startswith("s3://"):
        raise ValueError("must start with s3://")
    bucket, sep, key = value[5:].partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise ValueError(f"bucket name {bucket!r} is not a valid S3 bucket name")
    if not sep:
        raise ValueError("must be s3://bucket/... with a '/' after the bucket")
    return S3Uri(bucket, key)


def default_slide_id(key: str) -> str:
    """The slide's stem: the last non-empty segment of a key, prefix or local file/folder name, minus the longest
    matching suffix of SLIDE_SUFFIXES (case-insensitive): `in/S1.ome.tif` -> `S1`, `in/case-7/` -> `case-7`."""
    name = key.rstrip("/").rsplit("/", 1)[-1]
    lower = name.lower()
    for suffix in SLIDE_SUFFIXES:
        if lower.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


# --- the rules -------------------------------------------------------------------------------------------------
# Each rule: (field, applies when the field is present?, check returning None or the problem in words).
# They run in table order and the first failure is reported, so messages stay one line and deterministic.

def _is_str(v: Any) -> str | None:
    return None if isinstance(v, str) else f"must be a string, got {type(v).__name__}"


def _slide_uri(v: Any) -> str | None:
    try:
        uri = parse_s3_uri(v)
    except ValueError as e:
        return str(e)
    if not uri.key:
        return "must name a slide object (s3://bucket/key.svs) or a slide's prefix (s3://bucket/slide/), not a bucket"
    if uri.is_prefix:
        # The prefix is downloaded as one local folder named after its last segment: every segment must be a name.
        segments = uri.key[:-1].split("/")
        if "" in segments:
            return "must not contain an empty path segment ('//')"
        if "." in segments or ".." in segments:
            return "must not contain a '.' or '..' path segment"
        return None
    name = uri.name.lower()
    if name.endswith(MULTI_FILE_SUFFIXES):
        if "/" in uri.key:
            parent = uri.key.rsplit("/", 1)[0] + "/"
            return ("is one file of a multi-file slide (.mrxs/.vms): send the prefix that holds it and its data "
                    f"files instead, e.g. s3://{uri.bucket}/{parent}")
        return ("is one file of a multi-file slide (.mrxs/.vms): put it and its data files under a prefix of their "
                "own and send that prefix instead, e.g. s3://bucket/slide/")
    if not name.endswith(OBJECT_SUFFIXES):
        return (f"must be a slide object ending in {', '.join(OBJECT_SUFFIXES)}, or a prefix ending in '/' holding "
                "a multi-file slide (MRXS, VMS, DICOM series)")
    return None


def _output_uri(v: Any) -> str | None:
    try:
        uri = parse_s3_uri(v)
    except ValueError as e:
        return str(e)
    if uri.key and not uri.key.endswith("/"):
        return "must be a prefix ending in '/' (s3://bucket/prefix/)"
    if "//" in uri.key or uri.key.startswith("/"):
        return "must not contain an empty path segment ('//')"
    return None


def _slide_id(v: Any) -> str | None:
    if not _SLIDE_ID.match(v):
        return "must be 1-128 characters of letters, digits, '.', '_' or '-' (no '/', not starting with '.' or '-')"
    return None


def _study(v: Any) -> str | None:
    if not _STUDY.match(v):
        return "must be 1-128 printable ASCII characters without spaces (it is the FIFO MessageGroupId)"
    return None


def _sequence(v: Any) -> str | None:
    if isinstance(v, bool) or not isinstance(v, int):
        return f"must be an integer, got {type(v).__name__}"
    if not 0 <= v <= _MAX_SEQUENCE:
        return "must be between 0 and 2^63-1"
    return None


REQUIRED = ("slide", "output")
OPTIONAL = ("slide_id", "study", "sequence")

#: The contract as data: (field, check). Optional fields are checked only when present and not null.
RULES: tuple[tuple[str, Callable[[Any], str | None]], ...] = (
    ("slide", _is_str),
    ("slide", _slide_uri),
    ("output", _is_str),
    ("output", _output_uri),
    ("slide_id", _is_str),
    ("slide_id", _slide_id),
    ("study", _is_str),
    ("study", _study),
    ("sequence", _sequence),
)


def parse_message(body: str | bytes) -> SlideMessage:
    """Parse and validate one SQS message body; raise ContractError (one line: field, value, problem) if it is bad."""
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ContractError("body", body[:40], f"is not UTF-8 ({e.reason})") from None
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        raise ContractError("body", _Raw(body), f"is not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    if not isinstance(data, dict):
        raise ContractError("body", data, f"must be a JSON object, got {type(data).__name__}")
    for field in REQUIRED:
        if data.get(field) is None:
            raise ContractError(field, data.get(field), "is required")
    unknown = sorted(set(data) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise ContractError(unknown[0], data[unknown[0]],
                            f"is not a field of the contract (allowed: {', '.join(REQUIRED + OPTIONAL)})")
    for field, check in RULES:
        value = data.get(field)
        if value is None:
            continue
        problem = check(value)
        if problem:
            raise ContractError(field, value, problem)
    slide = parse_s3_uri(data["slide"])
    slide_id = data.get("slide_id")
    if slide_id is None:
        slide_id = default_slide_id(slide.key)
        problem = _slide_id(slide_id)
        if problem:
            what = "last segment" if slide.is_prefix else "file stem"
            raise ContractError("slide", data["slide"],
                                f"its {what} {slide_id!r} is not a usable slide_id; give slide_id explicitly")
    return SlideMessage(slide=slide, output=parse_s3_uri(data["output"]), slide_id=slide_id,
                        study=data.get("study"), sequence=data.get("sequence"))


def make_body(slide: str, output: str, *, slide_id: str | None = None, study: str | None = None,
              sequence: int | None = None) -> str:
    """Build a contract-conforming message body (validated, so a producer cannot send a bad one by accident).

    `slide` is `s3://bucket/key.<ext>` for a one-object slide, or `s3://bucket/prefix/` for a multi-file one.
    """
    d: dict[str, Any] = {"slide": slide, "output": output}
    if slide_id is not None:
        d["slide_id"] = slide_id
    if study is not None:
        d["study"] = study
    if sequence is not None:
        d["sequence"] = sequence
    body = json.dumps(d, sort_keys=True)
    parse_message(body)
    return body

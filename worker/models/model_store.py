"""Where the model file comes from: a local path or s3://bucket/key, pinned by SHA-256, via a node cache by digest.

Every source ends as a `ModelFile`: an open file whose bytes were hashed, handed to the loader as that same open file,
so a file swapped by name after the check is never the one loaded. An S3 model needs its digest (`--model-sha256`):
the digest is the cache key, and it makes every pod of a burst run exactly the model it was given. The cache
(`ModelCache`, a node-local folder shared by the Jobs on a node: the NVMe or a hostPath) is written atomically (a
temporary file in the same folder, hashed while it streams, renamed only when the digest matches), one download per
digest at a time (an `fcntl` lock per digest), LRU-cleaned when a model is added, and re-verified on every hit: any
pod can write to that folder, so no pod trusts what another left there.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from worker.logfmt import event, one_line
from worker.models.errors import ModelError
from worker.slides.limits import parse_bytes

log = logging.getLogger("worker.model")

BUILTIN_WEIGHTS = Path(__file__).resolve().parents[1] / "weights" / "tinyseg-v2.pt2"
"""The built-in model, shipped in the image (`python -m worker.devtools.train` writes it)."""

DEFAULT_CACHE_MAX_BYTES = 20 * 2**30
"""Default size of the node's model cache (env MODEL_CACHE_MAX_BYTES): 20 GiB. The seed's models are about 3 GB, so
this keeps six of them, more than the workloads one GPU node serves in a day, while leaving most of the node's disk
to what must fit: the image (about 10 GB unpacked) and the scratch room for one slide and its overlay (a slide may
be up to 64 GiB, SLIDE_MAX_FILE_BYTES; real ones are 0.1-5 GB). GPU instance-store NVMe is 250 GB or more."""

CHUNK_BYTES = 8 * 2**20
"""Bytes per read while streaming a download to disk and hashing it."""

_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_ENTRY = re.compile(r"sha256-([0-9a-f]{64})")
_PARTIAL = re.compile(r"sha256-([0-9a-f]{64})\..*\.partial")


class ModelDigestMismatch(ModelError):
    """The model's bytes do not have the SHA-256 it was pinned to; the message names both digests."""


def check_sha256(value: str | None, name: str = "--model-sha256") -> str | None:
    """The pinned digest in lower case (None when not given); ValueError, one line naming `name` and the value, when
    it is not 64 hexadecimal digits."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not _SHA256.fullmatch(value.strip()):
        raise ValueError(f"{name}={value!r}: must be 64 hexadecimal digits, the model file's SHA-256 "
                         "(as `sha256sum FILE` prints it)")
    return value.strip().lower()


def parse_size(name: str, raw: str) -> int:
    """Bytes from an environment value: a whole number (21474836480) or with a unit (20GiB, 20Gi, 500MB), read as
    the SLIDE_MAX_*_BYTES variables are (worker.slides.limits.parse_bytes)."""
    try:
        return parse_bytes(name, raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: must be a whole number of bytes >= 1 (e.g. 21474836480 or 20GiB)") from None


def model_uri(flag_value: str | None, environ: Mapping[str, str]) -> str | None:
    """The model to run: --model, else $MODEL_URI, else $MODEL_PATH (None: the built-in one); ValueError when the
    two variables are both set and differ (which one was meant cannot be guessed)."""
    if flag_value:
        return flag_value
    uri, path = environ.get("MODEL_URI") or None, environ.get("MODEL_PATH") or None
    if uri and path and uri != path:
        raise ValueError(f"MODEL_URI={uri!r} and MODEL_PATH={path!r}: both set and different; set one of them")
    return uri or path


def cache_max_bytes(environ: Mapping[str, str]) -> int:
    """$MODEL_CACHE_MAX_BYTES in bytes (units allowed), else DEFAULT_CACHE_MAX_BYTES; ValueError when malformed."""
    raw = environ.get("MODEL_CACHE_MAX_BYTES")
    return DEFAULT_CACHE_MAX_BYTES if not raw else parse_size("MODEL_CACHE_MAX_BYTES", raw)


def _pinned(sha256: str | None) -> str | None:
    try:
        return check_sha256(sha256)
    except ValueError as exc:
        raise ModelError(str(exc)) from None


def is_s3_uri(uri: Any) -> bool:
    """Whether a --model value names an S3 object rather than a local file."""
    return isinstance(uri, str) and uri.startswith("s3://")


def check_source(uri: str | None, sha256: str | None, flag: str = "--model") -> None:
    """ValueError (one line naming `flag` and the value) when `uri` is an S3 address that cannot be a model: not
    s3://bucket/key naming one object, or given without a digest."""
    if not is_s3_uri(uri):
        return
    from worker.messages import parse_s3_uri

    try:
        where = parse_s3_uri(uri)
    except ValueError as exc:
        raise ValueError(f"{flag}={uri!r}: {exc}") from None
    if where.is_prefix:
        raise ValueError(f"{flag}={uri!r}: must name one object (s3://bucket/key), not a prefix")
    if sha256 is None:
        raise ValueError(f"{flag}={uri!r}: an S3 model needs --model-sha256 (or MODEL_SHA256): the node cache is "
                         "keyed by it, and every pod must run the same bytes")


@dataclass
class ModelFile:
    """A model file on this node, open, with its SHA-256 checked: what `load_model` reads (the same open file)."""

    label: str
    """How messages name the model: the local path or the s3:// URI."""
    file: BinaryIO
    """The open file whose bytes were hashed, at offset 0."""
    sha256: str
    """The SHA-256 of those bytes (hex)."""
    origin: str
    """Where the bytes came from: "built-in", "local", "cache" (this node's cache) or "s3" (downloaded now)."""
    fetch_s: float = 0.0
    """Seconds spent getting the file here and hashing it (a download, or re-hashing a cache hit)."""
    size_bytes: int = 0
    """The file's size in bytes."""

    def close(self) -> None:
        """Close the file (an uncached download is deleted then)."""
        self.file.close()

    def __enter__(self) -> ModelFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _mismatch(label: str, expected: str, actual: str, what: str) -> ModelDigestMismatch:
    return ModelDigestMismatch(f"{label}: sha256 mismatch: expected {expected} (--model-sha256 / MODEL_SHA256), "
                               f"{what} has {actual}; refused before any slide")


def _digest(f: BinaryIO) -> str:
    f.seek(0)
    digest = hashlib.file_digest(f, "sha256").hexdigest()
    f.seek(0)
    return digest


def open_local(path: str | os.PathLike | None, sha256: str | None = None) -> ModelFile:
    """The built-in model (`path` None) or a local model file, opened and hashed; ModelError when it is missing or
    unreadable, ModelDigestMismatch when `sha256` is given and differs."""
    t0 = time.monotonic()
    sha256 = _pinned(sha256)
    p = BUILTIN_WEIGHTS if path is None else Path(path)
    if not p.is_file():
        if path is None:
            raise ModelError(f"{p}: built-in weights are missing; run `python -m worker.devtools.train --out {p}`")
        raise ModelError(f"{p}: no such model file")
    try:
        f = open(p, "rb")  # noqa: SIM115 - handed to the caller open: the loader reads the bytes hashed here
    except OSError as exc:
        raise ModelError(f"{p}: cannot read the model file ({one_line(exc, 120)})") from None
    digest = _digest(f)
    if sha256 is not None and digest != sha256:
        f.close()
        raise _mismatch(str(p), sha256, digest, "the file")
    return ModelFile(str(p), f, digest, "built-in" if path is None else "local", time.monotonic() - t0,
                     os.fstat(f.fileno()).st_size)


def _stream(s3: Any, uri: str, f: BinaryIO, before_write: Any = None) -> tuple[str, int]:
    """GET `uri` into the open file `f`, hashing as it streams; return (sha256, bytes). ModelError, one line, when
    S3 refuses (no such object, access denied, ...)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from worker import s3io
    from worker.messages import parse_s3_uri

    where = parse_s3_uri(uri)
    try:
        r = s3.get_object(Bucket=where.bucket, Key=where.key)
    except (ClientError, BotoCoreError) as exc:  # S3's answer or the network's: one line naming the object
        code = s3io.error_code(exc)
        raise ModelError(f"{uri}: cannot download the model ({code + ': ' if code else ''}{one_line(exc, 160)})") \
            from None
    if before_write is not None:
        before_write(int(r.get("ContentLength") or 0))
    h, n = hashlib.sha256(), 0
    body = r["Body"]
    while chunk := body.read(CHUNK_BYTES):
        f.write(chunk)
        h.update(chunk)
        n += len(chunk)
    f.flush()
    return h.hexdigest(), n


def fetch_model(uri: str | None, sha256: str | None = None, *, cache: ModelCache | None = None, s3: Any = None,
                temp_dir: str | os.PathLike | None = None) -> ModelFile:
    """The model named by `uri` (None: the built-in one; a local path; or s3://bucket/key), open and checked.

    An S3 model comes from `cache` when it holds the digest (re-verified), else from S3 into the cache; without a
    cache it is downloaded into an unnamed temporary file in `temp_dir` (default $TMPDIR) that disappears once
    closed. `s3` is a boto3 S3 client (default: the standard one, only built when S3 is used). Raises ModelError
    (one line), ModelDigestMismatch when the bytes are not the pinned ones.
    """
    if not is_s3_uri(uri):
        return open_local(uri, sha256)
    sha256 = _pinned(sha256)
    try:
        check_source(uri, sha256)
    except ValueError as exc:
        raise ModelError(str(exc)) from None
    assert uri is not None and sha256 is not None
    if s3 is None:
        from worker import s3io

        s3 = s3io.s3_client()
    if cache is not None:
        return cache.fetch(uri, sha256, s3)
    t0 = time.monotonic()
    f = tempfile.TemporaryFile(dir=temp_dir)  # noqa: SIM115 - returned open; deleted when closed
    try:
        actual, n = _stream(s3, uri, f)
        if actual != sha256:
            raise _mismatch(uri, sha256, actual, "the object")
    except BaseException:
        f.close()
        raise
    f.seek(0)
    seconds = time.monotonic() - t0
    log.info(event("model.fetched", uri=uri, sha256=sha256, origin="s3", bytes=n, seconds=seconds, cache=None))
    return ModelFile(uri, f, sha256, "s3", seconds, n)


@dataclass(frozen=True)
class ModelCache:
    """A node-local folder of model files named by their SHA-256 (`sha256-<hex>`), shared by the node's pods."""

    directory: Path
    """The folder (flag --model-cache, env MODEL_CACHE_DIR); created when missing. Put it on the node's NVMe or a
    hostPath, never on a network file system (the locks are fcntl locks)."""
    max_bytes: int = DEFAULT_CACHE_MAX_BYTES
    """Most bytes the cached models may take (env MODEL_CACHE_MAX_BYTES, default 20 GiB: DEFAULT_CACHE_MAX_BYTES);
    when a model is added, the least recently used others are deleted until it fits (a model larger than this is
    still kept while it is in use)."""

    def entry(self, sha256: str) -> Path:
        """Where the model with this digest lives in the cache."""
        return self.directory / f"sha256-{sha256}"

    @contextlib.contextmanager
    def _lock(self, name: str, wait: bool = True) -> Iterator[bool]:
        """Hold the cache's lock `name` (an fcntl lock on locks/<name>.lock, released when the process dies); with
        `wait` False, yield False at once when another process holds it. Lock files are never deleted: deleting one
        while another process waits on it would let two processes hold "the" lock."""
        locks = self.directory / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a link another pod planted there must not make this process create or lock another file.
        fd = os.open(locks / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "r+b") as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def _open_hit(self, uri: str, sha256: str, locked: bool = False) -> ModelFile | None:
        """The cached file, open and re-hashed, or None (absent, or not what its name says: then it is deleted;
        `locked`: the caller holds the digest's lock)."""
        t0 = time.monotonic()
        path = self.entry(sha256)
        try:
            # Not a link, not a FIFO (whose open would block): only a regular file another pod left is even read.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError:  # ELOOP: a symbolic link
            with contextlib.suppress(OSError):
                self._discard(path, sha256, "a symbolic link", os.lstat(path).st_ino, locked)
            return None
        f = os.fdopen(fd, "rb")
        st = os.fstat(fd)
        actual = _digest(f) if stat.S_ISREG(st.st_mode) else "not a regular file"
        if actual == sha256:
            with contextlib.suppress(OSError):
                os.utime(path)  # the mtime is the LRU clock: this model was just used
            return ModelFile(uri, f, sha256, "cache", time.monotonic() - t0, st.st_size)
        f.close()
        self._discard(path, sha256, actual, st.st_ino, locked)
        return None

    def _discard(self, path: Path, sha256: str, actual: str, inode: int, locked: bool) -> None:
        """Delete an entry that is not what its name says (still the same file: `inode`), under its digest's lock."""
        log.warning(event("model.cache_corrupt", path=str(path), expected=sha256, actual=actual,
                          detail="deleted; fetching the model again"))
        with contextlib.ExitStack() as stack:
            if not locked:
                stack.enter_context(self._lock(f"sha256-{sha256}"))
            with contextlib.suppress(OSError):
                if os.lstat(path).st_ino == inode:  # not a good file renamed into place meanwhile
                    path.unlink()

    def fetch(self, uri: str, sha256: str, s3: Any) -> ModelFile:
        """The model `sha256` from this cache (re-verified), else downloaded from `uri` into it; see fetch_model."""
        t0 = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        hit = self._open_hit(uri, sha256)
        if hit is None:
            with self._lock(f"sha256-{sha256}"):  # one download per digest per node; the others wait, then hit
                hit = self._open_hit(uri, sha256, locked=True)
                if hit is None:
                    return self._download(uri, sha256, s3, t0)
        log.info(event("model.fetched", uri=uri, sha256=sha256, origin="cache", bytes=hit.size_bytes,
                       seconds=hit.fetch_s, cache=str(self.directory)))
        return hit

    def _download(self, uri: str, sha256: str, s3: Any, t0: float) -> ModelFile:
        """Stream `uri` to a temporary file beside the entry, hashing it; rename it into place only if it has the
        digest (the caller holds the digest's lock)."""
        fd, tmp = tempfile.mkstemp(prefix=f"sha256-{sha256}.", suffix=".partial", dir=self.directory)
        f = os.fdopen(fd, "w+b")
        try:
            actual, n = _stream(s3, uri, f, before_write=lambda size: self.evict(keep=sha256, room=size))
            if actual != sha256:
                raise _mismatch(uri, sha256, actual, "the object")
            os.fsync(f.fileno())
            os.chmod(tmp, 0o444)
            os.replace(tmp, self.entry(sha256))
        except BaseException:
            f.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        f.seek(0)
        seconds = time.monotonic() - t0
        log.info(event("model.fetched", uri=uri, sha256=sha256, origin="s3", bytes=n, seconds=seconds,
                       cache=str(self.directory)))
        return ModelFile(uri, f, sha256, "s3", seconds, n)

    def evict(self, keep: str | None = None, room: int = 0) -> list[str]:
        """Delete the least recently used models (never `keep`, never one another process is fetching) until the
        cache holds at most max_bytes - `room`; also partial downloads nobody is writing. Returns the deleted
        digests. Skipped when another process is cleaning at the same moment."""
        removed: list[str] = []
        with self._lock("evict", wait=False) as mine:
            if not mine:
                return removed
            entries: list[tuple[float, int, str, Path]] = []
            for p in self.directory.iterdir():
                partial, whole = _PARTIAL.fullmatch(p.name), _ENTRY.fullmatch(p.name)
                with contextlib.suppress(OSError):
                    if partial and partial.group(1) != keep:
                        with self._lock(f"sha256-{partial.group(1)}", wait=False) as idle:
                            if idle:  # its writer died: a partial file of a download nobody is doing
                                p.unlink()
                    elif whole:
                        st = p.stat()
                        entries.append((st.st_mtime, st.st_size, whole.group(1), p))
            total = sum(size for _, size, _, _ in entries)
            for _, size, digest, p in sorted(entries):
                if total + room <= self.max_bytes:
                    break
                if digest == keep:
                    continue
                with contextlib.suppress(OSError), self._lock(f"sha256-{digest}", wait=False) as idle:
                    if idle:
                        p.unlink()
                        total -= size
                        removed.append(digest)
                        log.info(event("model.cache_evicted", sha256=digest, bytes=size, cache=str(self.directory)))
        return removed

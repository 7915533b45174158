"""The model store: digests, local files, S3 through the node cache (a real moto_server), and `infer --model s3://`."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import boto3
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/worker: counting_proxy

from counting_proxy import CountingProxy  # noqa: E402
from moto_server import aws_env  # noqa: E402

from worker.models import model_store  # noqa: E402
from worker.models.errors import ModelError  # noqa: E402
from worker.models.model_store import (  # noqa: E402
    BUILTIN_WEIGHTS,
    ModelCache,
    ModelDigestMismatch,
    check_sha256,
    check_source,
    fetch_model,
    open_local,
)

ROOT = Path(__file__).resolve().parents[3]
BUCKET, KEY = "lab-models", "seg/tinyseg-v2.pt2"
URI = f"s3://{BUCKET}/{KEY}"
BUILTIN_SHA256 = hashlib.sha256(BUILTIN_WEIGHTS.read_bytes()).hexdigest()
WRONG = "0123456789abcdef" * 4


# --- digests, sizes, sources: one-line refusals ---------------------------------------------------------------------

def test_a_digest_is_64_hex_digits_in_either_case():
    assert check_sha256(BUILTIN_SHA256.upper()) == BUILTIN_SHA256
    assert check_sha256(None) is None and check_sha256("") is None


@pytest.mark.parametrize("value", ["abc", "g" * 64, BUILTIN_SHA256[:63], "sha256:" + BUILTIN_SHA256, 12])
def test_a_malformed_digest_is_one_line_naming_the_flag_and_the_value(value):
    with pytest.raises(ValueError) as info:
        check_sha256(value)
    assert str(info.value) == (f"--model-sha256={value!r}: must be 64 hexadecimal digits, the model file's SHA-256 "
                               "(as `sha256sum FILE` prints it)")


@pytest.mark.parametrize("raw,expected", [("21474836480", 20 * 2**30), ("20GiB", 20 * 2**30), ("20Gi", 20 * 2**30),
                                          ("500MB", 500 * 10**6), ("1_000", 1000),
                                          ("2e10", 2 * 10**10)])  # read as SLIDE_MAX_*_BYTES are
def test_cache_sizes_take_units(raw, expected):
    assert model_store.parse_size("MODEL_CACHE_MAX_BYTES", raw) == expected


@pytest.mark.parametrize("raw", ["lots", "0", "-5GiB", "1.5"])
def test_a_bad_cache_size_is_one_line_naming_the_variable(raw):
    with pytest.raises(ValueError, match=rf"^MODEL_CACHE_MAX_BYTES={raw!r}: must be a whole number of bytes >= 1"):
        model_store.cache_max_bytes({"MODEL_CACHE_MAX_BYTES": raw})
    assert model_store.cache_max_bytes({}) == model_store.DEFAULT_CACHE_MAX_BYTES == 20 * 2**30


def test_the_model_comes_from_the_flag_else_model_uri_else_model_path():
    env = {"MODEL_URI": URI, "MODEL_PATH": URI}
    assert model_store.model_uri("x.pt2", env) == "x.pt2"
    assert model_store.model_uri(None, env) == URI
    assert model_store.model_uri(None, {"MODEL_PATH": "lab.pt2"}) == "lab.pt2"
    assert model_store.model_uri(None, {"MODEL_URI": ""}) is None
    with pytest.raises(ValueError, match=r"^MODEL_URI='s3://.*' and MODEL_PATH='lab.pt2': both set and different"):
        model_store.model_uri(None, {"MODEL_URI": URI, "MODEL_PATH": "lab.pt2"})


@pytest.mark.parametrize("uri,fragment", [
    (URI, "an S3 model needs --model-sha256 (or MODEL_SHA256)"),
    ("s3://lab-models/seg/", "must name one object (s3://bucket/key), not a prefix"),
    ("s3://Bad_Bucket/m.pt2", "bucket name 'Bad_Bucket' is not a valid S3 bucket name"),
])
def test_s3_sources_that_cannot_be_a_model(uri, fragment):
    with pytest.raises(ValueError) as info:
        check_source(uri, None)
    assert str(info.value).startswith(f"--model={uri!r}: {fragment}") and "\n" not in str(info.value)
    check_source("local/lab.pt2", None)  # a local file needs no digest (it is still recorded)


# --- local files ----------------------------------------------------------------------------------------------------

def test_a_local_model_is_hashed_and_a_pinned_mismatch_names_both_digests():
    with open_local(None) as mf:
        assert (mf.sha256, mf.origin, mf.size_bytes) == (BUILTIN_SHA256, "built-in", BUILTIN_WEIGHTS.stat().st_size)
        assert mf.file.read(2) == b"PK"
    with open_local(str(BUILTIN_WEIGHTS), BUILTIN_SHA256.upper()) as mf:
        assert mf.origin == "local"
    with pytest.raises(ModelDigestMismatch) as info:
        open_local(str(BUILTIN_WEIGHTS), WRONG)
    msg = str(info.value)
    assert isinstance(info.value, ModelError) and "\n" not in msg
    assert msg == (f"{BUILTIN_WEIGHTS}: sha256 mismatch: expected {WRONG} (--model-sha256 / MODEL_SHA256), the file "
                   f"has {BUILTIN_SHA256}; refused before any slide")


def test_a_missing_local_model_is_one_line(tmp_path):
    with pytest.raises(ModelError, match=r"nope.pt2: no such model file$"):
        open_local(tmp_path / "nope.pt2")


# --- the node cache: eviction and stale files (no S3 needed) ------------------------------------------------------

def _entry(cache: ModelCache, digest: str, size: int, mtime: float) -> Path:
    p = cache.entry(digest)
    p.write_bytes(b"x" * size)
    os.utime(p, (mtime, mtime))
    return p


def test_eviction_deletes_least_recently_used_but_never_the_model_in_use_or_one_being_fetched(tmp_path):
    cache = ModelCache(tmp_path, max_bytes=300)
    a, b, c, d = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)
    for i, digest in enumerate((a, b, c, d)):  # a oldest ... d newest, 100 bytes each: 400 > 300
        _entry(cache, digest, 100, 1_000_000 + i)
    with cache._lock(f"sha256-{b}"):  # another process is fetching or verifying b right now
        removed = cache.evict(keep=a)
    assert removed == [c]  # a is in use, b is busy: c is the least recently used that may go, and then it fits
    assert sorted(p.name for p in tmp_path.glob("sha256-*")) == [f"sha256-{x}" for x in (a, b, d)]
    assert cache.evict(keep=d, room=100) == [a]  # room for 100 more bytes: the oldest goes
    assert cache.evict(keep=d, room=250) == [b]  # more than fits: all but the model in use
    assert [p.name for p in tmp_path.glob("sha256-*")] == [f"sha256-{d}"]


def test_eviction_removes_partial_downloads_nobody_is_writing(tmp_path):
    cache = ModelCache(tmp_path, max_bytes=10**9)
    dead = tmp_path / f"sha256-{'e' * 64}.123.partial"
    live = tmp_path / f"sha256-{'f' * 64}.456.partial"
    dead.write_bytes(b"half")
    live.write_bytes(b"half")
    with cache._lock(f"sha256-{'f' * 64}"):
        cache.evict()
    assert not dead.exists() and live.exists()


# --- S3 through the cache, against a real moto_server ---------------------------------------------------------------

@pytest.fixture
def s3_model(aws):
    """The built-in .pt2 as a lab's model in S3; returns a boto3 client that counts its GetObject calls."""
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=BUILTIN_WEIGHTS.read_bytes())
    s3.gets = []
    s3.meta.events.register("before-parameter-build.s3.GetObject", lambda params, **kw: s3.gets.append(params["Key"]))
    return s3


def test_the_cache_downloads_once_then_serves_the_verified_file(s3_model, tmp_path):
    cache = ModelCache(tmp_path / "cache")
    with fetch_model(URI, BUILTIN_SHA256, cache=cache, s3=s3_model) as first:
        assert (first.origin, first.sha256, first.label) == ("s3", BUILTIN_SHA256, URI)
        assert first.file.read() == BUILTIN_WEIGHTS.read_bytes()
    entry = cache.entry(BUILTIN_SHA256)
    assert entry.read_bytes() == BUILTIN_WEIGHTS.read_bytes() and entry.stat().st_mode & 0o777 == 0o444
    assert not list(cache.directory.glob("*.partial"))
    with fetch_model(URI, BUILTIN_SHA256, cache=cache, s3=s3_model) as second:
        assert second.origin == "cache" and second.file.read(2) == b"PK"
    assert s3_model.gets == [KEY]


def test_a_wrong_digest_from_s3_is_refused_and_leaves_nothing_in_the_cache(s3_model, tmp_path):
    cache = ModelCache(tmp_path / "cache")
    with pytest.raises(ModelDigestMismatch) as info:
        fetch_model(URI, WRONG, cache=cache, s3=s3_model)
    assert str(info.value) == (f"{URI}: sha256 mismatch: expected {WRONG} (--model-sha256 / MODEL_SHA256), the "
                               f"object has {BUILTIN_SHA256}; refused before any slide")
    assert [p.name for p in cache.directory.iterdir()] == ["locks"]


def test_a_tampered_cache_entry_is_detected_deleted_and_fetched_again(s3_model, tmp_path, caplog):
    cache = ModelCache(tmp_path / "cache")
    fetch_model(URI, BUILTIN_SHA256, cache=cache, s3=s3_model).close()
    entry = cache.entry(BUILTIN_SHA256)
    entry.chmod(0o644)
    entry.write_bytes(b"PK a poisoned model from another pod")
    with fetch_model(URI, BUILTIN_SHA256, cache=cache, s3=s3_model) as again:
        assert again.origin == "s3" and again.file.read() == BUILTIN_WEIGHTS.read_bytes()
    assert s3_model.gets == [KEY, KEY]
    assert any("model.cache_corrupt" in r.getMessage() for r in caplog.records)
    assert entry.read_bytes() == BUILTIN_WEIGHTS.read_bytes()


def test_a_link_or_a_fifo_planted_in_the_cache_is_removed_not_followed(s3_model, tmp_path):
    cache = ModelCache(tmp_path / "cache")
    cache.directory.mkdir()
    elsewhere = tmp_path / "elsewhere.pt2"
    elsewhere.write_bytes(BUILTIN_WEIGHTS.read_bytes())  # even the right bytes: a link is not followed
    cache.entry(BUILTIN_SHA256).symlink_to(elsewhere)
    with fetch_model(URI, BUILTIN_SHA256, cache=cache, s3=s3_model) as mf:
        assert mf.origin == "s3"
    assert not cache.entry(BUILTIN_SHA256).is_symlink() and elsewhere.is_file()
    cache.entry(BUILTIN_SHA256).unlink()
    os.mkfifo(cache.entry(BUILTIN_SHA256))  # opening a FIFO to read would block until someone writes
    origins = []
    t = threading.Thread(target=lambda: origins.append(fetch_model(URI, BUILTIN_SHA256, cache=cache, s3=s3_model)))
    t.start()
    t.join(timeout=60)
    assert not t.is_alive() and [m.origin for m in origins] == ["s3"]
    origins[0].close()
    assert cache.entry(BUILTIN_SHA256).read_bytes() == BUILTIN_WEIGHTS.read_bytes()
    assert s3_model.gets == [KEY, KEY]


def test_threads_fetching_the_same_model_at_once_download_it_once(s3_model, tmp_path):
    big = os.urandom(24 * 2**20)  # large enough that the fetches overlap
    s3_model.put_object(Bucket=BUCKET, Key="big.bin", Body=big)
    digest = hashlib.sha256(big).hexdigest()
    cache = ModelCache(tmp_path / "cache")
    start, origins = threading.Barrier(4), []

    def fetch() -> None:
        start.wait(timeout=30)
        with fetch_model(f"s3://{BUCKET}/big.bin", digest, cache=cache, s3=s3_model) as mf:
            origins.append((mf.origin, hashlib.file_digest(mf.file, "sha256").hexdigest()))

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(origins) == [("cache", digest)] * 3 + [("s3", digest)]
    assert s3_model.gets == ["big.bin"]


_FETCH_CHILD = """
import sys
from pathlib import Path
from worker.models.model_store import ModelCache, fetch_model
with fetch_model(sys.argv[1], sys.argv[2], cache=ModelCache(Path(sys.argv[3]))) as mf:
    print(mf.origin)
"""


@pytest.mark.slow
def test_two_processes_fetching_the_same_model_at_once_download_it_once(s3_model, tmp_path):
    big = os.urandom(24 * 2**20)
    s3_model.put_object(Bucket=BUCKET, Key="big.bin", Body=big)
    args = [f"s3://{BUCKET}/big.bin", hashlib.sha256(big).hexdigest(), str(tmp_path / "cache")]
    with CountingProxy(os.environ["AWS_ENDPOINT_URL"]) as proxy:
        env = {**os.environ, **aws_env(proxy.url)}
        children = [subprocess.Popen([sys.executable, "-c", _FETCH_CHILD, *args], cwd=ROOT, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
        try:
            outs = [c.communicate(timeout=120) for c in children]
        finally:
            for c in children:
                if c.poll() is None:
                    c.kill()
                    c.wait(timeout=10)
    assert [c.returncode for c in children] == [0, 0], [err for _, err in outs]
    assert sorted(out.strip() for out, _ in outs) == ["cache", "s3"]
    assert proxy.requests == [("GET", f"/{BUCKET}/big.bin")]


def test_without_a_cache_the_download_is_an_unnamed_file_gone_once_closed(s3_model, tmp_path):
    with fetch_model(URI, BUILTIN_SHA256, s3=s3_model, temp_dir=tmp_path) as mf:
        assert mf.origin == "s3" and mf.file.read() == BUILTIN_WEIGHTS.read_bytes()
    assert list(tmp_path.iterdir()) == []


def test_a_missing_s3_object_is_one_line(s3_model, tmp_path):
    with pytest.raises(ModelError) as info:
        fetch_model(f"s3://{BUCKET}/nope.pt2", BUILTIN_SHA256, cache=ModelCache(tmp_path), s3=s3_model)
    assert str(info.value).startswith(f"s3://{BUCKET}/nope.pt2: cannot download the model (NoSuchKey: ")
    assert "\n" not in str(info.value)


# --- `python -m worker infer --model s3://...`: what the child process asks S3 for ------------------------------------

def _infer(slide: Path, out: Path, env: dict, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "worker", "infer", str(slide), "--out", str(out), "--device", "cpu",
                           "--model", URI, *extra], cwd=ROOT, capture_output=True, text=True, timeout=180,
                          env={**os.environ, **env})


@pytest.fixture
def small_slide(tmp_path):
    from worker.devtools.synthetic import write_synthetic_slide

    return write_synthetic_slide(tmp_path / "S-1.ome.tif", width=1024, height=1024, mpp_um=0.5, seed=5)


@pytest.mark.slow
def test_infer_from_s3_twice_the_second_run_asks_s3_for_nothing(s3_model, small_slide, tmp_path):
    cache = tmp_path / "node-cache"
    with CountingProxy(os.environ["AWS_ENDPOINT_URL"]) as proxy:
        env = {**aws_env(proxy.url), "MODEL_CACHE_DIR": str(cache)}
        first = _infer(small_slide, tmp_path / "o1", env, "--model-sha256", BUILTIN_SHA256)
        seen_first = list(proxy.requests)
        second = _infer(small_slide, tmp_path / "o2", env, "--model-sha256", BUILTIN_SHA256)
        seen_second = proxy.requests[len(seen_first):]
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert seen_first == [("GET", f"/{BUCKET}/{KEY}")]  # one GET of the model, nothing else
    assert seen_second == []  # the node cache served it
    for out, origin in (("o1", "s3"), ("o2", "cache")):
        model = json.loads((tmp_path / out / "S-1.json").read_text())["model"]
        assert (model["sha256"], model["from"], model["uri"]) == (BUILTIN_SHA256, origin, URI)
        assert model["fetch_s"] >= 0 and model["name"] == "gpuburst-tinyseg"
    assert "(s3 fetched in " in first.stdout and "(cache fetched in " in second.stdout
    assert cache.joinpath(f"sha256-{BUILTIN_SHA256}").is_file()


@pytest.mark.slow
def test_infer_refuses_a_wrong_digest_in_one_line_naming_the_real_one(s3_model, small_slide, tmp_path):
    r = _infer(small_slide, tmp_path / "o", {"MODEL_SHA256": WRONG, "MODEL_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        f"python -m worker infer: error: {URI}: sha256 mismatch: expected {WRONG} (--model-sha256 / MODEL_SHA256), "
        f"the object has {BUILTIN_SHA256}; refused before any slide"]
    assert not (tmp_path / "o").exists()  # nothing was processed or written


def test_infer_refuses_a_malformed_digest_or_an_unpinned_s3_model_with_exit_2(small_slide, tmp_path, capsys):
    from worker import commands

    argv = ["infer", str(small_slide), "--out", str(tmp_path / "o"), "--model", URI]
    assert commands.main([*argv, "--model-sha256", "abc"]) == commands.EXIT_USAGE
    assert capsys.readouterr().err == ("python -m worker infer: error: --model-sha256='abc': must be 64 hexadecimal "
                                       "digits, the model file's SHA-256 (as `sha256sum FILE` prints it)\n")
    assert commands.main(argv) == commands.EXIT_USAGE
    assert capsys.readouterr().err.startswith(f"python -m worker infer: error: --model={URI!r}: an S3 model needs "
                                              "--model-sha256")
    assert not (tmp_path / "o").exists()

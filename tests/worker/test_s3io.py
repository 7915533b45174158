"""S3 helpers against a real moto_server: listing and downloading a multi-file slide prefix, and its identity digest."""
from __future__ import annotations

import sys
from pathlib import Path, PurePosixPath

import pytest
from botocore.exceptions import ClientError

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sqs_helpers import SLIDES, clients, make_buckets  # noqa: E402

from worker import s3io  # noqa: E402
from worker.messages import S3Uri  # noqa: E402

PREFIX = S3Uri(SLIDES, "in/case-7/")

# An MRXS-shaped slide: the index file, its data folder, plus a folder marker the console would create.
FILES = {
    "S1.mrxs": b"[GENERAL]\nindex",
    "S1/Index.dat": b"index data",
    "S1/Slidedat.ini": b"[GENERAL]\nSLIDE_VERSION=01.02",
    "S1/Data0000.dat": b"\xff\xd8 jpeg tiles 0",
    "S1/Data0001.dat": b"\xff\xd8 jpeg tiles 1!",
}


@pytest.fixture
def s3(aws):
    s3, _ = clients()
    make_buckets(s3)
    for rel, data in FILES.items():
        s3.put_object(Bucket=SLIDES, Key=PREFIX.key + rel, Body=data)
    for marker in ("in/case-7/", "in/case-7/S1/", "in/case-7/empty-folder/"):
        s3.put_object(Bucket=SLIDES, Key=marker, Body=b"")
    # Neighbours that share a string prefix but are not under the slide's prefix.
    s3.put_object(Bucket=SLIDES, Key="in/case-70/other.dat", Body=b"not this slide")
    s3.put_object(Bucket=SLIDES, Key="in/case-7.svs", Body=b"not this slide either")
    return s3


def test_list_prefix_skips_markers_follows_pages_and_sorts(s3):
    listing = s3io.list_prefix(s3, PREFIX, page_size=2)  # 8 keys in pages of 2: every page must be followed
    assert [o.relative for o in listing.objects] == sorted(FILES)
    assert [o.key for o in listing.objects] == [PREFIX.key + k for k in sorted(FILES)]
    for o in listing.objects:
        head = s3.head_object(Bucket=SLIDES, Key=o.key)
        assert (o.etag, o.size_bytes) == (head["ETag"], head["ContentLength"])
    assert listing.size_bytes == sum(len(b) for b in FILES.values())
    ident = listing.identity()
    assert ident == {"etag": listing.digest, "objects": 5, "size_bytes": listing.size_bytes}
    assert ident["etag"].startswith("manifest-sha256:") and len(ident["etag"]) == len("manifest-sha256:") + 64


def test_download_prefix_recreates_the_tree(s3, tmp_path):
    listing = s3io.list_prefix(s3, PREFIX)
    dest = tmp_path / "case-7"
    seen: list[tuple[int, int]] = []
    n = s3io.download_prefix(s3, listing, dest, workers=3, progress=lambda done, total: seen.append((done, total)))
    assert n == listing.size_bytes
    got = {f.relative_to(dest).as_posix(): f.read_bytes() for f in dest.rglob("*") if f.is_file()}
    assert got == FILES
    assert not (dest / "empty-folder").exists()  # markers make no folders
    assert seen == [(i, 5) for i in range(1, 6)]


def test_digest_is_stable_across_listings_and_changes_with_an_etag(s3):
    a = s3io.list_prefix(s3, PREFIX)
    b = s3io.list_prefix(s3, PREFIX, page_size=1)
    assert a.digest == b.digest
    # Order-independent by construction, and every field counts.
    rows = [(o.relative, o.etag, o.size_bytes) for o in a.objects]
    assert s3io.manifest_digest(reversed(rows)) == a.digest
    assert s3io.manifest_digest(rows[:-1]) != a.digest
    renamed = [("x" + rows[0][0], *rows[0][1:]), *rows[1:]]
    assert s3io.manifest_digest(renamed) != a.digest
    resized = [(rows[0][0], rows[0][1], rows[0][2] + 1), *rows[1:]]
    assert s3io.manifest_digest(resized) != a.digest
    # Same size, new content: only the ETag differs.
    s3.put_object(Bucket=SLIDES, Key=PREFIX.key + "S1/Data0000.dat", Body=b"\xff\xd8 jpeg tiles 9")
    c = s3io.list_prefix(s3, PREFIX)
    assert c.size_bytes == a.size_bytes and c.digest != a.digest


def test_an_object_rewritten_after_listing_fails_the_download_as_changed(s3, tmp_path):
    listing = s3io.list_prefix(s3, PREFIX)
    s3.put_object(Bucket=SLIDES, Key=PREFIX.key + "S1/Index.dat", Body=b"rescanned index")
    with pytest.raises(s3io.PrefixChanged, match=r"S1/Index\.dat changed during the download \(ETag no longer"):
        s3io.download_prefix(s3, listing, tmp_path / "d")


def test_an_object_deleted_after_listing_fails_the_download_as_changed(s3, tmp_path):
    listing = s3io.list_prefix(s3, PREFIX)
    s3.delete_object(Bucket=SLIDES, Key=PREFIX.key + "S1.mrxs")
    with pytest.raises(s3io.PrefixChanged, match=r"S1\.mrxs was deleted during the download"):
        s3io.download_prefix(s3, listing, tmp_path / "d")


def test_a_progress_callback_that_raises_stops_the_download(s3, tmp_path):
    listing = s3io.list_prefix(s3, PREFIX)

    def cancel(done, total):
        raise KeyboardInterrupt("stop")

    with pytest.raises(KeyboardInterrupt):
        s3io.download_prefix(s3, listing, tmp_path / "d", workers=1, progress=cancel)
    assert len([f for f in (tmp_path / "d").rglob("*") if f.is_file()]) < 5


def test_an_empty_prefix_is_refused_in_one_line(s3):
    for prefix in (S3Uri(SLIDES, "in/case-7/empty-folder/"), S3Uri(SLIDES, "nothing/here/")):
        with pytest.raises(s3io.PrefixError) as info:
            s3io.list_prefix(s3, prefix)
        assert str(info.value).startswith(f"no objects under {prefix} ")
        assert "\n" not in str(info.value)


def test_a_missing_bucket_is_not_found(aws):
    s3, _ = clients()
    with pytest.raises(ClientError) as info:
        s3io.list_prefix(s3, S3Uri("no-such-bucket", "in/x/"))
    assert s3io.is_not_found(info.value)


def test_object_and_size_limits(s3):
    with pytest.raises(s3io.PrefixError, match=r"^s3://slides-in/in/case-7/ holds more than 4 objects "
                                                r"\(limit: 4 per slide\); is it one slide\?$"):
        s3io.list_prefix(s3, PREFIX, max_objects=4, page_size=2)
    assert len(s3io.list_prefix(s3, PREFIX, max_objects=5).objects) == 5
    total = sum(len(b) for b in FILES.values())
    limit = total - 1
    with pytest.raises(s3io.PrefixError, match=rf"holds more than {limit} bytes \(limit: {limit} bytes per slide\)$"):
        s3io.list_prefix(s3, PREFIX, max_total_bytes=total - 1)
    assert s3io.list_prefix(s3, PREFIX, max_total_bytes=total).size_bytes == total


@pytest.mark.parametrize("evil,fragment", [
    ("in/case-7/../../etc/passwd", "would escape the download folder (a '..' segment)"),
    ("in/case-7/S1/../../x", "would escape the download folder"),
    ("in/case-7//etc/cron.d/x", "would be an absolute path"),
    ("in/case-7/S1/./Index.dat", "'.' or empty path segment"),
    ("in/case-7/S1//Index.dat", "'.' or empty path segment"),
    ("in/case-7/" + "n" * 300, "over 255 bytes"),
])
def test_a_key_that_would_leave_the_folder_refuses_the_whole_prefix(s3, tmp_path, evil, fragment):
    s3.put_object(Bucket=SLIDES, Key=evil, Body=b"gotcha")
    with pytest.raises(s3io.PrefixError) as info:
        s3io.list_prefix(s3, PREFIX)
    text = str(info.value)
    assert text.startswith(f"key={evil!r} under {PREFIX}: ") and fragment in text and "\n" not in text


def test_a_key_that_is_both_a_file_and_a_folder_is_refused(s3):
    s3.put_object(Bucket=SLIDES, Key="in/case-7/S1/Index.dat/inner", Body=b"x")
    with pytest.raises(s3io.PrefixError, match=r"key='in/case-7/S1/Index.dat' under .*is both an object and the "
                                                r"folder of 'in/case-7/S1/Index.dat/inner'"):
        s3io.list_prefix(s3, PREFIX)


def test_download_never_writes_through_a_symlink_out_of_the_folder(s3, tmp_path):
    listing = s3io.list_prefix(s3, PREFIX)
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / "S1").symlink_to(outside, target_is_directory=True)
    with pytest.raises(s3io.PrefixError, match=r"would be written outside"):
        s3io.download_prefix(s3, listing, dest)
    assert list(outside.iterdir()) == []


def test_safe_relative_path_accepts_ordinary_nested_names():
    p = s3io.safe_relative_path("S1/Data 0001.dat", key="k", prefix=PREFIX)
    assert p == PurePosixPath("S1", "Data 0001.dat")
    with pytest.raises(s3io.PrefixError):
        s3io.safe_relative_path("..", key="k", prefix=PREFIX)


def test_list_prefix_needs_a_prefix(aws):
    s3, _ = clients()
    with pytest.raises(s3io.PrefixError, match=r"^prefix='s3://slides-in/x.svs': must be a key prefix"):
        s3io.list_prefix(s3, S3Uri(SLIDES, "x.svs"))

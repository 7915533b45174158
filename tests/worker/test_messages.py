"""The message contract: every rule accepts good bodies and rejects bad ones with one line naming field and value."""
from __future__ import annotations

import json

import pytest

from worker.messages import (
    MULTI_FILE_SUFFIXES,
    OBJECT_SUFFIXES,
    SLIDE_SUFFIXES,
    ContractError,
    default_slide_id,
    make_body,
    parse_message,
    parse_s3_uri,
)

GOOD = {"slide": "s3://slides-in/study1/S-001.ome.tif", "output": "s3://results-out/run1/"}


def body(**changes):
    d = dict(GOOD)
    for k, v in changes.items():
        if v is ...:
            d.pop(k, None)
        else:
            d[k] = v
    return json.dumps(d)


def test_minimal_body_defaults_slide_id_to_the_stem():
    m = parse_message(body())
    assert (m.slide.bucket, m.slide.key) == ("slides-in", "study1/S-001.ome.tif")
    assert m.slide_id == "S-001"
    assert m.study is None and m.sequence is None
    assert str(m.summary_uri) == "s3://results-out/run1/S-001.json"
    assert str(m.output_uri(".overlay.ome.tif")) == "s3://results-out/run1/S-001.overlay.ome.tif"
    assert str(m.output_uri(".preview.png")) == "s3://results-out/run1/S-001.preview.png"


def test_full_body():
    m = parse_message(body(slide_id="case_7.a", study="STUDY-42", sequence=3, output="s3://results-out/"))
    assert (m.slide_id, m.study, m.sequence) == ("case_7.a", "STUDY-42", 3)
    assert str(m.summary_uri) == "s3://results-out/case_7.a.json"
    assert parse_message(json.dumps(m.to_dict())) == m


def test_bytes_body_and_nulls_for_optional_fields():
    m = parse_message(body(study=None, sequence=None, slide_id=None).encode())
    assert m.slide_id == "S-001" and m.study is None


@pytest.mark.parametrize("key,stem", [
    ("a/b/S1.ome.tif", "S1"), ("S1.OME.TIFF", "S1"), ("x/S1.tiff", "S1"), ("S1.tif", "S1"), ("S1.svs", "S1"),
    ("S1.v2.tif", "S1.v2"),
    ("x/S1.ndpi", "S1"), ("S1.SCN", "S1"), ("S1.bif", "S1"), ("S1.dcm", "S1"),
    ("S1.mrxs", "S1"), ("S1.vms", "S1"),                      # local index files (`infer` on a local slide)
    ("in/case-7/", "case-7"), ("in/S1.mrxs/", "S1"), ("case-7", "case-7"),  # prefixes and local folder names
    ("notes.txt", "notes.txt"), (".svs", ".svs"),
])
def test_default_slide_id(key, stem):
    assert default_slide_id(key) == stem


@pytest.mark.parametrize("raw,field,fragment", [
    ("{not json", "body", "is not JSON"),
    ("", "body", "is not JSON"),
    ("[1, 2]", "body", "must be a JSON object"),
    (b"\xff\xfe", "body", "is not UTF-8"),
    (body(slide=...), "slide", "is required"),
    (body(output=...), "output", "is required"),
    (body(slide=7), "slide", "must be a string"),
    (body(slide="https://x/y.tif"), "slide", "must start with s3://"),
    (body(slide="s3://Bad_Bucket/y.tif"), "slide", "not a valid S3 bucket name"),
    (body(slide="s3://bucket-ok"), "slide", "with a '/' after the bucket"),
    (body(slide="s3://bucket-ok/"), "slide", "not a bucket"),
    (body(slide="s3://bucket-ok/notes.txt"), "slide", "ending in .svs, .tif, .tiff, .ome.tif, .ome.tiff, .ndpi, .scn, "
                                                      ".bif, .dcm, or a prefix ending in '/'"),
    (body(slide="s3://bucket-ok/in/S1.mrxs"), "slide", "send the prefix that holds it and its data files instead, "
                                                       "e.g. s3://bucket-ok/in/"),
    (body(slide="s3://bucket-ok/a/b/S1.VMS"), "slide", "multi-file slide (.mrxs/.vms): send the prefix that holds "
                                                       "it and its data files instead, e.g. s3://bucket-ok/a/b/"),
    (body(slide="s3://bucket-ok/S1.mrxs"), "slide", "under a prefix of their own and send that prefix"),
    (body(slide="s3://bucket-ok/a//case-7/"), "slide", "empty path segment"),
    (body(slide="s3://bucket-ok//"), "slide", "empty path segment"),
    (body(slide="s3://bucket-ok/in/../"), "slide", "'..' path segment"),
    (body(slide="s3://bucket-ok/./"), "slide", "'..' path segment"),
    (body(slide="s3://bucket-ok/in/a b/"), "slide", "its last segment 'a b' is not a usable slide_id; give slide_id"),
    (body(output="s3://results-out/run1"), "output", "must be a prefix ending in '/'"),
    (body(output="s3://results-out/a//b/"), "output", "empty path segment"),
    (body(slide_id="a/b"), "slide_id", "letters, digits"),
    (body(slide_id=".hidden"), "slide_id", "letters, digits"),
    (body(slide_id=""), "slide_id", "letters, digits"),
    (body(slide_id=5), "slide_id", "must be a string"),
    (body(study="has space"), "study", "printable ASCII"),
    (body(study="x" * 129), "study", "printable ASCII"),
    (body(sequence="3"), "sequence", "must be an integer"),
    (body(sequence=1.0), "sequence", "must be an integer"),
    (body(sequence=True), "sequence", "must be an integer"),
    (body(sequence=-1), "sequence", "between 0"),
    (body(slides="s3://x/y.tif"), "slides", "not a field of the contract"),
    (body(slide="s3://bucket-ok/a b#c.tif"), "slide", "give slide_id explicitly"),
])
def test_each_rule_rejects_with_one_line_naming_field_and_value(raw, field, fragment):
    with pytest.raises(ContractError) as info:
        parse_message(raw)
    err = info.value
    text = str(err)
    assert err.field == field
    assert text.startswith(f"{field}=")
    assert fragment in text
    assert "\n" not in text and len(text) < 300


def test_error_shows_the_offending_value():
    with pytest.raises(ContractError, match=r'^sequence=-1: '):
        parse_message(body(sequence=-1))
    with pytest.raises(ContractError, match=r'^output="s3://results-out/run1": '):
        parse_message(body(output="s3://results-out/run1"))


def test_long_values_are_shortened():
    with pytest.raises(ContractError) as info:
        parse_message("x" * 5000)
    assert len(str(info.value)) < 300


def test_explicit_slide_id_rescues_an_awkward_file_name():
    assert parse_message(body(slide="s3://bucket-ok/a b#c.tif", slide_id="abc")).slide_id == "abc"


def test_make_body_validates():
    b = make_body("s3://slides-in/x.tif", "s3://results-out/", study="s", sequence=0)
    assert json.loads(b)["study"] == "s"
    with pytest.raises(ContractError):
        make_body("s3://slides-in/x.tif", "s3://results-out")


def test_parse_s3_uri_bucket_root():
    u = parse_s3_uri("s3://results-out/")
    assert (u.bucket, u.key, str(u)) == ("results-out", "", "s3://results-out/")


@pytest.mark.parametrize("key", ["S1.svs", "S1.tif", "S1.tiff", "S1.ome.tif", "S1.ome.tiff", "S1.ndpi", "S1.scn",
                                 "S1.bif", "S1.dcm", "S1.NDPI", "x/S1.Dcm"])
def test_every_single_object_suffix_is_accepted_as_an_object(key):
    m = parse_message(body(slide=f"s3://bucket-ok/{key}"))
    assert m.slide_id == "S1" and not m.is_prefix and m.slide.key == key


def test_a_prefix_names_a_multi_file_slide_and_defaults_slide_id_to_its_last_segment():
    m = parse_message(body(slide="s3://bucket-ok/in/case-7/"))
    assert m.is_prefix and (m.slide.bucket, m.slide.key, m.slide.name) == ("bucket-ok", "in/case-7/", "case-7")
    assert m.slide_id == "case-7"
    assert str(m.summary_uri) == "s3://results-out/run1/case-7.json"
    assert m.to_dict()["slide"] == "s3://bucket-ok/in/case-7/"
    assert parse_message(json.dumps(m.to_dict())) == m
    # A known suffix on the folder name is stripped as for a file; a suffix-less DICOM series needs none.
    assert parse_message(body(slide="s3://bucket-ok/S1.mrxs/")).slide_id == "S1"
    assert parse_message(body(slide="s3://bucket-ok/1.2.840.113619.2/")).slide_id == "1.2.840.113619.2"
    assert not parse_message(body()).is_prefix


def test_explicit_slide_id_rescues_an_awkward_prefix_name():
    m = parse_message(body(slide="s3://bucket-ok/in/a b/", slide_id="ab"))
    assert m.slide_id == "ab" and m.is_prefix


def test_make_body_accepts_a_prefix_and_still_refuses_a_lone_index_object():
    b = make_body("s3://slides-in/study/case-7/", "s3://results-out/")
    assert json.loads(b) == {"slide": "s3://slides-in/study/case-7/", "output": "s3://results-out/"}
    with pytest.raises(ContractError, match=r'^slide="s3://slides-in/study/S1.mrxs": .*send the prefix'):
        make_body("s3://slides-in/study/S1.mrxs", "s3://results-out/")


def test_suffix_tables():
    assert set(SLIDE_SUFFIXES) == set(OBJECT_SUFFIXES) | set(MULTI_FILE_SUFFIXES)
    assert [len(x) for x in SLIDE_SUFFIXES] == sorted((len(x) for x in SLIDE_SUFFIXES), reverse=True)
    assert not set(OBJECT_SUFFIXES) & set(MULTI_FILE_SUFFIXES)

"""The message contract: every rule accepts good bodies and rejects bad ones with one line naming field and value."""
from __future__ import annotations

import json

import pytest

from worker.messages import ContractError, default_slide_id, make_body, parse_message, parse_s3_uri

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
    (body(slide="s3://bucket-ok/folder/"), "slide", "must name an object"),
    (body(slide="s3://bucket-ok/notes.txt"), "slide", "TIFF-family"),
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

"""The empty-selector-term rule config, the pack and verify share (spec/selector_terms.py)."""
from __future__ import annotations

import pytest

from components.spec.selector_terms import empty_fields, empty_selector_terms, find_empty_terms, show_term


@pytest.mark.parametrize("term,empty", [
    ({"tags": {}}, ["tags"]),
    ({"name": "", "owner": "amazon"}, ["name"]),
    ({"ssmParameter": "  "}, ["ssmParameter"]),
    ({"tags": {}, "name": ""}, ["tags", "name"]),
    ({"tags": {"karpenter.sh/discovery": "dev"}}, []),
    ({"name": "*", "owner": "amazon"}, []),
    ({"id": "subnet-0123"}, []),
    ({"alias": "al2023@latest"}, []),
    ("not-a-term", []),
])
def test_empty_fields(term, empty):
    assert empty_fields(term) == empty


def test_each_empty_term_is_named_by_path_and_as_written():
    spec = {"subnetSelectorTerms": [{"tags": {"a": "b"}}, {"tags": {}}],
            "amiSelectorTerms": [{"name": "", "owner": "amazon"}]}
    assert [p for p, _, _ in find_empty_terms(spec)] == ["spec.amiSelectorTerms[0]", "spec.subnetSelectorTerms[1]"]
    lines = empty_selector_terms(spec)
    assert lines[0].startswith('spec.amiSelectorTerms[0] = {name: "", owner: amazon}: an empty name; Karpenter')
    assert lines[1].startswith("spec.subnetSelectorTerms[1] = {tags: {}}: an empty tags map; Karpenter 1.14.4")
    assert all("\n" not in line and "NotReady" in line and "drift" in line for line in lines)


def test_nothing_to_say_of_good_or_unreadable_specs():
    assert empty_selector_terms({"subnetSelectorTerms": [{"tags": {"a": "b"}}]}) == []
    assert empty_selector_terms(None) == [] and empty_selector_terms({"subnetSelectorTerms": "x"}) == []
    assert show_term({"tags": {"k": "v"}, "owner": "self"}) == "{tags: {k: v}, owner: self}"

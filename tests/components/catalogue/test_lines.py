"""The release lines the catalogue knows (catalogue/lines.py): each line's support window, the newer patches of the
pins with what they change, and the one-line note the synth, the pack and `verify` print."""
from __future__ import annotations

from datetime import date

import pytest

from components import catalogue as c


def test_every_line_is_ordered_sourced_and_holds_its_own_patches():
    for line in c.RELEASE_LINES:
        versions = [c.parse_version(p.version) for p in line.patches]
        assert versions == sorted(versions) and len(set(versions)) == len(versions), line.line
        assert all(c.minor(p.version) == c.minor(line.line) for p in line.patches), line.line
        assert all(p.source for p in line.patches) and line.support, line.line
        assert all(p.released is None or date.fromisoformat(p.released) for p in line.patches)


def test_the_pins_are_in_known_lines():
    assert c.release_line("karpenter", c.KARPENTER_VERSION).line == "1.14"
    assert c.release_line("karpenter-crd", c.KARPENTER_VERSION).line == "1.14"
    assert c.release_line("keda", c.KEDA_VERSION).line == "2.20"


def test_the_pinned_karpenter_is_behind_1_14_4_of_its_lts_line():
    assert [p.version for p in c.newer_patches("karpenter", "1.14.1")] == ["1.14.2", "1.14.3", "1.14.4"]
    assert [p.version for p in c.newer_patches("karpenter", "1.14.3")] == ["1.14.4"]
    assert c.newer_patches("karpenter", "1.14.4") == []
    assert c.newest_patch("karpenter", "1.14.1").version == "1.14.4"
    line = c.release_line("karpenter", "1.14.1")
    assert line.lts is True and line.supported_until == (2027, 7)
    (spot,) = [p for p in c.newer_patches("karpenter", "1.14.1") if p.version == "1.14.3"]
    assert any("SpotMaxPriceTooLow" in ch for ch in spot.changes)


def test_1_14_4_carries_the_empty_selector_action_required():
    patch = c.newest_patch("karpenter", "1.14.1")
    assert patch.action_required == c.KARPENTER_EMPTY_SELECTOR_TERMS
    for words in ("empty tags map, name or ssmParameter", "NotReady", "drift"):
        assert words in patch.action_required
    assert "1.14.4" in c.EMPTY_SELECTOR_TERMS_IGNORED_SINCE


def test_nothing_is_invented_for_what_no_source_gives():
    assert c.newest_patch("karpenter", "1.14.1").released is None  # the release page shows no day
    (first,) = [p for p in c.release_line("keda", "2.21.0").patches if p.version == "2.21.0"]
    assert first.changes == () and "unknown" in first.source
    assert all(line.supported_until is None for line in c.RELEASE_LINES if line.chart == "keda")


@pytest.mark.parametrize("on,expected", [
    (date(2026, 12, 1), "the karpenter 1.14 LTS line is supported until Jul 2027"),
    (date(2027, 7, 31), "the karpenter 1.14 LTS line is supported until Jul 2027"),
    (date(2027, 8, 1), "the karpenter 1.14 LTS line left support after Jul 2027"),
])
def test_line_support_by_day(on, expected):
    assert c.line_support("karpenter", "1.14.1", on) == expected


def test_a_regular_line_is_superseded_by_a_newer_one_and_keda_has_no_window():
    assert "regular release, supported only until the next minor" in c.line_support("karpenter", "1.15.3")
    assert "no support window" in c.line_support("keda", "2.20.2")
    assert "not in the catalogue's release lines" in c.line_support("karpenter", "1.12.0")


def test_the_upgrade_note_names_the_newest_patch_and_what_it_requires():
    note = c.upgrade_note("karpenter", "1.14.1", date(2026, 12, 1))
    assert note.startswith("karpenter 1.14.1: the karpenter 1.14 LTS line is supported until Jul 2027; behind 1.14.4")
    assert "1.14.3: classify SpotMaxPriceTooLow" in note and "1.14.4: skip EC2NodeClass" in note
    assert "ACTION REQUIRED: Karpenter ignores EC2NodeClass selector terms" in note and "\n" not in note
    assert "newer line" not in note  # a supported LTS line is not told to leave it
    assert c.upgrade_note("karpenter", "1.14.4", date(2026, 12, 1)) is None
    assert "newer line 1.15 (regular, newest 1.15.3)" in c.upgrade_note("karpenter", "1.14.4", date(2027, 8, 1))


def test_keda_is_told_of_its_newer_line():
    note = c.upgrade_note("keda", "2.20.2")
    assert "newer line 2.21 (no LTS scheme, newest 2.21.1)" in note and "behind" not in note
    assert c.upgrade_note("keda", "2.21.1") is None
    assert [p.version for p in c.newer_patches("keda", "2.21.0")] == ["2.21.1"]


def test_unknown_versions_and_charts_say_nothing_newer():
    assert c.newer_patches("karpenter", "latest") == [] and c.newer_patches("nvidia-device-plugin", "0.20.0") == []
    assert c.upgrade_note("karpenter", "1.16.0") is None

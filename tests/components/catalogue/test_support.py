"""The EKS support calendar and rule (catalogue/support.py): dates, prices, the 90-day window, the judging day."""
from datetime import date

import pytest

from components import catalogue


def test_the_pinned_kubernetes_is_in_standard_support_with_more_than_the_warning_window_left_at_release():
    row = catalogue.EKS_SUPPORT[catalogue.KUBERNETES_VERSION]
    assert row.standard_end == date(2027, 3, 27)
    assert catalogue.kubernetes_support_finding(catalogue.KUBERNETES_VERSION, "STANDARD", date(2026, 12, 1)) is None


def test_the_calendar_is_14_plus_12_months_and_covers_the_catalogue_lines():
    for minor_, row in catalogue.EKS_SUPPORT.items():
        assert row.eks_release < row.standard_end < row.extended_end, minor_
        assert (row.extended_end - row.standard_end).days in (365, 366), minor_
        assert 420 <= (row.standard_end - row.eks_release).days <= 430, minor_
        assert row.source
    lo, hi = catalogue.karpenter_kubernetes_range(catalogue.KARPENTER_VERSION)
    for m in range(catalogue.minor(lo)[1], catalogue.minor(hi)[1] + 1):
        assert f"1.{m}" in catalogue.EKS_SUPPORT


def test_1_34_is_told_its_end_of_standard_support_and_the_cost():
    f = catalogue.kubernetes_support_finding("1.34", "STANDARD", date(2026, 11, 15))
    assert f.level == "advisory"
    assert "2026-12-02" in f.message and "in 17 days" in f.message and "$0.60" in f.message
    # Outside the 90-day window: nothing to say.
    assert catalogue.kubernetes_support_finding("1.34", "STANDARD", date(2026, 9, 2)) is None
    assert catalogue.kubernetes_support_finding("1.34", "STANDARD", date(2026, 9, 3)).level == "advisory"


def test_past_standard_support_is_mandatory_unless_extended_and_past_extended_always():
    after = date(2026, 12, 2)
    assert catalogue.kubernetes_support_finding("1.34", "STANDARD", after).level == "mandatory"
    extended = catalogue.kubernetes_support_finding("1.34", "EXTENDED", after)
    assert extended.level == "advisory" and "2027-12-02" in extended.message and "6x" in extended.message
    assert catalogue.kubernetes_support_finding("1.34", "EXTENDED", date(2027, 12, 2)).level == "mandatory"


def test_an_unknown_minor_cannot_be_judged_and_says_so():
    f = catalogue.kubernetes_support_finding("1.40", "STANDARD", date(2026, 12, 1))
    assert f.level == "mandatory" and "not in the catalogue's EKS support calendar" in f.message


def test_today_reads_the_override(monkeypatch):
    monkeypatch.setenv(catalogue.TODAY_ENV, "2027-01-02")
    assert catalogue.today() == date(2027, 1, 2)
    monkeypatch.setenv(catalogue.TODAY_ENV, "next tuesday")
    with pytest.raises(ValueError, match="GPUBURST_TODAY"):
        catalogue.today()


def test_the_pin_is_not_past_its_end_of_standard_support_on_the_real_date():
    from datetime import datetime, timezone

    today = datetime.now(timezone.utc).date()
    finding = catalogue.kubernetes_support_finding(catalogue.KUBERNETES_VERSION, catalogue.DEFAULT_SUPPORT_TYPE, today)
    assert finding is None or finding.level != "mandatory", (
        f"bump catalogue.KUBERNETES_VERSION: on {today} {finding.message}")

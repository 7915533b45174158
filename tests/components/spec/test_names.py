"""The shared names issue 19 adds: the data-class tag and its values, and the EKS control-plane log group's name."""
from __future__ import annotations

from components.spec import names


def test_data_class_tag_and_values():
    assert names.DATA_CLASS_TAG == "gpuburst.io/data-class"
    assert (names.CLINICAL_SLIDES, names.ACCESS_LOGS) == ("clinical-slides", "access-logs")


def test_control_plane_log_group_is_the_one_eks_writes_to():
    assert names.control_plane_log_group("gpuburst-dev") == "/aws/eks/gpuburst-dev/cluster"

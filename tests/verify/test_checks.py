"""checks.py: the table's order and names, and one broken check never hides the others."""
from __future__ import annotations

from components.verify import checks
from components.verify.checks import CHECKS, Context, run_checks
from components.verify.model import CheckResult, VerifySettings


def test_names_and_order():
    assert [c.name for c in CHECKS] == ["versions", "worker-iam", "keda", "gpu-job", "gpu-allocatable",
                                        "hardware-ami"]
    # gpu-job brings a node up before the node checks judge the pool
    names = [c.name for c in CHECKS]
    assert names.index("gpu-job") < names.index("gpu-allocatable") < names.index("hardware-ami")
    assert all(c.proves for c in CHECKS)


def test_a_crashing_check_fails_alone_and_skip_is_reported(monkeypatch):
    def boom(ctx):
        raise RuntimeError("list nodes: 403 Forbidden: nodes is forbidden\nsecond line")

    table = tuple(checks.Check(c.name, c.proves, boom if c.name == "versions" else
                               (lambda ctx, n=c.name: CheckResult(n, "pass", "ok"))) for c in CHECKS)
    monkeypatch.setattr(checks, "CHECKS", table)
    results = run_checks(Context(settings=VerifySettings()), skip=("keda",))
    by = {r.name: r for r in results}
    assert by["versions"].status == "fail"
    assert by["versions"].summary == "the check could not run: RuntimeError: list nodes: 403 Forbidden: nodes is " \
                                     "forbidden"
    assert by["keda"].status == "skipped" and by["keda"].summary == "skipped by --skip"
    assert by["gpu-job"].status == "pass"

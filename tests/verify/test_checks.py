"""checks.py: the table's order and names, and one broken check never hides the others."""
from __future__ import annotations

from components.verify import checks
from components.verify.checks import CHECKS, run_checks
from components.verify.context import Context
from components.verify.model import CheckResult, VerifySettings


def test_names_and_order():
    assert [c.name for c in CHECKS] == ["ami-canary", "versions", "karpenter-health", "worker-iam",
                                        "workload-identity", "scaler-iam", "keda", "gpu-job", "gpu-allocatable",
                                        "hardware-ami", "burst"]
    # burst costs GPU time and sends real work: it runs only when named
    assert [c.name for c in CHECKS if c.opt_in] == ["burst"]
    assert [c.name for c in checks.selected()] == [c.name for c in CHECKS if c.name != "burst"]
    assert [c.name for c in checks.selected(("burst",))] == ["burst"]
    # gpu-job brings a node up before the node checks judge the pool
    names = [c.name for c in CHECKS]
    assert names.index("gpu-job") < names.index("gpu-allocatable") < names.index("hardware-ami")
    # the AMI canary needs no node: it runs first, before anything waits for one
    assert names[0] == "ami-canary"
    assert all(c.proves for c in CHECKS)


def test_a_crashing_check_errors_alone_and_skip_is_reported(monkeypatch):
    def boom(ctx):
        raise RuntimeError("list nodes: 403 Forbidden: nodes is forbidden\nsecond line")

    table = tuple(checks.Check(c.name, c.proves, boom if c.name == "versions" else
                               (lambda ctx, n=c.name: CheckResult(n, "pass", "ok"))) for c in CHECKS)
    monkeypatch.setattr(checks, "CHECKS", table)
    results = run_checks(Context(settings=VerifySettings()), skip=("keda",))
    by = {r.name: r for r in results}
    assert by["versions"].status == "error"  # it could not run: no verdict, not a defect found
    assert by["versions"].summary == "the check could not run: RuntimeError: list nodes: 403 Forbidden: nodes is " \
                                     "forbidden"
    assert by["keda"].status == "skipped" and by["keda"].summary == "skipped by --skip"
    assert by["gpu-job"].status == "pass"


def test_only_runs_the_named_checks_in_table_order(monkeypatch):
    ran = []
    table = tuple(checks.Check(c.name, c.proves, (lambda ctx, n=c.name: ran.append(n) or CheckResult(n, "pass", "ok")),
                               opt_in=c.opt_in) for c in CHECKS)
    monkeypatch.setattr(checks, "CHECKS", table)
    results = run_checks(Context(settings=VerifySettings()), only=("burst", "keda"))
    assert ran == ["keda", "burst"] and [r.name for r in results] == ["keda", "burst"]
    ran.clear()
    run_checks(Context(settings=VerifySettings()))
    assert "burst" not in ran and len(ran) == len(CHECKS) - 1


def test_a_known_cause_skips_the_checks_that_would_wait_for_a_gpu_node(monkeypatch):
    """A check listed before gpu-job that shows no GPU node can work (ami-canary, versions) makes gpu-job and burst
    skip with its reason at once; a check after them cannot (the table's order decides)."""
    from components.verify import burst, gpujob
    from components.verify.model import SKIPPED

    def canary(ctx):
        ctx.block_gpu_nodes("ami-canary", "4 of NodePool gpu's 4 GPU type(s) get the al2023 neuron image")
        return CheckResult("ami-canary", "fail", "4 of NodePool gpu's 4 GPU type(s) get the al2023 neuron image")

    table = tuple(checks.Check(c.name, c.proves, canary if c.name == "ami-canary" else
                               gpujob.run if c.name == "gpu-job" else burst.run if c.name == "burst" else
                               (lambda ctx, n=c.name: CheckResult(n, "pass", "ok")), opt_in=c.opt_in)
                  for c in CHECKS)
    monkeypatch.setattr(checks, "CHECKS", table)
    ctx = Context(settings=VerifySettings(worker_image="img"))  # no cluster at all: nothing may be called
    by = {r.name: r for r in run_checks(ctx, only=("ami-canary", "gpu-job", "burst"))}
    for name in ("gpu-job", "burst"):
        assert by[name].status == SKIPPED
        assert by[name].summary == ("not run: ami-canary failed: 4 of NodePool gpu's 4 GPU type(s) get the al2023 "
                                    "neuron image")
        assert by[name].evidence[-1].endswith("nothing created, nothing waited for")
    ctx = Context(settings=VerifySettings(worker_image="img"))
    assert [r.status for r in run_checks(ctx, only=("gpu-job",))] == ["error"]  # not blocked: it runs (no cluster)

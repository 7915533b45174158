"""examples/another-team (docs/adopting.md): a lab's workload stack attached to a cluster another stack runs
synthesizes under its own project name, passes the pack with no rule disabled (its cross-stack ends reported as
advisories), and fails it once a real mismatch is put inside it."""
from __future__ import annotations

import copy
import json

import pytest

from policies.harness import check, normalise_plan
from tests.synth_run import ROOT, run_synth

EXAMPLE = ROOT / "examples" / "another-team"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


@pytest.fixture(scope="module")
def example_plan(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("another-team")
    proc = run_synth(out, "--project-dir", str(EXAMPLE), "--stack", "lab")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((out / "plan.json").read_text(encoding="utf-8"))


def test_the_example_is_synthesized_under_its_own_project_and_installs_nothing_twice(example_plan):
    urns = [r["urn"] for r in example_plan["resources"]]
    assert urns and all(u.startswith("urn:pulumi:lab::tils-lab::") for u in urns)
    types = {r["type"] for r in example_plan["resources"]}
    assert not {t for t in types if t.startswith("kubernetes:helm.sh/")}
    assert {"gpuburst:index:ExistingKeda", "gpuburst:index:ExistingKarpenter",
            "gpuburst:index:ExistingCluster"} <= types
    assert "gpuburst:index:GpuBurstPlatform" not in types


@pytest.mark.slow
def test_the_example_passes_the_pack_with_its_cross_stack_ends_as_advisories(example_plan):
    report = check(normalise_plan(example_plan))
    assert report.mandatory == [], "\n".join(d.line() for d in report.mandatory)
    assert report.advisory, "the KEDA operator, the device plugin and the node class live elsewhere: say so"


@pytest.mark.slow
def test_a_mismatch_inside_the_example_fails_the_pack(example_plan):
    broken = copy.deepcopy(example_plan)
    (association,) = [r for r in broken["resources"] if r["type"] == ASSOCIATION]
    association["properties"]["serviceAccount"] = "someone-else"
    report = check(normalise_plan(broken))
    lines = [d.line() for d in report.mandatory]
    assert any("someone-else" in line for line in lines), lines

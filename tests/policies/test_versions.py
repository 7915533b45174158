"""Tests for the version rules (every version used here is derived from `components.catalogue`, never restated)."""
from __future__ import annotations

import pytest

from components import catalogue
from policies import versions as rule

PIN = catalogue.CHARTS["karpenter"].version
KEDA_PIN = catalogue.CHARTS["keda"].version
BROKEN = sorted(catalogue.KARPENTER_BROKEN_RELEASES)
_kmaj, _kmin, _ = catalogue.parse_version(catalogue.KEDA_MINIMUM)
KEDA_TOO_OLD = f"{_kmaj}.{_kmin - 1}.0"
REJECTING_KEDA, _last, REJECTED_STRATEGY, _why = catalogue.KEDA_REJECTED_SCALING_STRATEGIES[0]
_lo, _hi = catalogue.karpenter_kubernetes_range(PIN)
K8S_TOO_NEW = f"{catalogue.minor(_hi)[0]}.{catalogue.minor(_hi)[1] + 1}"
K8S_TOO_OLD = f"{catalogue.minor(_lo)[0]}.{catalogue.minor(_lo)[1] - 1}"


def chart_check(run_rule, samples, props, rtype=None) -> list[str]:
    return run_rule(rule.CHART_POLICY, rtype or samples.T_CHART, props)


@pytest.mark.parametrize("chart", sorted(catalogue.CHARTS))
def test_pinned_charts_pass(run_rule, samples, chart):
    assert chart_check(run_rule, samples, samples.chart(chart)) == []


@pytest.mark.parametrize("version", BROKEN)
@pytest.mark.parametrize("chart", catalogue.KARPENTER_CHARTS)
def test_broken_karpenter_releases_fail(run_rule, samples, chart, version):
    messages = chart_check(run_rule, samples, samples.chart(chart, version))
    assert len(messages) == 1
    assert f"version of chart '{chart}' = '{version}'" in messages[0] and f"use '{PIN}'" in messages[0]


def test_keda_below_minimum_and_unparseable_and_unpinned_fail(run_rule, samples):
    assert f"older than the minimum {catalogue.KEDA_MINIMUM}" in \
        chart_check(run_rule, samples, samples.chart("keda", KEDA_TOO_OLD))[0]
    assert "not a version" in chart_check(run_rule, samples, samples.chart("karpenter", "^1.0"))[0]
    unpinned = samples.chart("karpenter")
    del unpinned["version"]
    messages = chart_check(run_rule, samples, unpinned)
    assert len(messages) == 1 and "version of chart 'karpenter' is missing" in messages[0]


@pytest.mark.parametrize("chart_string,version_prop,expected", [
    ("oci://public.ecr.aws/karpenter/karpenter", BROKEN[0], "karpenter"),
    ("oci://public.ecr.aws/karpenter/karpenter/", BROKEN[0], "karpenter"),
    ("oci://public.ecr.aws/karpenter/karpenter-crd", BROKEN[0], "karpenter-crd"),
    ("karpenter", BROKEN[0], "karpenter"),
    ("Karpenter", BROKEN[0], "karpenter"),
    ("somerepo/karpenter", BROKEN[0], "karpenter"),
    (f"https://charts.example/karpenter-{BROKEN[0]}.tgz", None, "karpenter"),
    (f"oci://public.ecr.aws/karpenter/karpenter:{BROKEN[0]}", None, "karpenter"),
])
def test_chart_names_are_recognised_from_the_last_segment(run_rule, samples, chart_string, version_prop, expected):
    props = {"chart": chart_string}
    if version_prop:
        props["version"] = version_prop
    for rtype in (samples.T_CHART, samples.T_RELEASE):
        messages = chart_check(run_rule, samples, props, rtype)
        assert len(messages) == 1, (chart_string, messages)
        assert f"of chart '{expected}' = '{BROKEN[0]}'" in messages[0], messages


def test_unrelated_charts_and_types_are_ignored(run_rule, samples):
    assert chart_check(run_rule, samples, {"chart": "ingress-nginx", "version": BROKEN[0]}) == []
    assert chart_check(run_rule, samples, {"chart": "karpenter-extras", "version": BROKEN[0]}) == []
    assert run_rule(rule.CHART_POLICY, samples.T_QUEUE, samples.chart("karpenter", BROKEN[0])) == []


def test_chart_missing_properties_and_unknowns(run_rule, samples):
    assert chart_check(run_rule, samples, {}) == []  # no chart name: nothing to judge
    unknown_version = samples.chart("keda")
    unknown_version["version"] = samples.U
    assert "version is unknown during preview" in chart_check(run_rule, samples, unknown_version)[0]
    assert "chart is unknown" in chart_check(run_rule, samples, {"chart": samples.U, "version": PIN})[0]


def crd_and_controller(samples, crd_version, controller_version):
    return [(samples.T_CHART, "karpenter-crd", samples.chart("karpenter-crd", crd_version)),
            (samples.T_CHART, "karpenter", samples.chart("karpenter", controller_version))]


def test_karpenter_pair(run_stack, samples):
    assert run_stack(rule.PAIR_POLICY, crd_and_controller(samples, PIN, PIN)) == []
    assert run_stack(rule.PAIR_POLICY, crd_and_controller(samples, "v" + PIN, PIN)) == []  # same version, spelt so
    found = run_stack(rule.PAIR_POLICY, crd_and_controller(samples, catalogue.KARPENTER_MINIMUM, PIN))
    assert len(found) == 1
    urn, message = found[0]
    assert urn.endswith("::karpenter-crd")
    assert f"karpenter-crd = '{catalogue.KARPENTER_MINIMUM}' but karpenter is at '{PIN}'" in message
    # Needs both: one chart alone is not judged by this rule.
    assert run_stack(rule.PAIR_POLICY, crd_and_controller(samples, PIN, PIN)[:1]) == []
    unknown = run_stack(rule.PAIR_POLICY, crd_and_controller(samples, samples.U, PIN))
    assert len(unknown) == 1 and "unknown during preview" in unknown[0][1]


def sj_with_strategy(samples, strategy):
    sj = samples.scaled_job()
    sj["spec"]["scalingStrategy"] = {"strategy": strategy}
    return sj


def test_scaling_strategy_judged_against_the_stacks_keda(run_stack, samples):
    bad_keda = [(samples.T_CHART, samples.chart("keda", REJECTING_KEDA)),
                (samples.T_SCALEDJOB, "slides", sj_with_strategy(samples, REJECTED_STRATEGY))]
    found = run_stack(rule.STRATEGY_POLICY, bad_keda)
    assert len(found) == 1 and found[0][0].endswith("::slides")
    assert f"spec.scalingStrategy.strategy = '{REJECTED_STRATEGY}'" in found[0][1]
    assert REJECTING_KEDA in found[0][1]
    pinned = [(samples.T_CHART, samples.chart("keda")), bad_keda[1]]
    assert run_stack(rule.STRATEGY_POLICY, pinned) == []
    no_chart = [bad_keda[1]]  # no KEDA chart in the stack: judged against the pin
    assert run_stack(rule.STRATEGY_POLICY, no_chart) == []
    typo = run_stack(rule.STRATEGY_POLICY, [(samples.T_SCALEDJOB, sj_with_strategy(samples, "fastest"))])
    assert len(typo) == 1 and "not a KEDA strategy" in typo[0][1]
    assert run_stack(rule.STRATEGY_POLICY, [(samples.T_SCALEDJOB, samples.scaled_job())]) == []
    unknown = run_stack(rule.STRATEGY_POLICY, [(samples.T_SCALEDJOB, sj_with_strategy(samples, samples.U))])
    assert len(unknown) == 1 and "scalingStrategy.strategy is unknown" in unknown[0][1]


@pytest.mark.parametrize("cluster_type", ["T_EKS", "T_AWS_EKS"])
def test_kubernetes_version_range(run_stack, samples, cluster_type):
    rtype = getattr(samples, cluster_type)
    charts = [(samples.T_CHART, samples.chart("karpenter")), (samples.T_CHART, samples.chart("keda"))]
    assert run_stack(rule.KUBERNETES_POLICY, charts + [(rtype, samples.cluster())]) == []
    for bad in (K8S_TOO_NEW, K8S_TOO_OLD):
        found = run_stack(rule.KUBERNETES_POLICY, charts + [(rtype, "cluster", samples.cluster(bad))])
        assert found and all(urn.endswith("::cluster") for urn, _ in found)
        assert any(f"version = '{bad}'" in m and "outside what" in m for _, m in found), found
    unpinned = {"name": "gpuburst-dev"}
    assert "version is missing" in run_stack(rule.KUBERNETES_POLICY, [(rtype, unpinned)])[0][1]
    assert "version is unknown" in run_stack(rule.KUBERNETES_POLICY, [(rtype, samples.cluster(samples.U))])[0][1]


def test_kubernetes_range_follows_the_stacks_karpenter(run_stack, samples):
    # The oldest accepted Karpenter supports an older Kubernetes range than the pin: the pinned Kubernetes is outside.
    old = catalogue.KARPENTER_MINIMUM
    assert catalogue.kubernetes_problems(catalogue.KUBERNETES_VERSION, old, KEDA_PIN)
    stack = [(samples.T_CHART, samples.chart("karpenter", old)), (samples.T_EKS, samples.cluster())]
    found = run_stack(rule.KUBERNETES_POLICY, stack)
    assert any(f"karpenter {old}" in m for _, m in found), found


def test_over_grpc_with_config_overrides(analyze, samples):
    doc = samples.plan(*crd_and_controller(samples, catalogue.KARPENTER_MINIMUM, BROKEN[0]),
                       (samples.T_EKS, samples.cluster(K8S_TOO_NEW)),
                       (samples.T_CHART, samples.chart("keda", REJECTING_KEDA)),
                       (samples.T_SCALEDJOB, sj_with_strategy(samples, REJECTED_STRATEGY)))
    report = analyze(doc)
    for name in (rule.CHART_NAME, rule.PAIR_NAME, rule.STRATEGY_NAME, rule.KUBERNETES_NAME):
        assert report.by_policy(name) and {d.level for d in report.by_policy(name)} == {"MANDATORY"}, name
    report = analyze(doc, {rule.PAIR_NAME: "advisory", rule.STRATEGY_NAME: "disabled",
                           rule.KUBERNETES_NAME: {"enforcementLevel": "advisory"}})
    assert {d.level for d in report.by_policy(rule.PAIR_NAME)} == {"ADVISORY"}
    assert report.by_policy(rule.STRATEGY_NAME) == []
    assert {d.level for d in report.by_policy(rule.KUBERNETES_NAME)} == {"ADVISORY"}
    assert {d.level for d in report.by_policy(rule.CHART_NAME)} == {"MANDATORY"}
    unknown = analyze(samples.plan((samples.T_EKS, samples.cluster(samples.U))))
    assert [d.level for d in unknown.by_policy(rule.KUBERNETES_NAME)] == ["MANDATORY"]


# -- the EKS support rule ------------------------------------------------------------------------------------------

def _cluster(samples, version, support_type=None):
    props = samples.cluster(version)
    if support_type is not None:
        props["upgradePolicy"] = {"supportType": support_type}
    return props


@pytest.mark.parametrize("today,support_type,window,ended", [
    ("2026-09-02", "STANDARD", 0, 0),   # 91 days left: nothing to say
    ("2026-11-15", "STANDARD", 1, 0),   # inside the 90-day window: told
    ("2026-12-02", "STANDARD", 0, 1),   # past it: EKS auto-upgrades the control plane
    ("2026-12-02", "EXTENDED", 1, 0),   # past it, extended support chosen: told what it costs
    ("2026-12-02", None, 1, 0),         # unset = EKS's default EXTENDED: told, and told to set it
    ("2027-12-02", "EXTENDED", 0, 1),   # past extended support: refused whatever the policy
])
def test_support_rule_on_1_34(run_stack, samples, monkeypatch, today, support_type, window, ended):
    monkeypatch.setenv(catalogue.TODAY_ENV, today)
    stack = [(samples.T_EKS, _cluster(samples, "1.34", support_type))]
    found_window = run_stack(rule.SUPPORT_WINDOW_POLICY, stack)
    found_ended = run_stack(rule.SUPPORT_ENDED_POLICY, stack)
    assert (len(found_window), len(found_ended)) == (window, ended), (found_window, found_ended)
    for _urn, message in found_window + found_ended:
        assert message.startswith("version = '1.34'") and ("2026-12-02" in message or "2027-12-02" in message)
    if support_type is None and window:
        assert "upgradePolicy.supportType is unset (EKS's default EXTENDED; set it explicitly)" in found_window[0][1]


def test_the_pin_passes_the_support_rule_today(run_stack, samples):
    stack = [(samples.T_EKS, _cluster(samples, catalogue.KUBERNETES_VERSION, "STANDARD"))]
    assert run_stack(rule.SUPPORT_WINDOW_POLICY, stack) == []
    assert run_stack(rule.SUPPORT_ENDED_POLICY, stack) == []


def test_support_rule_over_grpc_with_the_day_in_policy_config(analyze, samples):
    doc = samples.plan((samples.T_EKS, _cluster(samples, "1.34", "STANDARD")))
    day = {"today": "2026-12-02"}
    report = analyze(doc, {rule.SUPPORT_WINDOW_NAME: day, rule.SUPPORT_ENDED_NAME: day})
    [ended] = report.by_policy(rule.SUPPORT_ENDED_NAME)
    assert ended.level == "MANDATORY" and "left EKS standard support on 2026-12-02" in ended.message
    assert "$0.60 per cluster-hour" in ended.message
    assert report.by_policy(rule.SUPPORT_WINDOW_NAME) == []
    report = analyze(doc, {rule.SUPPORT_WINDOW_NAME: {"today": "2026-11-15"}})
    [told] = report.by_policy(rule.SUPPORT_WINDOW_NAME)
    assert told.level == "ADVISORY" and "ends 2026-12-02 (in 17 days)" in told.message


@pytest.mark.parametrize("version,bad", [("0.19.1", True), ("0.20.0", False)])
def test_device_plugin_chart_versions(run_rule, samples, version, bad):
    messages = chart_check(run_rule, samples, samples.chart("nvidia-device-plugin", version))
    assert bool(messages) == bad, messages
    if bad:
        assert "#1550" in messages[0] and f"use '{catalogue.NVIDIA_DEVICE_PLUGIN_VERSION}'" in messages[0]


# -- partial plans: the Karpenter and KEDA another stack runs --------------------------------------------------------

def partial(**facts):
    from policies.facts import Fact, Scope

    return Scope(False, "the plan declares no gpuburst:index:GpuBurstPlatform",
                 {k: Fact(v, f"policy config {k}") for k, v in facts.items()})


def as_res(samples, *resources):
    from tests.policies.fragments import as_res as to_res

    return to_res(samples.plan(*resources))


def test_running_versions_are_the_charts_the_fact_or_the_pin_said_once(samples):
    from policies.outside import Outside

    chart = as_res(samples, (samples.T_CHART, samples.chart("keda", REJECTING_KEDA)))
    assert rule.running_versions(chart, rule.KEDA, partial(kedaVersion=KEDA_PIN), "u")[0] == [REJECTING_KEDA]
    assert rule.running_versions([], rule.KEDA, partial(kedaVersion=REJECTING_KEDA), "u") == ([REJECTING_KEDA], [], [])
    versions, _unknown, (said,) = rule.running_versions([], rule.KEDA, partial(), "u")
    assert versions == [KEDA_PIN] and isinstance(said, Outside) and said.keys == ("kedaVersion",)
    assert said.message == f"KEDA is not in this plan (no keda chart): its version is not known here, so the rules " \
                           f"judge against the catalogue's pin KEDA {KEDA_PIN}"
    _v, _u, (refused,) = rule.running_versions([], rule.KARPENTER, partial(karpenterVersion=BROKEN[0]), "u")
    assert refused[0] == "u" and refused[1].startswith(f"karpenterVersion = '{BROKEN[0]}' (policy config "
                                                       "karpenterVersion): ")


def test_in_a_partial_plan_the_strategy_and_range_follow_the_existing_versions(samples):
    job = as_res(samples, (samples.T_SCALEDJOB, "slides", sj_with_strategy(samples, REJECTED_STRATEGY)))
    assert [f for f in rule.strategy_findings(job, partial()) if isinstance(f, tuple)] == []
    (found,) = rule.strategy_findings(job, partial(kedaVersion=REJECTING_KEDA))
    assert REJECTING_KEDA in found[1] and found[0].endswith("::slides")
    old = catalogue.KARPENTER_MINIMUM
    cluster = as_res(samples, (samples.T_EKS, "cluster", samples.cluster()))
    assert any(f"karpenter {old}" in m for _u, m in rule.kubernetes_findings(
        cluster, partial(karpenterVersion=old, kedaVersion=KEDA_PIN)))


def test_in_a_partial_plan_a_karpenter_crd_chart_is_paired_with_the_existing_karpenter(samples):
    from policies.outside import Outside

    crd = as_res(samples, (samples.T_CHART, "karpenter-crd", samples.chart("karpenter-crd", PIN)))
    (said,) = rule.pair_findings(crd, partial())
    assert isinstance(said, Outside) and said.urn.endswith("::karpenter-crd")
    assert rule.pair_findings(crd, partial(karpenterVersion=PIN)) == []
    (urn, message), = rule.pair_findings(crd, partial(karpenterVersion=catalogue.KARPENTER_MINIMUM))
    assert urn.endswith("::karpenter-crd") and f"but karpenter is at '{catalogue.KARPENTER_MINIMUM}' (policy config " \
                                               "karpenterVersion)" in message
    pool = as_res(samples, (samples.T_NODEPOOL, samples.gpu_nodepool()))
    assert rule.pair_findings(pool, partial()) == []  # a NodePool alone: nothing to pair, nothing said
    (urn, message), = rule.pair_findings(pool, partial(karpenterVersion=BROKEN[0]))
    assert "swapped the AL2023 NVIDIA and Neuron AMI variants" in message and "::kubernetes:karpenter.sh" in urn


# -- chart-newer-patch (advisory): what the newer patches of the release's line fix or require ----------------------

def newer(run_rule, samples, props) -> list[str]:
    return run_rule(rule.NEWER_PATCH_POLICY, samples.T_CHART, props)


def test_the_pinned_karpenter_is_told_of_1_14_4_and_its_action_required(run_rule, samples, monkeypatch):
    monkeypatch.setenv(catalogue.TODAY_ENV, "2026-12-01")
    for chart in ("karpenter", "keda"):
        messages = newer(run_rule, samples, samples.chart(chart))
        assert len(messages) == 1 and messages[0] == (
            f"version of chart {chart!r}: {catalogue.upgrade_note(chart, catalogue.CHARTS[chart].version)} "
            "(docs/upgrading.md moves the pin)")
    (karpenter,) = newer(run_rule, samples, samples.chart("karpenter"))
    assert "behind 1.14.4" in karpenter and "ACTION REQUIRED" in karpenter and "SpotMaxPriceTooLow" in karpenter
    assert "supported until Jul 2027" in karpenter


def test_nothing_to_tell_at_the_newest_patch_or_for_other_charts(run_rule, samples, monkeypatch):
    monkeypatch.setenv(catalogue.TODAY_ENV, "2026-12-01")
    assert newer(run_rule, samples, samples.chart("karpenter", "1.14.4")) == []
    assert newer(run_rule, samples, samples.chart("karpenter-crd")) == []  # said once, on the controller chart
    assert newer(run_rule, samples, samples.chart("nvidia-device-plugin")) == []
    assert newer(run_rule, samples, samples.chart("karpenter", "latest")) == []  # chart-versions reports it
    assert newer(run_rule, samples, samples.chart("karpenter", samples.U)) == []

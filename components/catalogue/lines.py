"""The Karpenter and KEDA release lines the catalogue knows: each line's support window, and the patches newer than the
pins with what each changes (charts and digests of releases newer than the offline sources are never invented here).

Karpenter 1.14.2-1.14.4 and KEDA 2.21.x were released after the newest upstream source reachable offline (tags end at
Karpenter v1.14.1 and KEDA v2.20.2), so their charts cannot be rendered nor their images pinned here: the facts below
are taken from their release notes and support pages (each row names its source) so that the synth summary, the pack
(advisory `chart-newer-patch`) and `verify --check versions` can say what a pinned release misses. A value no source
gives is None, and the row says why. docs/upgrading.md is the procedure that moves a pin once a chart can be pulled.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from .releases import parse_version
from .support import today

__all__ = [
    "Patch",
    "ReleaseLine",
    "RELEASE_LINES",
    "KARPENTER_SUPPORT_POLICY",
    "KEDA_SUPPORT_POLICY",
    "KARPENTER_EMPTY_SELECTOR_TERMS",
    "EMPTY_SELECTOR_TERMS_IGNORED_SINCE",
    "release_line",
    "newer_patches",
    "newest_patch",
    "newer_lines",
    "lines_to_tell",
    "line_label",
    "line_support",
    "upgrade_note",
]


@dataclass(frozen=True)
class Patch:
    """One release of a line: what it changes for this stack, and whether it asks for action before upgrading."""

    version: str
    """Exact version, e.g. `1.14.4`."""
    released: str | None
    """Release day (ISO date) as the source shows it, or None when no source here gives it (`source` says why)."""
    changes: tuple[str, ...]
    """What it fixes or changes, one short line each, in the release notes' words; empty when the notes are not
    reachable here (`source` says so)."""
    action_required: str | None
    """The release notes' "Action Required", in short, or None when there is none."""
    source: str
    """Where the facts come from."""


@dataclass(frozen=True)
class ReleaseLine:
    """One minor line (`1.14`) of a chart: its support window and the patches the catalogue knows, oldest first."""

    chart: str
    """`karpenter` (the `karpenter-crd` chart shares its lines) or `keda`."""
    line: str
    """MAJOR.MINOR."""
    lts: bool | None
    """True for a Long-Term Support line, False for a regular one, None where the project has no LTS scheme."""
    supported_until: tuple[int, int] | None
    """(year, month) of the end of support as the source names it (`Jul 2027`), or None when no end is published."""
    support: str
    """The support policy that applies to the line, one line with its source."""
    patches: tuple[Patch, ...]
    """The releases of the line the catalogue knows, oldest first; the last is the newest known patch."""


KARPENTER_SUPPORT_POLICY = (
    "Karpenter SUPPORT.md (aws/karpenter-provider-aws): an LTS line is supported 12 months from its release (6 months "
    "active support, then 6 months of security patches only); a regular line only until the next minor is published")
"""Karpenter's published support policy (SUPPORT.md; karpenter.sh/v1.9/upgrading/compatibility/ 'Support Policy')."""

KEDA_SUPPORT_POLICY = (
    "KEDA publishes no support window or LTS line: it is community-supported, best effort (kedacore/governance "
    "SUPPORT.md; keda.sh/docs/operate/cluster)")
"""KEDA's support policy: none with dates."""

EMPTY_SELECTOR_TERMS_IGNORED_SINCE = ("1.9.4", "1.14.4", "1.15.3")
"""The Karpenter patches (one per supported line) from which an EC2NodeClass selector term with an empty tags map,
name or ssmParameter is ignored (the same "Action Required" in each one's release notes)."""

KARPENTER_EMPTY_SELECTOR_TERMS = (
    "Karpenter ignores EC2NodeClass selector terms with an empty tags map, name or ssmParameter (1.9.4, 1.14.4, "
    "1.15.3): if every term of a list is empty the EC2NodeClass becomes NotReady (nodes already launched are not "
    "replaced); if only some are, it selects fewer resources and the nodes outside the new selection drift; an AMI "
    "term with an owner and an empty value selects nothing (use name '*' with the owner for all of an owner's AMIs)")
"""The Action Required of Karpenter 1.14.4 (and 1.9.4, 1.15.3), in short: why config, the pack and verify refuse an
empty selector term (`components.spec.selector_terms`)."""

_K_RELEASES = "https://github.com/aws/karpenter-provider-aws/releases/tag/v"
_SF_MIRROR = "the date SourceForge's mirror of the GitHub release shows (sourceforge.net/projects/karpenter.mirror)"
_NO_DATE = "no release day: the indexed copy of the release page shows none"

RELEASE_LINES: tuple[ReleaseLine, ...] = (
    ReleaseLine("karpenter", "1.9", True, (2027, 2),
                "LTS line, released Feb 2026, supported until Feb 2027 (SUPPORT.md 'LTS versions table'; the v1.9.x "
                "release notes' banner)", (
                    Patch("1.9.4", None, ("skip EC2NodeClass selector terms without filters (#9964, #9969)",),
                          KARPENTER_EMPTY_SELECTOR_TERMS, f"{_K_RELEASES}1.9.4 ({_NO_DATE})"),
                )),
    ReleaseLine("karpenter", "1.14", True, (2027, 7),
                "LTS line, released Jul 2026, supported until Jul 2027 (SUPPORT.md 'LTS versions table'; the v1.14.x "
                "release notes' banner 'Supported until Jul 2027')", (
                    Patch("1.14.1", "2026-08-20", (), None,
                          "the catalogue's pin; ../shared/upstream-crds/README.md (tag v1.14.1)"),
                    Patch("1.14.2", "2026-10-12", (
                        "key the offering cache on nestedVirtualizationEnabled (#9683)",
                        "bump go and golang.org/x dependencies to address vulnerabilities (#9711)"), None,
                          f"{_K_RELEASES}1.14.2; release day: {_SF_MIRROR}"),
                    Patch("1.14.3", "2026-10-23", (
                        "classify SpotMaxPriceTooLow as an insufficient-capacity (ICE) error (#9501, #9787)",
                        "treat a reclaiming interruptible capacity reservation as unavailable capacity (#9703)",
                        "core: heal stranded unlaunched NodeClaim entries in cluster state (kubernetes-sigs/karpenter "
                        "#3190); relax minValues against narrowed NodeClaim requirements (#3170)",
                        "go 1.26.10, golang.org/x/net v0.60.0"), None,
                          f"{_K_RELEASES}1.14.3 (newreleases.io copy); release day: {_SF_MIRROR}"),
                    Patch("1.14.4", None, ("skip EC2NodeClass selector terms without filters (#9964, #9968); no CRD "
                                           "upgrade needed",),
                          KARPENTER_EMPTY_SELECTOR_TERMS, f"{_K_RELEASES}1.14.4 ({_NO_DATE})"),
                )),
    ReleaseLine("karpenter", "1.15", False, None,
                "regular line (v1.15.0 released Oct 2026: karpenter.sh/v1.15/upgrading): supported only until the "
                "next minor is published, and no 1.16 is seen in the sources here", (
                    Patch("1.15.3", None, ("skip EC2NodeClass selector terms without filters (#9964, #9970)",),
                          KARPENTER_EMPTY_SELECTOR_TERMS,
                          f"{_K_RELEASES}1.15.3 (newreleases.io copy; {_NO_DATE}); 1.15.0-1.15.2 are not recorded"),
                )),
    ReleaseLine("keda", "2.20", None, None, KEDA_SUPPORT_POLICY, (
        Patch("2.20.2", "2026-07-31", ("the ScaledJob CRD accepts scalingStrategy 'default' again (#7855)",
                                       "a dedicated HPAActive condition on ScaledObject (#7914)"), None,
              "kedacore/keda CHANGELOG.md v2.20.2 (the newest 2.20.x entry on main); ../shared/upstream-crds/README.md "
              "for the day"),
    )),
    ReleaseLine("keda", "2.21", None, None, KEDA_SUPPORT_POLICY, (
        Patch("2.21.0", None, (), None,
              "unknown: the 2.21.0 release notes are not among the sources reachable here (kedacore/keda main's "
              "CHANGELOG still lists 2.21's changes as Unreleased)"),
        Patch("2.21.1", None, (
            "only manage HPAs owned by the ScaledObject (#8374)",
            "skip unchanged streamed metric specs (#8306); Go toolchain 1.27.3 (#8316)",
            "scaler fixes: ArangoDB, Splunk Observability, InfluxDB, MySQL (#8343, #8366, #8305, #8369)",
            "dependencies updated, retaining Kubernetes 1.36 (#8361, #8365)"), None,
              "https://github.com/kedacore/keda/releases/tag/v2.21.1 (released '15 Nov', the year not shown in the "
              "indexed copy) and the KEDA chart v2.21.1 release (kedacore/charts, App v2.21.1)"),
    )),
)
"""Every line the catalogue knows, per chart oldest first (the pins' lines, the newer ones, and Karpenter's other
supported LTS line)."""


def _chart(chart: str) -> str:
    return "karpenter" if chart in ("karpenter", "karpenter-crd") else chart


def _line_of(version: str) -> str:
    major, minor_, _ = parse_version(version)
    return f"{major}.{minor_}"


def release_line(chart: str, version: str) -> ReleaseLine | None:
    """The line `version` of `chart` belongs to (`karpenter-crd` is Karpenter's), or None when the catalogue does not
    know it."""
    try:
        line = _line_of(version)
    except ValueError:
        return None
    return next((r for r in RELEASE_LINES if r.chart == _chart(chart) and r.line == line), None)


def newer_patches(chart: str, version: str) -> list[Patch]:
    """The known patches of `version`'s own line newer than it, oldest first (empty for an unknown line, an
    unparseable version, or the newest known patch). This is what `verify --check versions` asks about a live
    release: `catalogue.newer_patches("karpenter", "1.14.1")` -> 1.14.2, 1.14.3, 1.14.4."""
    line = release_line(chart, version)
    if line is None:
        return []
    v = parse_version(version)
    return [p for p in line.patches if parse_version(p.version) > v]


def newest_patch(chart: str, version: str) -> Patch | None:
    """The newest known patch of `version`'s line (None for a line the catalogue does not know)."""
    line = release_line(chart, version)
    return line.patches[-1] if line is not None and line.patches else None


def newer_lines(chart: str, version: str) -> list[ReleaseLine]:
    """The known lines of `chart` above `version`'s line, oldest first."""
    try:
        major, minor_, _ = parse_version(version)
    except ValueError:
        return []
    return [r for r in RELEASE_LINES if r.chart == _chart(chart) and parse_version(r.line) > (major, minor_, 0)]


def _month(ym: tuple[int, int]) -> str:
    return date(ym[0], ym[1], 1).strftime("%b %Y")


def line_support(chart: str, version: str, on: date | None = None) -> str:
    """One line on the support of `version`'s line on day `on` (default: `support.today()`): LTS and until when, regular
    and whether a newer minor has superseded it, or KEDA's lack of a published window. An end month counts as
    supported through its last day."""
    line = release_line(chart, version)
    name = _chart(chart)
    if line is None:
        try:
            label = _line_of(version)
        except ValueError:
            return f"{name} {version!r} is not a version"
        return (f"the {name} {label} line is not in the catalogue's release lines "
                f"({KARPENTER_SUPPORT_POLICY if name == 'karpenter' else KEDA_SUPPORT_POLICY})")
    on = on or today()
    if line.supported_until is not None:
        y, m = line.supported_until
        ended = (on.year, on.month) > (y, m)
        kind = "LTS" if line.lts else "regular"
        return (f"the {name} {line.line} {kind} line {'left support after' if ended else 'is supported until'} "
                f"{_month(line.supported_until)}")
    if line.lts is False:
        newer = newer_lines(chart, version)
        return (f"the {name} {line.line} line is a regular release, "
                + (f"out of support since {name} {newer[0].line} was published" if newer else
                   "supported only until the next minor is published"))
    return f"the {name} {line.line} line: {line.support}"


def lines_to_tell(chart: str, version: str, on: date | None = None) -> list[ReleaseLine]:
    """The newer lines worth telling a stack on `version` of: none while its line is a supported LTS line (staying
    on it is the point of LTS), else every newer known line."""
    own = release_line(chart, version)
    if own is not None and own.lts and "left support" not in line_support(chart, version, on):
        return []
    return newer_lines(chart, version)


def line_label(r: ReleaseLine) -> str:
    """`1.15 (regular, newest 1.15.3)`: a line as a message names it."""
    kind = {True: "LTS", False: "regular", None: "no LTS scheme"}[r.lts]
    return f"{r.line} ({kind}" + (f", newest {r.patches[-1].version}" if r.patches else "") + ")"


def _patch_text(p: Patch) -> str:
    what = "; ".join(p.changes) if p.changes else "changes unknown here"
    return f"{p.version}: {what}" + (f"; ACTION REQUIRED: {p.action_required}" if p.action_required else "")


def upgrade_note(chart: str, version: str, on: date | None = None) -> str | None:
    """One line for a person on call or a maintainer: the release's line and its support, the newer patches of that
    line with what each fixes or requires, and the newer lines (not for a supported LTS line: staying on it is the
    point of LTS); None when there is nothing newer to tell of (the newest known patch of a supported LTS line, or of
    the newest known line)."""
    newer = newer_patches(chart, version)
    lines = lines_to_tell(chart, version, on)
    if not newer and not lines:
        return None
    name = _chart(chart)
    parts = [f"{name} {version}: {line_support(chart, version, on)}"]
    if newer:
        parts.append(f"behind {newer[-1].version}, the newest patch of its line: "
                     + " | ".join(_patch_text(p) for p in newer))
    parts += [f"newer line {line_label(r)}" for r in lines]
    return "; ".join(parts)

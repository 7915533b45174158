"""Rules `ec2nodeclass-al2023-ami`: every Karpenter EC2NodeClass boots Amazon Linux 2023 through one alias term, and
`ec2nodeclass-selector-terms`: none of its selector terms is empty (Karpenter 1.14.4 ignores those; see below).

Why: AL2 reached end of support and has no AMIs for current Kubernetes versions; Bottlerocket and Windows need a
different bootstrap and GPU setup than the worker was built for; and a raw AMI id (or a name/tag/SSM selector)
cannot be checked for its family offline, so a wrong or stale image reaches the GPU nodes unnoticed. One
`alias: al2023@latest` (or a pinned `al2023@vYYYYMMDD`) lets Karpenter pick the AL2023 NVIDIA variant for GPU
instances and the standard one elsewhere.
"""
from __future__ import annotations

import re
from typing import Any

from ._components import selector_terms
from .declare import resource_policy
from .resources import EC2NODECLASS, dig, enumerate_at, fmt
from .unknowns import UNKNOWN, unknown_message

NAME = "ec2nodeclass-al2023-ami"
ALIAS = re.compile(r"^al2023@(latest|v\d{8})$")
"""`al2023@latest` or `al2023@vYYYYMMDD`."""
AMI_FAMILY = "AL2023"
"""The only `spec.amiFamily` accepted (it may also be omitted: the alias implies it)."""
DO = "set spec.amiSelectorTerms to [{alias: 'al2023@latest'}] (or pin 'al2023@vYYYYMMDD') and omit spec.amiFamily"


def problems(props: Any) -> list[str]:
    """Why this EC2NodeClass (plain props) does not select exactly one AL2023 alias; empty when it does."""
    out: list[str] = []
    family = dig(props, "spec", "amiFamily")
    if family.unknown:
        out.append(unknown_message(family.path, "the AMI family"))
    elif not family.missing and family.value != AMI_FAMILY:
        out.append(f"{family.path} = {fmt(family.value)}: only {AMI_FAMILY} is allowed; {DO}")
    terms = dig(props, "spec", "amiSelectorTerms")
    if terms.unknown:
        return out + [unknown_message(terms.path, "which AMI the nodes boot")]
    if terms.missing or terms.value == []:
        return out + [f"{terms.path} is missing: {DO}"]
    items = list(enumerate_at(terms))
    if len(items) != 1:
        return out + [f"{terms.path} has {len(items)} terms {fmt(terms.value)}: select exactly one alias term; {DO}"]
    path, term = items[0]
    if term is UNKNOWN:
        return out + [unknown_message(path, "which AMI the nodes boot")]
    if not isinstance(term, dict):
        return out + [f"{path} is {fmt(term)}: {DO}"]
    alias = dig(term, "alias", base=path)
    others = sorted(k for k in term if k != "alias")
    if alias.unknown:
        out.append(unknown_message(alias.path, "which AMI family the alias selects"))
    elif alias.missing:
        what = ("a raw AMI id cannot be checked for its family offline" if "id" in others
                else f"selecting by {', '.join(others) or 'nothing'} does not fix the AMI family")
        out.append(f"{path} = {fmt(term)}: {what}; {DO}")
    elif not isinstance(alias.value, str) or not ALIAS.match(alias.value):
        family_name = alias.value.split("@", 1)[0] if isinstance(alias.value, str) else alias.value
        why = ("AL2 is end of life and has no AMIs for current Kubernetes" if family_name == "al2"
               else "only the al2023 family in the form al2023@latest or al2023@vYYYYMMDD is allowed")
        out.append(f"{alias.path} = {fmt(alias.value)}: {why}; {DO}")
    if others and not alias.missing:
        out.append(f"{path} also sets {', '.join(others)}: an alias term must stand alone; {DO}")
    return out


POLICY = resource_policy(
    NAME, "A Karpenter EC2NodeClass must select exactly one AMI alias term al2023@latest or al2023@vYYYYMMDD (no AL2, "
          "Bottlerocket, Windows, raw AMI ids or name/tag selectors).",
    (EC2NODECLASS,), lambda r: problems(r.props))

SELECTOR_NAME = "ec2nodeclass-selector-terms"
"""Rule: no EC2NodeClass selector term selects by an empty tags map, name or ssmParameter (Karpenter 1.14.4 ignores
such a term: all terms of a list empty, the EC2NodeClass goes NotReady; some empty, its nodes drift)."""


def selector_problems(props: Any) -> list[str]:
    """One line per selector term of this EC2NodeClass (plain props) with an empty tags map, name or ssmParameter
    (`components.spec.selector_terms`), and per such value unknown during a preview."""
    spec = dig(props, "spec")
    if spec.unknown:
        return [unknown_message(spec.path, "whether a selector term is empty")]
    out: list[str] = []
    for field in selector_terms.SELECTOR_TERM_LISTS:
        terms = dig(props, "spec", field)
        if terms.unknown:
            out.append(unknown_message(terms.path, "whether a selector term is empty"))
            continue
        if not isinstance(terms.value, list):
            continue
        for path, term in enumerate_at(terms):
            found = [dig(term, k, base=path) for k in selector_terms.EMPTY_IGNORED_FIELDS] if term is not UNKNOWN \
                else [dig(term, base=path)]
            out += [unknown_message(f.path, "whether the selector term is empty") for f in found if f.unknown]
    return out + selector_terms.empty_selector_terms(spec.value)


SELECTOR_POLICY = resource_policy(
    SELECTOR_NAME, "No EC2NodeClass selector term may select by an empty tags map, name or ssmParameter: Karpenter "
                   "1.14.4 ignores such terms (all empty: the EC2NodeClass goes NotReady; some: its nodes drift).",
    (EC2NODECLASS,), lambda r: selector_problems(r.props))

POLICIES = [POLICY, SELECTOR_POLICY]

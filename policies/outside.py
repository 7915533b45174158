"""The marker a cross-resource rule yields for an end that lives outside this stack, and the split of a rule's
findings into the violations its own policy reports and the markers `outside-this-stack` collects."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

Finding = tuple[str | None, str]
"""(urn or None, message): a violation of the rule that found it."""


@dataclass(frozen=True)
class Outside:
    """One end of a reference that is not in this plan: what could not be checked and why.

    A rule yields it instead of a violation where the end it looks for is absent from a partial plan and no fact
    (reference component or policy config) describes it. It is deliberately not a tuple: a policy that forgot to
    filter it out crashes (and fails closed) instead of reporting it as a violation.
    """

    urn: str | None
    """The resource in the plan whose check stopped at the boundary (None: the plan as a whole)."""
    message: str
    """One line naming that resource, the field and value, what could not be checked and why. Two rules that miss
    the same end say it in the same words, so it is reported once."""
    keys: tuple[str, ...] = ()
    """The facts (policy config keys, see `policies.facts.FACTS`) that would let the rule check it."""


def violations(items: Iterable[Finding | Outside]) -> list[Finding]:
    """The violations among a rule's findings (what its own policy reports)."""
    return [item for item in items if not isinstance(item, Outside)]


def outsides(items: Iterable[Finding | Outside]) -> list[Outside]:
    """The ends outside this stack among a rule's findings (what `outside-this-stack` reports)."""
    return [item for item in items if isinstance(item, Outside)]

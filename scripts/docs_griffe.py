"""A griffe extension for the API reference (mkdocs.yml): a component's attributes show their type, not the code
that assigns them.

griffe reads an attribute's value from its assignment. For a dataclass field that is the default, which the
reference must show (`max_receive_count: int = 5`); for a component's output, assigned in `__init__`
(`self.role_arn = self.identity.role_arn`), it is an implementation detail, often a dozen lines of code. This drops
the value of every attribute whose assignment lies inside a method, and keeps every class-level one.
"""
from __future__ import annotations

from typing import Any

import griffe


class ComponentOutputs(griffe.Extension):
    """Forget the values of attributes assigned inside a class's methods (instance attributes)."""

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        methods = [m for m in cls.members.values() if not m.is_alias and m.is_function
                   and m.lineno is not None and m.endlineno is not None]
        for member in cls.members.values():
            if member.is_alias or not member.is_attribute or member.lineno is None:
                continue
            if any(m.lineno <= member.lineno <= m.endlineno for m in methods):
                member.value = None

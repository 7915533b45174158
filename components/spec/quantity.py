"""Kubernetes resource quantities (`4`, `100m`, `24Gi`, `1.5G`, `1e3`): one parser for the components, the pack and
`verify`, following the API's grammar (a signed decimal, then a binary-SI, decimal-SI or exponent suffix)."""
from __future__ import annotations

import re
from typing import Any

QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$")
"""The quantity grammar of k8s.io/apimachinery's resource.Quantity."""

_SUFFIX = {None: 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40, "Pi": 2.0 ** 50, "Ei": 2.0 ** 60}

MI = 2 ** 20
"""Bytes in a MiB."""
GI = 2 ** 30
"""Bytes in a GiB."""


def parse_quantity(value: Any) -> float | None:
    """A quantity in base units (cores, bytes): `"100m"` -> 0.1, `"24Gi"` -> 25769803776.0, `2` -> 2.0; None for
    anything else (a bool, None, an unknown value, text that is not a quantity)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    m = QUANTITY.match(value.strip())
    if not m:
        return None
    number, suffix = m.group(1), m.group(2)
    if suffix and suffix[0] in "eE" and len(suffix) > 1:
        return float(number + suffix)
    return float(number) * _SUFFIX[suffix]


def is_quantity(value: Any, *, negative: bool = False) -> bool:
    """True when `value` is a quantity string (never negative unless `negative`)."""
    if not isinstance(value, str) or not QUANTITY.match(value.strip()):
        return False
    return negative or not value.strip().startswith("-")


def fmt_mem(n: float) -> str:
    """Bytes as Kubernetes writes them: `24Gi`, `14162Mi`."""
    if n % GI == 0:
        return f"{int(n // GI)}Gi"
    return f"{int(round(n / MI))}Mi"


def fmt_cpu(n: float) -> str:
    """Cores as Kubernetes writes them: `4`, `3920m`."""
    return f"{int(n)}" if float(n).is_integer() else f"{int(round(n * 1000))}m"

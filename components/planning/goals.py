"""What the advisor aims at: a deadline (`plan-burst --deadline`) or a budget (`--budget`), parsed."""
from __future__ import annotations

import math
import re

from ..spec.validation import ConfigError

__all__ = [
    "parse_duration",
    "parse_budget",
]


def parse_duration(text: str) -> float:
    """`3h`, `90m`, `2h30m`, `1h5m30s`, `45s` or plain seconds (`5400`) -> seconds > 0; else a one-line
    ConfigError naming --deadline."""
    s = str(text).strip().lower()
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?:in)?)?(?:(\d+(?:\.\d+)?)s)?", s)
    if re.fullmatch(r"\d+(?:\.\d+)?", s):
        seconds = float(s)
    elif m and s:
        h, mi, sec = (float(g) if g else 0.0 for g in m.groups())
        seconds = h * 3600 + mi * 60 + sec
    else:
        seconds = -1.0
    if not (0 < seconds <= 7 * 86_400):
        raise ConfigError("--deadline", text, "a duration such as 3h, 90m, 2h30m or seconds (5400), > 0 and at most "
                                              "7 days")
    return seconds


def parse_budget(text: str) -> float:
    """`0.50` or `$0.50` (USD) -> dollars > 0; else a one-line ConfigError naming --budget."""
    try:
        usd = float(str(text).strip().lstrip("$"))
    except ValueError:
        usd = -1.0
    if not (0 < usd < math.inf):
        raise ConfigError("--budget", text, "US dollars > 0, e.g. 0.50")
    return usd

"""A small pure matcher for 5-field cron expressions (minute hour day-of-month month day-of-week), as KEDA's cron
scaler takes them, and the start/end windows they make."""
from __future__ import annotations

from datetime import datetime, timedelta

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day-of-month", 1, 31), ("month", 1, 12), ("day-of-week", 0, 7))


class CronError(ValueError):
    """A cron expression that is not five fields of *, numbers, lists, ranges and steps (one line)."""


def _field(text: str, name: str, lo: int, hi: int, expr: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if base == "*":
                start, end = lo, hi
            elif "-" in base:
                a, b = base.split("-", 1)
                start, end = int(a), int(b)
            else:
                start = int(base)
                end = hi if step_text else start  # `5/15` means 5, 20, 35, 50 (as in robfig/cron, KEDA's parser)
        except ValueError:
            raise CronError(f"cron {expr!r}: {name} {part!r} is not *, N, N-M, a list or a /step") from None
        if step < 1 or not (lo <= start <= end <= hi):
            raise CronError(f"cron {expr!r}: {name} {part!r} is outside {lo}-{hi} (or a step < 1)")
        values.update(range(start, end + 1, step))
    return frozenset(values)


def parse(expr: str) -> tuple[frozenset[int], ...]:
    """The five fields of `expr` as sets of allowed values; day-of-week 7 is folded into 0 (Sunday)."""
    parts = str(expr).split()
    if len(parts) != 5:
        raise CronError(f"cron {expr!r}: expected 5 fields (minute hour day-of-month month day-of-week), "
                        f"got {len(parts)}")
    fields = [_field(p, name, lo, hi, expr) for p, (name, lo, hi) in zip(parts, _FIELDS)]
    fields[4] = frozenset(0 if d == 7 else d for d in fields[4])
    return tuple(fields)


def matches(expr: str, when: datetime) -> bool:
    """True when `when` (to the minute, in its own time zone) matches `expr`. When both day-of-month and day-of-week
    are restricted (neither starts with *), either may match, as in Vixie cron."""
    minute, hour, dom, month, dow = parse(expr)
    parts = str(expr).split()
    if when.minute not in minute or when.hour not in hour or when.month not in month:
        return False
    dom_ok, dow_ok = when.day in dom, (when.isoweekday() % 7) in dow
    if parts[2].startswith("*") or parts[4].startswith("*"):
        return dom_ok and dow_ok
    return dom_ok or dow_ok


def window_active(start: str, end: str, when: datetime, lookback: timedelta = timedelta(days=8)) -> bool:
    """True when `when` lies inside the [start, end) window of a KEDA cron trigger: the latest minute matching
    `start` at or before `when` is later than the latest minute matching `end` (searched back over `lookback`)."""
    parse(start), parse(end)
    t = when.replace(second=0, microsecond=0)
    stop = t - lookback
    while t > stop:
        if matches(end, t):
            return False
        if matches(start, t):
            return True
        t -= timedelta(minutes=1)
    return False


def active_seconds(start: str, end: str, day_start: datetime, span: timedelta = timedelta(days=1)) -> int:
    """Seconds of [day_start, day_start + span) inside the start/end window (minute resolution)."""
    active = window_active(start, end, day_start - timedelta(minutes=1))
    total, t = 0, day_start.replace(second=0, microsecond=0)
    for _ in range(int(span.total_seconds() // 60)):
        if matches(end, t):
            active = False
        elif matches(start, t):
            active = True
        total += 60 if active else 0
        t += timedelta(minutes=1)
    return total


def window_around(start: str, end: str, tz: str, at: datetime) -> tuple[float, float]:
    """(start, end) in seconds from `at` of the [start, end) window in time zone `tz` that holds `at`: the latest
    minute matching `start` at or before it, the first matching `end` after it (each searched up to 8 days)."""
    from zoneinfo import ZoneInfo

    local = at.astimezone(ZoneInfo(tz))
    back = local.replace(second=0, microsecond=0)
    for _ in range(8 * 1440):
        if matches(start, back):
            break
        back -= timedelta(minutes=1)
    fwd = local.replace(second=0, microsecond=0) + timedelta(minutes=1)
    for _ in range(8 * 1440):
        if matches(end, fwd):
            break
        fwd += timedelta(minutes=1)
    return (back - local).total_seconds(), (fwd - local).total_seconds()


def weekly_window(at: datetime, lead_s: float, tz: str) -> dict[str, str]:
    """{'start', 'end'}: cron expressions, in `tz`, of a weekly window that opens `lead_s` before `at` (to the minute)
    and closes the minute after it, on its weekday."""
    from zoneinfo import ZoneInfo

    local = at.astimezone(ZoneInfo(tz))
    start = (local - timedelta(seconds=lead_s)).replace(second=0, microsecond=0)
    end = local.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return {k: f"{t.minute} {t.hour} * * {t.isoweekday() % 7}" for k, t in (("start", start), ("end", end))}

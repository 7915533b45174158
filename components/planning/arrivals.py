"""What arrives: one burst of messages (`--burst N[@TIME]`) or a recorded trace of arrivals (`--trace FILE.csv`)."""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..spec.validation import ConfigError

__all__ = [
    "Burst",
    "parse_burst",
    "Trace",
    "TRACE_COLUMNS",
    "TRACE_FORMAT",
    "TraceRow",
    "TraceCsv",
    "parse_trace",
]

@dataclass(frozen=True)
class Burst:
    """One burst: how many messages arrive at once, and when (for the warm floor's schedule)."""

    items: int
    """Messages arriving together. >= 1."""
    at: datetime | None = None
    """When they arrive (time-zone aware; a naive time is UTC). None (default): no time, the warm floor is ignored."""

    def arrivals_s(self) -> list[tuple[float, int]]:
        """One arrival of every message at 0 s: a burst is the one-arrival case of a trace."""
        return [(0.0, self.items)]


def parse_burst(text: str) -> Burst:
    """`20@2026-01-05T09:30:00+00:00` -> Burst(20, that time); a bad one raises ConfigError naming --burst."""
    m = re.match(r"^(\d+)@(.+)$", str(text).strip())
    try:
        if not m or int(m.group(1)) < 1:
            raise ValueError
        at = datetime.fromisoformat(m.group(2))
    except ValueError:
        raise ConfigError("--burst", text, "N@ISO-DATETIME with N >= 1, e.g. 20@2026-01-05T09:30:00+00:00") from None
    return Burst(int(m.group(1)), at if at.tzinfo else at.replace(tzinfo=timezone.utc))


@dataclass(frozen=True)
class Trace:
    """A recorded arrival pattern for one workload: messages arriving over time (one workload's rows of a --trace
    CSV)."""

    arrivals: tuple[tuple[datetime, int], ...]
    """(time-zone aware arrival time, messages), sorted, one entry per distinct time. At least one."""
    source: str = "trace"
    """Where it came from (the CSV's path as given). Default 'trace'."""

    @property
    def items(self) -> int:
        """Messages in the whole trace."""
        return sum(n for _, n in self.arrivals)

    @property
    def at(self) -> datetime:
        """The first arrival: the model's time zero."""
        return self.arrivals[0][0]

    def arrivals_s(self) -> list[tuple[float, int]]:
        """(seconds from the first arrival, messages) per arrival."""
        return [((t - self.at).total_seconds(), n) for t, n in self.arrivals]


TRACE_COLUMNS = ("at", "items", "workload")
"""Columns a --trace CSV may have: `at` (required), `items` and `workload` (optional)."""
TRACE_FORMAT = ("a header row, then one row per arrival: at (ISO-8601 datetime, naive = UTC), optional items "
                "(messages, whole number >= 1, default 1) and optional workload (the row applies only to that "
                "workload; empty or no column: to every workload); rows in any order; blank lines and lines starting "
                "with # are skipped")
"""The CSV format, for --help and the errors."""


@dataclass(frozen=True)
class TraceRow:
    """One arrival row of a --trace CSV."""

    at: datetime
    """Arrival time (time-zone aware; a naive time was taken as UTC)."""
    items: int
    """Messages arriving then (>= 1; default 1)."""
    workload: str | None
    """The workload it applies to; None: every workload."""
    line: int
    """Line number in the file (1 = the first line), for errors."""


@dataclass(frozen=True)
class TraceCsv:
    """A parsed --trace CSV: its rows for every workload."""

    source: str
    """The path as given on the command line."""
    rows: tuple[TraceRow, ...]
    """Arrival rows in file order. At least one."""

    def for_workload(self, name: str) -> Trace | None:
        """The rows that apply to workload `name` as a Trace (same times merged, sorted); None when none apply."""
        merged: dict[datetime, int] = {}
        for r in self.rows:
            if r.workload in (None, name):
                merged[r.at] = merged.get(r.at, 0) + r.items
        return Trace(tuple(sorted(merged.items())), self.source) if merged else None

    def check_workloads(self, names: Iterable[str]) -> None:
        """Refuse (one line, with the line number) a row naming a workload the stack does not have."""
        names = list(names)
        for r in self.rows:
            if r.workload is not None and r.workload not in names:
                raise ConfigError(f"--trace {self.source} line {r.line} column workload", r.workload,
                                  f"a workload of the stack: one of {', '.join(names)}")


def parse_trace(path: Any) -> TraceCsv:
    """Read a --trace CSV (format: TRACE_FORMAT); a bad file, header or row raises a one-line ConfigError naming the
    file, the line, the column and the value."""
    import csv
    import io
    from pathlib import Path

    name = str(path)
    where = f"--trace {name}"
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # -sig: spreadsheet exports often open with a BOM
    except OSError as e:
        raise ConfigError("--trace", name, f"a readable CSV file ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ConfigError("--trace", name, "a UTF-8 text CSV file") from None
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    rows: list[TraceRow] = []
    try:
        for cells in reader:
            line = reader.line_num
            if not any(c.strip() for c in cells) or cells[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [c.strip().lower() for c in cells]
                bad = [c for c in header if c not in TRACE_COLUMNS]
                if bad or "at" not in header or len(set(header)) != len(header):
                    raise ConfigError(f"{where} line {line} header", ",".join(cells),
                                      "the column at, optionally items and workload (each once, any order)")
                continue
            if len(cells) != len(header):
                raise ConfigError(f"{where} line {line}", ",".join(cells),
                                  f"{len(header)} fields ({','.join(header)}), got {len(cells)}")
            row = {k: v.strip() for k, v in zip(header, cells)}
            try:
                at = datetime.fromisoformat(row["at"])
            except ValueError:
                raise ConfigError(f"{where} line {line} column at", row["at"],
                                  "an ISO-8601 datetime (naive = UTC), e.g. 2026-01-05T09:30:00Z") from None
            items = row.get("items") or "1"
            if not re.fullmatch(r"[0-9]+", items) or int(items) < 1:
                raise ConfigError(f"{where} line {line} column items", row["items"], "a whole number of messages >= 1")
            rows.append(TraceRow(at if at.tzinfo else at.replace(tzinfo=timezone.utc), int(items),
                                 row.get("workload") or None, line))
    except csv.Error as e:
        raise ConfigError(f"{where} line {reader.line_num}", str(e), "well-formed CSV") from None
    if not rows:
        raise ConfigError("--trace", name, f"an arrival trace: {TRACE_FORMAT}; it has no arrival rows")
    return TraceCsv(name, tuple(rows))

"""Karpenter's controller log read line by line in every layout it is written in (zap's JSON encoder, Karpenter's
default, and zap's console encoder with or without the logger and caller columns), counting what it cannot read.

What each layout is, from the source:
- Karpenter (kubernetes-sigs/karpenter v1.14.1 `pkg/operator/logging/logging.go`, `DefaultZapConfig`): encoding
  `json`, keys `message`, `level` (CapitalLevelEncoder: `ERROR`), `time` (ISO8601TimeEncoder:
  `2026-11-02T09:45:30.100Z`), `logger` (the component's name, `controller`), `caller` (ShortCallerEncoder,
  `controller/controller.go:347`, but `DisableCaller: true`), `stacktrace` (`DisableStacktrace: true`). A file
  `/etc/karpenter/logging/zap-logger-config` overrides any of it: `"encoding": "console"`, an empty `nameKey`
  (no logger column), `"disableCaller": false` (a caller column), other level or time encoders.
- zap's console encoder (uber-go/zap `zapcore/console_encoder.go`, `EncodeEntry`): the time, the level, the logger
  name (only when the entry has one and NameKey is set) and the caller (only when defined and CallerKey is set),
  joined by tabs; then a tab and the message; then, when the entry has fields, a tab and the fields as one JSON
  object (written by the JSON encoder in its spaced form: `{"controller": "nodeclass", ...}`); then, when a stack
  was taken, a newline and the stack (`function` lines, each followed by a tab-indented `file:line` line).

A line that is none of these is counted as not understood; the reader never guesses a level for it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .model import parse_time

LEVELS = ("DEBUG", "INFO", "WARN", "ERROR", "DPANIC", "PANIC", "FATAL")
"""zap's levels as its Capital level encoders write them (the lowercase encoders write the same words in lower
case; the color ones wrap them in ANSI escapes)."""
ERROR_LEVELS = ("ERROR", "DPANIC", "PANIC", "FATAL")
"""Levels that count as an ERROR line."""
JSON_KEYS: dict[str, tuple[str, ...]] = {"level": ("level", "L", "lvl"), "time": ("time", "ts", "T"),
                                         "message": ("message", "msg", "M"), "logger": ("logger", "N", "name"),
                                         "caller": ("caller", "C")}
"""Keys of each entry field in a JSON line: Karpenter's (first), then zap's production and development defaults."""
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EPOCH = re.compile(r"\d+(?:\.\d+)?(?:e\+?\d+)?", re.IGNORECASE)
"""zap's epoch time encoders as a console column (`1.7780811301e+09`, `1778081130100`)."""
_CALLER = re.compile(r"^\S+\.go:\d+$")
"""zap's caller encoders: `controller/controller.go:347` (short) or a full path, always `FILE.go:LINE`."""
_STACK_FUNCTION = re.compile(r"^[\w.\-/]+(?:\.\(?\*?[\w\[\].,{}\-]+\)?)+(?:\.[\w\[\].,{}\-]+)*(?:\(.*\))?$")
"""A stack frame's function line (`sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller).Start`)."""


@dataclass
class LogEntry:
    """One log entry, whatever its layout."""

    layout: str
    """`json` or `console`."""
    level: str
    """The level in capitals (`ERROR`)."""
    time: datetime | None
    """When it was written; None when the time is absent or unreadable (it then counts whatever --since says)."""
    message: str
    """The message (`Reconciler error`)."""
    time_text: str = ""
    """The time as written (`2026-11-02T09:45:30.100Z`), for quoting. Default ''."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Everything else: the JSON line's other keys, or the console line's trailing JSON context; plus `logger` and
    `caller` when the console line has those columns. Default {}."""


@dataclass
class LogReading:
    """What one pod's log held: the entries understood and the lines that were not."""

    lines: int = 0
    """Non-empty lines read. Default 0."""
    entries: list[LogEntry] = field(default_factory=list)
    """Every entry understood, oldest first. Default []."""
    stack_lines: int = 0
    """Lines of a stack trace after an understood entry (zap writes them when a stacktrace level is configured).
    Default 0."""
    unreadable: list[str] = field(default_factory=list)
    """Lines neither JSON entries, console entries nor a stack under one, in order. Default []."""

    @property
    def understood(self) -> int:
        """Lines understood: entries and their stack lines."""
        return len(self.entries) + self.stack_lines

    def layouts(self) -> dict[str, int]:
        """Entries per layout (`json`, `console`), for the evidence."""
        out: dict[str, int] = {}
        for e in self.entries:
            out[e.layout] = out.get(e.layout, 0) + 1
        return out

    def unreadable_mentioning_error(self) -> list[str]:
        """Lines not understood that mention an error: a layout this reader does not know may hide ERROR lines."""
        return [ln for ln in self.unreadable if re.search(r"error|panic|fatal", ln, re.IGNORECASE)]


def _level(text: str) -> str | None:
    word = _ANSI.sub("", text).strip().upper()
    return word if word in LEVELS else None


def _time(value) -> datetime | None:
    """An ISO 8601 time (`2026-11-02T09:45:30.100Z`, `…+0100`), or zap's epoch encoders (seconds, a float)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
        # EpochTimeEncoder (seconds), EpochMillisTimeEncoder, EpochNanosTimeEncoder.
        seconds /= 1e9 if seconds > 1e17 else 1e3 if seconds > 1e11 else 1
        try:
            return datetime.fromtimestamp(seconds, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    text = str(value or "").strip()
    if _EPOCH.fullmatch(text):
        return _time(float(text))
    when = parse_time(text)
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when


def _first(record: dict, key: str):
    for k in JSON_KEYS[key]:
        if k in record:
            return k, record[k]
    return None, None


def parse_json_line(text: str) -> LogEntry | None:
    """A JSON entry (an object with a level zap writes), or None."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    level_key, level_value = _first(record, "level")
    level = _level(str(level_value)) if level_key else None
    if level is None:
        return None
    time_key, time_value = _first(record, "time")
    message_key, message = _first(record, "message")
    rest = {k: v for k, v in record.items() if k not in (level_key, time_key, message_key)}
    for name in ("logger", "caller"):
        key, value = _first(record, name)
        if key and key != name:
            rest[name] = rest.pop(key)
    return LogEntry("json", level, _time(time_value), str(message or ""), str(time_value or ""), rest)


def parse_console_line(text: str) -> LogEntry | None:
    """A console entry: TIME, LEVEL, [LOGGER], [CALLER], MESSAGE, [{JSON context}], tab-separated; or None.

    The columns between the level and the message are told apart by what they are: a caller always ends in
    `.go:LINE`; a logger name has no blank; the message is the rest up to the JSON context (a message may hold tabs).
    """
    parts = text.split("\t")
    if len(parts) < 3:
        return None
    level = _level(parts[1])
    when = _time(parts[0])
    if level is None or when is None:
        return None
    rest = parts[2:]
    context: dict = {}
    if len(rest) > 1 and rest[-1].lstrip().startswith("{"):
        try:
            parsed = json.loads(rest[-1])
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            context, rest = parsed, rest[:-1]
    columns: dict[str, str] = {}
    if len(rest) > 1 and _CALLER.match(rest[0]):
        columns["caller"], rest = rest[0], rest[1:]
    elif len(rest) > 2 and _CALLER.match(rest[1]) and " " not in rest[0]:
        columns["logger"], columns["caller"], rest = rest[0], rest[1], rest[2:]
    elif len(rest) > 1 and rest[0] and " " not in rest[0]:
        columns["logger"], rest = rest[0], rest[1:]
    fields = dict(context)
    fields.update(columns)
    return LogEntry("console", level, when, "\t".join(rest).strip(), parts[0].strip(), fields)


def _stack_line(line: str) -> bool:
    """A line of the stack zap appends under an entry: a tab-indented `file:line`, or a function."""
    return line[:1] in ("\t", " ") or bool(_STACK_FUNCTION.match(line)) or line.startswith("goroutine ")


def read_log(text: str) -> LogReading:
    """Every non-empty line of a controller log, parsed in whichever layout it is in, or counted as not understood."""
    reading = LogReading()
    after_entry = False
    for raw in (text or "").splitlines():
        if not raw.strip():
            continue
        reading.lines += 1
        line = raw.rstrip("\r\n")
        body = line.strip()
        entry = parse_json_line(body) if body.startswith("{") else parse_console_line(body)
        if entry is not None:
            reading.entries.append(entry)
            after_entry = True
        elif after_entry and _stack_line(line):
            reading.stack_lines += 1
        else:
            reading.unreadable.append(line)
            after_entry = False
    return reading

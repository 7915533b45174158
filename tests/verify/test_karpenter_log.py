"""karpenter_log: Karpenter's log read in every layout zap writes (JSON; console with or without the logger and caller
columns), what it cannot read counted, never guessed."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from verify_fakes import karpenter_console_log, load, zap_console_line

from components.verify.karpenter_log import parse_console_line, parse_json_line, read_log

CONTEXT = {"controller": "nodeclass", "EC2NodeClass": {"name": "gpu"}, "error": "resolving AMIs: none"}
T = "2026-11-02T09:48:30.100Z"
WHEN = datetime(2026, 11, 2, 9, 48, 30, 100000, tzinfo=timezone.utc)


@pytest.mark.parametrize("logger,caller", [(None, None), ("controller", None), (None, "controller/controller.go:347"),
                                           ("controller", "controller/controller.go:347")])
def test_every_console_layout_gives_the_same_entry(logger, caller):
    line = zap_console_line(T, "ERROR", "Reconciler error", CONTEXT, logger=logger, caller=caller)
    e = parse_console_line(line)
    assert e is not None, line
    assert (e.layout, e.level, e.time, e.message, e.time_text) == ("console", "ERROR", WHEN, "Reconciler error", T)
    assert e.fields["EC2NodeClass"] == {"name": "gpu"} and e.fields["error"] == "resolving AMIs: none"
    assert e.fields.get("logger") == logger and e.fields.get("caller") == caller


def test_the_seed_incidents_line_with_no_logger_column_is_read():
    line = (f'{T}\tERROR\tReconciler error\t{{"controller":"nodeclass","EC2NodeClass":{{"name":"gpu"}},'
            '"error":"resolving AMIs: none"}')
    e = parse_console_line(line)
    assert e is not None and e.message == "Reconciler error" and e.fields["controller"] == "nodeclass"
    assert "logger" not in e.fields


def test_a_console_message_may_hold_tabs_or_be_empty_and_may_have_no_context():
    e = parse_console_line(f"{T}\tINFO\tcontroller\tpart one\tpart two\t{{\"k\": 1}}")
    assert e is not None and e.fields["logger"] == "controller" and e.message == "part one\tpart two"
    e = parse_console_line(f"{T}\tWARN\tcontroller\t\t{{\"k\": 1}}")
    assert e is not None and e.message == "" and e.fields == {"k": 1, "logger": "controller"}
    e = parse_console_line(f"{T}\tINFO\tstarting")
    assert e is not None and e.message == "starting" and e.fields == {}


@pytest.mark.parametrize("level,time_text,when", [
    ("error", "2026-11-02T10:48:30.100+0100", WHEN),  # lowercase encoder; ISO 8601 with an offset
    ("\x1b[31mERROR\x1b[0m", T, WHEN),  # CapitalColorLevelEncoder
    ("ERROR", "1793612910.1", datetime.fromtimestamp(1793612910.1, tz=timezone.utc)),  # EpochTimeEncoder
    ("ERROR", "1.7936129101e+09", datetime.fromtimestamp(1793612910.1, tz=timezone.utc)),
])
def test_other_level_and_time_encoders(level, time_text, when):
    e = parse_console_line(f"{time_text}\t{level}\tcontroller\tReconciler error\t{{}}")
    assert e is not None and e.level == "ERROR" and e.time == when


def test_json_lines_with_karpenters_keys_and_zaps_development_keys():
    e = parse_json_line('{"level":"ERROR","time":"2026-11-02T09:48:30.100Z","logger":"controller",'
                        '"message":"Reconciler error","controller":"nodeclass"}')
    assert e is not None and (e.layout, e.level, e.time, e.message) == ("json", "ERROR", WHEN, "Reconciler error")
    assert e.fields == {"logger": "controller", "controller": "nodeclass"}
    e = parse_json_line('{"L":"error","T":1793612910.1,"N":"controller","M":"boom","C":"a/b.go:1"}')
    assert e is not None and e.level == "ERROR" and e.message == "boom"
    assert e.fields == {"logger": "controller", "caller": "a/b.go:1"}
    assert parse_json_line('{"message":"no level"}') is None
    assert parse_json_line('{"level":"LOUD","message":"not a zap level"}') is None
    assert parse_json_line('["not", "an", "object"]') is None


@pytest.mark.parametrize("line", [
    'time=2026-11-02T09:48:30Z level=error msg="Reconciler error"',  # logfmt
    "E1102 09:48:30.100000       1 controller.go:347] Reconciler error",  # klog
    "ERROR\tReconciler error\t{}",  # no time column
    f"{T}\tLOUD\tReconciler error",  # not a zap level
    "yesterday\tERROR\tReconciler error",  # not a time
    "panic: runtime error: invalid memory address",
])
def test_lines_of_other_layouts_are_not_entries(line):
    assert parse_console_line(line) is None
    reading = read_log(line + "\n")
    assert (reading.lines, reading.understood, reading.unreadable) == (1, 0, [line])


def test_read_log_counts_what_it_understood_and_what_it_did_not():
    reading = read_log(load("karpenter_controller_ami_errors.log") + "\nsomething else\n\n")
    assert reading.lines == 33 and reading.layouts() == {"json": 32} and reading.unreadable == ["something else"]
    assert reading.unreadable_mentioning_error() == []
    console = read_log(karpenter_console_log(("logger", "caller")))
    assert (console.lines, console.understood, console.layouts()) == (26, 26, {"console": 26})
    assert sum(1 for e in console.entries if e.level == "ERROR") == 12


def test_a_stack_under_an_entry_counts_as_understood_but_not_without_one():
    stack = ("sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller).reconcileHandler\n"
             "\t/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.22.4/pkg/internal/controller/controller.go:347\n"
             "sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller).processNextWorkItem\n"
             "\t/go/pkg/mod/sigs.k8s.io/controller-runtime@v0.22.4/pkg/internal/controller/controller.go:294\n")
    entry = zap_console_line(T, "ERROR", "Reconciler error", CONTEXT, logger="controller")
    reading = read_log(entry + "\n" + stack)
    assert (reading.lines, len(reading.entries), reading.stack_lines, reading.unreadable) == (5, 1, 4, [])
    alone = read_log(stack)
    assert alone.understood == 0 and len(alone.unreadable) == 4

"""What a verify run hands back: the human table and the versioned JSON document for CI, written atomically."""
from __future__ import annotations

import json
import os
import sys
import tempfile
from datetime import datetime
from importlib import metadata
from typing import Any, TextIO

from .model import ERROR, FAIL, PASS, SKIPPED, CheckResult

SCHEMA = "gpuburst.verify/v1"
"""The document's `schema`: a consumer refuses any other (a new major means a field changed meaning)."""


def gpuburst_version() -> str:
    """The installed gpuburst version (the distribution's metadata), or `unknown` when run from a bare checkout."""
    try:
        return metadata.version("gpuburst")
    except metadata.PackageNotFoundError:
        return "unknown"


def document(results: list[CheckResult], *, started: datetime, finished: datetime, argv: list[str],
             stack: str | None, cluster: str | None, interrupted: bool, exit_status: int, strict: bool = False,
             lock: list[str] | None = None, error: str | None = None) -> dict[str, Any]:
    """The `--json` document: `schema`, `run` (when, where, how, how it ended) and `results` (one per check that
    reported, in order; an interrupted run lists those that finished)."""
    return {
        "schema": SCHEMA,
        "run": {
            "started": started.isoformat(), "finished": finished.isoformat(), "stack": stack, "cluster": cluster,
            "gpuburst_version": gpuburst_version(), "argv": list(argv), "interrupted": interrupted,
            "strict": strict, "exit_status": exit_status, "error": error, "lock": list(lock or []),
            "counts": {s: sum(r.status == s for r in results) for s in (PASS, FAIL, ERROR, SKIPPED)},
        },
        "results": [r.to_dict() for r in results],
    }


def write_json(path: str, doc: dict[str, Any], stdout: TextIO | None = None) -> None:
    """Write the document to `path` (`-` = stdout) atomically: a temporary file in the same folder, flushed, then
    renamed over `path`, so a reader (or a run killed mid-write) never sees half a document."""
    text = json.dumps(doc, indent=2) + "\n"
    if path == "-":
        (stdout or sys.stdout).write(text)
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".verify-", suffix=".json.tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def render_table(results: list[CheckResult], interrupted: bool = False) -> str:
    """The human report: one row per check, its evidence indented below it, then a one-line total."""
    width = max([len(r.name) for r in results] + [5])
    out = [f"{'CHECK'.ljust(width)}  STATUS   SUMMARY"]
    for r in results:
        status = r.status.upper() if r.status in (FAIL, ERROR) else r.status
        out.append(f"{r.name.ljust(width)}  {status.ljust(7)}  {r.summary}")
        for e in r.evidence:
            out.append(f"{' ' * width}    - {e}")
    failed = [r.name for r in results if r.status == FAIL]
    errored = [r.name for r in results if r.status == ERROR]
    out.append("")
    parts = []
    if errored:
        parts.append(f"{len(errored)} could not run ({', '.join(errored)})")
    if failed:
        parts.append(f"{len(failed)} failed ({', '.join(failed)})")
    tail = " — interrupted, the checks after these did not run" if interrupted else ""
    out.append(("verify: " + "; ".join(parts) if parts else
                f"verify: no check failed ({sum(r.status == PASS for r in results)} passed, "
                f"{sum(r.status == SKIPPED for r in results)} skipped)") + tail)
    return "\n".join(out)

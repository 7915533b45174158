"""The tests' handle on a real `moto_server`: the worker demo's own launcher (worker/devtools/localaws.py) plus a
reset call."""
from __future__ import annotations

import urllib.request

from worker.devtools.localaws import aws_env, free_port, moto_server

__all__ = ["aws_env", "free_port", "moto_server", "reset"]


def reset(endpoint_url: str) -> None:
    """Drop every resource the server holds (moto's reset API), so tests sharing one server start clean."""
    req = urllib.request.Request(endpoint_url + "/moto-api/reset", method="POST")
    urllib.request.urlopen(req, timeout=5).close()

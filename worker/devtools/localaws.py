"""A local stand-in for AWS: a `moto_server` subprocess on a free loopback port, started and stopped by its handle."""
from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent(new_session: bool = False) -> Callable[[], None]:
    """A `preexec_fn` that makes a child get SIGTERM when this process dies, even by SIGKILL (Linux only).

    With `new_session`, the child also gets its own session, so a terminal's Ctrl-C reaches only us and we stop the
    child in order.
    """
    def preexec() -> None:
        if new_session:
            os.setsid()
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL("libc.so.6", use_errno=True)
                libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
            except OSError:
                pass

    return preexec


def moto_available() -> bool:
    """Whether moto's server extra is importable (it is a development dependency, not in the worker image)."""
    try:
        import flask  # noqa: F401  (moto[server] needs it)
        import moto.server  # noqa: F401
    except ImportError:
        return False
    return True


@contextmanager
def moto_server(start_timeout_s: float = 30.0) -> Iterator[str]:
    """Run `moto_server -H 127.0.0.1 -p PORT`, yield its URL once it answers, and stop it on every exit path.

    Only the process this function started is stopped (terminate, then kill after 10 s), including when the
    body raises KeyboardInterrupt.
    """
    port = free_port()
    exe = Path(sys.executable).with_name("moto_server")
    cmd = ([str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]) + ["-H", "127.0.0.1", "-p",
                                                                                       str(port)]
    # Its own session: a Ctrl-C in the terminal reaches us, and we stop the server in order, after the consumer.
    # If we are killed outright, the kernel sends it SIGTERM (die_with_parent), so it never outlives us.
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=die_with_parent(new_session=True))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with code {proc.returncode} before it answered on {url}")
            try:
                urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not answer on {url} within {start_timeout_s:.0f} s")
                time.sleep(0.1)
        yield url
    finally:
        stop_process(proc, grace_s=10)


def stop_process(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the child, then SIGKILL it if it has not exited after `grace_s` seconds; return once it is gone."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def aws_env(endpoint_url: str, region: str = "us-east-1") -> dict[str, str]:
    """Environment variables that point boto3 (here or in a child process) at the local server with fake keys."""
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
    }

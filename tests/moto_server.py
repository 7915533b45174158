"""A real `moto_server` on a free loopback port, started and stopped by its own handle, for server tests."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def moto_server(start_timeout_s: float = 30.0) -> Iterator[str]:
    """Run `moto_server` on 127.0.0.1, yield its endpoint URL, and always stop it.

    The server is a subprocess of its own (not an in-process mock), so the code under test talks HTTP to it through
    boto3's ordinary configuration (`AWS_ENDPOINT_URL`).
    """
    port = free_port()
    exe = Path(sys.executable).with_name("moto_server")
    cmd = [str(exe), "-H", "127.0.0.1", "-p", str(port)] if exe.exists() else [
        sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def aws_env(endpoint_url: str, region: str = "us-east-1") -> dict[str, str]:
    """Environment variables that point boto3 (in this process or a child) at the local server with fake keys."""
    return {
        "AWS_ENDPOINT_URL": endpoint_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
    }


def reset(endpoint_url: str) -> None:
    """Drop every resource the server holds (moto's reset API), so tests sharing one server start clean."""
    req = urllib.request.Request(endpoint_url + "/moto-api/reset", method="POST")
    urllib.request.urlopen(req, timeout=5).close()

"""`python -m worker demo` end to end (small slides), and that its moto_server is stopped on success and on Ctrl-C."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]



def moto_url(output: str) -> str:
    m = re.search(r"moto_server is up at (http://127\.0\.0\.1:\d+)", output)
    assert m, output
    return m.group(1)


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url + "/moto-api/", timeout=2).close()
        return True
    except OSError:
        return False


def clean_env() -> dict[str, str]:
    """The demo must not need (or pick up) the test session's AWS settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


SHARED_SLIDE = ROOT.parent / "shared" / "real-slides" / "CMU-1-Small-Region.svs"


def test_demo_runs_end_to_end_and_stops_its_server(tmp_path):
    out = tmp_path / "demo"
    env = dict(clean_env(), GPUBURST_CACHE=str(tmp_path / "cache"))
    if not SHARED_SLIDE.is_file():
        # No shared data here: a cache holding no slide and no download keeps the test offline and fast.
        env["PIP_NO_INDEX"] = "1"
    r = subprocess.run([sys.executable, "-m", "worker", "demo", "--out", str(out), "--slides", "2", "--size", "1024",
                        "--device", "cpu"], cwd=ROOT, capture_output=True, text=True, timeout=150, env=env)
    text = r.stdout
    assert r.returncode == 0, text + r.stderr
    # the results table: one row per slide, each done, with numbers in it
    header = next(line for line in text.splitlines() if line.strip().startswith("slide "))
    for col in ("tiles seen", "tissue %", "class areas", "seconds", "status"):
        assert col in header
    rows = [line for line in text.splitlines() if re.match(r"\s+slide-0[12]\s+\d+\s+\d+\.\d", line)]
    assert len(rows) == 2 and all("done (message received 1x)" in row for row in rows), text
    assert "redelivered slide-01: skipped, not processed twice" in text
    # the malformed message sits in the dead-letter queue with its reason
    assert re.search(r"reason: contract violation: body=.*is not JSON", text), text
    assert "work queue now: 0 visible, 0 in flight" in text
    for name in ("slide-01", "slide-02"):
        for suffix in (".overlay.ome.tif", ".preview.png", ".json"):
            assert (out / "results" / f"{name}{suffix}").stat().st_size > 0
    if SHARED_SLIDE.is_file():  # the real 20x H&E scan is analysed beside the synthetic ones
        assert "a real scan: Aperio SVS, 20x H&E" in text and "copied from" in text
        assert re.search(r"\n\s+CMU-1-Small-Region\s+\d+\s+\d+\.\d.*done \(message received 1x\)", text), text
        assert (out / "results" / "CMU-1-Small-Region.overlay.ome.tif").stat().st_size > 0
        assert (out / "results" / "previews.png").stat().st_size > 0
        assert re.search(r"Demo finished in \d+\.\d s\. 3/3 slides done, 1 message\(s\) in the dead-letter queue", text)
    else:
        assert "(no real slide this time: " in text
        assert re.search(r"Demo finished in \d+\.\d s\. 2/2 slides done, 1 message\(s\) in the dead-letter queue", text)
    assert not answers(moto_url(text))


def test_ctrl_c_stops_the_consumer_and_the_server(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "worker", "demo", "--out", str(tmp_path / "demo"), "--slides", "1",
                          "--size", "1024", "--device", "cpu"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env={**clean_env(), "PYTHONUNBUFFERED": "1"},
                         start_new_session=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 90
        for line in p.stdout:
            lines.append(line)
            if "slide.received" in line or time.monotonic() > deadline:
                break
        assert any("slide.received" in x for x in lines), "".join(lines)
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        rest, _ = p.communicate(timeout=60)
        lines.append(rest)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
    text = "".join(lines)
    assert p.returncode == 130, text
    assert "consumer.stopping why=SIGINT" in text
    assert not answers(moto_url(text))


def test_a_killed_demo_leaves_no_server_behind(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "worker", "demo", "--out", str(tmp_path / "demo"), "--slides", "1",
                          "--size", "1024", "--device", "cpu"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env={**clean_env(), "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    try:
        for line in p.stdout:
            lines.append(line)
            if "moto_server is up" in line:
                break
        p.kill()  # SIGKILL: no finally blocks run in the demo
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    url = moto_url("".join(lines))
    deadline = time.monotonic() + 10
    while answers(url) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not answers(url)

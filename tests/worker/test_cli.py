"""`python -m worker` as a user runs it: the GPU self-check, usage errors, infer, bench, and the worker image recipe."""
from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sqs_helpers import aws_child_env  # noqa: E402

from worker import cli  # noqa: E402


def run_worker(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m worker ARGS` from the repo root; killed (by subprocess.run) when it overruns `timeout`."""
    import os

    return subprocess.run([sys.executable, "-m", "worker", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def cuda_usable() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@pytest.mark.skipif("cuda_usable()", reason="this machine has a usable GPU; the no-GPU exit cannot be observed here")
def test_consume_with_device_cuda_and_no_gpu_exits_3_with_one_line_at_once():
    r = run_worker("consume", "--queue-url", "http://127.0.0.1:9/nowhere", "--device", "cuda", timeout=60)
    assert r.returncode == cli.EXIT_NO_GPU
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "no usable NVIDIA GPU" in lines[0]
    assert r.stdout == ""


@pytest.mark.skipif("cuda_usable()", reason="this machine has a usable GPU")
def test_device_env_var_is_the_default():
    r = run_worker("consume", "--queue-url", "http://127.0.0.1:9/nowhere", env={"DEVICE": "cuda"}, timeout=60)
    assert r.returncode == cli.EXIT_NO_GPU and "no usable NVIDIA GPU" in r.stderr


@pytest.mark.parametrize("args,fragment", [
    (["--visibility-timeout", "60", "--visibility-extension-interval", "60"],
     "--visibility-extension-interval=60.0: must be > 0 and < --visibility-timeout=60"),
    (["--wait-time", "25"], "--wait-time=25: must be 0-20 s"),
    (["--max-messages", "0"], "--max-messages=0: must be at least 1"),
])
def test_consume_usage_errors_exit_2_with_one_line(args, fragment):
    r = run_worker("consume", "--queue-url", "http://127.0.0.1:9/q", *args, timeout=60)
    assert r.returncode == cli.EXIT_USAGE
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"python -m worker consume: error: {fragment}"), r.stderr


def test_consume_without_a_queue_url_exits_2(monkeypatch):
    monkeypatch.delenv("QUEUE_URL", raising=False)
    assert cli.main(["consume"]) == cli.EXIT_USAGE


def test_visibility_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("VISIBILITY_TIMEOUT", "300")
    monkeypatch.setenv("VISIBILITY_EXTENSION_INTERVAL", "45")
    monkeypatch.setenv("GRACE_PERIOD", "120")
    monkeypatch.setenv("QUEUE_URL", "http://q/1/work")
    s = cli.consume_settings(cli.build_parser().parse_args(["consume", "--mode", "service"]))
    assert (s.queue_url, s.visibility_timeout_s, s.visibility_extension_interval_s, s.grace_period_s, s.mode) == (
        "http://q/1/work", 300, 45.0, 120.0, "service")
    s = cli.consume_settings(cli.build_parser().parse_args(["consume", "--visibility-timeout", "90"]))
    assert s.visibility_timeout_s == 90  # a flag beats the environment


def test_consume_reports_a_missing_queue_in_one_line_and_exits_1(aws):
    r = run_worker("consume", "--queue-url", f"{aws}/123456789012/no-such-queue", "--device", "cpu",
                   env=aws_child_env(aws), timeout=90)
    assert r.returncode == cli.EXIT_FAILURE, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "consume.failed" in last and ("NonExistentQueue" in last or "QueueDoesNotExist" in last), last
    assert "Traceback" not in r.stderr


def test_progress_bar_plain_text():
    buf = io.StringIO()
    bar = cli.ProgressBar("S1", stream=buf, min_interval_s=0)
    bar(0, 10)
    bar(10, 10)
    bar.close()
    lines = buf.getvalue().splitlines()
    assert lines[-1].startswith("S1 [##############################] 100.0%  10/10 tiles")
    bar("not", "numbers")  # ignored, never raises


def test_bench_prints_run_bench_as_indented_json(monkeypatch, capsys):
    import worker.bench

    seen = {}

    def fake_run_bench(quick, device):
        seen.update(quick=quick, device=device)
        return {"device": device, "tiles_per_s": 12.5}

    monkeypatch.setattr(worker.bench, "run_bench", fake_run_bench)
    assert cli.main(["bench", "--quick", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert out == json.dumps({"device": "cpu", "tiles_per_s": 12.5}, indent=2) + "\n"
    assert seen == {"quick": True, "device": "cpu"}


def test_infer_writes_three_outputs_shows_progress_and_prints_where(tmp_path):
    from worker.synthetic import write_synthetic_slide

    slide = write_synthetic_slide(tmp_path / "S-7.ome.tif", width=1024, height=1024, seed=3)
    out = tmp_path / "out"
    r = run_worker("infer", str(slide), "--out", str(out), "--device", "cpu", timeout=120)
    assert r.returncode == 0, r.stderr
    for suffix in (".overlay.ome.tif", ".preview.png", ".json"):
        assert (out / f"S-7{suffix}").is_file()
        assert str(out / f"S-7{suffix}") in r.stdout
    assert re.search(r"S-7 \[#+\.*\] +\d+\.\d%", r.stderr), r.stderr
    assert "100.0%" in r.stderr


def test_infer_uncalibrated_slide_is_one_line_exit_1_and_mpp_um_rescues_it(tmp_path):
    from worker.synthetic import write_synthetic_slide

    slide = write_synthetic_slide(tmp_path / "nocal.tif", width=1024, height=1024, seed=4, ome=False,
                                  calibrated=False)
    r = run_worker("infer", str(slide), "--out", str(tmp_path / "o"), "--device", "cpu", timeout=120)
    assert r.returncode == cli.EXIT_FAILURE
    err = [line for line in r.stderr.splitlines() if line.startswith("python -m worker infer: error:")]
    assert len(err) == 1 and "nocal.tif" in err[0], r.stderr
    assert "Traceback" not in r.stderr
    r = run_worker("infer", str(slide), "--out", str(tmp_path / "o"), "--device", "cpu", "--mpp-um", "0.25",
                   timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "o" / "nocal.json").read_text())["mpp_um"] == 0.25


# --- the image recipe ----------------------------------------------------------------------------------------
DOCKERFILE = (ROOT / "worker" / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def test_dockerfile_base_image_is_a_build_arg_without_default():
    ins = instructions()
    assert ins[0] == ("ARG", "BASE_IMAGE")
    assert ins[1] == ("FROM", "${BASE_IMAGE}")
    assert not re.search(r"nvidia/cuda", DOCKERFILE), "no CUDA base image: torch's wheels bring CUDA"


def test_dockerfile_tells_the_nvidia_toolkit_what_to_mount_and_which_driver_it_needs():
    envs = " ".join(rest for op, rest in instructions() if op == "ENV")
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in envs
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=13.0"' in envs


def test_dockerfile_runs_python_m_worker_as_uid_10001_with_scratch_env():
    ins = dict((op, rest) for op, rest in instructions() if op in ("USER", "ENTRYPOINT", "CMD", "WORKDIR"))
    assert ins["USER"] == "10001:10001"
    assert json.loads(ins["ENTRYPOINT"]) == ["python", "-m", "worker"]
    assert json.loads(ins["CMD"]) == ["consume", "--mode", "job"]
    assert ins["WORKDIR"] == "/app"
    envs = " ".join(rest for op, rest in instructions() if op == "ENV")
    for var in ("HOME=/scratch", "TMPDIR=/scratch", "PYTHONDONTWRITEBYTECODE=1"):
        assert var in envs
    runs = [rest for op, rest in instructions() if op == "RUN"]
    layers = sorted(p.name for p in (ROOT / "worker" / "image").glob("[0-9][0-9]-*.txt"))
    installs = [r for r in runs if "pip install" in r]
    # One RUN (one image layer) per lock file, in order, each hash-checked, wheels only, no resolver at build time.
    assert [re.search(r"source=worker/image/([^,]+),", r).group(1) for r in installs] == layers
    for r in installs:
        assert "--require-hashes" in r and "--no-deps" in r and "--only-binary=:all:" in r
    assert "pip check" in installs[-1]  # the layers together are the whole closure
    runs = " ".join(runs)
    assert "compileall" in runs  # bytecode at build time: the root filesystem is read-only at run time


def test_dockerfile_user_comes_after_every_run():
    ops = [op for op, _ in instructions()]
    assert max(i for i, op in enumerate(ops) if op == "RUN") < ops.index("USER")

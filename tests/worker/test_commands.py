"""`python -m worker` as a user runs it: the GPU self-check, usage errors, infer, bench, package-model."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_helpers import CPU, random_rgb  # noqa: E402
from sqs_helpers import aws_child_env  # noqa: E402

from worker import commands  # noqa: E402
from worker.models.loading import load_model  # noqa: E402
from worker.models.tinyseg import TinySegNet  # noqa: E402


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
    assert r.returncode == commands.EXIT_NO_GPU
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "no usable NVIDIA GPU" in lines[0]
    assert r.stdout == ""


@pytest.mark.skipif("cuda_usable()", reason="this machine has a usable GPU")
def test_device_env_var_is_the_default():
    r = run_worker("consume", "--queue-url", "http://127.0.0.1:9/nowhere", env={"DEVICE": "cuda"}, timeout=60)
    assert r.returncode == commands.EXIT_NO_GPU and "no usable NVIDIA GPU" in r.stderr


@pytest.mark.parametrize("args,fragment", [
    (["--visibility-timeout", "60", "--visibility-extension-interval", "60"],
     "--visibility-extension-interval=60.0: must be > 0 and < --visibility-timeout=60"),
    (["--wait-time", "25"], "--wait-time=25: must be 0-20 s"),
    (["--max-messages", "0"], "--max-messages=0: must be at least 1"),
])
def test_consume_usage_errors_exit_2_with_one_line(args, fragment):
    r = run_worker("consume", "--queue-url", "http://127.0.0.1:9/q", *args, timeout=60)
    assert r.returncode == commands.EXIT_USAGE
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"python -m worker consume: error: {fragment}"), r.stderr


def test_consume_without_a_queue_url_exits_2(monkeypatch):
    monkeypatch.delenv("QUEUE_URL", raising=False)
    assert commands.main(["consume"]) == commands.EXIT_USAGE


def test_visibility_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("VISIBILITY_TIMEOUT", "300")
    monkeypatch.setenv("VISIBILITY_EXTENSION_INTERVAL", "45")
    monkeypatch.setenv("GRACE_PERIOD", "120")
    monkeypatch.setenv("QUEUE_URL", "http://q/1/work")
    s = commands.consume_settings(commands.build_parser().parse_args(["consume", "--mode", "service"]))
    assert (s.queue_url, s.visibility_timeout_s, s.visibility_extension_interval_s, s.grace_period_s, s.mode) == (
        "http://q/1/work", 300, 45.0, 120.0, "service")
    s = commands.consume_settings(commands.build_parser().parse_args(["consume", "--visibility-timeout", "90"]))
    assert s.visibility_timeout_s == 90  # a flag beats the environment


def test_slide_limits_come_from_the_environment(monkeypatch):
    from worker.slides.limits import SlideLimits

    monkeypatch.setenv("QUEUE_URL", "http://q/1/work")
    monkeypatch.setenv("SLIDE_MAX_PIXELS", "2e10")
    monkeypatch.setenv("SLIDE_MAX_FILE_BYTES", "10GiB")
    s = commands.consume_settings(commands.build_parser().parse_args(["consume"]))
    assert s.slide_limits == SlideLimits(max_pixels=20_000_000_000, max_file_bytes=10 * 2**30)


@pytest.mark.parametrize("command", ["consume", "infer"])
def test_a_bad_slide_limit_variable_exits_2_with_one_line_naming_it(monkeypatch, capsys, tmp_path, command):
    monkeypatch.setenv("SLIDE_MAX_TILE_PX", "big")
    slide = tmp_path / "s.tif"
    slide.write_bytes(b"II*\x00")
    args = ["consume", "--queue-url", "http://127.0.0.1:9/q"] if command == "consume" else [
        "infer", str(slide), "--out", str(tmp_path / "out")]
    assert commands.main(args) == commands.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err == (f"python -m worker {command}: error: SLIDE_MAX_TILE_PX='big': must be a whole number >= 1 "
                   f"(e.g. 40000000000 or 4e10)")
    assert not (tmp_path / "out").exists()  # refused before any work


def test_infer_applies_the_environments_limits_in_one_line_exit_1(tmp_path):
    from worker.devtools.synthetic import write_synthetic_slide

    slide = write_synthetic_slide(tmp_path / "S-8.ome.tif", width=1024, height=1024, seed=3)
    r = run_worker("infer", str(slide), "--out", str(tmp_path / "o"), "--device", "cpu",
                   env={"SLIDE_MAX_PIXELS": "1000000"}, timeout=120)
    assert r.returncode == commands.EXIT_FAILURE, r.stderr
    err = [line for line in r.stderr.splitlines() if line.startswith("python -m worker infer: error:")]
    assert err == [f"python -m worker infer: error: {slide}: directory 0 declares 1024 × 1024 px (1.0e6 px) over the "
                   f"limit of 1.0e6 px (SLIDE_MAX_PIXELS)"], r.stderr


def test_consume_reports_a_missing_queue_in_one_line_and_exits_1(aws):
    r = run_worker("consume", "--queue-url", f"{aws}/123456789012/no-such-queue", "--device", "cpu",
                   env=aws_child_env(aws), timeout=90)
    assert r.returncode == commands.EXIT_FAILURE, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "consume.failed" in last and ("NonExistentQueue" in last or "QueueDoesNotExist" in last), last
    assert "Traceback" not in r.stderr


def test_bench_prints_run_bench_as_indented_json(monkeypatch, capsys):
    import worker.devtools.bench

    seen = {}

    def fake_run_bench(quick, device, precision):
        seen.update(quick=quick, device=device, precision=precision)
        return {"device": device, "tiles_per_s": 12.5}

    monkeypatch.setattr(worker.devtools.bench, "run_bench", fake_run_bench)
    monkeypatch.delenv("PRECISION", raising=False)
    assert commands.main(["bench", "--quick", "--device", "cpu", "--precision", "fp32"]) == 0
    out = capsys.readouterr().out
    assert out == json.dumps({"device": "cpu", "tiles_per_s": 12.5}, indent=2) + "\n"
    assert seen == {"quick": True, "device": "cpu", "precision": "fp32"}


def test_infer_writes_three_outputs_shows_progress_and_prints_where(tmp_path):
    from worker.devtools.synthetic import write_synthetic_slide

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
    from worker.devtools.synthetic import write_synthetic_slide

    slide = write_synthetic_slide(tmp_path / "nocal.tif", width=1024, height=1024, seed=4, ome=False,
                                  calibrated=False)
    r = run_worker("infer", str(slide), "--out", str(tmp_path / "o"), "--device", "cpu", timeout=120)
    assert r.returncode == commands.EXIT_FAILURE
    err = [line for line in r.stderr.splitlines() if line.startswith("python -m worker infer: error:")]
    assert len(err) == 1 and "nocal.tif" in err[0], r.stderr
    assert "Traceback" not in r.stderr
    r = run_worker("infer", str(slide), "--out", str(tmp_path / "o"), "--device", "cpu", "--mpp-um", "0.25",
                   timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "o" / "nocal.json").read_text())["mpp_um"] == 0.25


# --- the model: by path or s3:// URI, pinned by digest (the S3 runs of infer are in models/test_model_store.py) -----


def test_model_settings_come_from_flags_and_the_environment(monkeypatch):
    digest = "ab" * 32
    monkeypatch.setenv("QUEUE_URL", "http://q/1/work")
    monkeypatch.setenv("MODEL_URI", "s3://lab-models/seg.pt2")
    monkeypatch.setenv("MODEL_SHA256", digest.upper())
    monkeypatch.setenv("MODEL_CACHE_DIR", "/nvme/models")
    monkeypatch.setenv("MODEL_CACHE_MAX_BYTES", "50GiB")
    s = commands.consume_settings(commands.build_parser().parse_args(["consume"]))
    assert (s.model_path, s.model_sha256, s.model_cache_dir, s.model_cache_max_bytes) == (
        "s3://lab-models/seg.pt2", digest, "/nvme/models", 50 * 2**30)
    s = commands.consume_settings(commands.build_parser().parse_args(["consume", "--model", "lab.pt2"]))
    assert s.model_path == "lab.pt2"  # a flag beats the environment


@pytest.mark.parametrize("args,env,fragment", [
    (["--model-sha256", "xyz"], {}, "--model-sha256='xyz': must be 64 hexadecimal digits"),
    (["--model", "s3://lab-models/seg.pt2"], {}, "--model='s3://lab-models/seg.pt2': an S3 model needs --model-sha256"),
    ([], {"MODEL_URI": "s3://m/a.pt2", "MODEL_PATH": "b.pt2"}, "MODEL_URI='s3://m/a.pt2' and MODEL_PATH='b.pt2': both"),
    ([], {"MODEL_CACHE_MAX_BYTES": "big"}, "MODEL_CACHE_MAX_BYTES='big': must be a whole number of bytes"),
])
def test_consume_model_usage_errors_exit_2_with_one_line(monkeypatch, capsys, args, env, fragment):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert commands.main(["consume", "--queue-url", "http://127.0.0.1:9/q", *args]) == commands.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"python -m worker consume: error: {fragment}") and err.count("\n") == 1, err


def test_consume_refuses_a_wrong_model_digest_before_receiving_any_message(aws):
    import boto3

    from worker.models.loading import BUILTIN_WEIGHTS

    s3, sqs = boto3.client("s3"), boto3.client("sqs")
    s3.create_bucket(Bucket="lab-models")
    s3.put_object(Bucket="lab-models", Key="seg.pt2", Body=BUILTIN_WEIGHTS.read_bytes())
    url = sqs.create_queue(QueueName="work")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"slide": "s3://in/a.svs", "output": "s3://out/"}))
    real = hashlib.sha256(BUILTIN_WEIGHTS.read_bytes()).hexdigest()
    r = run_worker("consume", "--queue-url", url, "--device", "cpu", "--model", "s3://lab-models/seg.pt2",
                   "--model-sha256", "0" * 64, env=aws_child_env(aws), timeout=120)
    assert r.returncode == commands.EXIT_FAILURE, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "consume.failed error=ModelDigestMismatch" in last and "0" * 64 in last and real in last, r.stderr
    got = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["ApproximateReceiveCount"])["Messages"]
    assert got[0]["Attributes"]["ApproximateReceiveCount"] == "1"  # this is its first receive: the worker took none


# --- python -m worker package-model --------------------------------------------------------------------------------


def test_package_model_command_writes_a_loadable_pt2(tmp_path, capsys):
    torch.manual_seed(4)
    net = TinySegNet().eval()
    sd = tmp_path / "weights.pt"
    torch.save({"state_dict": net.state_dict()}, sd)
    out = tmp_path / "lab.pt2"
    rc = commands.main(["package-model", "--module", "worker.models.tinyseg:TinySegNet", "--state-dict", str(sd),
                        "--out", str(out),
                   "--classes", "background,nuclei,vessel", "--input-mpp-um", "0.5", "--mean", "0.5,0.5,0.5",
                   "--std", "0.25,0.25,0.25", "--colors", "0,0,0;1,2,3;4,5,6", "--name", "lab", "--version", "3"])
    assert rc == commands.EXIT_OK
    printed = capsys.readouterr().out
    assert f"{out}: lab 3, classes background, nuclei, vessel; 256 px tiles at 0.5 µm/px" in printed
    m = load_model(out, CPU)
    assert (m.name, m.version, m.input_mpp_um, m.colors[2]) == ("lab", "3", 0.5, (4, 5, 6))
    assert type(m.module) is TinySegNet  # the factory's class, so the eager rebuild applies
    rgb = random_rgb(1)
    with torch.inference_mode():
        assert torch.allclose(m.module(m.prepare(rgb)), net(m.prepare(rgb)), atol=1e-4)  # the --state-dict weights


@pytest.mark.parametrize("args, fragment", [
    (["--input-mpp-um", "100"], "input_mpp_um=100.0: must be"),
    (["--input-mpp-um", "0.5", "--mean", "0.5,0.5"], "--mean='0.5,0.5': expected 3 comma-separated numbers, got 2"),
    (["--input-mpp-um", "0.5", "--classes", "background"], "classes=['background']: must list 2-256 classes"),
])
def test_package_model_command_errors_are_one_line_exit_2(tmp_path, capsys, args, fragment):
    out = tmp_path / "m.pt2"
    base = ["package-model", "--module", "worker.models.tinyseg:TinySegNet", "--out", str(out),
            "--classes", "background,a,b"]
    assert commands.main(base + args) == commands.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m worker package-model: error: ") and fragment in err and "\n" not in err
    assert not out.exists()

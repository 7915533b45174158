"""scripts/build_image.py (`make image`): builder detection, its commands, the CA it hands pip, the size table."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from components import catalogue

ROOT = Path(__file__).resolve().parents[2]


def load():
    spec = importlib.util.spec_from_file_location("build_image", ROOT / "scripts" / "build_image.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bi = load()


def probe_of(working: set[tuple[str, ...]]):
    return lambda cmd: tuple(cmd) in working


def test_the_first_usable_builder_wins_and_docker_needs_buildx_and_a_daemon():
    every = {c for probes in bi.PROBES.values() for c in probes}
    assert bi.detect_builder(probe_of(every)) == "docker"
    no_daemon = every - {("docker", "info")}
    assert bi.detect_builder(probe_of(no_daemon)) == "podman"  # a docker client without a daemon (this machine)
    assert bi.detect_builder(probe_of({("buildah", "version")})) == "buildah"
    assert bi.detect_builder(probe_of(set())) is None
    assert bi.detect_builder(probe_of(no_daemon), "docker") is None
    assert bi.detect_builder(probe_of(every), "buildah") == "buildah"


def test_buildah_builds_are_run_and_saved_with_podman():
    assert bi.runner_for("docker", lambda t: False) == "docker"
    assert bi.runner_for("buildah", lambda t: t == "podman") == "podman"
    assert bi.runner_for("buildah", lambda t: False) is None


def test_no_builder_prints_one_line_naming_what_to_install(monkeypatch, capsys):
    monkeypatch.setattr(bi, "_probe", lambda cmd: False)
    assert bi.main(["--skip-build"]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "install docker" in out[0] and "podman" in out[0] and "buildah" in out[0]


@pytest.mark.parametrize("ref, drop, want", [
    ("python:3.11", True, "docker.io/library/python:3.11"),
    ("python:3.11-slim@sha256:ab", True, "docker.io/library/python@sha256:ab"),
    ("python:3.11-slim@sha256:ab", False, "docker.io/library/python:3.11-slim@sha256:ab"),
    ("lab/worker:1", True, "docker.io/lab/worker:1"),
    ("localhost/gpuburst-standin-base:bookworm", True, "localhost/gpuburst-standin-base:bookworm"),
    ("registry.example:5000/a/b:1@sha256:cd", True, "registry.example:5000/a/b@sha256:cd"),
])
def test_image_references_are_fully_qualified(ref, drop, want):
    assert bi.qualify_image(ref, drop_tag_with_digest=drop) == want


def test_the_catalogues_base_is_qualified_by_digest_for_podman():
    got = bi.qualify_image(catalogue.WORKER_BASE_IMAGE, drop_tag_with_digest=True)
    assert got == "docker.io/library/python@" + catalogue.WORKER_BASE_IMAGE.split("@")[1]


def test_pip_config_cert_prefers_the_environments_setting():
    listing = ":env:.cert='/env/ca.pem'\nglobal.cert='/etc/ca.pem'\nglobal.timeout='60'\n"
    assert bi.pip_config_cert(listing) == "/env/ca.pem"
    assert bi.pip_config_cert("global.cert='/etc/ca.pem'\n") == "/etc/ca.pem"
    assert bi.pip_config_cert("global.timeout='60'\n") is None


def test_the_ca_bundle_is_looked_up_in_pips_order_skipping_missing_files():
    files = {"/pip.pem", "/requests.pem", "/flag.pem", bi.SYSTEM_CA_BUNDLE}
    env = {"PIP_CERT": "/gone.pem", "REQUESTS_CA_BUNDLE": "/requests.pem"}
    assert bi.choose_ca_bundle(None, env, "/pip.pem", files.__contains__) == ("/pip.pem", "pip config cert")
    assert bi.choose_ca_bundle(None, env, None, files.__contains__) == ("/requests.pem", "$REQUESTS_CA_BUNDLE")
    assert bi.choose_ca_bundle(None, {}, None, files.__contains__) == (bi.SYSTEM_CA_BUNDLE, "system bundle")
    assert bi.choose_ca_bundle("/flag.pem", env, "/pip.pem", files.__contains__) == ("/flag.pem", "--ca-bundle")
    assert bi.choose_ca_bundle("none", env, "/pip.pem", files.__contains__)[0] is None
    assert bi.choose_ca_bundle(None, {}, None, lambda p: False)[0] is None
    with pytest.raises(ValueError, match=r"^--ca-bundle: '/typo.pem' is not a readable file$"):
        bi.choose_ca_bundle("/typo.pem", env, None, files.__contains__)


def test_containers_conf_stays_within_this_processes_hard_limits():
    text = bi.containers_conf(20000, 96365, "runc")
    assert 'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]' in text
    assert 'runtime = "runc"' in text
    assert "nofile=1024:1024" in bi.containers_conf(1024, 512, None)
    assert "[engine]" not in bi.containers_conf(1, 1, None)


def test_build_commands_pass_the_base_the_secret_and_keep_one_layer_per_run():
    kw = dict(tag="t", base_image="b", ca_bundle="/ca.pem", no_cache=False)
    for builder in bi.BUILDERS:
        cmd = bi.build_command(builder, **kw)
        assert cmd[-1] == "." and cmd[cmd.index("-f") + 1] == "worker/Dockerfile"
        assert cmd[cmd.index("--build-arg") + 1] == "BASE_IMAGE=b" and cmd[cmd.index("-t") + 1] == "t"
        assert cmd[cmd.index("--secret") + 1] == "id=pip-ca,src=/ca.pem"
        assert "--no-cache" not in cmd
    assert bi.build_command("buildah", **kw)[:3] == ["buildah", "build", "--layers"]
    assert "--ignorefile" in bi.build_command("podman", **kw)  # the Dockerfile's own .dockerignore keeps .venv out
    assert bi.build_command("docker", **kw)[:4] == ["docker", "buildx", "build", "--load"]
    bare = bi.build_command("podman", tag="t", base_image="b", ca_bundle=None, no_cache=True)
    assert "--secret" not in bare and "--no-cache" in bare


def test_the_smoke_test_runs_as_10001_on_a_read_only_root_without_network():
    slide = ROOT / "x" / "CMU-1-Small-Region.svs"
    for runner in ("docker", "podman"):
        cmd = bi.smoke_command(runner, image="img", slide=slide, name="n")
        assert cmd[:3] == [runner, "run", "--rm"]
        assert cmd[cmd.index("--user") + 1] == "10001:10001" and "--read-only" in cmd
        assert cmd[cmd.index("--network") + 1] == "none"
        assert cmd[cmd.index("--tmpfs") + 1].startswith("/scratch:rw,")
        assert cmd[cmd.index("-v") + 1] == f"{slide}:/slides/CMU-1-Small-Region.svs:ro"
        assert cmd[cmd.index("img") + 1:] == ["infer", "/slides/CMU-1-Small-Region.svs", "--out", "/scratch/out",
                                              "--device", "cpu"]
    assert "--read-only-tmpfs=false" in bi.smoke_command("podman", image="i", slide=slide, name="n")
    assert "--read-only-tmpfs=false" not in bi.smoke_command("docker", image="i", slide=slide, name="n")


def test_smoke_verdict_needs_exit_0_and_the_slides_summary_line():
    out = ("device: cpu\nCMU-1-Small-Region: 71 tissue tiles, tissue 34.8%, 0.8 s with gpuburst-tinyseg 2.0.0 on cpu\n"
           "stages: model load 2.5 s\n")
    ok, line = bi.smoke_verdict(0, out, "", "CMU-1-Small-Region")
    assert ok and line.startswith("CMU-1-Small-Region: 71 tissue tiles")
    assert bi.smoke_verdict(1, out, "", "CMU-1-Small-Region")[0] is False
    ok, why = bi.smoke_verdict(0, "device: cpu\n", "", "CMU-1-Small-Region")
    assert not ok and why.endswith("(last line: device: cpu)")
    err = 'ERROR infer.failed detail="No usable temporary directory found in [\'/scratch\']"\n'
    ok, why = bi.smoke_verdict(1, "device: cpu\n", err, "CMU-1-Small-Region")
    assert not ok and why.startswith("infer exited 1 ") and "No usable temporary directory" in why


def test_podman_measures_what_a_push_sends_and_docker_its_saved_layers():
    assert bi.save_command("podman", "i", Path("/o")) == ["podman", "push", "--quiet", "--compression-format",
                                                          "gzip", "i", "oci:/o"]
    assert bi.save_command("docker", "i", Path("/o")) == ["docker", "save", "i"]
    assert "push" in bi.measure_method("podman") and "zlib" in bi.measure_method("docker")


def test_the_standin_base_is_debian_12_minbase_with_python_and_a_path():
    boot, imp = bi.standin_commands("podman", Path("/r"), "localhost/b", "http://mirror")
    assert boot[:2] == ["debootstrap", "--variant=minbase"] and boot[-3:] == ["bookworm", "/r", "http://mirror"]
    assert {"python3", "python3-venv", "ca-certificates"} <= set(boot[2].removeprefix("--include=").split(","))
    assert imp[:2] == ["podman", "import"] and imp[-2:] == ["-", "localhost/b"]
    assert f"ENV PATH={bi.DEFAULT_PATH}" in imp  # an imported root filesystem has no PATH; useradd lives in sbin


def test_compare_rows_covers_every_catalogue_layer_and_the_total():
    cat = {"10-a.txt": 100, "20-b.txt": 200}
    rows = bi.compare_rows({"10-a.txt": 110, "20-b.txt": 190, "base": 5}, cat)
    assert rows == [("10-a.txt", 110, 100, pytest.approx(10.0)), ("20-b.txt", 190, 200, pytest.approx(-5.0)),
                    ("Python layers total", 300, 300, pytest.approx(0.0))]
    with pytest.raises(ValueError, match=r"\['20-b.txt'\] of WORKER_IMAGE_LAYER_BYTES were not measured"):
        bi.compare_rows({"10-a.txt": 1}, cat)
    assert bi.drift_failures(rows, None) == [] and bi.drift_failures(rows, 5.0) == ["10-a.txt +10.0 %"]
    table = bi.format_table(rows, {"10-a.txt": (3_000_000, 12, 500)}).splitlines()
    assert table[1].split() == ["10-a.txt", "0.0", "0.0", "+10.0%", "3.0", "12"]


def test_the_catalogue_layers_are_the_lock_files():
    assert set(catalogue.WORKER_IMAGE_LAYER_BYTES) == {p.name for p in (ROOT / "worker" / "image").glob("*.txt")}


def test_make_image_passes_the_base_and_the_ca_bundle_to_the_script():
    out = subprocess.run(["make", "-n", "image", "BASE_IMAGE=localhost/b", "CA_BUNDLE=/ca.pem"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    command = " ".join(w for w in out.stdout.split() if w != "\\")  # the recipe's continued lines, joined
    assert "scripts/build_image.py --base-image localhost/b --ca-bundle /ca.pem" in command
    plain = subprocess.run(["make", "-n", "image"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    assert "scripts/build_image.py" in plain and "--base-image" not in plain and "--ca-bundle" not in plain


def test_help_explains_the_offline_standin_base():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_image.py"), "--help"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "debootstrap --variant=minbase" in out.stdout and "--standin-base" in out.stdout


def saved_with(hits=(), placeholders=(), env=()):
    ia = sys.modules["image_archive"]
    layer = ia.LayerStats("l.tar", secret_hits=tuple(hits), secret_placeholders=tuple(placeholders))
    return ia.SavedImage(layers=[layer], config={"config": {"Env": list(env)}})


def test_the_ca_verdict_names_every_leak_and_passes_only_a_clean_image():
    ia = sys.modules["image_archive"]
    needle = ia.Needle("ab" * 32, 1234)
    leaks, verdict = bi._secret_verdict(saved_with(placeholders=["run/secrets/pip-ca"]), needle)
    assert leaks == [] and verdict.startswith("in none of the 1 layers") and "empty mount point" in verdict
    leaks, verdict = bi._secret_verdict(saved_with(hits=["etc/ssl/proxy.pem"], env=["PIP_CERT=/run/secrets/pip-ca"]),
                                        needle)
    assert leaks == ["l.tar: etc/ssl/proxy.pem", "image config Env PIP_CERT"]
    assert verdict == "FOUND in l.tar: etc/ssl/proxy.pem; image config Env PIP_CERT"


def test_ci_builds_and_smoke_tests_the_image_with_make_image_on_worker_changes():
    text = (ROOT / ".github" / "workflows" / "worker-image.yml").read_text()
    on = text.split("\njobs:", 1)[0]
    assert on.count('- "worker/**"') == 2  # pull requests and pushes to main, each with its paths filter
    assert "make image" in text and "--max-drift-pct" in text and "fetch_real_slide" in text
    uses = [line.split("uses:", 1)[1].strip() for line in text.splitlines() if "uses:" in line]
    assert uses and all(re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+|[0-9a-f]{40})", u) for u in uses), uses

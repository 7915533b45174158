"""The GPU worker's container image: an immutable-tag ECR repository and a docker-build image pushed to it by digest.

The tag is derived from a content hash of the worker sources, the Dockerfile and the build inputs
(`source_digest`), so rebuilding the same sources produces the same tag (and the same layers from the registry
cache) while any change produces a new one: with immutable tags a tag can never be re-pointed at other bits.
Workloads reference the image by digest (`image_ref` = `<repositoryUrl>@sha256:...`), never by tag.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws

from .catalogue import WORKER_BASE_IMAGE
from .recipe import DOCKERFILE, WORKER_DIR, default_context, is_copied
from .spec.extras import missing_message
from .spec.validation import ConfigError, Rule, is_int_between, names_its_errors, validate

try:  # the `platform` extra (spec/extras.py): a workload stack never imports this module
    import pulumi_docker_build as docker_build
except ModuleNotFoundError as _missing:
    if _missing.name != "pulumi_docker_build":
        raise
    raise ModuleNotFoundError(missing_message("pulumi_docker_build", "gpuburst.WorkerImage (the worker image build)"),
                              name=_missing.name) from None

WORKER_PLATFORM = "linux/amd64"
"""The one platform the worker is built for: the GPU instance families the NodePool allows are all x86-64."""

CACHE_TAG = "cache"
"""Tag of the BuildKit registry cache image (`<repo>:cache`): the only tag exempt from immutability, since every
build rewrites it."""

TAG_PREFIX = "src-"
"""Prefix of derived tags: `src-` + the first 16 hex digits of `source_digest`."""

BASE_IMAGE_ARG = "GPUBURST_WORKER_IMAGE"
"""The build argument a lab's own build (`gpuburst:workerBuild`) is handed: the built-in worker image this stack
built, by digest; the lab's Dockerfile's last stage starts `FROM ${GPUBURST_WORKER_IMAGE}`."""

_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_REPO = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")


@dataclass
class WorkerImageArgs:
    """Inputs of a WorkerImage."""

    context: str = field(default_factory=default_context)
    """Build context directory, relative to the Pulumi program's working directory or absolute. Default: the packaged
    recipe (`recipe.worker_recipe_dir()`): `gpuburst/recipe` installed, the repository root in this repository
    (written `.` when the program runs there). A lab that builds its own image passes its own folder."""
    dockerfile: str = DOCKERFILE
    """Dockerfile path relative to `context`. Default `worker/Dockerfile`."""
    source_paths: list[str] = field(default_factory=lambda: [WORKER_DIR])
    """Files or directories (relative to `context`) whose contents, with the Dockerfile, make the derived tag.
    Default `["worker"]`: everything the Dockerfile copies must be listed here, or a change to it would not change
    the tag (and the push of a different image under an existing immutable tag would fail)."""
    tag: str | None = None
    """Image tag (letters, digits, `_.-`, ≤ 128, not `cache`). Default None: `src-` + 16 hex digits of
    `source_digest` over `source_paths`, the Dockerfile, the base image and the platform."""
    repository_name: str | None = None
    """ECR repository name (lowercase). Default None: auto-named from the resource name."""
    keep_tagged_images: int = 10
    """Tagged images the lifecycle policy keeps, newest first (1..1000). Default 10: enough to roll back."""
    untagged_expiry_days: int = 7
    """Days after which untagged images (old cache manifests) expire (1..3650). Default 7."""
    tags: dict[str, str] = field(default_factory=dict)
    """Extra AWS tags on the repository. Default none."""
    build_args: dict[str, pulumi.Input[str]] | None = None
    """Docker build arguments. Default None: the built-in recipe's (`build_args()`: BASE_IMAGE, the pinned base). A
    lab's build (`lab_image_args`) gets BASE_IMAGE_ARG instead. Values that are Outputs do not enter the derived tag:
    pass `tag` (as `lab_image_args` does) so a change of them still makes a new one."""


RULES: tuple[Rule, ...] = (
    Rule("context", lambda v: isinstance(v, str) and Path(v).is_dir(), "an existing directory (the build context)"),
    Rule("tag", lambda v: v is None or (isinstance(v, str) and bool(_TAG.match(v)) and v != CACHE_TAG),
         f"None or a tag of letters, digits, '_', '.', '-' (at most 128, not starting with '.' or '-', not "
         f"'{CACHE_TAG}', which the build cache uses)"),
    Rule("repository_name", lambda v: v is None or (isinstance(v, str) and 2 <= len(v) <= 256 and bool(_REPO.match(v))),
         "None or an ECR repository name: lowercase letters, digits, and '.', '_', '-', '/' between them"),
    Rule("keep_tagged_images", is_int_between(1, 1000), "an int in 1..1000"),
    Rule("untagged_expiry_days", is_int_between(1, 3650), "an int of days in 1..3650"),
)


def validate_args(args: WorkerImageArgs) -> None:
    """Raise ConfigError (one line naming field and value) for the first bad field; paths must exist."""
    validate({k: v for k, v in vars(args).items() if k != "build_args"}, RULES)
    ctx = Path(args.context)
    if not (ctx / args.dockerfile).is_file():
        raise ConfigError("dockerfile", args.dockerfile, f"a file under the context {args.context!r}")
    if not isinstance(args.source_paths, list) or not args.source_paths:
        raise ConfigError("source_paths", args.source_paths, "a non-empty list of paths under the context")
    for p in args.source_paths:
        if not isinstance(p, str) or not (ctx / p).exists():
            raise ConfigError("source_paths", p, f"a file or directory under the context {args.context!r}")


def _files(path: Path) -> Iterable[Path]:
    if path.is_file():
        yield path
        return
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if is_copied(d, is_dir=True))
        for f in sorted(filenames):
            if is_copied(f, is_dir=False):
                yield Path(dirpath) / f


def source_digest(paths: Iterable[str | os.PathLike[str]], *, root: str | os.PathLike[str] | None = None,
                  extra: Mapping[str, str] | None = None) -> str:
    """SHA-256 (hex) of the files under `paths`: their paths relative to `root`, executable bits and contents.

    Directories are walked recursively (caches and `.pyc` files skipped by `recipe.is_copied`, the filter the
    wheel's copy of worker/ uses too); the order of `paths` and where the checkout (or the installed recipe) lives
    do not matter. `extra` (e.g. build args, platform) is hashed too, so a new base image makes a new digest even
    when no file changed. Raises FileNotFoundError for a path that does not exist.
    """
    base = Path(root) if root is not None else Path.cwd()
    entries: dict[str, tuple[bool, str]] = {}
    for p in paths:
        path = base / p if not Path(p).is_absolute() else Path(p)
        if not path.exists():
            raise FileNotFoundError(f"source path {str(p)!r} does not exist under {str(base)!r}")
        for f in _files(path):
            rel = Path(os.path.relpath(f, base)).as_posix()
            executable = bool(f.stat().st_mode & stat.S_IXUSR)
            entries[rel] = (executable, hashlib.sha256(f.read_bytes()).hexdigest())
    h = hashlib.sha256()
    for rel in sorted(entries):
        executable, content = entries[rel]
        h.update(f"file\0{rel}\0{'x' if executable else '-'}\0{content}\n".encode())
    for k in sorted(extra or {}):
        h.update(f"extra\0{k}\0{(extra or {})[k]}\n".encode())
    return h.hexdigest()


def build_args() -> dict[str, str]:
    """Docker build args of the worker image: the pinned CUDA base image from the catalogue."""
    return {"BASE_IMAGE": WORKER_BASE_IMAGE}


def derived_tag(args: WorkerImageArgs) -> str:
    """The image tag: `args.tag`, or `src-<16 hex>` of the sources, Dockerfile, build args and platform."""
    if args.tag is not None:
        return args.tag
    extra = {f"build-arg:{k}": v for k, v in build_args().items()}
    extra["platform"] = WORKER_PLATFORM
    digest = source_digest([*args.source_paths, args.dockerfile], root=args.context, extra=extra)
    return TAG_PREFIX + digest[:16]


_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(?P<image>\S+)(?:\s+AS\s+(?P<name>\S+))?\s*$", re.I)


def final_base(dockerfile_text: str) -> str | None:
    """The image the last stage of a Dockerfile starts FROM, followed through earlier stages' names (`FROM x AS
    base` ... `FROM base`), as written (`${ARG}` unexpanded); None when it has no FROM."""
    stages: dict[str, str] = {}
    last: str | None = None
    for line in dockerfile_text.splitlines():
        m = _FROM.match(line)
        if m:
            image = m.group("image")
            last = stages.get(image.lower(), image)
            if m.group("name"):
                stages[m.group("name").lower()] = last
    return last


def lab_base_problem(dockerfile: Path) -> str | None:
    """Why the lab's Dockerfile is not built on the gpuburst worker image (its last stage's FROM is not
    `${GPUBURST_WORKER_IMAGE}`), or None."""
    base = final_base(dockerfile.read_text(encoding="utf-8", errors="replace"))
    if base in (f"${{{BASE_IMAGE_ARG}}}", f"${BASE_IMAGE_ARG}"):
        return None
    return (f"a Dockerfile whose last stage starts `ARG {BASE_IMAGE_ARG}` / `FROM ${{{BASE_IMAGE_ARG}}}` (the "
            f"gpuburst worker image this stack builds; its last stage starts FROM {base!r}), or declare the CUDA of "
            "the image it builds with gpuburst:workerImageCuda so the policy pack can judge it")


def lab_image_args(context: str, dockerfile: str, *, base: WorkerImage | None,
                   tags: dict[str, str] | None = None) -> WorkerImageArgs:
    """WorkerImageArgs of a lab's own build (`gpuburst:workerBuild`): the lab's context and Dockerfile, the whole
    context hashed into the tag, and, with `base` (the built-in image this stack builds), BASE_IMAGE_ARG = its
    reference by digest, whose tag joins the hash (a new base makes a new lab image). ConfigError naming
    `gpuburst:workerBuild.<key>` when a path does not exist or, with `base`, the Dockerfile does not build on it."""
    ctx = Path(context)
    if not ctx.is_dir():
        raise ConfigError("gpuburst:workerBuild.context", context, "an existing folder, relative to the project folder")
    if not (ctx / dockerfile).is_file():
        raise ConfigError("gpuburst:workerBuild.dockerfile", dockerfile, f"a file under the context {context!r}")
    if base is not None and (problem := lab_base_problem(ctx / dockerfile)):
        raise ConfigError("gpuburst:workerBuild.dockerfile", dockerfile, problem)
    extra = {"platform": WORKER_PLATFORM, **({"base": base.tag} if base is not None else {})}
    # The Dockerfile may live outside the context (`../Dockerfile`): hashed on its own too.
    tag = TAG_PREFIX + source_digest([".", dockerfile], root=ctx, extra=extra)[:16]
    return WorkerImageArgs(context=context, dockerfile=dockerfile, source_paths=["."], tag=tag,
                           build_args={BASE_IMAGE_ARG: base.image_ref} if base is not None else {},
                           tags=dict(tags or {}))


def lifecycle_policy(keep_tagged_images: int, untagged_expiry_days: int) -> dict[str, Any]:
    """The repository's lifecycle policy: keep the cache image, expire untagged images, keep the newest N tagged.

    Images referenced by a tagged image index (the platform image and its attestations) are not expired as
    untagged while the index lives; ECR keeps an index's children with it.
    """
    return {"rules": [
        {
            "rulePriority": 1,
            "description": f"Keep the build cache image (tag '{CACHE_TAG}')",
            "selection": {"tagStatus": "tagged", "tagPatternList": [CACHE_TAG], "countType": "imageCountMoreThan",
                          "countNumber": 1},
            "action": {"type": "expire"},
        },
        {
            "rulePriority": 2,
            "description": f"Expire untagged images {untagged_expiry_days} days after push (replaced cache manifests)",
            "selection": {"tagStatus": "untagged", "countType": "sinceImagePushed", "countUnit": "days",
                          "countNumber": untagged_expiry_days},
            "action": {"type": "expire"},
        },
        {
            "rulePriority": 3,
            "description": f"Keep the newest {keep_tagged_images} tagged images",
            "selection": {"tagStatus": "tagged", "tagPatternList": ["*"], "countType": "imageCountMoreThan",
                          "countNumber": keep_tagged_images},
            "action": {"type": "expire"},
        },
    ]}


@names_its_errors
class WorkerImage(pulumi.ComponentResource):
    """ECR repository (scan on push, immutable tags, KMS, lifecycle) + the worker image built and pushed to it."""

    repository: aws.ecr.Repository
    image: docker_build.Image
    repository_url: pulumi.Output[str]
    image_ref: pulumi.Output[str]
    digest: pulumi.Output[str]
    tag: str

    def __init__(self, name: str, args: WorkerImageArgs | None = None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        args = args or WorkerImageArgs()
        validate_args(args)
        super().__init__("gpuburst:index:WorkerImage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.tag = derived_tag(args)

        self.repository = aws.ecr.Repository(
            f"{name}-repo", name=args.repository_name,
            image_scanning_configuration={"scan_on_push": True},
            # Every tag is immutable except the build cache's, which BuildKit rewrites on each build (with plain
            # IMMUTABLE the second build's cache export fails: the tag already exists).
            image_tag_mutability="IMMUTABLE_WITH_EXCLUSION",
            image_tag_mutability_exclusion_filters=[{"filter": CACHE_TAG, "filter_type": "WILDCARD"}],
            encryption_configurations=[{"encryption_type": "KMS"}],
            force_delete=False, tags=dict(args.tags), opts=child)
        aws.ecr.LifecyclePolicy(
            f"{name}-lifecycle", repository=self.repository.name,
            policy=json.dumps(lifecycle_policy(args.keep_tagged_images, args.untagged_expiry_days)), opts=child)

        token = aws.ecr.get_authorization_token_output(registry_id=self.repository.registry_id,
                                                       opts=pulumi.InvokeOutputOptions(parent=self))
        url = self.repository.repository_url
        cache_ref = pulumi.Output.concat(url, ":", CACHE_TAG)
        context = str(Path(args.context))
        self.image = docker_build.Image(
            f"{name}-image",
            context=docker_build.BuildContextArgs(location=context),
            dockerfile=docker_build.DockerfileArgs(location=str(Path(args.context) / args.dockerfile)),
            platforms=[docker_build.Platform(WORKER_PLATFORM)],
            build_args=args.build_args if args.build_args is not None else build_args(),
            tags=[pulumi.Output.concat(url, ":", self.tag)],
            push=True,
            registries=[docker_build.RegistryArgs(
                address=url, username=token.user_name, password=pulumi.Output.secret(token.password))],
            cache_from=[docker_build.CacheFromArgs(registry=docker_build.CacheFromRegistryArgs(ref=cache_ref))],
            # image_manifest + OCI media types: ECR rejects BuildKit's default cache manifest list.
            cache_to=[docker_build.CacheToArgs(registry=docker_build.CacheToRegistryArgs(
                ref=cache_ref, image_manifest=True, oci_media_types=True, mode=docker_build.CacheMode.MAX))],
            opts=child)

        self.repository_url = url
        self.digest = self.image.digest
        self.image_ref = pulumi.Output.concat(url, "@", self.image.digest)
        self.register_outputs({
            "repositoryUrl": self.repository_url, "repositoryArn": self.repository.arn, "tag": self.tag,
            "digest": self.digest, "imageRef": self.image_ref,
        })

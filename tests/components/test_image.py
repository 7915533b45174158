"""WorkerImage: `source_digest`, the lifecycle policy, the validation table, the repo + build under mocks, and the
default build context (the packaged recipe, components/recipe.py)."""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pulumi
import pytest

from components import catalogue, recipe
from components import image as im
from components.image import WorkerImage, WorkerImageArgs
from components.spec.validation import ConfigError
from components.synth.mocks import FAKE_ACCOUNT, RealisticMocks, run_under_mocks

REPO_URL_PREFIX = f"{FAKE_ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/"
ROOT = Path(__file__).resolve().parents[2]


class _Mocks(RealisticMocks):
    """RealisticMocks whose invokes answer `(outputs, [])`: pulumi 3.272's MockMonitor iterates the failures, so the
    shared mocks' `(outputs, None)` raises TypeError on any invoke (reported to the lead; harmless once fixed)."""

    def call(self, args):
        ret = super().call(args)
        if isinstance(ret, tuple):
            return ret[0], list(ret[1] or [])
        return ret


@pytest.fixture
def context(tmp_path: Path) -> Path:
    """A build context shaped like the repository: worker/ with a Dockerfile and sources."""
    (tmp_path / "worker" / "pkg").mkdir(parents=True)
    (tmp_path / "worker" / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY worker /app/worker\n")
    (tmp_path / "worker" / "main.py").write_text("print('infer')\n")
    (tmp_path / "worker" / "pkg" / "model.py").write_text("WEIGHTS = 1\n")
    (tmp_path / "worker" / "requirements.txt").write_text("numpy==2.3.5\n")
    return tmp_path


def _digest(ctx: Path, **kw) -> str:
    return im.source_digest(["worker"], root=ctx, **kw)


# --------------------------------------------------------------------------------------------------------------------
# source_digest
# --------------------------------------------------------------------------------------------------------------------

def test_digest_is_stable_and_independent_of_location_and_order(context, tmp_path_factory):
    d = _digest(context)
    assert len(d) == 64 and d == _digest(context)
    elsewhere = tmp_path_factory.mktemp("copy") / "repo"
    shutil.copytree(context, elsewhere)
    assert _digest(elsewhere) == d
    assert (im.source_digest(["worker/main.py", "worker/pkg"], root=context)
            == im.source_digest(["worker/pkg", "worker/main.py"], root=context))


@pytest.mark.parametrize("change", ["edit", "add", "rename", "chmod"])
def test_digest_changes_with_any_source_change(context, change):
    before = _digest(context)
    f = context / "worker" / "pkg" / "model.py"
    if change == "edit":
        f.write_text("WEIGHTS = 2\n")
    elif change == "add":
        (context / "worker" / "pkg" / "new.py").write_text("")
    elif change == "rename":
        f.rename(f.with_name("model2.py"))
    else:
        f.chmod(0o755)
    assert _digest(context) != before


def test_digest_ignores_caches_and_bytecode(context):
    before = _digest(context)
    (context / "worker" / "__pycache__").mkdir()
    (context / "worker" / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"\0")
    (context / "worker" / "pkg" / "model.pyc").write_bytes(b"\0")
    assert _digest(context) == before


def test_digest_includes_extra_inputs(context):
    assert _digest(context, extra={"BASE_IMAGE": "a"}) != _digest(context, extra={"BASE_IMAGE": "b"})


def test_digest_of_a_missing_path_raises(context):
    with pytest.raises(FileNotFoundError, match="nope"):
        im.source_digest(["nope"], root=context)


def test_derived_tag_reuses_the_tag_for_the_same_sources_and_changes_with_the_base_image(context, monkeypatch):
    args = WorkerImageArgs(context=str(context))
    tag = im.derived_tag(args)
    assert tag.startswith("src-") and len(tag) == 4 + 16
    assert im.derived_tag(args) == tag
    (context / "worker" / "Dockerfile").write_text("FROM scratch\n")
    assert im.derived_tag(args) != tag                       # the Dockerfile is hashed too
    tag2 = im.derived_tag(args)
    monkeypatch.setattr(im, "WORKER_BASE_IMAGE", "nvidia/cuda:13.0.0-runtime-ubuntu24.04")
    assert im.derived_tag(args) != tag2                      # so is the base image
    assert im.derived_tag(replace(args, tag="v1.2.3")) == "v1.2.3"


# --------------------------------------------------------------------------------------------------------------------
# Lifecycle policy
# --------------------------------------------------------------------------------------------------------------------

def test_lifecycle_policy_keeps_cache_expires_untagged_keeps_last_n():
    rules = im.lifecycle_policy(12, 5)["rules"]
    assert [r["rulePriority"] for r in rules] == [1, 2, 3]
    cache, untagged, tagged = (r["selection"] for r in rules)
    assert cache == {"tagStatus": "tagged", "tagPatternList": ["cache"], "countType": "imageCountMoreThan",
                     "countNumber": 1}
    assert untagged == {"tagStatus": "untagged", "countType": "sinceImagePushed", "countUnit": "days",
                        "countNumber": 5}
    assert tagged == {"tagStatus": "tagged", "tagPatternList": ["*"], "countType": "imageCountMoreThan",
                      "countNumber": 12}
    assert all(r["action"] == {"type": "expire"} for r in rules)


# --------------------------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [
    ("tag", "cache"),
    ("tag", "-bad"),
    ("tag", "a:b"),
    ("repository_name", "Worker"),
    ("repository_name", "worker//x"),
    ("keep_tagged_images", 0),
    ("untagged_expiry_days", 3651),
    ("dockerfile", "worker/Missing.Dockerfile"),
    ("source_paths", "worker/absent"),
])
def test_each_bad_field_is_a_one_line_error_naming_field_and_value(context, field, value):
    args = replace(WorkerImageArgs(context=str(context)), **{field: value})
    if field == "source_paths":
        args = replace(args, source_paths=["worker", value])
    with pytest.raises(ConfigError) as e:
        im.validate_args(args)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{field}: {value!r} is not valid: ")


def test_missing_context_is_refused(tmp_path):
    with pytest.raises(ConfigError) as e:
        im.validate_args(WorkerImageArgs(context=str(tmp_path / "absent")))
    assert str(e.value).startswith(f"context: {str(tmp_path / 'absent')!r} is not valid: ")


# --------------------------------------------------------------------------------------------------------------------
# Under mocks
# --------------------------------------------------------------------------------------------------------------------

def _run(args: WorkerImageArgs):
    def program():
        w = WorkerImage("worker", args)
        pulumi.export("image_ref", w.image_ref)
        pulumi.export("repository_url", w.repository_url)
        pulumi.export("tag", w.tag)
    return run_under_mocks(program, mocks=_Mocks())


def _unsecret(value):
    """Inputs holding a secret arrive as the engine's secret envelope; return the plain value."""
    if isinstance(value, dict) and "value" in value and len(value) == 2:
        return value["value"]
    return value


def test_repository_settings(context):
    res = _run(WorkerImageArgs(context=str(context), repository_name="gpuburst/worker"))
    (repo,) = res.monitor.by_type("aws:ecr/repository:Repository")
    p = repo.properties
    assert p["name"] == "gpuburst/worker"
    assert p["imageScanningConfiguration"] == {"scanOnPush": True}
    # Immutable for every tag but the build cache's (which each build rewrites).
    assert p["imageTagMutability"] == "IMMUTABLE_WITH_EXCLUSION"
    assert p["imageTagMutabilityExclusionFilters"] == [{"filter": "cache", "filterType": "WILDCARD"}]
    assert p["encryptionConfigurations"] == [{"encryptionType": "KMS"}]
    assert p["forceDelete"] is False
    (lc,) = res.monitor.by_type("aws:ecr/lifecyclePolicy:LifecyclePolicy")
    assert lc.properties["repository"] == "gpuburst/worker"
    assert json.loads(lc.properties["policy"]) == im.lifecycle_policy(10, 7)


def test_image_build_inputs(context):
    args = WorkerImageArgs(context=str(context), repository_name="worker")
    res = _run(args)
    (img,) = res.monitor.by_type("docker-build:index:Image")
    p = img.properties
    url = REPO_URL_PREFIX + "worker"
    assert p["buildArgs"] == {"BASE_IMAGE": catalogue.WORKER_BASE_IMAGE}
    assert p["platforms"] == ["linux/amd64"]
    assert p["context"] == {"location": str(context)}
    assert p["dockerfile"] == {"location": str(context / "worker" / "Dockerfile")}
    assert p["push"] is True
    assert p["tags"] == [f"{url}:{im.derived_tag(args)}"]
    assert p["cacheFrom"] == [{"registry": {"ref": f"{url}:cache"}}]
    (cache_to,) = p["cacheTo"]
    assert cache_to["registry"]["ref"] == f"{url}:cache"
    assert cache_to["registry"]["imageManifest"] is True
    assert cache_to["registry"]["ociMediaTypes"] is True
    assert cache_to["registry"]["mode"] == "max"
    (registry,) = _unsecret(p["registries"])
    assert registry == {"address": url, "username": "AWS", "password": "mock-ecr-token"}


def test_the_registry_password_is_a_secret(context):
    res = _run(WorkerImageArgs(context=str(context)))
    (img,) = res.monitor.by_type("docker-build:index:Image")
    assert "mock-ecr-token" not in json.dumps({k: v for k, v in img.properties.items() if k != "registries"})
    assert img.properties["registries"] != _unsecret(img.properties["registries"])  # wrapped as a secret


def test_image_ref_is_repository_at_digest(context):
    res = _run(WorkerImageArgs(context=str(context), repository_name="worker"))
    ref = res.outputs["image_ref"]
    assert isinstance(ref, str) and ref != "None"
    assert ref.startswith(REPO_URL_PREFIX + "worker@sha256:")
    assert len(ref.split("@sha256:")[1]) == 64
    assert res.outputs["repository_url"] == REPO_URL_PREFIX + "worker"
    assert res.outputs["tag"].startswith("src-")
    (comp,) = res.monitor.by_type("gpuburst:index:WorkerImage")
    assert all(r.parent == comp.urn for r in res.registrations if r is not comp)


def test_relative_paths_resolve_from_the_working_directory(context, monkeypatch):
    monkeypatch.chdir(context)
    res = _run(WorkerImageArgs(context="."))
    (img,) = res.monitor.by_type("docker-build:index:Image")
    assert img.properties["context"] == {"location": "."}
    assert img.properties["dockerfile"] == {"location": os.path.join("worker", "Dockerfile")}


# --------------------------------------------------------------------------------------------------------------------
# The default context: the packaged recipe (components/recipe.py)
# --------------------------------------------------------------------------------------------------------------------

def test_from_the_repository_root_the_default_context_is_dot_as_before(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert WorkerImageArgs().context == "."
    res = _run(WorkerImageArgs())
    (img,) = res.monitor.by_type("docker-build:index:Image")
    assert img.properties["context"] == {"location": "."}
    assert img.properties["dockerfile"] == {"location": os.path.join("worker", "Dockerfile")}


def test_from_another_project_the_default_context_is_the_recipe_not_the_working_folder(tmp_path, monkeypatch):
    # What the platform's WorkerImageArgs(tags=...) meets in another project: no worker/ under the working folder.
    monkeypatch.chdir(tmp_path)
    args = WorkerImageArgs()
    assert Path(args.context) == recipe.worker_recipe_dir() == ROOT  # this repository (the editable install)
    im.validate_args(args)
    res = _run(args)
    (img,) = res.monitor.by_type("docker-build:index:Image")
    assert img.properties["dockerfile"] == {"location": str(ROOT / "worker" / "Dockerfile")}
    assert im.derived_tag(args) == im.derived_tag(WorkerImageArgs(context=str(ROOT)))


def _fake_package(tmp_path: Path, *, installed: bool, repository: bool) -> Path:
    package = tmp_path / "site" / "gpuburst"
    package.mkdir(parents=True)
    for where, present in ((package / "recipe", installed), (package.parent, repository)):
        if present:
            (where / "worker").mkdir(parents=True, exist_ok=True)
            (where / "worker" / "Dockerfile").write_text("FROM scratch\n")
    return package


@pytest.mark.parametrize("installed,repository,expected", [
    (True, True, "site/gpuburst/recipe"), (True, False, "site/gpuburst/recipe"), (False, True, "site"),
    (False, False, "site/gpuburst/recipe")])
def test_the_installed_recipe_wins_then_the_repository_root(tmp_path, installed, repository, expected):
    package = _fake_package(tmp_path, installed=installed, repository=repository)
    assert recipe.worker_recipe_dir(package) == tmp_path / expected


def test_the_default_context_is_relative_below_the_working_folder_else_absolute(tmp_path, monkeypatch):
    package = _fake_package(tmp_path, installed=True, repository=False)
    monkeypatch.chdir(tmp_path)
    assert recipe.default_context(package) == "site/gpuburst/recipe"
    monkeypatch.chdir(package / "recipe")
    assert recipe.default_context(package) == "."
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert recipe.default_context(package) == str((package / "recipe").resolve())


def test_a_broken_install_names_where_the_recipe_was_expected(tmp_path):
    package = _fake_package(tmp_path, installed=False, repository=False)
    with pytest.raises(ConfigError) as e:
        im.validate_args(WorkerImageArgs(context=recipe.default_context(package)))
    assert str(e.value).startswith(f"context: {str(package / 'recipe')!r} is not valid: ")


def test_the_digest_filter_is_the_recipe_copy_filter():
    assert recipe.is_copied("worker", is_dir=True) and not recipe.is_copied("__pycache__", is_dir=True)
    assert recipe.is_copied("Dockerfile", is_dir=False) and not recipe.is_copied("x.pyc", is_dir=False)


def test_a_missing_dockerfile_stops_the_program(context):
    (context / "worker" / "Dockerfile").unlink()
    with pytest.raises(ConfigError, match=r"^WorkerImage '[^']+': dockerfile: 'worker/Dockerfile' is not valid"):
        _run(WorkerImageArgs(context=str(context)))


# --------------------------------------------------------------------------------------------------------------------
# A lab's own build (gpuburst:workerBuild)
# --------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,base", [
    ("ARG GPUBURST_WORKER_IMAGE\nFROM ${GPUBURST_WORKER_IMAGE}\nCOPY m /m\n", "${GPUBURST_WORKER_IMAGE}"),
    ("FROM python:3.11 AS build\nRUN x\nfrom --platform=linux/amd64 $GPUBURST_WORKER_IMAGE\n",
     "$GPUBURST_WORKER_IMAGE"),
    ("FROM ${GPUBURST_WORKER_IMAGE} AS base\nFROM python:3.11 AS tools\nFROM base\n", "${GPUBURST_WORKER_IMAGE}"),
    ("FROM nvcr.io/nvidia/pytorch:25.01-py3\n", "nvcr.io/nvidia/pytorch:25.01-py3"),
    ("# no stage\n", None),
])
def test_final_base_follows_stage_names_to_the_last_stages_image(text, base):
    assert im.final_base(text) == base


def _lab(tmp_path: Path, dockerfile: str) -> Path:
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "Dockerfile").write_text(dockerfile)
    (tmp_path / "lab" / "model.pt2").write_bytes(b"weights")
    return tmp_path / "lab"


def test_a_lab_build_on_the_worker_image_is_handed_it_and_its_tag_follows_both(tmp_path, monkeypatch):
    lab = _lab(tmp_path, "ARG GPUBURST_WORKER_IMAGE\nFROM ${GPUBURST_WORKER_IMAGE}\nCOPY model.pt2 /opt/model.pt2\n")
    monkeypatch.chdir(tmp_path)
    seen = {}

    def program():
        base = WorkerImage("worker")
        args = im.lab_image_args("lab", "Dockerfile", base=base)
        seen["tag"], seen["base_tag"] = args.tag, base.tag
        WorkerImage("lab", args)
    res = run_under_mocks(program, mocks=_Mocks())
    images = {r.name: r.properties for r in res.monitor.by_type("docker-build:index:Image")}
    lab_build = images["lab-image"]
    assert set(lab_build["buildArgs"]) == {im.BASE_IMAGE_ARG}
    assert lab_build["buildArgs"][im.BASE_IMAGE_ARG].startswith(REPO_URL_PREFIX + "worker-repo@sha256:")
    assert lab_build["dockerfile"] == {"location": "lab/Dockerfile"} and lab_build["context"] == {"location": "lab"}
    assert lab_build["tags"][0].endswith(":" + seen["tag"])
    # The tag hashes the whole context and the base's tag: a new model or a new base makes a new image.
    before = im.lab_image_args("lab", "Dockerfile", base=None).tag
    (lab / "model.pt2").write_bytes(b"other weights")
    assert im.lab_image_args("lab", "Dockerfile", base=None).tag != before


def test_a_lab_build_not_on_the_worker_image_is_refused_unless_it_declares_its_cuda(tmp_path, monkeypatch):
    _lab(tmp_path, "FROM nvcr.io/nvidia/pytorch:25.01-py3\n")
    monkeypatch.chdir(tmp_path)

    def program():
        im.lab_image_args("lab", "Dockerfile", base=WorkerImage("worker"))
    with pytest.raises(ConfigError) as e:
        run_under_mocks(program, mocks=_Mocks())
    text = str(e.value)
    assert text.startswith("gpuburst:workerBuild.dockerfile: 'Dockerfile' is not valid: a Dockerfile whose last stage")
    assert "'nvcr.io/nvidia/pytorch:25.01-py3'" in text and "workerImageCuda" in text and "\n" not in text
    assert im.lab_image_args("lab", "Dockerfile", base=None).build_args == {}  # declared CUDA: no base handed


def test_a_lab_build_whose_paths_do_not_exist_is_refused_naming_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^gpuburst:workerBuild.context: 'lab' is not valid: an existing folder"):
        im.lab_image_args("lab", "Dockerfile", base=None)
    (tmp_path / "lab").mkdir()
    with pytest.raises(ConfigError, match=r"^gpuburst:workerBuild.dockerfile: 'lab.Dockerfile' is not valid: a file"):
        im.lab_image_args("lab", "lab.Dockerfile", base=None)


def test_a_lab_dockerfile_outside_its_context_is_found_and_hashed(tmp_path, monkeypatch):
    lab = _lab(tmp_path, "unused\n")
    (tmp_path / "recipe").mkdir()
    recipe = tmp_path / "recipe" / "Dockerfile"
    recipe.write_text("ARG GPUBURST_WORKER_IMAGE\nFROM ${GPUBURST_WORKER_IMAGE}\n")
    monkeypatch.chdir(tmp_path)
    before = im.lab_image_args("lab", "../recipe/Dockerfile", base=None)
    assert before.dockerfile == "../recipe/Dockerfile" and before.context == "lab" and lab.is_dir()
    recipe.write_text("ARG GPUBURST_WORKER_IMAGE\nFROM ${GPUBURST_WORKER_IMAGE}\nENV X=1\n")
    assert im.lab_image_args("lab", "../recipe/Dockerfile", base=None).tag != before.tag

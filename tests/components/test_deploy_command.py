"""`gpuburst deploy` against a real moto_server: the bundle (git-tracked files only), the upload, the build started on
that exact object version, the wait, and the one-line exit 2 on bad input or a missing runner.

moto 5 implements CodeBuild's CreateProject, BatchGetProjects, StartBuild and BatchGetBuilds, but its builds end
SUCCEEDED on the first BatchGetBuilds and it drops StartBuild's environmentVariablesOverride: the override is checked
on the request botocore sends, and the FAILED, FAULT and timed-out waits against a stand-in client (test_follow_*).
"""
from __future__ import annotations

import io
import subprocess
import zipfile
from pathlib import Path

import boto3
import pytest

from components import deploy_command as dc
from components.spec.deploy_runner import source_bucket_name

pytestmark = pytest.mark.slow  # git runs in a subprocess

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"
PROJECT = "gpuburst-ci-deploy"
BUCKET = source_bucket_name("gpuburst-ci", ACCOUNT, REGION)
KEY = "ci/source.zip"
PROG = "gpuburst deploy"


def _git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@example.org",
                           "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout.strip()


@pytest.fixture
def project(tmp_path) -> Path:
    """A git work tree holding a Pulumi project: tracked files, an untracked one, an ignored `.venv`, a force-added
    `out/` file, a tracked file edited after staging and one deleted from the working tree."""
    root = tmp_path / "repo"
    root.mkdir()
    files = {
        "Pulumi.yaml": "name: gpuburst\nruntime: python\n",
        "Pulumi.ci.yaml": "config:\n  aws:region: us-east-1\n  gpuburst:environment: ci\n"
                          "  gpuburst:token:\n    secure: AAABAJ0k\n",
        "__main__.py": "print('program')\n",
        "requirements.txt": "pulumi==3.272.0\n",
        "components/a.py": "A = 1\n",
        "scripts/run.sh": "#!/bin/sh\necho run\n",
        ".gitignore": ".venv/\nout/\n",
        "gone.txt": "deleted after staging\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "scripts/run.sh").chmod(0o755)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    (root / "out").mkdir()
    (root / "out/plan.json").write_text("{}\n")
    _git(root, "add", "-f", "out/plan.json")
    _git(root, "commit", "-qm", "init")
    (root / "components/a.py").write_text("A = 2  # edited, not committed\n")
    (root / "gone.txt").unlink()
    (root / "untracked.txt").write_text("never bundled\n")
    (root / ".venv/lib").mkdir(parents=True)
    (root / ".venv/lib/site.py").write_text("never bundled\n")
    return root


@pytest.fixture
def runner(aws) -> dict:
    """The runner as the component makes it, in moto: a versioned source bucket and the CodeBuild project."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET)
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    cb = boto3.client("codebuild", region_name=REGION)
    cb.create_project(name=PROJECT, source={"type": "S3", "location": f"{BUCKET}/{KEY}"},
                      artifacts={"type": "NO_ARTIFACTS"},
                      environment={"type": "LINUX_CONTAINER", "image": "aws/codebuild/amazonlinux-x86_64-standard:5.0",
                                   "computeType": "BUILD_GENERAL1_MEDIUM"},
                      serviceRole=f"arn:aws:iam::{ACCOUNT}:role/gpuburst-ci-deploy")
    return {"s3": s3, "codebuild": cb}


@pytest.fixture
def start_build_requests(monkeypatch) -> list[dict]:
    """The parameters of every StartBuild request the command sends (moto does not keep the overrides)."""
    sent: list[dict] = []
    real = dc.session_for

    def hooked(region):
        session = real(region)
        session.events.register("provide-client-params.codebuild.StartBuild",
                                lambda params, **_: sent.append(dict(params)))
        return session

    monkeypatch.setattr(dc, "session_for", hooked)
    return sent


def _bundle(s3) -> tuple[zipfile.ZipFile, dict]:
    obj = s3.get_object(Bucket=BUCKET, Key=KEY)
    return zipfile.ZipFile(io.BytesIO(obj["Body"].read())), obj


def test_deploy_uploads_the_tracked_files_and_follows_the_build(project, runner, start_build_requests, capsys):
    rc = dc.main(["--stack", "ci", "--project-dir", str(project), "--poll", "0.01"], PROG)
    out, err = capsys.readouterr()
    assert rc == 0, err
    zf, obj = _bundle(runner["s3"])
    assert sorted(zf.namelist()) == [".gitignore", "Pulumi.ci.yaml", "Pulumi.yaml", "__main__.py", "components/a.py",
                                     "requirements.txt", "scripts/run.sh"]
    assert zf.read("components/a.py") == b"A = 2  # edited, not committed\n"  # the working tree's copy
    assert (zf.getinfo("scripts/run.sh").external_attr >> 16) & 0o111  # still executable
    assert obj["Metadata"]["gpuburst-git-head"] == _git(project, "rev-parse", "HEAD")
    assert "gone.txt is tracked but not a file in the working tree" in err

    (req,) = start_build_requests
    assert req["projectName"] == PROJECT
    assert req["sourceVersion"] == obj["VersionId"]
    assert {v["name"]: v["value"] for v in req["environmentVariablesOverride"]} == {
        "GPUBURST_PULUMI_COMMAND": "up", "GPUBURST_STACK": "ci"}
    assert "buildspecOverride" not in req and "sourceLocationOverride" not in req
    assert f"-> s3://{BUCKET}/{KEY} (version {obj['VersionId']})" in out
    assert "  BUILD" in out and "log: " in out and out.rstrip().endswith(": SUCCEEDED")


def test_the_same_tree_makes_the_same_bundle_and_a_new_version(project, runner, start_build_requests):
    for _ in range(2):
        assert dc.main(["--stack", "ci", "--project-dir", str(project), "--command", "preview", "--no-wait"],
                       PROG) == 0
    versions = runner["s3"].list_object_versions(Bucket=BUCKET, Prefix=KEY)["Versions"]
    assert len(versions) == 2 and versions[0]["ETag"] == versions[1]["ETag"]
    assert sorted(r["sourceVersion"] for r in start_build_requests) == sorted(v["VersionId"] for v in versions)
    assert all({"name": "GPUBURST_PULUMI_COMMAND", "value": "preview", "type": "PLAINTEXT"}
               in r["environmentVariablesOverride"] for r in start_build_requests)


def test_a_bad_command_is_refused_in_one_line_before_any_aws_call(project, capsys, monkeypatch):
    monkeypatch.setattr(dc, "session_for", lambda region: pytest.fail("no AWS call for a bad command"))
    rc = dc.main(["--stack", "ci", "--project-dir", str(project), "--command", "apply"], PROG)
    _, err = capsys.readouterr()
    assert rc == 2
    assert err.count("\n") == 1
    assert "'apply'" in err and "up, preview, refresh, destroy" in err


def test_a_missing_project_is_exit_2_in_one_line(project, aws, capsys):
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    rc = dc.main(["--stack", "ci", "--project-dir", str(project)], PROG)
    _, err = capsys.readouterr()
    assert rc == 2
    assert err.count("\n") == 1 and f"no CodeBuild project '{PROJECT}'" in err
    assert boto3.client("s3", region_name=REGION).list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


def test_another_stacks_runner_is_refused(project, runner, capsys):
    rc = dc.main(["--stack", "ci", "--project-dir", str(project), "--source-bucket", "someone-elses-bucket"], PROG)
    _, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1
    assert f"{BUCKET}/{KEY}" in err and "someone-elses-bucket/ci/source.zip" in err


def test_an_unversioned_bucket_is_refused(project, runner, capsys):
    runner["s3"].put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Suspended"})
    rc = dc.main(["--stack", "ci", "--project-dir", str(project)], PROG)
    _, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1 and "keeps no object versions" in err


def test_flags_name_the_runner_without_a_stack_file(project, runner, start_build_requests, capsys):
    (project / "Pulumi.ci.yaml").unlink()
    rc = dc.main(["--stack", "ci", "--project-dir", str(project), "--runner-project", PROJECT,
                  "--source-bucket", BUCKET, "--no-wait"], PROG)
    assert rc == 0, capsys.readouterr().err
    assert len(start_build_requests) == 1
    rc = dc.main(["--stack", "ci", "--project-dir", str(project)], PROG)
    assert rc == 2 and "no Pulumi.ci.yaml" in capsys.readouterr().err


@pytest.mark.parametrize("argv,needle", [
    (["--command", "up"], "--stack"),
    (["--stack", "ci", "--wait", "0"], "--wait"),
    (["--stack", "bad stack"], "--stack"),
])
def test_bad_arguments_are_exit_2_in_one_line(project, argv, needle, capsys):
    rc = dc.main([*argv, "--project-dir", str(project)], PROG)
    _, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1 and needle in err


def test_a_folder_outside_git_is_exit_2(tmp_path, capsys):
    (tmp_path / "Pulumi.yaml").write_text("name: x\n")
    rc = dc.main(["--stack", "ci", "--project-dir", str(tmp_path)], PROG)
    _, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1 and "not a git work tree" in err


def test_bundle_members_are_the_tracked_files_only(project):
    members = dc.bundle_members(dc.tracked_files(project))
    assert "untracked.txt" not in members and not any(m.startswith((".venv/", "out/")) for m in members)
    buf = io.BytesIO()
    written, skipped = dc.write_bundle(project, members, buf)
    assert skipped == ["gone.txt"] and written == len(members) - 1
    again = io.BytesIO()
    dc.write_bundle(project, members, again)
    assert buf.getvalue() == again.getvalue()  # deterministic


# ------------------------------------------------------------------------------------ the wait, on a stand-in client --

class _Builds:
    """A stand-in CodeBuild client answering BatchGetBuilds from a list of snapshots."""

    def __init__(self, snapshots: list[dict]) -> None:
        self.snapshots, self.calls = snapshots, 0

    def batch_get_builds(self, ids):
        snap = self.snapshots[min(self.calls, len(self.snapshots) - 1)]
        self.calls += 1
        return {"builds": [{"id": ids[0], **snap}]}


def _phase(kind, status=None, took=None, why=None):
    p = {"phaseType": kind}
    if status:
        p["phaseStatus"] = status
    if took is not None:
        p["durationInSeconds"] = took
    if why:
        p["contexts"] = [{"statusCode": "COMMAND_EXECUTION_ERROR", "message": why}]
    return p


def test_follow_prints_each_phase_once_and_fails_on_failed():
    running = {"buildStatus": "IN_PROGRESS", "phases": [_phase("SUBMITTED", "SUCCEEDED", 0), _phase("INSTALL")],
               "logs": {"groupName": "/aws/codebuild/gpuburst-ci-deploy", "streamName": "ci/abc"}}
    failed = {"buildStatus": "FAILED", "phases": [
        _phase("SUBMITTED", "SUCCEEDED", 0), _phase("INSTALL", "SUCCEEDED", 40),
        _phase("PRE_BUILD", "SUCCEEDED", 60),
        _phase("BUILD", "FAILED", 300, "Error while executing command: case ... Reason: exit status 255")]}
    client, out, slept = _Builds([running, running, failed]), io.StringIO(), []
    rc = dc.follow(client, "gpuburst-ci-deploy:1", wait_s=600, poll_s=5, out=out, clock=lambda: 0.0,
                   sleep=slept.append)
    text = out.getvalue()
    assert rc == 1 and client.calls == 3 and slept == [5, 5]
    assert text.count("SUBMITTED") == 1 and text.count("INSTALL") == 1
    assert "log: group /aws/codebuild/gpuburst-ci-deploy stream ci/abc" in text
    assert "BUILD             FAILED     300 s  (Error while executing command" in text
    assert text.rstrip().endswith("gpuburst-ci-deploy:1: FAILED")


@pytest.mark.parametrize("status", ["FAULT", "TIMED_OUT", "STOPPED"])
def test_follow_is_exit_1_for_every_other_end(status):
    assert dc.follow(_Builds([{"buildStatus": status}]), "b:1", wait_s=60, poll_s=1, out=io.StringIO(),
                     clock=lambda: 0.0, sleep=lambda s: None) == 1


def test_follow_gives_up_when_the_wait_runs_out():
    now = [0.0]

    def sleep(s):
        now[0] += s

    out = io.StringIO()
    client = _Builds([{"buildStatus": "IN_PROGRESS"}])
    rc = dc.follow(client, "b:1", wait_s=30, poll_s=10, out=out, clock=lambda: now[0], sleep=sleep)
    assert rc == 1 and client.calls == 4 and "still IN_PROGRESS after 30 s" in out.getvalue()

"""`gpuburst deploy`: bundle the project's git-tracked files, upload them to the deploy runner and follow its build.

`deploy --stack NAME [--command up|preview|refresh|destroy] [--project-dir .] [--runner-project NAME]
[--source-bucket NAME] [--no-wait]` zips the files `git ls-files` lists under the project folder (the working tree's
copy, never `.venv/`, `out/`, `node_modules/`: spec.deploy_runner.bundle_members), puts the zip at
`<stack>/source.zip` in the runner's source bucket (the bucket's default SSE-KMS encrypts it), starts a build of the
runner's CodeBuild project on exactly that object version with GPUBURST_PULUMI_COMMAND and GPUBURST_STACK overridden,
and polls BatchGetBuilds, printing each finished phase and where the log is, until the build ends or the wait runs out.

Exit status: 0 when the build SUCCEEDED (or, with --no-wait, once it started); 1 when it ended otherwise (FAILED, FAULT,
TIMED_OUT, STOPPED) or was still running when the wait ran out; 2, with one line, on bad input or an AWS error (no such
project, no credentials, a bucket that is not the project's). It touches only the source bucket and CodeBuild (and STS
to learn the account), never the clinical buckets or the Kubernetes API, so it runs from anywhere with AWS
credentials allowed s3:PutObject on the bucket, kms:GenerateDataKey on the data key, and codebuild:BatchGetProjects,
StartBuild and BatchGetBuilds on the project: a laptop, or a GitHub-hosted runner.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from .spec.deploy_runner import (
    COMMAND_VAR,
    DEFAULT_COMMAND,
    PULUMI_COMMANDS,
    STACK_VAR,
    bundle_members,
    check_pulumi_command,
    check_stack_name,
    program_file,
    runner_name,
    source_bucket_name,
    source_object_key,
)
from .spec.validation import ConfigError

GIT_TIMEOUT_S = 60.0
"""Seconds a `git` call may take before the command gives up."""
DEFAULT_WAIT_S = 3 * 3600
"""Seconds to follow a build by default: the runner's build timeout (120 min) plus its queue timeout (60 min)."""
DEFAULT_POLL_S = 10.0
"""Seconds between two BatchGetBuilds calls."""
FINAL_STATUSES = ("SUCCEEDED", "FAILED", "FAULT", "TIMED_OUT", "STOPPED")
"""A build's statuses once it has ended (CodeBuild API Reference, Build.buildStatus)."""
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
"""Every entry's timestamp: the same files make the same zip, whenever and wherever they are bundled."""


class DeployError(Exception):
    """A bad input or an AWS answer the command cannot go on from, said in one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise DeployError(message)


@dataclass(frozen=True)
class Target:
    """Where a bundle goes and which project builds it."""

    project: str
    """The runner's CodeBuild project."""
    bucket: str
    """The runner's source bucket."""
    key: str
    """The bundle's key, `<stack>/source.zip`."""
    region: str | None
    """The stack's region (`aws:region`), None for the session's default."""


def parser(prog: str) -> argparse.ArgumentParser:
    """The command line of `deploy`."""
    p = _Parser(prog=prog, description="Bundle the project's git-tracked files, upload them to the in-VPC deploy "
                                       "runner's source bucket and run `pulumi <command>` there in a CodeBuild build, "
                                       "printing its phases until it ends (exit 0 SUCCEEDED, 1 otherwise, 2 on bad "
                                       "input or an AWS error).")
    p.add_argument("--stack", required=True, help="the Pulumi stack to deploy (its Pulumi.<stack>.yaml names the "
                                                  "environment and region the runner's names come from)")
    p.add_argument("--command", default=DEFAULT_COMMAND,
                   help=f"the Pulumi command the build runs: {', '.join(PULUMI_COMMANDS)} (default {DEFAULT_COMMAND})")
    p.add_argument("--project-dir", type=Path, default=Path("."),
                   help="the Pulumi project's folder, a git work tree: its tracked files are the bundle (default: .)")
    p.add_argument("--runner-project", default=None,
                   help="the runner's CodeBuild project (default: gpuburst-<environment>-deploy)")
    p.add_argument("--source-bucket", default=None,
                   help="the runner's source bucket (default: gpuburst-<environment>-deploy-<account>-<region>)")
    p.add_argument("--no-wait", action="store_true", help="start the build and exit 0 without following it")
    p.add_argument("--wait", type=float, default=DEFAULT_WAIT_S, metavar="SECONDS",
                   help=f"follow the build at most this long; still running then is exit 1 (default {DEFAULT_WAIT_S})")
    p.add_argument("--poll", type=float, default=DEFAULT_POLL_S, metavar="SECONDS",
                   help=f"seconds between two status calls (default {DEFAULT_POLL_S:g})")
    return p


def tracked_files(project_dir: Path, timeout_s: float = GIT_TIMEOUT_S) -> list[str]:
    """The files `git ls-files` lists under `project_dir` (relative to it), or DeployError."""
    try:
        proc = subprocess.run(["git", "-C", str(project_dir), "ls-files", "-z", "--cached"], capture_output=True,
                              timeout=timeout_s, check=False)
    except FileNotFoundError:
        raise DeployError("git is not installed: the bundle is the project's git-tracked files") from None
    except subprocess.TimeoutExpired:
        raise DeployError(f"git ls-files in {project_dir} took over {timeout_s:g} s") from None
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip().splitlines()
        raise DeployError(f"--project-dir {str(project_dir)!r}: not a git work tree ({why[0] if why else 'git'})")
    return [p for p in proc.stdout.decode("utf-8", errors="surrogateescape").split("\0") if p]


def git_head(project_dir: Path, timeout_s: float = GIT_TIMEOUT_S) -> str:
    """The commit checked out in `project_dir`, or `none` (no commit yet, or git unavailable)."""
    try:
        proc = subprocess.run(["git", "-C", str(project_dir), "rev-parse", "--verify", "-q", "HEAD"],
                              capture_output=True, timeout=timeout_s, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return "none"
    return proc.stdout.decode().strip() or "none" if proc.returncode == 0 else "none"


def write_bundle(project_dir: Path, members: list[str], out: IO[bytes]) -> tuple[int, list[str]]:
    """Zip `members` (paths relative to `project_dir`) into `out`, deterministically; (files written, members skipped
    because the working tree has no regular file there: deleted, or a submodule). A symlink is refused."""
    written, skipped = 0, []
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for member in members:
            path = project_dir / member
            if path.is_symlink():
                raise DeployError(f"{member}: a symlink; the bundle holds regular files only")
            if not path.is_file():
                skipped.append(member)
                continue
            info = zipfile.ZipInfo(member, date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            info.external_attr = (0o100000 | mode) << 16
            zf.writestr(info, path.read_bytes())
            written += 1
    return written, skipped


def stack_names(project_dir: Path, stack: str) -> tuple[str, str | None]:
    """(name prefix, region) from `Pulumi.<stack>.yaml`: `gpuburst-<gpuburst:environment>` (the environment defaults to
    the stack's name, as the program's config does) and `aws:region` (None when unset). Reads only those two keys, so
    a stack file with secrets is fine."""
    short = stack.rsplit("/", 1)[-1]
    path = project_dir / f"Pulumi.{short}.yaml"
    if not path.is_file():
        raise DeployError(f"--stack {stack!r}: no {path.name} in {project_dir} to take the runner's names from "
                          "(or pass --runner-project and --source-bucket)")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise DeployError(f"{path.name}: not valid YAML: {str(e).splitlines()[0]}") from None
    config = doc.get("config") if isinstance(doc, dict) else None
    config = config if isinstance(config, dict) else {}
    environment = config.get("gpuburst:environment", short)
    region = config.get("aws:region")
    if not isinstance(environment, str) or (region is not None and not isinstance(region, str)):
        raise DeployError(f"{path.name}: gpuburst:environment and aws:region must be plain strings")
    return f"gpuburst-{environment}", region


def resolve_target(args: argparse.Namespace, stack: str, account: Callable[[str], str],
                   default_region: Callable[[], str | None]) -> Target:
    """The project, bucket, key and region of a deploy: the flags where given, else the names the component derives
    from the stack file (`account(region)` is asked only when the bucket's name needs it)."""
    short = stack.rsplit("/", 1)[-1]
    prefix: str | None = None
    region: str | None = None
    if (args.project_dir / f"Pulumi.{short}.yaml").is_file() or args.runner_project is None \
            or args.source_bucket is None:
        prefix, region = stack_names(args.project_dir, stack)
    region = region or default_region()
    project = args.runner_project if args.runner_project is not None else runner_name(prefix)  # type: ignore[arg-type]
    if args.source_bucket is not None:
        bucket = args.source_bucket
    elif region is None:
        raise DeployError("no region: set aws:region in the stack file, or AWS_REGION")
    else:
        bucket = source_bucket_name(prefix, account(region), region)  # type: ignore[arg-type]
    return Target(project, bucket, source_object_key(stack), region)


def session_for(region: str | None) -> Any:
    """The boto3 session the command's clients come from (a seam the tests hook)."""
    import boto3

    return boto3.session.Session(region_name=region)


def check_project(codebuild: Any, target: Target) -> None:
    """DeployError unless the project exists and builds from `<bucket>/<key>` in S3."""
    found = codebuild.batch_get_projects(names=[target.project]).get("projects") or []
    if not found:
        raise DeployError(f"no CodeBuild project {target.project!r} in {target.region or 'the default region'} "
                          "(the bootstrap `up` creates the runner; or pass --runner-project)")
    source = found[0].get("source") or {}
    want = f"{target.bucket}/{target.key}"
    if source.get("type") != "S3" or source.get("location") != want:
        raise DeployError(f"project {target.project!r} builds from {source.get('type')} "
                          f"{source.get('location')!r}, not {want!r} (another stack's runner, or a wrong "
                          "--source-bucket)")


def upload(s3: Any, target: Target, body: IO[bytes], stack: str, head: str) -> str:
    """Put the bundle and return its version id (DeployError when the bucket keeps no versions)."""
    resp = s3.put_object(Bucket=target.bucket, Key=target.key, Body=body, ContentType="application/zip",
                         Metadata={"gpuburst-stack": stack, "gpuburst-git-head": head})
    version = resp.get("VersionId")
    if not version or version == "null":
        raise DeployError(f"s3://{target.bucket} keeps no object versions: a build must name the exact bundle it "
                          "runs (the runner's bucket is versioned; is this the right --source-bucket?)")
    return version


def start_build(codebuild: Any, target: Target, version: str, command: str, stack: str) -> dict[str, Any]:
    """Start a build of exactly that bundle version running `command` on `stack`."""
    return codebuild.start_build(
        projectName=target.project, sourceVersion=version,
        environmentVariablesOverride=[{"name": COMMAND_VAR, "value": command, "type": "PLAINTEXT"},
                                      {"name": STACK_VAR, "value": stack, "type": "PLAINTEXT"}])["build"]


def phase_lines(build: dict[str, Any], seen: set[str]) -> list[str]:
    """One line for each phase of `build` that has ended and is not in `seen` (which it updates), with the reason
    CodeBuild gives for a phase that did not succeed."""
    lines = []
    for phase in build.get("phases") or []:
        kind, status = phase.get("phaseType"), phase.get("phaseStatus")
        if not kind or not status or kind in seen:
            continue
        seen.add(kind)
        took = phase.get("durationInSeconds")
        line = f"  {kind:<17} {status:<10}" + (f" {took} s" if took is not None else "")
        reasons = [c.get("message") for c in phase.get("contexts") or [] if c.get("message")]
        if status != "SUCCEEDED" and reasons:
            line += f"  ({'; '.join(reasons)})"
        lines.append(line.rstrip())
    return lines


def log_line(build: dict[str, Any]) -> str | None:
    """Where the build's log is, once CodeBuild says (group and stream, else the console link), or None."""
    logs = build.get("logs") or {}
    if logs.get("groupName") and logs.get("streamName"):
        link = f" ({logs['deepLink']})" if logs.get("deepLink") else ""
        return f"log: group {logs['groupName']} stream {logs['streamName']}{link}"
    return f"log: {logs['deepLink']}" if logs.get("deepLink") else None


def follow(codebuild: Any, build_id: str, *, wait_s: float, poll_s: float, out: IO[str],
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> int:
    """Poll the build until it ends (0 SUCCEEDED, 1 otherwise) or `wait_s` runs out (1), printing its phases."""
    deadline = clock() + wait_s
    seen: set[str] = set()
    log_shown = False
    while True:
        builds = codebuild.batch_get_builds(ids=[build_id]).get("builds") or []
        if not builds:
            raise DeployError(f"build {build_id} not found")
        build = builds[0]
        for line in phase_lines(build, seen):
            print(line, file=out)
        where = None if log_shown else log_line(build)
        if where:
            print(where, file=out)
            log_shown = True
        status = build.get("buildStatus")
        if status in FINAL_STATUSES:
            print(f"build {build_id}: {status}", file=out)
            return 0 if status == "SUCCEEDED" else 1
        left = deadline - clock()
        if left <= 0:
            print(f"build {build_id}: still {status} after {wait_s:g} s; it goes on (see the log)", file=out)
            return 1
        sleep(min(poll_s, left))


def _aws_errors() -> tuple[type[BaseException], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def main(argv: list[str], prog: str) -> int:
    """Run `deploy` (see the module docstring); the exit status."""
    label = "deploy"
    aws_errors = _aws_errors()
    out = sys.stdout
    try:
        args = parser(prog).parse_args(argv)
        command = check_pulumi_command(args.command, "--command")
        stack = check_stack_name(args.stack, "--stack")
        if args.wait <= 0 or args.poll <= 0:
            raise ConfigError("--wait" if args.wait <= 0 else "--poll", args.wait if args.wait <= 0 else args.poll,
                              "a number of seconds above 0")
        members = bundle_members(tracked_files(args.project_dir))
        if program_file(".") not in members:
            raise DeployError(f"--project-dir {str(args.project_dir)!r}: no git-tracked Pulumi.yaml (the bundle's "
                              "root must be the Pulumi project)")
        target = resolve_target(
            args, stack, account=lambda region: session_for(region).client("sts").get_caller_identity()["Account"],
            default_region=lambda: session_for(None).region_name)
        session = session_for(target.region)
        codebuild = session.client("codebuild")
        check_project(codebuild, target)
        with tempfile.TemporaryFile() as fh:
            written, skipped = write_bundle(args.project_dir, members, fh)
            size = fh.tell()
            fh.seek(0)
            version = upload(session.client("s3"), target, fh, stack, git_head(args.project_dir))
        for member in skipped:
            print(f"deploy: {member} is tracked but not a file in the working tree: left out", file=sys.stderr)
        print(f"bundle: {written} files, {size} bytes -> s3://{target.bucket}/{target.key} (version {version})",
              file=out)
        build = start_build(codebuild, target, version, command, stack)
        print(f"build {build['id']}: pulumi {command} --stack {stack} in {target.project}", file=out)
        if args.no_wait:
            return 0
        return follow(codebuild, build["id"], wait_s=args.wait, poll_s=args.poll, out=out)
    except (ConfigError, DeployError) as e:
        print(f"{label}: {_one_line(e)}", file=sys.stderr)
        return 2
    except aws_errors as e:
        print(f"{label}: AWS: {_one_line(e)}", file=sys.stderr)
        return 2

"""The in-VPC deploy runner's pure parts: its names, the buildspec its builds run, and the source bundle's rules.

The runner (components/deploy_runner.py) is a CodeBuild project in the VPC's system subnets whose builds run `pulumi
up` (or preview, refresh, destroy) as a deployer role, so no deploy after the bootstrap needs a public EKS endpoint;
`gpuburst deploy` (components/deploy_command.py) zips the project's git-tracked files, uploads them to the runner's
source bucket and starts a build. Both derive the same names from the stack's name prefix (`gpuburst-<environment>`)
with the functions here.

The buildspec (`buildspec`) is the project's own, inline (a bundle cannot change it): it installs the pinned Pulumi CLI
with the official installer and checks its version, makes `.venv` from the program's requirements.txt (and the policy
pack's), logs in to the backend, selects the stack (never creates one) and runs the one command allowed by name in
GPUBURST_PULUMI_COMMAND — the shell matches the variable against the allow-list and never splices it into a command
line. The passphrase and the Pulumi Cloud token come from Secrets Manager through the buildspec's `env.secrets-manager`
(CodeBuild User Guide, "Build specification reference", env/secrets-manager: `secret-id:json-key:version-stage:
version-id`; a whole-ARN reference reads the whole secret string), which CodeBuild masks in the logs.
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import PurePosixPath
from typing import Any

import yaml

from ..catalogue import DEPLOY_RUNNER_PYTHON_VERSION, PULUMI_CLI_VERSION
from .deploy_model import DeployRunner
from .validation import ConfigError

PULUMI_COMMANDS = ("up", "preview", "refresh", "destroy")
"""The Pulumi commands a runner build may run (GPUBURST_PULUMI_COMMAND); anything else is refused, in Python and in the
build's shell. A `destroy` run inside the runner also deletes the runner's own project, subnets and NAT while its build
runs in them: destroy a whole stack from the deploy CIDRs instead."""
POLICY_PACK_COMMANDS = ("up", "preview")
"""The commands that run with `--policy-pack` (the repository's CrossGuard pack)."""
DEFAULT_COMMAND = "up"
"""The project's default GPUBURST_PULUMI_COMMAND (a StartBuild override takes precedence)."""

COMMAND_VAR = "GPUBURST_PULUMI_COMMAND"
"""Environment variable naming the Pulumi command of a build."""
STACK_VAR = "GPUBURST_STACK"
"""Environment variable naming the stack a build selects."""
BACKEND_VAR = "PULUMI_BACKEND_URL"
"""Environment variable holding the backend `pulumi login` uses (DeployRunner.backend_url)."""
PASSPHRASE_VAR = "PULUMI_CONFIG_PASSPHRASE"
"""Environment variable the passphrase secrets provider reads (from DeployRunner.secrets_provider_secret_arn)."""
ACCESS_TOKEN_VAR = "PULUMI_ACCESS_TOKEN"
"""Environment variable Pulumi Cloud logins read (from DeployRunner.access_token_secret_arn)."""

PULUMI_INSTALLER_URL = "https://get.pulumi.com"
"""The official installer script (pulumi/get.pulumi.com dist/install.sh)."""
PULUMI_HOME_BIN = "$HOME/.pulumi/bin"
"""Where the installer puts the CLI and its language plugins (its default install root, `$HOME/.pulumi`)."""
SOURCE_OBJECT_NAME = "source.zip"
"""Name of a stack's bundle in the source bucket (`<stack>/source.zip`)."""
RUNNER_SUFFIX = "-deploy"
"""Suffix of the runner's names after the stack's name prefix."""

BUNDLE_EXCLUDED_DIRS = (".git", ".venv", "node_modules", "out", "__pycache__")
"""Folders never bundled, at any depth, even when tracked: environments, build outputs and caches are rebuilt in the
runner (a tracked `.venv` would shadow the one the buildspec makes)."""
BUNDLE_EXCLUDED_SUFFIXES = (".pyc",)
"""File suffixes never bundled."""

_PREFIX = re.compile(r"^[a-z][a-z0-9-]{0,61}[a-z0-9]$")
_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_STACK = re.compile(r"^(?:[A-Za-z0-9_.-]+/){0,2}[A-Za-z0-9_.-]{1,100}$")
_REL_PATH = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]{0,254}$")
_PROJECT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{1,254}$")
BUCKET_NAME_MAX = 63
"""S3's limit on a bucket name's length."""


def _check_prefix(name_prefix: Any) -> str:
    if not isinstance(name_prefix, str) or not _PREFIX.match(name_prefix) or "--" in name_prefix:
        raise ConfigError("name_prefix", name_prefix, "the stack's name prefix, lowercase letters, digits and '-' "
                                                      "(gpuburst-<environment>)")
    return name_prefix


def runner_name(name_prefix: str) -> str:
    """The runner's CodeBuild project name (also its security group's Name): `<prefix>-deploy`."""
    name = _check_prefix(name_prefix) + RUNNER_SUFFIX
    if not _PROJECT.match(name):
        raise ConfigError("name_prefix", name_prefix, "a prefix that makes a CodeBuild project name (2..255 letters, "
                                                      "digits, '-' or '_')")
    return name


def runner_log_group(name_prefix: str) -> str:
    """The runner's CloudWatch log group, `/aws/codebuild/<prefix>-deploy` (CodeBuild's own naming): the data key's
    policy must name it (DataKeyArgs.log_group_names) for the group's KMS encryption to work."""
    return f"/aws/codebuild/{runner_name(name_prefix)}"


def source_bucket_name(name_prefix: str, account_id: str, region: str) -> str:
    """The runner's source bucket, `<prefix>-deploy-<account>-<region>`: globally unique without a random suffix, so
    `gpuburst deploy` finds it from the stack file and the caller's account alone."""
    if not isinstance(account_id, str) or not _ACCOUNT.match(account_id):
        raise ConfigError("account_id", account_id, "a 12-digit AWS account id as a string")
    if not isinstance(region, str) or not _REGION.match(region):
        raise ConfigError("region", region, "an AWS region like 'eu-west-1'")
    name = f"{runner_name(name_prefix)}-{account_id}-{region}"
    if len(name) > BUCKET_NAME_MAX:
        raise ConfigError("name_prefix", name_prefix, f"a prefix short enough that {name!r} fits S3's "
                                                      f"{BUCKET_NAME_MAX} characters (or name the bucket yourself)")
    return name


def check_stack_name(stack: Any, field: str = "stack") -> str:
    """The stack name, or ConfigError: Pulumi's characters (letters, digits, '-', '_', '.'), optionally qualified as
    `org/project/stack`."""
    if not isinstance(stack, str) or not _STACK.match(stack):
        raise ConfigError(field, stack, "a Pulumi stack name: letters, digits, '-', '_' or '.' (optionally "
                                        "org/project/stack)")
    return stack


def source_object_key(stack: str) -> str:
    """Key of a stack's bundle in the source bucket: `<stack>/source.zip` (the project's S3 source location)."""
    return f"{check_stack_name(stack)}/{SOURCE_OBJECT_NAME}"


def check_pulumi_command(command: Any, field: str = "command") -> str:
    """The command, or ConfigError naming the allow-list."""
    if command not in PULUMI_COMMANDS:
        raise ConfigError(field, command, f"one of {', '.join(PULUMI_COMMANDS)}")
    return command


def _check_rel_path(field: str, value: Any) -> str:
    if (not isinstance(value, str) or not _REL_PATH.match(value) or ".." in PurePosixPath(value).parts
            or "//" in value):
        raise ConfigError(field, value, "a relative folder inside the bundle (letters, digits, '_', '-', '.', '/'; "
                                        "no '..')")
    return value


def pulumi_invocation(command: str, policy_pack: str | None = "policies") -> str:
    """The CLI line a build runs for `command` (stack from GPUBURST_STACK, never prompting): `--yes` for the commands
    that take it (`pulumi preview` has no `--yes` flag: pulumi/pulumi pkg/cmd/pulumi/operations/preview.go), and
    `--policy-pack` for up and preview when a pack is given."""
    check_pulumi_command(command)
    words = ["pulumi", command]
    if command != "preview":
        words.append("--yes")
    words += ["--non-interactive", "--stack", f'"${STACK_VAR}"']
    if policy_pack is not None and command in POLICY_PACK_COMMANDS:
        words += ["--policy-pack", shlex.quote(_check_rel_path("policy_pack", policy_pack))]
    return " ".join(words)


def dispatch_command(policy_pack: str | None = "policies") -> str:
    """One shell line that runs the allowed command GPUBURST_PULUMI_COMMAND names, and fails on anything else: the
    variable is only ever matched, never spliced into a command line."""
    arms = " ".join(f"{c}) {pulumi_invocation(c, policy_pack)} ;;" for c in PULUMI_COMMANDS)
    refuse = (f'*) echo "{COMMAND_VAR}=${COMMAND_VAR} is not one of {" ".join(PULUMI_COMMANDS)}: refused" >&2; '
              "exit 1 ;;")
    return f'case "${COMMAND_VAR}" in {arms} {refuse} esac'


def _guard() -> str:
    allowed = "|".join(PULUMI_COMMANDS)
    return (f'case "${COMMAND_VAR}" in {allowed}) ;; *) echo "{COMMAND_VAR}=${COMMAND_VAR} is not one of '
            f'{" ".join(PULUMI_COMMANDS)}: refused" >&2; exit 1 ;; esac')


def secrets_manager_env(runner: DeployRunner) -> dict[str, str]:
    """`env.secrets-manager` of the buildspec: each configured secret's ARN under the variable Pulumi reads."""
    out: dict[str, str] = {}
    if runner.secrets_provider_secret_arn:
        out[PASSPHRASE_VAR] = runner.secrets_provider_secret_arn
    if runner.access_token_secret_arn:
        out[ACCESS_TOKEN_VAR] = runner.access_token_secret_arn
    return out


def buildspec(runner: DeployRunner, *, project_dir: str = ".", policy_pack: str | None = "policies") -> dict[str, Any]:
    """The runner's buildspec (version 0.2, bash) as a dict: install the pinned CLI, make the program's `.venv`, log in,
    select the stack, run the command GPUBURST_PULUMI_COMMAND names. `project_dir` is the Pulumi project's folder in
    the bundle; `policy_pack` (relative to it, or None) is the CrossGuard pack up and preview run with, whose
    requirements.txt goes into the same `.venv` (its PulumiPolicy.yaml names `../.venv`: the repository layout)."""
    if not isinstance(runner, DeployRunner):
        raise ConfigError("runner", runner, "a spec.deploy_model.DeployRunner")
    src = f'"$CODEBUILD_SRC_DIR"/{shlex.quote(_check_rel_path("project_dir", project_dir))}'
    requirements = ["requirements.txt"]
    if policy_pack is not None:
        requirements.append(f"{_check_rel_path('policy_pack', policy_pack)}/requirements.txt")
    pip = ".venv/bin/python -m pip install --disable-pip-version-check --no-input " + " ".join(
        f"-r {shlex.quote(r)}" for r in requirements)
    python = DEPLOY_RUNNER_PYTHON_VERSION
    env: dict[str, Any] = {"shell": "bash", "variables": {"PULUMI_SKIP_UPDATE_CHECK": "true"}}
    secrets = secrets_manager_env(runner)
    if secrets:
        env["secrets-manager"] = secrets
    return {
        "version": 0.2,
        "env": env,
        "phases": {
            "install": {
                "runtime-versions": {"python": python},
                "commands": [
                    _guard(),
                    f'test -n "${STACK_VAR}" || {{ echo "{STACK_VAR} is empty" >&2; exit 1; }}',
                    f"set -o pipefail && curl -fsSL {PULUMI_INSTALLER_URL} | sh -s -- --version {PULUMI_CLI_VERSION} "
                    "--no-edit-path",
                    f'export PATH="{PULUMI_HOME_BIN}:$PATH"',
                    f'test "$(pulumi version)" = "v{PULUMI_CLI_VERSION}" || {{ echo "pulumi $(pulumi version) is not '
                    f'the pinned v{PULUMI_CLI_VERSION}" >&2; exit 1; }}',
                ],
            },
            "pre_build": {
                "commands": [
                    f"cd {src}",
                    "python3 -m venv .venv",
                    f".venv/bin/python -c 'import sys; assert sys.version_info[:2] == ({python.replace('.', ', ')}), "
                    "sys.version'",
                    pip,
                    f'pulumi login --non-interactive "${BACKEND_VAR}"',
                    f'pulumi stack select --non-interactive "${STACK_VAR}"',
                ],
            },
            "build": {"commands": [f"cd {src}", dispatch_command(policy_pack)]},
        },
    }


def buildspec_yaml(runner: DeployRunner, *, project_dir: str = ".", policy_pack: str | None = "policies") -> str:
    """`buildspec(...)` as the YAML text the CodeBuild project's source carries."""
    return yaml.safe_dump(buildspec(runner, project_dir=project_dir, policy_pack=policy_pack), sort_keys=False,
                          width=4096)


def runner_trust_statement(account_id: str, region: str, project_name: str, partition: str = "aws") -> dict[str, Any]:
    """The statement the runner's role (the deployer's, named in config, not made by the stack) needs in its trust
    policy so CodeBuild can assume it: `codebuild.amazonaws.com`, held to this account's runner project with the global
    condition keys `aws:SourceAccount` and `aws:SourceArn` (IAM User Guide, "The confused deputy problem")."""
    if not isinstance(account_id, str) or not _ACCOUNT.match(account_id):
        raise ConfigError("account_id", account_id, "a 12-digit AWS account id as a string")
    if not isinstance(region, str) or not _REGION.match(region):
        raise ConfigError("region", region, "an AWS region like 'eu-west-1'")
    if not isinstance(project_name, str) or not _PROJECT.match(project_name):
        raise ConfigError("project_name", project_name, "a CodeBuild project name")
    return {
        "Sid": "CodeBuildRunsTheDeployRunner",
        "Effect": "Allow",
        "Principal": {"Service": "codebuild.amazonaws.com"},
        "Action": "sts:AssumeRole",
        "Condition": {
            "StringEquals": {"aws:SourceAccount": account_id},
            "ArnLike": {"aws:SourceArn": f"arn:{partition}:codebuild:{region}:{account_id}:project/{project_name}"},
        },
    }


def bundle_members(paths: Iterable[str]) -> list[str]:
    """The bundle's members among `paths` (the project's git-tracked files, relative to it, `/`-separated), sorted:
    never a file under BUNDLE_EXCLUDED_DIRS or with a BUNDLE_EXCLUDED_SUFFIXES suffix. ConfigError for a path that
    is absolute or climbs out with `..` (git never lists one; a zip entry like that could write outside the folder)."""
    out: set[str] = set()
    for raw in paths:
        if not isinstance(raw, str) or not raw:
            raise ConfigError("bundle path", raw, "a non-empty relative path")
        p = PurePosixPath(raw)
        if p.is_absolute() or ".." in p.parts or "\\" in raw:
            raise ConfigError("bundle path", raw, "a relative '/'-separated path inside the project (no '..')")
        if any(part in BUNDLE_EXCLUDED_DIRS for part in p.parts[:-1]) or p.name in BUNDLE_EXCLUDED_DIRS:
            continue
        if p.name.endswith(BUNDLE_EXCLUDED_SUFFIXES):
            continue
        out.add(p.as_posix())
    return sorted(out)


def program_file(project_dir: str = ".") -> str:
    """The bundle member the runner needs to find the program: `<project_dir>/Pulumi.yaml`."""
    folder = _check_rel_path("project_dir", project_dir)
    return (PurePosixPath(folder) / "Pulumi.yaml").as_posix()

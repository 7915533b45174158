"""The deploy runner's pure parts: names, the buildspec (pinned CLI, command allow-list in Python and in the build's
shell, secrets only from Secrets Manager) and the source bundle's rules."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from components.catalogue import DEPLOY_RUNNER_IMAGE, DEPLOY_RUNNER_PYTHON_VERSION, PULUMI_CLI_VERSION
from components.spec import deploy_runner as dr
from components.spec.deploy_model import DeployRunner
from components.spec.validation import ConfigError

ROOT = Path(__file__).resolve().parents[3]
ROLE = "arn:aws:iam::123456789012:role/gpuburst-prod-deploy"
PASSPHRASE = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:gpuburst-prod-passphrase-AbCdEf"
TOKEN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:pulumi-token-AbCdEf"
S3_RUNNER = DeployRunner(ROLE, "s3://example-pulumi-state", secrets_provider_secret_arn=PASSPHRASE)
CLOUD_RUNNER = DeployRunner(ROLE, "https://api.pulumi.com", access_token_secret_arn=TOKEN)


def _commands(spec: dict) -> list[str]:
    return [c for phase in spec["phases"].values() for c in phase["commands"]]


def _one_line_naming(err: ConfigError, field: str, value) -> None:
    assert "\n" not in str(err)
    assert str(err).startswith(f"{field}: {value!r} is not valid")


# ------------------------------------------------------------------------------------------------------------ pins --

def test_cli_pin_is_the_sdk_pin_of_the_program_and_the_pack():
    for req in ("requirements.txt", "policies/requirements.txt"):
        pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", (ROOT / req).read_text(), re.M))
        assert pins["pulumi"] == PULUMI_CLI_VERSION, req


def test_runner_image_is_a_codebuild_managed_amazon_linux_image():
    assert re.fullmatch(r"aws/codebuild/amazonlinux-x86_64-standard:\d+\.0", DEPLOY_RUNNER_IMAGE)
    assert re.fullmatch(r"3\.\d+", DEPLOY_RUNNER_PYTHON_VERSION)


# ----------------------------------------------------------------------------------------------------------- names --

def test_names_derive_from_the_stack_prefix():
    assert dr.runner_name("gpuburst-prod") == "gpuburst-prod-deploy"
    assert dr.runner_log_group("gpuburst-prod") == "/aws/codebuild/gpuburst-prod-deploy"
    assert (dr.source_bucket_name("gpuburst-prod", "123456789012", "eu-west-1")
            == "gpuburst-prod-deploy-123456789012-eu-west-1")
    assert dr.source_object_key("prod") == "prod/source.zip"
    assert dr.source_object_key("acme/gpuburst/prod") == "acme/gpuburst/prod/source.zip"


def test_a_bucket_name_over_s3s_limit_is_refused_in_one_line():
    prefix = "gpuburst-" + "a" * 31
    with pytest.raises(ConfigError) as e:
        dr.source_bucket_name(prefix, "123456789012", "ap-southeast-2")
    _one_line_naming(e.value, "name_prefix", prefix)
    assert "63" in str(e.value)


@pytest.mark.parametrize("fn,args,field,bad", [
    (dr.runner_name, ("Gpuburst_Prod",), "name_prefix", "Gpuburst_Prod"),
    (dr.source_bucket_name, ("gpuburst-prod", "1234", "eu-west-1"), "account_id", "1234"),
    (dr.source_bucket_name, ("gpuburst-prod", "123456789012", "Ireland"), "region", "Ireland"),
    (dr.check_stack_name, ("prod; rm -rf /",), "stack", "prod; rm -rf /"),
    (dr.check_pulumi_command, ("apply",), "command", "apply"),
])
def test_bad_names_are_refused_in_one_line(fn, args, field, bad):
    with pytest.raises(ConfigError) as e:
        fn(*args)
    _one_line_naming(e.value, field, bad)


# ------------------------------------------------------------------------------------------------------- buildspec --

def test_buildspec_installs_the_pinned_cli_with_the_official_installer_and_checks_it():
    spec = dr.buildspec(S3_RUNNER)
    install = spec["phases"]["install"]
    assert install["runtime-versions"] == {"python": DEPLOY_RUNNER_PYTHON_VERSION}
    (get,) = [c for c in install["commands"] if "get.pulumi.com" in c]
    assert f"curl -fsSL https://get.pulumi.com | sh -s -- --version {PULUMI_CLI_VERSION}" in get
    assert get.startswith("set -o pipefail")  # a failed download must not pass as an empty script
    assert any(f'"v{PULUMI_CLI_VERSION}"' in c and "pulumi version" in c for c in install["commands"])
    assert spec["env"]["shell"] == "bash"


def test_buildspec_makes_the_venv_from_the_programs_and_the_packs_requirements():
    pre = dr.buildspec(S3_RUNNER)["phases"]["pre_build"]["commands"]
    assert "python3 -m venv .venv" in pre
    (pip,) = [c for c in pre if "pip install" in c]
    assert "-r requirements.txt" in pip and "-r policies/requirements.txt" in pip
    assert pre.index("python3 -m venv .venv") < pre.index(pip)
    assert 'pulumi login --non-interactive "$PULUMI_BACKEND_URL"' in pre
    assert 'pulumi stack select --non-interactive "$GPUBURST_STACK"' in pre
    assert not any("--create" in c for c in pre)  # a mistyped stack must fail, never start an empty one


def test_each_allowed_command_runs_with_its_flags_and_the_pack_only_for_up_and_preview():
    assert dr.pulumi_invocation("up") == ('pulumi up --yes --non-interactive --stack "$GPUBURST_STACK" '
                                          "--policy-pack policies")
    assert dr.pulumi_invocation("preview") == ('pulumi preview --non-interactive --stack "$GPUBURST_STACK" '
                                               "--policy-pack policies")
    assert dr.pulumi_invocation("refresh") == 'pulumi refresh --yes --non-interactive --stack "$GPUBURST_STACK"'
    assert dr.pulumi_invocation("destroy") == 'pulumi destroy --yes --non-interactive --stack "$GPUBURST_STACK"'
    assert "--policy-pack" not in dr.pulumi_invocation("up", policy_pack=None)


def test_the_command_variable_is_never_spliced_into_a_command_line():
    for c in _commands(dr.buildspec(S3_RUNNER)):
        # Every mention is inside a quoted `case` subject or an error message, never an argv word of its own.
        for m in re.finditer(r"\$GPUBURST_PULUMI_COMMAND", c):
            before = c[:m.start()]
            assert before.endswith('case "') or before.endswith('echo "GPUBURST_PULUMI_COMMAND='), c


def test_secrets_come_from_secrets_manager_and_no_plaintext_secret_anywhere():
    for runner, var, arn in ((S3_RUNNER, "PULUMI_CONFIG_PASSPHRASE", PASSPHRASE),
                             (CLOUD_RUNNER, "PULUMI_ACCESS_TOKEN", TOKEN)):
        spec = dr.buildspec(runner)
        assert spec["env"]["secrets-manager"] == {var: arn}
        assert set(spec["env"]["variables"]) == {"PULUMI_SKIP_UPDATE_CHECK"}
        text = dr.buildspec_yaml(runner)
        for secret_var in ("PULUMI_CONFIG_PASSPHRASE", "PULUMI_ACCESS_TOKEN"):
            assert text.count(secret_var) == (1 if secret_var == var else 0), text  # only the reference
            assert not any(secret_var in c for c in _commands(spec))  # never echoed or set by a command


def test_a_runner_without_secrets_has_no_secrets_block():
    spec = dr.buildspec(DeployRunner(ROLE, "s3://example-pulumi-state"))
    assert "secrets-manager" not in spec["env"]


def test_buildspec_yaml_parses_back_to_the_dict():
    for runner in (S3_RUNNER, CLOUD_RUNNER):
        assert yaml.safe_load(dr.buildspec_yaml(runner)) == dr.buildspec(runner)
        assert yaml.safe_load(dr.buildspec_yaml(runner))["version"] == 0.2


def test_project_dir_and_pack_are_checked_and_quoted():
    spec = dr.buildspec(S3_RUNNER, project_dir="infra/gpu", policy_pack=None)
    assert spec["phases"]["build"]["commands"][0] == 'cd "$CODEBUILD_SRC_DIR"/infra/gpu'
    assert not any("--policy-pack" in c or "policies/requirements" in c for c in _commands(spec))
    for field, kwargs in (("project_dir", {"project_dir": "../elsewhere"}),
                          ("project_dir", {"project_dir": "/abs"}),
                          ("policy_pack", {"policy_pack": "p; curl evil"})):
        with pytest.raises(ConfigError) as e:
            dr.buildspec(S3_RUNNER, **kwargs)
        _one_line_naming(e.value, field, next(iter(kwargs.values())))


def test_trust_statement_admits_codebuild_for_this_project_only():
    st = dr.runner_trust_statement("123456789012", "eu-west-1", "gpuburst-prod-deploy")
    assert st["Principal"] == {"Service": "codebuild.amazonaws.com"} and st["Action"] == "sts:AssumeRole"
    assert st["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}
    assert st["Condition"]["ArnLike"] == {
        "aws:SourceArn": "arn:aws:codebuild:eu-west-1:123456789012:project/gpuburst-prod-deploy"}


# --------------------------------------------------------------------------------------- the build's shell, for real --

def _run_build_phase(tmp_path: Path, command: str) -> subprocess.CompletedProcess:
    """Run the buildspec's build-phase commands in bash with a stand-in `pulumi` that prints its argv."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed here")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "pulumi"
    fake.write_text('#!/bin/sh\necho "PULUMI $*"\n')
    fake.chmod(0o755)
    script = "\n".join(dr.buildspec(S3_RUNNER)["phases"]["build"]["commands"])
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "CODEBUILD_SRC_DIR": str(tmp_path),
           "GPUBURST_PULUMI_COMMAND": command, "GPUBURST_STACK": "prod"}
    return subprocess.run([bash, "-c", script], env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("command", dr.PULUMI_COMMANDS)
def test_the_build_shell_runs_each_allowed_command(tmp_path, command):
    proc = _run_build_phase(tmp_path, command)
    assert proc.returncode == 0, proc.stderr
    expected = dr.pulumi_invocation(command).replace('"$GPUBURST_STACK"', "prod").replace("pulumi ", "PULUMI ", 1)
    assert proc.stdout.strip() == expected


@pytest.mark.slow
@pytest.mark.parametrize("command", ["apply", "up --target x", "up; echo pwned", "", "UP", "$(echo up)"])
def test_the_build_shell_refuses_anything_else(tmp_path, command):
    proc = _run_build_phase(tmp_path, command)
    assert proc.returncode != 0
    assert "PULUMI" not in proc.stdout and "pwned" not in proc.stdout
    assert "refused" in proc.stderr


@pytest.mark.slow
def test_the_install_guard_refuses_a_bad_command_before_installing_anything(tmp_path):
    guard = dr.buildspec(S3_RUNNER)["phases"]["install"]["commands"][0]
    for command, ok in (("destroy", True), ("import", False)):
        proc = subprocess.run(["bash", "-c", guard], env={"GPUBURST_PULUMI_COMMAND": command, "PATH": os.defpath},
                              capture_output=True, text=True, timeout=30)
        assert (proc.returncode == 0) is ok, (command, proc.stderr)


# ---------------------------------------------------------------------------------------------------------- bundle --

def test_bundle_members_leave_out_environments_outputs_and_caches():
    tracked = ["Pulumi.yaml", "__main__.py", "components/x.py", ".venv/lib/site.py", "out/plan.json",
               "web/node_modules/a/index.js", "components/__pycache__/x.cpython-311.pyc", "stray.pyc",
               "docs/out.md", "components/synth/out_dir.py", "Pulumi.yaml"]
    assert dr.bundle_members(tracked) == ["Pulumi.yaml", "__main__.py", "components/synth/out_dir.py",
                                          "components/x.py", "docs/out.md"]


@pytest.mark.parametrize("bad", ["../secrets.txt", "/etc/passwd", "a/../../b", "dir\\file"])
def test_bundle_members_refuse_paths_that_leave_the_project(bad):
    with pytest.raises(ConfigError) as e:
        dr.bundle_members(["Pulumi.yaml", bad])
    assert "\n" not in str(e.value) and repr(bad) in str(e.value)


def test_program_file_is_pulumi_yaml_in_the_project_folder():
    assert dr.program_file() == "Pulumi.yaml"
    assert dr.program_file("infra") == "infra/Pulumi.yaml"

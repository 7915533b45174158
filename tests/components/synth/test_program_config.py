"""A program's own config key that its stack file lacks, misspells or holds in the wrong type stops `synth` (and
`rehearse`, which runs the program too) in one line naming the key and the stack file, with a did-you-mean: exit 2,
no traceback."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from pulumi.config import ConfigMissingError, ConfigTypeError
from synth_run import ROOT, run_synth

from components.synth.synth import program_config_problem

PROGRAM = '''import pulumi

cfg = pulumi.Config()
role = cfg.require("kedaOperatorRoleArn")
size = cfg.require_int("rootVolumeGiB")
pulumi.export("role", role)
'''


def project(tmp_path, config: dict) -> tuple:
    """A minimal Pulumi project `lab` whose program requires two keys, and its stack file `Pulumi.lab.yaml`."""
    folder = tmp_path / "lab"
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text("name: tils-lab\nruntime: python\n", encoding="utf-8")
    (folder / "__main__.py").write_text(PROGRAM, encoding="utf-8")
    stack = folder / "Pulumi.lab.yaml"
    stack.write_text(yaml.safe_dump({"config": {"aws:region": "us-east-1", **config}}), encoding="utf-8")
    return folder, stack


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # no traceback under it
    return lines[0]


def test_a_misspelt_key_is_one_line_naming_the_key_the_file_and_the_key_it_misspells(tmp_path):
    folder, stack = project(tmp_path, {"tils-lab:kedaOperatorRoleARN": "arn:aws:iam::123456789012:role/keda",
                                       "tils-lab:rootVolumeGiB": 100})
    line = one_line(run_synth(tmp_path / "out", "--project-dir", str(folder), "--stack", "lab"))
    assert line.startswith("synth: "), line
    assert "'tils-lab:kedaOperatorRoleArn'" in line and str(stack) in line
    assert line.endswith("did you mean 'tils-lab:kedaOperatorRoleARN'?"), line
    assert not (tmp_path / "out" / "plan.json").exists()


def test_a_missing_key_with_no_near_miss_lists_the_namespace_keys(tmp_path):
    folder, stack = project(tmp_path, {"tils-lab:rootVolumeGiB": 100, "tils-lab:namespace": "lab-tils"})
    line = one_line(run_synth(tmp_path / "out", "--project-dir", str(folder), "--stack", "lab",
                              "--stack-file", str(stack)))
    assert "'tils-lab:kedaOperatorRoleArn'" in line and str(stack) in line
    assert "its tils-lab keys are namespace, rootVolumeGiB" in line, line


def test_a_key_of_the_wrong_type_is_one_line_naming_the_key_and_value(tmp_path):
    folder, _stack = project(tmp_path, {"tils-lab:kedaOperatorRoleArn": "arn:aws:iam::123456789012:role/keda",
                                        "tils-lab:rootVolumeGiB": "lots"})
    line = one_line(run_synth(tmp_path / "out", "--project-dir", str(folder), "--stack", "lab"))
    assert "'tils-lab:rootVolumeGiB'" in line and "'lots'" in line and "int" in line, line


def test_rehearse_runs_the_program_and_says_it_in_the_same_line(tmp_path):
    folder, stack = project(tmp_path, {"tils-lab:kedaOperatorRoleARN": "arn:aws:iam::123456789012:role/keda",
                                       "tils-lab:rootVolumeGiB": 100})
    proc = subprocess.run([sys.executable, "-m", "components", "rehearse", "--project-dir", str(folder),
                           "--stack", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    line = one_line(proc)
    assert line.startswith("rehearse: ") and "did you mean 'tils-lab:kedaOperatorRoleARN'?" in line, line
    assert str(stack) in line


@pytest.mark.parametrize("config, expected", [
    ({"tils-lab:kedaoperatorrolearn": "x"}, "did you mean 'tils-lab:kedaoperatorrolearn'?"),
    ({"other:kedaOperatorRoleArn": "x"}, "it has no tils-lab: key at all"),
])
def test_the_message_in_process(config, expected):
    text = program_config_problem(ConfigMissingError("tils-lab:kedaOperatorRoleArn", False), config, "Pulumi.lab.yaml")
    assert text.startswith("Pulumi.lab.yaml has no config key 'tils-lab:kedaOperatorRoleArn'") and \
        text.endswith(expected), text
    typed = program_config_problem(ConfigTypeError("tils-lab:size", "big", "int"), {}, "Pulumi.lab.yaml")
    assert typed == "Pulumi.lab.yaml: config key 'tils-lab:size' = 'big' is not valid: the program reads it as int"


def test_a_gpuburst_config_error_in_a_program_is_one_line_under_python_m_components(tmp_path):
    """A program imports `gpuburst` (as an installed user's does); run by `python -m components` in the repository,
    its ConfigError is gpuburst's class, not this package's: still one line, exit 2."""
    folder = tmp_path / "lab"
    folder.mkdir()
    (folder / "Pulumi.yaml").write_text("name: tils-lab\nruntime: python\n", encoding="utf-8")
    (folder / "__main__.py").write_text(
        "from gpuburst import GpuNodePool, GpuNodePoolArgs\n"
        "GpuNodePool('tils', GpuNodePoolArgs(nodeclass_name='gpu', gpu_limit=0,\n"
        "            instance_types=['g5.xlarge', 'g5.2xlarge']))\n", encoding="utf-8")
    (folder / "Pulumi.lab.yaml").write_text(yaml.safe_dump({"config": {"aws:region": "us-east-1"}}),
                                            encoding="utf-8")
    proc = run_synth(tmp_path / "out", "--project-dir", str(folder), "--stack", "lab")
    assert one_line(proc).startswith("synth: GpuNodePool 'tils': gpu_limit: 0 is not valid")

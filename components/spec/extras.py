"""Which optional extra of the gpuburst distribution brings which package, and the one line that says so when missing.

The core (`pip install gpuburst`) holds what a workload stack needs to synth: pulumi, pulumi-aws, pulumi-kubernetes
and PyYAML. The rest is behind extras (pyproject.toml's `[project.optional-dependencies]`, whose pins
tests/components/test_packaging.py holds equal to requirements.txt): `platform` for the platform program (the EKS
cluster, the worker image build, the Helm charts rendered offline), `verify` for the live checks and `deploy`, `planner`
for the burst planner's PNG timelines, `policy` for the policy pack's runtime. A module that needs one imports it
where it is used, so `import gpuburst` and a workload stack's synth and check never load it.
"""
from __future__ import annotations

import importlib.util

EXTRA_OF: dict[str, tuple[str, str]] = {
    # import name: (distribution on PyPI, the extra that brings it)
    "pulumi_eks": ("pulumi-eks", "platform"),
    "pulumi_docker_build": ("pulumi-docker-build", "platform"),
    "helm_python": ("helm-python-sdk", "platform"),
    "boto3": ("boto3", "verify"),
    "botocore": ("boto3", "verify"),
    "kubernetes": ("kubernetes", "verify"),
    "jsonschema": ("jsonschema", "verify"),
    "matplotlib": ("matplotlib", "planner"),
    "pulumi_policy": ("pulumi-policy", "policy"),
}
"""Each optional package by its import name: its distribution name and the extra that installs it."""


def install_hint(module: str) -> str:
    """`pip install "gpuburst[<extra>]"` for the extra that brings `module` (an import name of EXTRA_OF)."""
    return f'pip install "gpuburst[{EXTRA_OF[module][1]}]"'


def missing_message(module: str, needed_for: str) -> str:
    """One line for a missing optional package: who needs it, the distribution, and the install command."""
    distribution, _ = EXTRA_OF[module]
    return f"{needed_for} needs {distribution}, which is not installed here: {install_hint(module)}"


def is_installed(module: str) -> bool:
    """Whether `module` can be imported here (found on the path; not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module whose __spec__ is None
        return False

"""`gpuburst rehearse`: before anything is applied, what AWS will decide for the deploy model's people and roles on
this stack's plan — one line per denial, exit 1 when there is one."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .plan_model import read_facts
from .scenarios import rehearse

ASSUMPTIONS = ("assumed: the deployers' own IAM policies allow everything (rehearse judges the resource policies); "
               "the uploaders' and readers' allow nothing (the bucket and key policies must suffice)")


def _plan(args: argparse.Namespace) -> dict:
    if args.plan is not None:
        return json.loads(args.plan.read_text(encoding="utf-8"))
    from ..config.files import StackFileError, read_stack_config
    from ..synth.synth import SynthError, plan_document, run_program

    try:
        config = read_stack_config(args.stack, args.project_dir, args.stack_file)
    except StackFileError as e:
        raise SynthError(str(e)) from None
    return plan_document(args.stack, run_program(args.stack, config, args.project_dir, stack_file=args.stack_file))


def main(argv: list[str], prog: str = "python -m components rehearse") -> int:
    """Run the rehearsal; 0 when AWS would allow everything the model needs, 1 with a line per denial, 2 with one
    line when the stack or plan cannot be read."""
    from ..spec.validation import ConfigError
    from ..synth.synth import SynthError

    parser = argparse.ArgumentParser(
        prog=prog,
        description="Offline, on the stack's plan and its deploy model (gpuburst:deploy): may each deployer create, "
                    "read back, update and delete every bucket, key, queue, topic and repository from where it "
                    "deploys; may the uploaders put and the readers get from their places, and nothing else; do "
                    "the clinical buckets refuse everyone else outside the VPC; do the workers get through the S3 "
                    "endpoint; does `pulumi up` reach the Kubernetes API. One line per denial: resource, action, "
                    "principal, place, the deciding statement's Sid, the fix.")
    parser.add_argument("--stack", default="dev", help="stack whose Pulumi.<stack>.yaml to read (default: dev)")
    parser.add_argument("--stack-file", type=Path, default=None, help="read the config from this YAML file instead")
    parser.add_argument("--project-dir", type=Path, default=Path("."),
                        help="the Pulumi project (the folder of its Pulumi.yaml; default: the working folder)")
    parser.add_argument("--plan", type=Path, default=None,
                        help="judge this plan.json (from `synth`) instead of synthesising the stack")
    args = parser.parse_args(argv)
    try:
        facts = read_facts(_plan(args))
    except (SynthError, ConfigError, OSError, ValueError, KeyError) as e:
        print(f"rehearse: {e}", file=sys.stderr)
        return 2
    if facts.model is None:
        why = facts.model_error or "the plan declares no deploy model (gpuburst:index:DeployAccess)"
        print(f"rehearse: {why}: nothing to rehearse; set gpuburst:deploy (README \"Deploying for real\")",
              file=sys.stderr)
        return 2
    try:
        findings = rehearse(facts)
    except ValueError as e:  # a malformed policy in the plan
        print(f"rehearse: {e}", file=sys.stderr)
        return 2
    for f in findings:
        print(f.line())
    m = facts.model
    where = ", ".join([*m.deploy_cidrs, *(["the in-VPC runner"] if m.runner else [])])
    print(f"rehearse: {len(findings)} denial(s) for {len(m.deployer_role_arns)} deployer(s) from {where}, "
          f"{len(m.slide_uploaders)} uploader(s), {len(m.result_readers)} reader(s), "
          f"{len(facts.governed)} governed resource(s); {ASSUMPTIONS}")
    return 1 if findings else 0

"""DeployAccess: the stack's deploy model declared in the plan, so the policy pack and `gpuburst rehearse` judge the
resource policies against who deploys, from where, and who reaches the clinical buckets from outside.

Like the `Existing*` references (components/existing.py) it creates nothing: a ComponentResource with no children
whose registered properties are the model's facts (`DeployModel.as_facts()`: deployerRoleArns, deployCidrs, runner,
bootstrap, slideUploaders, resultReaders, breakGlassRoleArns). A platform stack declares it from `gpuburst:deploy`;
a workload stack (examples/another-team) declares its own, with the roles that deploy it.
"""
from __future__ import annotations

from typing import Any

import pulumi

from .spec.deploy_model import DeployModel, parse_deploy_model
from .spec.validation import ConfigError, names_its_errors

DEPLOY_ACCESS_TYPE = "gpuburst:index:DeployAccess"
"""The component's type token (the pack and rehearse find the facts by it)."""


@names_its_errors
class DeployAccess(pulumi.ComponentResource):
    """The deploy model as facts in the plan (no resource is created)."""

    model: DeployModel

    def __init__(self, name: str, model: DeployModel | dict[str, Any],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        """`model`: a DeployModel, or its camelCase mapping as in `gpuburst:deploy` (parsed and checked here)."""
        if isinstance(model, dict):
            model = parse_deploy_model(model)
        if not isinstance(model, DeployModel):
            raise ConfigError("model", model, "a spec.deploy_model.DeployModel or its gpuburst:deploy mapping")
        self.model = model
        facts = model.as_facts()
        super().__init__(DEPLOY_ACCESS_TYPE, name, facts, opts)
        self.register_outputs(facts)

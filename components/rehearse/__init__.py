"""rehearse: what AWS will decide at apply time, offline — a pure IAM policy evaluator (`evaluate`, `conditions`),
the plan's facts (`plan_model`), the deploy model's scenarios (`scenarios`) and the command (`cli`).

Import the evaluator from its module (`from components.rehearse.evaluate import evaluate`): the package re-exports
its types, not the function, so `components.rehearse.evaluate` stays the module.
"""
from .evaluate import LAYERS, VERDICTS, Decision, Policy, Request, StatementRef, check_policy, request_context

__all__ = ["LAYERS", "VERDICTS", "Decision", "Policy", "Request", "StatementRef", "check_policy", "request_context"]

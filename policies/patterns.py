"""Advisory `consumer-for-independent-work`: a persistent consumer (a worker Deployment) declared for work the chooser
would run as a ScaledJob.

A consumer works through a burst one item after another on one GPU; independent work (no order, no state carried
between messages) can run on many GPUs at once. Whether that wins depends on the model load against the per-item
time, which is what `planning.chooser.choose_pattern` weighs; the components write its pick and its reason, with the
per-burst estimates, on the workload's object (`gpuburst.io/chooser-pattern`, `gpuburst.io/chooser-reason`,
`components.spec.workload`), beside the declared facts. This rule names a consumer whose pick is `scaledjob`, with the
chooser's estimate. Advisory: a consumer carries any work, only more slowly (the config's or the program's word is
final); a consumer declared without facts carries no pick and is not judged.
"""
from __future__ import annotations

from collections.abc import Iterable

from pulumi_policy import EnforcementLevel

from ._components import WORKER_LABEL, workload
from .declare import resource_policy
from .fixes import fix_for
from .plan import Res, describe_res
from .resources import dig

NAME = "consumer-for-independent-work"
DEPLOYMENT = ("apps", "Deployment")


def consumer_findings(res: Res) -> Iterable[str]:
    """The advisory for a worker Deployment whose chooser pick (annotation) is a ScaledJob."""
    annotations = dig(res.props, "metadata", "annotations").value
    if not isinstance(annotations, dict):
        return []
    labels = dig(res.props, "spec", "template", "metadata", "labels").value
    own = dig(res.props, "metadata", "labels", "app.kubernetes.io/name").value
    if WORKER_LABEL not in ((labels or {}).get("app.kubernetes.io/name") if isinstance(labels, dict) else None, own):
        return []
    if annotations.get(workload.CHOICE_ANNOTATION) != "scaledjob":
        return []
    reason = annotations.get(workload.CHOICE_REASON_ANNOTATION)
    name = dig(res.props, "metadata", "name").value
    fix = fix_for(res.urn,
                  platform=f"leave gpuburst:workloads.{name if isinstance(name, str) else '<name>'}.pattern out (the "
                           "chooser's pick) or set it to scaledjob",
                  component="declare a GpuScaledJob for this queue instead of the GpuConsumer",
                  manifest="run it as a KEDA ScaledJob")
    facts = ", ".join(f"{k.rsplit('/', 1)[-1]}={annotations[k]}" for k in
                      (workload.INDEPENDENT_ANNOTATION, workload.ORDERED_ANNOTATION, workload.STATEFUL_ANNOTATION)
                      if isinstance(annotations.get(k), str))
    return [f"{describe_res(res)} is a persistent consumer for work declared independent ({facts}), which the chooser "
            f"would run as a ScaledJob: {reason if isinstance(reason, str) else 'no reason given'}; {fix}"]


POLICY = resource_policy(
    NAME, "Names a worker Deployment (GpuConsumer) declared for independent work that the chooser would run as a "
          "ScaledJob, with the chooser's estimate.", (DEPLOYMENT,), consumer_findings,
    level=EnforcementLevel.ADVISORY)

POLICIES = [POLICY]

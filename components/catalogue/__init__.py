"""The catalogue: every pinned version, every fact about versions, support dates, instances and timings, in one place.

Components, the policy pack, the planner and `verify` read this package; nothing else restates a version. A fact here
is a table row with its reason and source, so an error message can quote it and a test can check it against the
upstream oracles. Importing it loads no provider SDK. Modules: `pins` (what the stack deploys), `releases` (release
facts and version rules), `support` (the EKS support calendar and rule), `instances` (GPU instance and driver facts),
`timing` (the planner's stage durations, pull model and prices), `chart_findings` (why each checkov finding left on
the pinned charts' objects stays), `provider_actions` (the IAM actions the Pulumi AWS provider calls per resource
type and phase, S3's rows in `provider_actions_s3`), `logs` (CloudWatch Logs' retention periods).
"""
from .chart_findings import *  # noqa: F403
from .instances import *  # noqa: F403
from .lines import *  # noqa: F403
from .logs import *  # noqa: F403
from .pins import *  # noqa: F403
from .provider_actions import *  # noqa: F403
from .releases import *  # noqa: F403
from .support import *  # noqa: F403
from .timing import *  # noqa: F403

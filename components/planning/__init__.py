"""planning: the burst planner and the pattern chooser: what arrives (`arrivals`), each stage's duration (`stages`)
and the image pull and model fetch on this stack's nodes (`node_stages`), the discrete-event model (`simulation`, its
ScaledJob part in `jobs`), the stack as configured (`stack`), the advisor that searches what the stack allows for a
deadline or a budget (`goals`, `advisor`) and its answer (`advice`), the output (`report`), the ScaledJob-or-consumer
choice (`chooser`) and cron windows (`cron`). Importing it loads no provider SDK; this package re-exports the
planner's public names (`from components.planning import plan_stack`)."""
from .advice import *  # noqa: F403
from .advisor import *  # noqa: F403
from .arrivals import *  # noqa: F403
from .goals import *  # noqa: F403
from .node_stages import *  # noqa: F403
from .report import *  # noqa: F403
from .simulation import *  # noqa: F403
from .stack import *  # noqa: F403
from .stages import *  # noqa: F403

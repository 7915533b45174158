"""config: the stack's typed configuration, `gpuburst:<key>` in `Pulumi.<stack>.yaml`: the dataclasses (`stack`),
the rules that parse and check them (`parse`; `artifacts` for what the workers run: model, batch, image), and where
the raw map comes from (`files`). This package re-exports
their public names (`from components.config import parse_config, StackConfig`)."""
from .files import PROJECT_DIR, StackFileError, current_config, read_stack_config
from .parse import CONFIG_KEYS, parse_config, support_advisory
from .stack import (
    BURST_BUDGET_MAX_S,
    NAMESPACE,
    WARM_GPUS_MAX,
    BurstBudget,
    ModelSource,
    StackConfig,
    WarmGpus,
    WorkerBuild,
    WorkloadConfig,
)

__all__ = ["BURST_BUDGET_MAX_S", "CONFIG_KEYS", "NAMESPACE", "PROJECT_DIR", "WARM_GPUS_MAX", "BurstBudget",
           "ModelSource", "StackConfig", "StackFileError", "WarmGpus", "WorkerBuild", "WorkloadConfig",
           "current_config", "parse_config", "read_stack_config", "support_advisory"]

"""The trainer's configuration: the schema (validated frozen dataclasses), which task `task=` names and what a
task is (tasks), and how a config is built from YAML, a plain dict and `key=value` overrides, and written.

Torch-free: the submitter imports this to validate before anything is queued.
"""

from trainer.config.build import (
    best_metric,
    build_config,
    config_dict,
    flat,
    from_dict,
    parse_overrides,
    section,
    valid_keys,
    write_config,
)
from trainer.config.schema import (
    CheckpointConfig,
    DataConfig,
    DistConfig,
    HangConfig,
    OptimConfig,
    TrainConfig,
)

__all__ = [
    "CheckpointConfig",
    "DataConfig",
    "DistConfig",
    "HangConfig",
    "OptimConfig",
    "TrainConfig",
    "best_metric",
    "build_config",
    "config_dict",
    "flat",
    "from_dict",
    "parse_overrides",
    "section",
    "valid_keys",
    "write_config",
]

"""`python -m trainer key=value ...` (trainer/__main__.py), also under `torchrun --nproc-per-node N -m trainer ...`;
`python -m trainer [task=NAME] --help-settings` prints every setting as a Markdown table."""

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from trainer.config import TrainConfig, build_config, config_dict, parse_overrides, section, valid_keys, write_config
from trainer.config.build import task_settings_class
from trainer.data.resolve import resolve_data
from trainer.errors import one_line_errors
from trainer.run.prepare import make_dirs
from trainer.supervise.launcher import resolve

HELP_FLAG = "--help-settings"


def described_fields(cls: type, prefix: str = "") -> dict[str, dataclasses.Field[Any]]:
    """Every leaf field of a config dataclass by its dotted key (TrainConfig's task_settings left out)."""
    out: dict[str, dataclasses.Field[Any]] = {}
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory):
            out |= described_fields(f.default_factory, f"{prefix}{f.name}.")  # type: ignore[arg-type]
        elif not (cls is TrainConfig and f.name == "task_settings"):
            out[prefix + f.name] = f
    return out


def shown(value: Any) -> str:
    """A default as it is written in YAML or an override, in backticks."""
    text = ("true" if value else "false") if isinstance(value, bool) else str(value) if value != "" else '""'
    return f"`{text}`"


def settings_table(task: str = TrainConfig.task) -> str:
    """Every dotted key a config of `task` accepts, its default and its description (the fields' `help`)."""
    fields = described_fields(TrainConfig) | described_fields(task_settings_class(task), f"{section(task)}.")
    rows = ["| key | default | description |", "|---|---|---|"]
    for key in valid_keys(task=task):
        f = fields[key]
        description = f.metadata.get("help", "").replace("|", "\\|")  # a pipe would end the cell
        rows.append(f"| `{key}` | {shown(f.default)} | {description} |")
    return "\n".join(rows) + "\n"


@one_line_errors
def main(argv: list[str]) -> int:
    if HELP_FLAG in argv:
        overrides = parse_overrides([a for a in argv if a != HELP_FLAG])
        sys.stdout.write(settings_table(overrides.get("task", TrainConfig.task)))
        return 0
    env = resolve(os.environ)
    config = build_config(argv)
    # A fixed default folder: running the same command again resumes the run.
    run_dir = Path(config.run_dir or f"runs/{config.task}").resolve()
    config = dataclasses.replace(config, run_dir=str(run_dir))
    config = resolve_data(config, Path("runs/sample_data"), env.world_size)
    if env.is_main:
        make_dirs(run_dir)
        write_config(run_dir, config)
    from trainer.entry.task import run

    run(config_dict(config))
    return 0

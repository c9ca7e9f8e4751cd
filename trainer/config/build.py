"""Building a TrainConfig: from a nested mapping (YAML, a profile's section, the dict a task is sent) and from
`key=value` overrides, with the task's own settings and checks."""

import dataclasses
import math
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from trainer.config import tasks
from trainer.config.schema import TrainConfig, _check
from trainer.errors import UserError
from trainer.run.atomic import write_text
from trainer.run.rundir import RunDir


def task_settings_class(task: str) -> type:
    return tasks.get(task).settings


def section(task: str) -> str:
    """The key the task's settings live under (`<section>.<key>=value`): its name."""
    return tasks.get(task).name


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def valid_keys(cls: type = TrainConfig, prefix: str = "", task: str = TrainConfig.task) -> list[str]:
    """Every dotted key a config of `cls` accepts (a TrainConfig: with the settings of `task`)."""
    keys = []
    for name, tp in _fields(cls).items():
        if cls is TrainConfig and name == "task_settings":
            keys.extend(valid_keys(task_settings_class(task), f"{prefix}{section(task)}."))
        elif dataclasses.is_dataclass(tp):
            keys.extend(valid_keys(tp, f"{prefix}{name}."))
        else:
            keys.append(prefix + name)
    return keys


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str, example: str) -> Any:
    """Check a value read from YAML or a dict against the field's type."""
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if (tp is int and isinstance(value, bool)) or not isinstance(value, tp):
        raise UserError(f"{key}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")
    return _in_range(value, key, str(value), example)


def _in_range(value: Any, key: str, raw: str, example: str) -> Any:
    """Numbers a job can use: finite floats, integers a 64-bit int holds (torch's seeds, timeouts, counts)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{key}={raw}: must be a finite number; give e.g. {key}={example}")
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        raise UserError(f"{key}={raw}: out of range (a 64-bit integer); give e.g. {key}={example}")
    return value


def example_of(cls: type, name: str, tp: Any) -> str:
    """A value to suggest for field `name` of `cls`: its default where that is a plain value (accepted, as
    every default is), else one of its type."""
    field = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    default = field.default if field is not None else dataclasses.MISSING
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, int | float) and math.isfinite(default):
        return f"{default:g}" if isinstance(default, float) else str(default)
    if isinstance(default, str) and default and tp is str:
        return default
    return {bool: "true", int: "10", float: "0.001"}.get(tp, "text")


def from_dict(cls: type, data: Mapping[str, Any], prefix: str = "") -> Any:
    """Build a config dataclass from a nested mapping, rejecting unknown keys and wrong types."""
    if not isinstance(data, Mapping):
        raise UserError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {type(data).__name__}")
    if cls is TrainConfig:
        return _train_config(data)
    fields = _fields(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UserError(f"unknown config key {prefix}{unknown[0]!s}; valid keys: {', '.join(valid_keys(cls, prefix))}")
    return cls(**_field_values(cls, fields, data, prefix))


def _field_values(cls: type, fields: dict[str, Any], data: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The fields' values in `data`: each section built from its mapping, each plain value checked."""
    kwargs = {}
    for name, value in data.items():
        tp = fields[name]
        if dataclasses.is_dataclass(tp):  # a section already built passes (jobs.profiles.profile_of)
            kwargs[name] = value if isinstance(value, tp) else from_dict(tp, value, f"{prefix}{name}.")
        else:
            kwargs[name] = _coerce(value, tp, prefix + name, example_of(cls, name, tp))
    return kwargs


def _train_config(data: Mapping[str, Any]) -> TrainConfig:
    """A TrainConfig: the section named after its task holds the task's settings; another task's section
    is a mistake (settings that would silently do nothing)."""
    task = data.get("task", TrainConfig.task)
    if not isinstance(task, str):
        raise UserError(f"task: expected str, got {type(task).__name__} {task!r}")
    settings_class, own = task_settings_class(task), section(task)
    rest = {k: v for k, v in data.items() if k != own}
    _refuse_other_tasks(rest, own)
    keys = _fields(TrainConfig)
    unknown = sorted(set(rest) - set(keys) | ({"task_settings"} & set(rest)))
    if unknown:
        raise UserError(f"unknown config key {unknown[0]}; valid keys: {', '.join(valid_keys(task=task))}")
    kwargs = _field_values(TrainConfig, keys, rest, "")
    settings = from_dict(settings_class, data.get(own) or {}, f"{own}.")
    # Your task's file as an absolute path: the same file whatever folder a resume starts from.
    config = TrainConfig(**kwargs | {"task": tasks.canonical(task)}, task_settings=settings)
    _check_against_task(config)
    return config


def _check_against_task(config: TrainConfig) -> None:
    metrics = tasks.get(config.task).metrics
    _check(
        not config.eval.metric or config.eval.metric in metrics,
        "eval.metric",
        f"task {config.task} reports {', '.join(metrics) or 'none'}, not {config.eval.metric!r}",
    )
    _check(
        bool(metrics) or not (config.data.val_fraction or config.data.val_root),
        "data.val_fraction",
        f"and data.val_root need a task with evaluate() and metrics; task {config.task} has none",
    )


def best_metric(config: TrainConfig) -> tuple[str, str]:
    """The validation metric that picks the best checkpoint, and whether lower (min) or higher is better."""
    metrics = tasks.get(config.task).metrics
    name = config.eval.metric or next(iter(metrics))
    return name, config.eval.mode or metrics[name]


def _refuse_other_tasks(keys: Iterable[str], task: str) -> None:
    for key in keys:
        other = key.split(".", 1)[0]
        if other != task and other in tasks.available():
            raise UserError(f"{key} is a setting of task {other}, but task is {task}; drop it, or pass task={other}")


def config_dict(config: TrainConfig) -> dict[str, Any]:
    """The config as plain values, the task's settings under the task's name (config.yaml's layout)."""
    out = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "task_settings"}
    out = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in out.items()}
    return out | {section(config.task): dataclasses.asdict(config.task_settings)}


def write_config(run_dir: Path, config: TrainConfig) -> None:
    """The resolved config, the last thing written before a run starts: its presence marks a run."""
    write_text(RunDir(run_dir).config, yaml.safe_dump(config_dict(config), sort_keys=False))


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _parse_scalar(raw: str, tp: Any, key: str, example: str) -> Any:
    """Turn the text of a command-line override into the field's type."""
    try:
        if tp is bool:
            if raw.lower() in _TRUE | _FALSE:
                return raw.lower() in _TRUE
            raise ValueError
        if tp in (int, float):
            return _in_range(tp(raw), key, raw, example)
    except ValueError:
        raise UserError(f"{key}={raw}: expected {_type_name(tp)}; give e.g. {key}={example}") from None
    return raw


def parse_overrides(items: Iterable[str], task: str | None = None) -> dict[str, Any]:
    """Turn `a.b=1` arguments into a nested dict with values of the right types. The task's own keys are
    those of `task` (by default the one the items name, else the default task)."""
    pairs = []
    for item in items:
        key, eq, raw = item.partition("=")
        if not eq or not key:
            raise UserError(f"override {item!r} is not key=value; write e.g. steps=100")
        pairs.append((key, raw))
    task = next((raw for key, raw in reversed(pairs) if key == "task"), task or TrainConfig.task)
    keys = valid_keys(task=task)
    name = section(task)
    out: dict[str, Any] = {}
    for key, raw in pairs:
        if key not in keys:
            _refuse_other_tasks([key], name)
            raise UserError(f"unknown config key {key}; valid keys: {', '.join(keys)}")
        cls: Any = TrainConfig
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            cls = task_settings_class(task) if cls is TrainConfig and part == name else _fields(cls)[part]
            node = node.setdefault(part, {})
        tp = _fields(cls)[leaf]
        node[leaf] = _parse_scalar(raw, tp, key, example_of(cls, leaf, tp))
    return out


def merge(base: Mapping[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge `updates` into a copy of `base`."""
    out = dict(base)
    for key, value in updates.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def build_config(overrides: Iterable[str] = (), base: Mapping[str, Any] | None = None) -> TrainConfig:
    """The resolved trainer config: defaults, then `base` (a profile's section), then overrides."""
    base = base or {}
    return from_dict(TrainConfig, merge(base, parse_overrides(overrides, base.get("task"))))


def flat(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted keys: {"optim": {"lr": 1}} -> {"optim.lr": 1}."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out |= flat(value, f"{prefix}{key}.") if isinstance(value, Mapping) else {prefix + key: value}
    return out

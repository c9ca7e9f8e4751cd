"""Trainer configuration: frozen dataclasses validated at construction, and `key=value` overrides.

Torch-free on purpose: the submitter imports this to validate before it queues anything.
"""

import dataclasses
import math
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trainer.tasks
from trainer.errors import UserError

AMP_MODES = ("off", "bf16", "fp16")
SCHEDULES = ("constant", "cosine", "linear")

# The config classes are frozen (validated once, never changed) with eq=False: nothing compares configs,
# and each generated method is compiled at import, on the submit path (benchmarks/submit_speed.py).


WEEK_S = 7 * 24 * 3600


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise UserError(f"{key}: {message}")


@dataclass(frozen=True, eq=False)
class DataConfig:
    """Where the data is and how it is loaded."""

    root: str = ""  # empty: the built-in sample data, generated on first use
    csv: str = "pairs.csv"  # pix2pix only, relative to root
    image_size: int = 64
    num_workers: int = -1  # -1: derived from the CPUs available to each task
    loader: str = "shared"  # shared: trainer/loader.py (reused shared-memory batches); torch: torch's DataLoader
    verify_images: bool = True  # open images at submit, before anything is queued
    verify_sample: int = 1000  # how many samples' images (drawn at random, seed 0); 0: every one
    bad_images: str = "fail"  # an image that cannot be read in training: fail (naming it) or skip (counted)
    file_lists: str = ""  # set by the submitter: the folder of the resolved file lists every rank reads
    # Validation: a separate data root (its CSV: val_csv, default the same name as csv), or a fraction of the
    # training data held out by seed. Neither: no validation.
    val_root: str = ""
    val_csv: str = ""
    val_fraction: float = 0.0

    def __post_init__(self) -> None:
        _check(0 <= self.val_fraction < 1, "data.val_fraction", "must be >= 0 and < 1, e.g. 0.1")
        _check(
            not (self.val_root and self.val_fraction),
            "data.val_root",
            "and data.val_fraction are both set; hold out a fraction or name a validation root, not both",
        )
        _check(not self.val_csv or bool(self.val_root), "data.val_csv", "needs data.val_root (the folder it is in)")
        _check(
            self.image_size >= 16 and self.image_size % 16 == 0,
            "data.image_size",
            "must be a multiple of 16, at least 16",
        )
        _check(self.num_workers >= -1, "data.num_workers", "must be -1 (auto) or >= 0")
        _check(self.loader in ("shared", "torch"), "data.loader", f"must be shared or torch, got {self.loader!r}")
        _check(self.bad_images in ("fail", "skip"), "data.bad_images", f"must be fail or skip, got {self.bad_images!r}")
        _check(self.verify_sample >= 0, "data.verify_sample", "must be >= 0 (0: open every image)")

    def held_out(self, samples: int) -> int:
        """How many of `samples` val_fraction holds out for validation (at least one when it is set)."""
        return max(1, round(samples * self.val_fraction)) if self.val_fraction else 0


@dataclass(frozen=True, eq=False)
class OptimConfig:
    """AdamW and its schedule."""

    lr: float = 2e-3
    weight_decay: float = 0.0
    warmup_steps: int = 0
    grad_clip: float = 0.0  # 0: off
    schedule: str = "constant"  # after warm-up: constant, cosine or linear decay to min_lr at the last step
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        _check(self.lr > 0, "optim.lr", "must be > 0")
        _check(
            self.schedule in SCHEDULES,
            "optim.schedule",
            f"must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}",
        )
        _check(0 <= self.min_lr <= self.lr, "optim.min_lr", f"must be between 0 and optim.lr ({self.lr})")
        _check(self.weight_decay >= 0, "optim.weight_decay", "must be >= 0")
        _check(self.warmup_steps >= 0, "optim.warmup_steps", "must be >= 0")
        _check(self.grad_clip >= 0, "optim.grad_clip", "must be >= 0 (0 turns clipping off)")


@dataclass(frozen=True, eq=False)
class EvalConfig:
    """When the validation set is evaluated (with one: see data.val_root and data.val_fraction)."""

    every: int = 100  # steps between evaluations; the last step is always evaluated; 0: the last step only
    metric: str = ""  # the validation metric that picks the best checkpoint; empty: the task's choice
    mode: str = ""  # min or max; empty: the metric's own direction (the task knows it)

    def __post_init__(self) -> None:
        _check(self.every >= 0, "eval.every", "must be >= 0 (0: only at the end)")
        _check(self.mode in ("", "min", "max"), "eval.mode", f"must be min or max, got {self.mode!r}")


@dataclass(frozen=True, eq=False)
class LogConfig:
    """How often scalars and image grids are logged."""

    every: int = 10  # steps between scalar logs and progress lines
    image_every: int = 50  # steps between TensorBoard image grids; 0: never
    nonfinite: str = "warn"  # a loss that is NaN or infinite over a whole log interval: warn, or stop the run

    def __post_init__(self) -> None:
        _check(self.every >= 1, "log.every", "must be >= 1")
        _check(self.image_every >= 0, "log.image_every", "must be >= 0 (0 turns image grids off)")
        _check(self.nonfinite in ("warn", "stop"), "log.nonfinite", f"must be warn or stop, got {self.nonfinite!r}")


@dataclass(frozen=True, eq=False)
class CheckpointConfig:
    """How often checkpoints are written and how many are kept."""

    every: int = 50  # steps between checkpoints; the last step is always saved
    keep: int = 3  # newest checkpoints kept
    background: bool = False  # write in a thread while training goes on (only serialising blocks)
    broadcast: bool = True  # on resume rank 0 reads the checkpoint and sends it to the others (false: all read)

    def __post_init__(self) -> None:
        _check(self.every >= 1, "checkpoint.every", "must be >= 1")
        _check(self.keep >= 1, "checkpoint.keep", "must be >= 1")


@dataclass(frozen=True, eq=False)
class DistConfig:
    """The process group, the requeue vote, and DDP's gradient communication."""

    timeout_s: int = 300  # process-group init and collective timeout
    stop_check_every: int = 5  # steps between the ranks' votes on a requeue signal (an all-reduce each)
    # DDP's gradient communication (benchmarks/communication.py measures their effect); defaults are DDP's.
    bucket_cap_mb: float = 25.0  # gradient bytes per all-reduce
    gradient_as_bucket_view: bool = False  # .grad as views into the buckets: one copy less per step
    static_graph: bool = False  # the same parameters get gradients every step

    def __post_init__(self) -> None:
        _check(1 <= self.timeout_s <= WEEK_S, "dist.timeout_s", f"must be between 1 and {WEEK_S} (a week)")
        _check(self.stop_check_every >= 1, "dist.stop_check_every", "must be >= 1")
        _check(self.bucket_cap_mb > 0, "dist.bucket_cap_mb", "must be > 0, e.g. 25 (DDP's default)")


@dataclass(frozen=True, eq=False)
class TrainConfig:
    """Everything a training run needs; built from the profile's trainer section and overrides."""

    task: str = "pix2pix"
    run_dir: str = ""  # set by the submitter; with torchrun, defaults to runs/<task>
    seed: int = 0
    steps: int = 300
    batch_size: int = 8  # per process
    amp: str = "off"
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    log: LogConfig = field(default_factory=LogConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    # The task's own settings (an instance of its `settings` class), under the task's name in YAML and
    # overrides: `pix2pix.width=32`. None: the task's defaults.
    task_settings: Any = None

    def __post_init__(self) -> None:
        # Your task's file as an absolute path: the same file whatever folder a resume starts from.
        object.__setattr__(self, "task", trainer.tasks.canonical(self.task))
        settings = task_settings_class(self.task)
        if self.task_settings is None:
            object.__setattr__(self, "task_settings", settings())
        _check(isinstance(self.task_settings, settings), self.task, f"settings must be a {settings.__name__}")
        metrics = trainer.tasks.get(self.task).metrics
        _check(
            not self.eval.metric or self.eval.metric in metrics,
            "eval.metric",
            f"task {self.task} reports {', '.join(metrics) or 'none'}, not {self.eval.metric!r}",
        )
        _check(
            bool(metrics) or not (self.data.val_fraction or self.data.val_root),
            "data.val_fraction",
            f"and data.val_root need a task with evaluate() and metrics; task {self.task} has none",
        )
        _check(self.amp in AMP_MODES, "amp", f"must be one of {', '.join(AMP_MODES)}, got {self.amp!r}")
        _check(self.steps >= 1, "steps", "must be >= 1")
        # The sampler seeds torch with seed + epoch: room left below 2**63 for any number of epochs.
        _check(0 <= self.seed < 2**62, "seed", "must be >= 0 and < 2**62, e.g. 0")
        _check(self.batch_size >= 1, "batch_size", "must be >= 1")

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        # Pickled (by submitit) as plain values and rebuilt in the task: a task's settings class may live in
        # a file imported by path, which the task's interpreter has not imported when it unpickles.
        return _from_plain, (config_dict(self),)

    def best_metric(self) -> tuple[str, str]:
        """The validation metric that picks the best checkpoint, and whether lower (min) or higher is better."""
        metrics = trainer.tasks.get(self.task).metrics
        name = self.eval.metric or next(iter(metrics))
        return name, self.eval.mode or metrics[name]


@dataclass(frozen=True, eq=False)
class JobSettings:
    """What the submitter tells every task about requeueing, from the profile (signal without "SIG")."""

    signal: str = "USR2"
    signal_delay_s: int = 120
    max_num_timeout: int = 3


def task_settings_class(task: str) -> type:
    return trainer.tasks.get(task).settings


def section(task: str) -> str:
    """The key the task's settings live under (`<section>.<key>=value`): its name."""
    return trainer.tasks.get(task).name


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


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check a value read from YAML or a dict against the field's type."""
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if (tp is int and isinstance(value, bool)) or not isinstance(value, tp):
        raise UserError(f"{key}: expected {_type_name(tp)}, got {type(value).__name__} {value!r}")
    return _in_range(value, key, str(value))


def _in_range(value: Any, key: str, raw: str) -> Any:
    """Numbers a job can use: finite floats, integers a 64-bit int holds (torch's seeds, timeouts, counts)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{key}={raw}: must be a finite number; give e.g. {key}={_example(float)}")
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        raise UserError(f"{key}={raw}: out of range (a 64-bit integer); give e.g. {key}={_example(int)}")
    return value


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
    kwargs = {}
    for name, value in data.items():
        tp = fields[name]
        if dataclasses.is_dataclass(tp):
            kwargs[name] = from_dict(tp, value, f"{prefix}{name}.")
        else:
            kwargs[name] = _coerce(value, tp, prefix + name)
    return cls(**kwargs)


def _train_config(data: Mapping[str, Any]) -> TrainConfig:
    """A TrainConfig: the section named after its task holds the task's settings; another task's section
    is a mistake (settings that would silently do nothing)."""
    task = data.get("task", TrainConfig.task)
    if not isinstance(task, str):
        raise UserError(f"task: expected str, got {type(task).__name__} {task!r}")
    settings_class, own = task_settings_class(task), section(task)
    rest = {k: v for k, v in data.items() if k != own}
    if "model" in rest:  # config.yaml and profiles from before the tasks owned their settings
        raise UserError(
            "the model section is gone: write model.name as classify.model, model.width and model.depth as "
            "pix2pix.width and pix2pix.depth"
        )
    _refuse_other_tasks(rest, own)
    keys = _fields(TrainConfig)
    unknown = sorted(set(rest) - set(keys) | ({"task_settings"} & set(rest)))
    if unknown:
        raise UserError(f"unknown config key {unknown[0]}; valid keys: {', '.join(valid_keys(task=task))}")
    kwargs = {}
    for name, value in rest.items():
        tp = keys[name]
        kwargs[name] = from_dict(tp, value, f"{name}.") if dataclasses.is_dataclass(tp) else _coerce(value, tp, name)
    settings = from_dict(settings_class, data.get(own) or {}, f"{own}.")
    return TrainConfig(**kwargs, task_settings=settings)


def _refuse_other_tasks(keys: Iterable[str], task: str) -> None:
    for key in keys:
        other = key.split(".", 1)[0]
        if other != task and other in trainer.tasks.available():
            raise UserError(f"{key} is a setting of task {other}, but task is {task}; drop it, or pass task={other}")


def _from_plain(data: dict[str, Any]) -> TrainConfig:
    return from_dict(TrainConfig, data)  # type: ignore[no-any-return]


def config_dict(config: TrainConfig) -> dict[str, Any]:
    """The config as plain values, the task's settings under the task's name (config.yaml's layout)."""
    out = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "task_settings"}
    out = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in out.items()}
    return out | {section(config.task): dataclasses.asdict(config.task_settings)}


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _parse_scalar(raw: str, tp: Any, key: str) -> Any:
    """Turn the text of a command-line override into the field's type."""
    try:
        if tp is bool:
            if raw.lower() in _TRUE | _FALSE:
                return raw.lower() in _TRUE
            raise ValueError
        if tp is int:
            return _in_range(int(raw), key, raw)
        if tp is float:
            return _in_range(float(raw), key, raw)
    except ValueError:
        raise UserError(f"{key}={raw}: expected {_type_name(tp)}; give e.g. {key}={_example(tp)}") from None
    return raw


def _example(tp: Any) -> str:
    return {bool: "true", int: "10", float: "0.001"}.get(tp, "text")


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
        node[leaf] = _parse_scalar(raw, _fields(cls)[leaf], key)
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

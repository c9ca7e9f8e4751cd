"""The trainer's settings: frozen dataclasses, each field checked on its own at construction.

What depends on the task (its settings, its metrics) is checked where a config is built (trainer.config.build),
so this module imports no task and the tasks can name these types.
"""

from dataclasses import MISSING, dataclass, field
from typing import Any

from trainer.errors import UserError

AMP_MODES = ("off", "bf16", "fp16")
SCHEDULES = ("constant", "cosine", "linear")

# The config classes are frozen (validated once, never changed) with eq=False: nothing compares configs,
# and each generated method is compiled at import, on the submit path (benchmarks/submit_speed.py).


WEEK_S = 7 * 24 * 3600


def setting(default: Any = MISSING, help: str = "", **kw: Any) -> Any:
    """A config field with its description, the one source of `python -m trainer --help-settings`."""
    return field(default=default, metadata={"help": help}, **kw)


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise UserError(f"{key}: {message}")


@dataclass(frozen=True, eq=False)
class DataConfig:
    """Where the data is and how it is loaded."""

    root: str = setting("", "the data folder; empty: the built-in sample data, generated on first use")
    csv: str = setting("pairs.csv", "pix2pix: the CSV of image pairs, relative to `data.root`")
    image_size: int = setting(64, "images are resized to this square size (a multiple of 16)")
    num_workers: int = setting(-1, "loader worker processes per rank; -1: one per CPU of the task but one, at most 8")
    prefetch_factor: int = setting(2, "batches each loader worker prepares ahead (torch's DataLoader)")
    pin_memory: bool = setting(
        True, "on CUDA, batches in pinned host memory: the copy to the GPU overlaps the step (ignored on CPU)"
    )
    persistent_workers: bool = setting(True, "loader workers live from one epoch to the next instead of starting anew")
    verify_images: bool = setting(True, "open the data's images at submit, before anything is queued")
    verify_sample: int = setting(
        1000, "how many samples' images the submit check opens, drawn at random (seed 0); 0: every one"
    )
    bad_images: str = setting(
        "fail",
        "an image that cannot be read in training: `fail` (the run ends naming it) or `skip` (the next sample takes "
        "its place; counted in `summary.json`, the paths in `bad_images/`)",
    )
    allow_change: bool = setting(
        False,
        "a `--resume` whose training data or seed changed goes on (warned of in `attempts.json`) instead of ending: "
        "the samples of each step then differ from the run's",
    )
    file_lists: str = setting("", "set by the submitter: the folder of the resolved file lists every rank reads")
    # Validation: a separate data root or a fraction of the training data held out by seed; neither: none.
    val_root: str = setting("", "validate on this separate data root, checked at submit like the training data")
    val_csv: str = setting("", "pix2pix: the validation root's CSV; empty: the same name as `data.csv`")
    val_fraction: float = setting(
        0.0, "hold out this fraction of the training data (chosen by `seed`) for validation; 0: none"
    )

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
        _check(self.prefetch_factor >= 1, "data.prefetch_factor", "must be >= 1, e.g. 2 (torch's default)")
        _check(self.bad_images in ("fail", "skip"), "data.bad_images", f"must be fail or skip, got {self.bad_images!r}")
        _check(self.verify_sample >= 0, "data.verify_sample", "must be >= 0 (0: open every image)")

    def held_out(self, samples: int) -> int:
        """How many of `samples` val_fraction holds out for validation (at least one when it is set)."""
        return max(1, round(samples * self.val_fraction)) if self.val_fraction else 0


@dataclass(frozen=True, eq=False)
class OptimConfig:
    """AdamW and its schedule."""

    lr: float = setting(2e-3, "AdamW's learning rate (the peak, after warm-up)")
    weight_decay: float = setting(0.0, "AdamW's weight decay")
    warmup_steps: int = setting(0, "steps of linear warm-up to `optim.lr`")
    grad_clip: float = setting(0.0, "clip the gradients' total norm to this; 0: no clipping")
    schedule: str = setting(
        "constant",
        "after warm-up: `constant`, or `cosine` or `linear` decay reaching `optim.min_lr` at the last step (a function "
        "of the step: resumed exactly)",
    )
    min_lr: float = setting(0.0, "the learning rate a cosine or linear schedule ends at")

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

    every: int = setting(
        100, "steps between evaluations of the validation set; the last step is always evaluated; 0: only the last"
    )
    metric: str = setting("", "the validation metric that picks `checkpoints/best.pt`; empty: the task's first metric")
    mode: str = setting("", "`min` or `max`: which way `eval.metric` improves; empty: the metric's own direction")

    def __post_init__(self) -> None:
        _check(self.every >= 0, "eval.every", "must be >= 0 (0: only at the end)")
        _check(self.mode in ("", "min", "max"), "eval.mode", f"must be min or max, got {self.mode!r}")


@dataclass(frozen=True, eq=False)
class LogConfig:
    """How often scalars and image grids are logged."""

    every: int = setting(10, "steps between scalar logs (TensorBoard, `progress.json`) and progress lines")
    image_every: int = setting(50, "steps between TensorBoard image grids; 0: none")
    nonfinite: str = setting(
        "warn",
        "a training loss that is NaN or infinite over a whole log interval: `warn` (a `warning:` line) or `stop` "
        "(the run ends with that line in `error.txt`)",
    )

    # Off by default: a comm hook of our own replaces DDP's C++ all-reduce; on only where measured to cost <= 1%.
    stragglers: bool = setting(False, "time each rank's data, compute and communication; name a rank that stays slow")
    straggler_ratio: float = setting(1.2, "a straggler's own work (data + compute) per step, against the median rank's")
    straggler_intervals: int = setting(3, "log intervals in a row a rank must stay above straggler_ratio to be named")

    def __post_init__(self) -> None:
        _check(1 < self.straggler_ratio <= 100, "log.straggler_ratio", "must be above 1 and at most 100, e.g. 1.2")
        _check(1 <= self.straggler_intervals <= 10_000, "log.straggler_intervals", "must be between 1 and 10000")
        _check(self.every >= 1, "log.every", "must be >= 1")
        _check(self.image_every >= 0, "log.image_every", "must be >= 0 (0 turns image grids off)")
        _check(self.nonfinite in ("warn", "stop"), "log.nonfinite", f"must be warn or stop, got {self.nonfinite!r}")


@dataclass(frozen=True, eq=False)
class CheckpointConfig:
    """How often checkpoints are written and how many are kept."""

    every: int = setting(50, "steps between checkpoints; the last step is always saved")
    keep: int = setting(3, "how many of the newest checkpoints are kept (`best.pt` apart)")
    background: bool = setting(False, "write checkpoints in a thread while training goes on; only serialising blocks")
    broadcast: bool = setting(
        True,
        "on resume rank 0 alone reads the checkpoint and sends it over the process group (false: every rank reads it)",
    )

    def __post_init__(self) -> None:
        _check(self.every >= 1, "checkpoint.every", "must be >= 1")
        _check(self.keep >= 1, "checkpoint.keep", "must be >= 1")


@dataclass(frozen=True, eq=False)
class DistConfig:
    """The process group, the requeue vote, and DDP's gradient communication."""

    timeout_s: int = setting(300, "seconds for the process group to form and for any collective")
    # Voting every step cost about 2% of a step here; the signal comes long enough before the limit to wait.
    stop_check_every: int = setting(5, "steps between the ranks' votes on a requeue signal (an all-reduce each)")
    # DDP's gradient communication (benchmarks/communication.py measures their effect); defaults are DDP's.
    bucket_cap_mb: float = setting(
        25.0, "gradient megabytes per DDP all-reduce (larger: fewer messages, later overlap)"
    )
    gradient_as_bucket_view: bool = setting(False, "gradients as views into DDP's buckets: one copy less per step")
    static_graph: bool = setting(False, "DDP may assume the same parameters get gradients every step")
    init_method: str = setting(
        "tcp", "how the ranks meet: tcp (MASTER_ADDR:MASTER_PORT) or file (a file in the run directory)"
    )

    def __post_init__(self) -> None:
        _check(1 <= self.timeout_s <= WEEK_S, "dist.timeout_s", f"must be between 1 and {WEEK_S} (a week)")
        _check(self.init_method in ("tcp", "file"), "dist.init_method", "must be tcp or file")
        _check(self.stop_check_every >= 1, "dist.stop_check_every", "must be >= 1")
        _check(self.bucket_cap_mb > 0, "dist.bucket_cap_mb", "must be > 0, e.g. 25 (DDP's default)")


@dataclass(frozen=True, eq=False)
class HangConfig:
    """Hang detection, for the trainer (a watchdog thread per rank, trainer/supervise/watchdog.py) and for a
    `-- COMMAND` (its task watches it, trainer/supervise/script.py): the budgets and the heartbeat."""

    enabled: bool = setting(
        True, "a rank that makes no progress for its section's budget names the stuck rank and exits"
    )
    timeout_s: float = setting(0.0, "every budget at once, in seconds; 0: each derived from the run's own intervals")
    first_s: float = setting(900.0, "the budget of start-up to the first step, and of any section's first time")
    factor: float = setting(5.0, "a derived budget: the longest time the section took so far in this attempt x this")
    floor_s: float = setting(120.0, "a derived budget is never below this many seconds")
    beat_s: float = setting(5.0, "seconds between a rank's heartbeats, which tell a stopped rank from a slow one")

    def __post_init__(self) -> None:
        _check(1 <= self.beat_s <= 60, "hang.beat_s", "must be between 1 and 60 seconds, e.g. 5")
        least = 3 * self.beat_s
        _check(
            self.timeout_s == 0 or least <= self.timeout_s <= WEEK_S,
            "hang.timeout_s",
            f"must be 0 (derived budgets) or between 3 x hang.beat_s ({least:g}) and {WEEK_S} seconds",
        )
        _check(least <= self.first_s <= WEEK_S, "hang.first_s", f"must be between {least:g} and {WEEK_S} seconds")
        _check(1.5 <= self.factor <= 100, "hang.factor", "must be between 1.5 and 100, e.g. 5")
        _check(least <= self.floor_s <= WEEK_S, "hang.floor_s", f"must be between {least:g} and {WEEK_S} seconds")

    @classmethod
    def for_command(cls, idle_s: float) -> "HangConfig":
        """A `-- COMMAND`'s: one budget for any stretch without progress (the profile's script_hang_s, checked
        there; 0: never), with a heartbeat at least three times within it (5 s, as the trainer's, at most)."""
        # Whole seconds: idle_s / 3 could round above a third (3 x (12.06 / 3) > 12.06), failing __post_init__'s check.
        return cls(enabled=idle_s > 0, timeout_s=idle_s, beat_s=min(5.0, idle_s // 3) if idle_s else 5.0)


@dataclass(frozen=True, eq=False)
class TrainConfig:
    """Everything a training run needs; built from the profile's trainer section and overrides."""

    task: str = setting(
        "pix2pix",
        "`pix2pix` (paired image-to-image, U-Net, L1), `classify` (ImageFolder, a torchvision model), or your "
        "own: `my_pkg.my_module:MyTask` or `path/to/tasks.py:MyTask`",
    )
    run_dir: str = setting("", "the run directory; set by the submitter (under plain torchrun: `runs/<task>`)")
    seed: int = setting(0, "seeds the initial weights, the data order, the held-out split and augmentations")
    steps: int = setting(300, "optimizer steps in total")
    batch_size: int = setting(8, "samples per process per step")
    amp: str = setting("off", "mixed precision: `off`, `bf16` or `fp16` (fp16 with a GradScaler)")
    deterministic: bool = setting(
        False,
        "torch's deterministic kernels (`torch.use_deterministic_algorithms`): on GPUs, the same weights run to run "
        "and across a resume, at some speed; an op with no deterministic kernel then stops the run with torch's error "
        "naming it; on CPU the weights are the same without it",
    )
    data: DataConfig = setting(default_factory=DataConfig, help="the data and its loading")
    optim: OptimConfig = setting(default_factory=OptimConfig, help="AdamW and its schedule")
    log: LogConfig = setting(default_factory=LogConfig, help="scalars and image grids")
    eval: EvalConfig = setting(default_factory=EvalConfig, help="evaluation of the validation set")
    checkpoint: CheckpointConfig = setting(default_factory=CheckpointConfig, help="checkpoints")
    dist: DistConfig = setting(default_factory=DistConfig, help="the process group and DDP")
    hang: HangConfig = setting(default_factory=HangConfig, help="hang detection")
    # None until a config is built: then the task's `settings` instance (trainer.config.build fills it).
    task_settings: Any = setting(
        None, "the task's own settings, set as `<task name>.<key>=value` (e.g. `pix2pix.width=32`)"
    )

    def __post_init__(self) -> None:
        _check(
            self.task_settings is not None,
            "task_settings",
            "missing; build a config with trainer.config.build_config or from_dict, which resolve the task",
        )
        _check(self.amp in AMP_MODES, "amp", f"must be one of {', '.join(AMP_MODES)}, got {self.amp!r}")
        _check(self.steps >= 1, "steps", "must be >= 1")
        # The sampler seeds torch with seed + epoch: room left below 2**63 for any number of epochs.
        _check(0 <= self.seed < 2**62, "seed", "must be >= 0 and < 2**62, e.g. 0")
        _check(self.batch_size >= 1, "batch_size", "must be >= 1")

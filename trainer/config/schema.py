"""The trainer's settings: frozen dataclasses, each field checked on its own at construction.

What depends on the task (its settings, its metrics) is checked where a config is built (trainer.config.build),
so this module imports no task and the tasks can name these types.
"""

from dataclasses import dataclass, field
from typing import Any

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
    prefetch_factor: int = 2  # batches each loader worker prepares ahead (torch's DataLoader)
    pin_memory: bool = True  # on CUDA, batches in pinned host memory: the copy to the GPU overlaps the step
    persistent_workers: bool = True  # loader workers live from one epoch to the next instead of starting anew
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
        _check(self.prefetch_factor >= 1, "data.prefetch_factor", "must be >= 1, e.g. 2 (torch's default)")
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
        _check(self.amp in AMP_MODES, "amp", f"must be one of {', '.join(AMP_MODES)}, got {self.amp!r}")
        _check(self.steps >= 1, "steps", "must be >= 1")
        # The sampler seeds torch with seed + epoch: room left below 2**63 for any number of epochs.
        _check(0 <= self.seed < 2**62, "seed", "must be >= 0 and < 2**62, e.g. 0")
        _check(self.batch_size >= 1, "batch_size", "must be >= 1")

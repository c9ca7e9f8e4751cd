"""What `task=` names: a built-in task (a module of trainer.tasks, defining `TASK`) or yours, by import path.

A task owns everything about itself: its settings, its data check, its sample data, its dataset, model and
loss; the shared code asks the task and never tests a task's name. `task=classify` names a built-in task;
`task=my_pkg.my_module:MyTask` or `task=path/to/tasks.py:MyTask` names a class (instantiated without
arguments) or an object of your own with at least dataset(), model() and forward().

The built-in modules import torch inside their methods only: the submitter imports them (for the settings
and the data check) and must stay quick. Yours may import what they like; the submitter then pays for it.
A built-in task is found by its module's name, as yours is by its import path: the tasks import the config,
never the other way round.
"""

import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import io
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from trainer.errors import UserError
from trainer.imports import user_imports

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset

    from trainer.config.schema import TrainConfig

REQUIRED = ("dataset", "model", "forward")
BUILT_IN = "trainer.tasks"  # the package of the built-in tasks, one module each


class Task(Protocol):
    name: str
    """Where the task's settings live: `<name>.<key>=value` and the `<name>:` section of config.yaml."""
    settings: type
    """A frozen dataclass of the task's own keys, validated in __post_init__ (optional: none)."""
    metrics: dict[str, str]
    """The validation metrics `evaluate` reports, each with its direction (min or max); the first one picks
    the best checkpoint unless eval.metric names another (optional with no evaluate: no validation)."""

    def check(self, config: "TrainConfig", world_size: int) -> None:
        """Refuse data and settings this task cannot train on, with a UserError (run at submit; optional)."""
        ...

    def sample_data(self, folder: Path, count: int) -> None:
        """Write about `count` samples of the task's built-in data into `folder` (built-in tasks)."""
        ...

    def dataset(self, config: "TrainConfig") -> "Dataset[Any]": ...

    def model(self, config: "TrainConfig", dataset: "Dataset[Any]") -> "torch.nn.Module": ...

    def forward(self, model: "torch.nn.Module", batch: Any) -> tuple["torch.Tensor", dict[str, "torch.Tensor"]]:
        """Loss and named metrics (scalars) for one batch already on the device."""
        ...

    def evaluate(self, model: "torch.nn.Module", batch: Any) -> dict[str, "torch.Tensor"]:
        """Validation metrics of one batch, one value per sample (the trainer averages them over the set)."""
        ...

    def images(self, model: "torch.nn.Module", batch: Any) -> "torch.Tensor | None":
        """An image grid (C, H, W in [0, 1]) for TensorBoard, or None (optional)."""
        ...

    def collate(self, samples: list[Any]) -> Any:
        """A batch from a list of samples: DataLoader's collate_fn, e.g. padding sequences of different lengths
        (optional: torch's default_collate stacks them)."""
        ...

    def worker_init(self, worker_id: int) -> None:
        """Run in each loader worker as it starts: DataLoader's worker_init_fn (optional)."""
        ...


@dataclasses.dataclass(frozen=True)
class NoSettings:
    """The settings of a task that declares none."""


class UserTask:
    """Your task object, with the optional parts filled in."""

    def __init__(self, obj: Any, name: str) -> None:
        self.obj, self.name = obj, getattr(obj, "name", name)
        self.settings = getattr(obj, "settings", NoSettings)
        self.metrics = dict(getattr(obj, "metrics", {}))
        self.checks_data = hasattr(obj, "check")  # without check(), data.root may stay empty (data made in code)
        for method in (*REQUIRED, "evaluate", "collate", "worker_init"):
            if hasattr(obj, method):
                setattr(self, method, getattr(obj, method))

    def check(self, config: "TrainConfig", world_size: int) -> None:
        if hasattr(self.obj, "check"):
            self.obj.check(config, world_size)

    def images(self, model: "torch.nn.Module", batch: Any) -> "torch.Tensor | None":
        return self.obj.images(model, batch) if hasattr(self.obj, "images") else None


code_folder: Path | None = (
    None  # where `my_pkg.mod:Task` is imported from: the working folder, unless set (a --resume: the run's snapshot)
)


def check_devices(task: Any, count: int) -> None:
    """A task given `count` > 1 devices per process (gpus_per_task) places its model's parts itself: its
    model() takes `devices=`. Checked at submit (jobs.submit) and where the model is built."""
    if count > 1 and "devices" not in inspect.signature(task.model).parameters:
        raise UserError(
            f"gpus_per_task: {count} gives each task {count} devices, but {type(task).__name__}.model() takes no "
            "devices=; add it and place the model's parts on them, or set gpus_per_task: 1"
        )


def available() -> list[str]:
    """The built-in tasks. A directory listing rather than pkgutil, whose import the submit path would pay for."""
    folder = importlib.import_module(BUILT_IN).__path__[0]
    return sorted(n.removesuffix(".py") for n in os.listdir(folder) if n.endswith(".py") and n[0] != "_")


def canonical(name: str) -> str:
    """A task reference that names the same task from any folder: a file's path made absolute."""
    if ".py:" not in name:
        return name
    path, _, attribute = name.rpartition(":")
    return f"{Path(path).expanduser().resolve()}:{attribute}"


def get(name: str) -> Task:
    return _get(canonical(name))


@functools.cache
def _get(name: str) -> Task:
    if ":" not in name:
        if name not in available():
            raise UserError(
                f"task: unknown task {name!r}; choose one of {', '.join(available())}, or give your own as "
                "my_pkg.my_module:MyTask or path/to/tasks.py:MyTask"
            )
        return importlib.import_module(f"{BUILT_IN}.{name}").TASK  # type: ignore[no-any-return]
    source, _, attribute = name.rpartition(":")
    module = _import(source, name)
    if not hasattr(module, attribute):
        defined = ", ".join(n for n in vars(module) if not n.startswith("_"))[:200]
        raise UserError(f"task {name}: {source} has no {attribute!r}; it defines {defined}")
    obj = getattr(module, attribute)
    if isinstance(obj, type):
        try:
            obj = obj()
        except Exception as exc:  # the user's constructor failed
            first = (str(exc).strip().splitlines() or [""])[0]
            raise UserError(
                f"task {name}: {attribute}() failed ({type(exc).__name__}: {first}); a task class is made without "
                "arguments: fix its __init__ and resubmit"
            ) from None
    missing = [m for m in REQUIRED if not callable(getattr(obj, m, None))]
    if missing:
        raise UserError(
            f"task {name}: {attribute} lacks {', '.join(missing)}(); a task defines dataset(config), "
            "model(config, dataset) and forward(model, batch) (see README, Your task)"
        )
    return UserTask(obj, attribute)  # type: ignore[return-value]


def _import(source: str, name: str) -> Any:
    """A module by import path, or a .py file by path (absolute or from the current folder)."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):  # argparse's usage, should the module parse arguments
            return _load(source, name)
    except SystemExit as exc:  # argparse (or sys.exit) at module level
        said = (captured.getvalue().strip().splitlines() or [""])[-1]
        raise UserError(
            f"task {name}: importing {source} exited (status {exc.code}{': ' + said if said else ''}); argparse at "
            'module level? put the script part under `if __name__ == "__main__":` and resubmit'
        ) from None
    finally:
        if not captured.getvalue().startswith("usage:"):
            sys.stderr.write(captured.getvalue())  # what the module said otherwise (warnings) still shows


def _load(source: str, name: str) -> Any:
    try:
        if source.endswith(".py"):
            path = Path(source)
            if not path.is_file():
                raise UserError(f"task {name}: {path} is not a file; give path/to/tasks.py:MyTask")
            module_name = f"_user_task_{path.stem}"
            spec = importlib.util.spec_from_file_location(module_name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module  # dataclasses and pickling look modules up here
            with user_imports(path.resolve().parent):  # its imports: its own folder first, as Python runs it
                spec.loader.exec_module(module)
            return module
        with user_imports(code_folder or Path.cwd()):  # as `python -m` would: your package where you submit
            return importlib.import_module(source)
    except UserError:
        raise
    except ModuleNotFoundError as exc:
        raise UserError(
            f"task {name}: no module named {exc.name!r}; check the name, or submit from the folder holding it"
        ) from None
    except Exception as exc:  # the user's module failed while being imported
        first = (str(exc).strip().splitlines() or [""])[0]
        raise UserError(
            f"task {name}: importing {source} failed ({type(exc).__name__}: {first}); fix it and resubmit"
        ) from None

"""Cluster profiles: YAML files in cluster_profiles/, validated into a frozen dataclass."""

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from trainer.config import from_dict
from trainer.errors import UserError

EXECUTORS = ("local", "debug", "slurm")
PROFILE_DIRS = (Path.cwd() / "cluster_profiles", Path(__file__).resolve().parents[1] / "cluster_profiles")


@dataclass(frozen=True)
class Profile:
    name: str
    executor: str  # local: this machine, N processes; debug: in-process; slurm: sbatch
    nodes: int = 1
    gpus_per_node: int = 1  # one task per GPU; without GPUs, the number of processes per node
    timeout_min: int = 60
    run_root: str = "runs"  # run directories go here; on a cluster, a folder every node can see
    trainer: dict = field(default_factory=dict)  # trainer defaults for this profile, as key: value

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise UserError(f"executor {self.executor!r} is unknown; use one of {', '.join(EXECUTORS)}")
        if self.nodes < 1:
            raise UserError(f"nodes must be at least 1, got {self.nodes}; pass --nodes 1 or more")
        if self.gpus_per_node < 1:
            raise UserError(
                f"gpus_per_node must be at least 1, got {self.gpus_per_node}; pass --gpus-per-node 1 or more"
            )
        if self.executor in ("local", "debug") and self.nodes != 1:
            raise UserError(
                f"the {self.executor} executor runs on one node, got {self.nodes}; use --nodes 1 or a Slurm profile"
            )
        if self.executor == "debug" and self.gpus_per_node != 1:
            raise UserError("the debug executor runs one task in-process; use --gpus-per-node 1 or the local profile")
        if self.timeout_min < 1:
            raise UserError(f"timeout_min must be at least 1, got {self.timeout_min}")

    def with_overrides(self, **values: Any) -> "Profile":
        """The profile with command-line flags applied (None means not given)."""
        return dataclasses.replace(self, **{k: v for k, v in values.items() if v is not None})


def find_profile(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if path.is_file():
            return path
        raise UserError(
            f"profile file {path} does not exist; pass an existing YAML file or a name from cluster_profiles/"
        )
    for folder in PROFILE_DIRS:
        candidate = folder / f"{name_or_path}.yaml"
        if candidate.is_file():
            return candidate
    names = sorted({p.stem for d in PROFILE_DIRS if d.is_dir() for p in d.glob("*.yaml")})
    raise UserError(f"no profile named {name_or_path!r}; choose one of {', '.join(names)} or pass a YAML path")


def load_profile(name_or_path: str) -> Profile:
    path = find_profile(name_or_path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"profile {path} is not valid YAML ({str(exc).splitlines()[0]}); fix its syntax") from None
    if not isinstance(data, dict):
        raise UserError(f"profile {path} must be a mapping of key: value lines")
    if "name" in data:
        raise UserError(f"profile {path}: 'name' is taken from the file name; remove the key")
    try:
        return from_dict(Profile, {"name": path.stem, **data})
    except UserError as exc:
        raise UserError(f"profile {path}: {exc}") from None

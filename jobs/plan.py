"""The submission plan: plain values built by pure functions, acted on by jobs.launch."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.profiles import Profile
from trainer.config import TrainConfig, to_dict


@dataclass(frozen=True)
class Plan:
    executor: str
    run_dir: Path
    log_dir: Path  # submitit's folder: pickles and per-task logs
    parameters: dict[str, Any]  # for submitit's update_parameters
    config: dict[str, Any]  # the resolved trainer config, as passed to every task

    @property
    def tasks(self) -> int:
        return self.parameters.get("nodes", 1) * self.parameters.get("tasks_per_node", 1)

    def tensorboard_command(self) -> str:
        return f"tensorboard --logdir {self.run_dir / 'tensorboard'}"


def make_plan(profile: Profile, config: TrainConfig, has_gpus: bool) -> Plan:
    run_dir = Path(config.run_dir)
    parameters: dict[str, Any] = {"timeout_min": profile.timeout_min}
    if profile.executor == "local":
        # One process per GPU; on a machine without GPUs, gpus_per_node is the process count.
        parameters |= {"nodes": 1, "tasks_per_node": profile.gpus_per_node}
        if has_gpus:
            parameters["gpus_per_node"] = profile.gpus_per_node
    return Plan(profile.executor, run_dir, run_dir / "logs", parameters, to_dict(config))

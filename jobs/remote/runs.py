"""A run that lives on a cluster, as the laptop knows it: a folder of the same name under the local run root
holding `remote.json` (the login node, how to reach it, the run directory there). jobs.status, logs, cancel,
wait and list take that folder (or its name) and run over SSH; jobs.fetch brings the run's records and
TensorBoard events into it. It holds no job.json, config.yaml or checkpoints: nothing there looks like a run
to resume locally."""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from jobs.remote.ssh import Login
from trainer.errors import UserError
from trainer.run.atomic import write_text

RECORD = "remote.json"
LOCAL_ROOT = "runs"  # where the laptop keeps its remote runs' folders, under the folder submitted from


@dataclass(frozen=True)
class RemoteRun:
    login: Login
    run_dir: str  # on the cluster, as its submit printed it
    job_id: str
    profile: str
    cwd: str  # where the project's modules run on the cluster: the run's code snapshot (else the synced copy)
    folder: str = ""  # this record's folder here, as advice printed here names the run (not stored in it)


def local_folder(run_dir: str) -> Path:
    return Path(LOCAL_ROOT).resolve() / Path(run_dir).name


def shown(folder: Path) -> str:
    """The record's folder as a command here takes it: relative to this folder when under it (runs/NAME)."""
    try:
        return str(folder.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(folder.resolve())


def save(folder: Path, run: RemoteRun) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    record = {k: v for k, v in asdict(run).items() if k != "folder"}  # the folder is where the record is
    write_text(folder / RECORD, json.dumps(record, indent=2) + "\n")


def record_folder(target: str) -> Path | None:
    """The folder holding the record of the remote run at a path (a run's name: jobs.tracking.by_name first);
    None when there is none."""
    path = Path(target)
    return path if (path / RECORD).is_file() else None


def load(target: str) -> RemoteRun | None:
    """The remote run at a path; None when it is not one (a local run, a job id)."""
    folder = record_folder(target)
    if folder is None:
        return None
    record_file = folder / RECORD
    try:
        data = json.loads(record_file.read_text())
        fields = [data["run_dir"], data["cwd"], data.get("profile", "")]
        if not isinstance(data["login"], dict) or not all(isinstance(f, str) for f in fields):
            raise TypeError("a field of the wrong type")
        login = Login(**data["login"])
        job_id, profile = str(data["job_id"]), data.get("profile", "")
        return RemoteRun(login, data["run_dir"], job_id, profile, data["cwd"], shown(folder))
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"{record_file} is damaged ({exc}); remove the folder and look the run up on the cluster"
        ) from None
    except UserError as exc:  # a login, remote_root or ssh option this version refuses
        raise UserError(f"{record_file}: {exc}; edit its login fields to what a profile may hold now") from None

"""Where a run came from, recorded in its run directory's provenance/ folder.

At submit (jobs.submit): submit.json (command line, folder, resolved profile, git commit and dirty flag) and
git.diff. In the job: ranks/rank_N.json (each rank's host, written by the rank itself at every attempt),
environment.json (rank 0: Python, torch, CUDA, cuDNN, NCCL and every installed package's version) and
scontrol_JOBID.txt (rank 0: `scontrol show job` as the attempt starts); the batch step's supervisor adds
sacct_JOBID.txt when srun ends (trainer.supervise.slurm.record_sacct). Torch-free: a script's task records this without importing torch. Nothing
here may fail a job: a record that cannot be written is a warning.
"""

import importlib.metadata
import importlib.util
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from trainer.run.atomic import json_or_none, write_text
from trainer.run.rundir import RunDir


def _write(path: Path, text: str) -> None:
    try:
        write_text(path, text)
    except Exception as exc:  # a full disk: the job goes on, the record is missing
        print(f"warning: could not write {path}: {exc}", file=sys.stderr)


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, default=str) + "\n"


def write_submit(run_dir: Path, record: dict[str, Any], diff: str) -> None:
    folder = RunDir(run_dir).provenance
    write_text(folder / "submit.json", _json(record))
    if diff:
        write_text(folder / "git.diff", diff)


def read_submit(run_dir: Path) -> dict[str, Any]:
    """submit.json of a run (or of the sweep holding it); {} when there is none or it cannot be read."""
    for folder in (run_dir, run_dir.parent):
        path = RunDir(folder).provenance / "submit.json"
        if path.is_file():
            value = json_or_none(path)
            return value if isinstance(value, dict) else {}
    return {}


def record_rank(run_dir: Path, ids: dict[str, Any]) -> None:
    """This rank's host and ids (DistEnv.ids): which node ran which rank, per attempt (the latest one is kept)."""
    record = ids | {
        "host": ids["host"] or socket.gethostname(),
        "pid": os.getpid(),
        "python": sys.executable,  # jobs.top's stack dump runs it on the node (trainer.supervise.stacks)
        "time": time.time(),
        "cwd": os.getcwd(),  # the code snapshot, when the run has one
        "trainer": str(Path(__file__).resolve().parents[1]),  # where this process imported the trainer from
    }
    _write(RunDir(run_dir).provenance / "ranks" / f"rank_{ids['rank']}.json", _json(record))


def torch_versions() -> dict[str, Any]:
    """torch, CUDA, cuDNN, NCCL: from torch itself when this process imported it, else from its version file."""
    torch = sys.modules.get("torch")
    if torch is not None:
        out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
        out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        try:
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # a build without NCCL
            out["nccl"] = None
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        return out
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {"torch": None}
    values: dict[str, Any] = {}
    try:  # torch/version.py is plain assignments: read without importing torch (seconds, and memory)
        exec(Path(spec.submodule_search_locations[0], "version.py").read_text(), values)
    except Exception:
        return {"torch": None}
    return {"torch": values.get("__version__"), "cuda": values.get("cuda"), "nccl": "not read (torch not imported)"}


def record_environment(run_dir: Path) -> None:
    """Rank 0: the interpreter and every package's version (a frozen list), as this attempt found them."""
    packages = sorted(
        {f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions() if d.metadata["Name"]},
        key=str.lower,
    )
    record = {
        "time": time.time(),
        "host": socket.gethostname(),
        "python": sys.version,
        "executable": sys.executable,
        "platform": platform.platform(),
        **torch_versions(),
        "packages": packages,
    }
    _write(RunDir(run_dir).provenance / "environment.json", _json(record))


def record_slurm_job(run_dir: Path, job_id: str | None) -> None:
    """Rank 0 on Slurm: the job record as this attempt starts (nodes, limits, requeue count, ...)."""
    if not job_id:
        return
    try:
        done = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"warning: scontrol show job {job_id}: {exc}", file=sys.stderr)
        return
    _write(RunDir(run_dir).provenance / f"scontrol_{job_id}.txt", done.stdout + done.stderr)


LAUNCHER_PREFIXES = ("SLURM_", "SUBMITIT_", "TORCHELASTIC_", "MASTER_")
RANK_NAMES = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK"}
# torch's own report, written aside and renamed by the child itself: it outlives a rank 0 that ends first.
COLLECT_ENV = (
    "import os, sys\nos.nice(10)\nfrom torch.utils import collect_env\ntext = collect_env.get_pretty_env_info()\n"
    "with open(sys.argv[1] + '.part', 'w') as f:\n    f.write(text + '\\n')\nos.replace(sys.argv[1] + '.part', sys.argv[1])\n"
)


def collect_env(run_dir: Path, python: str = sys.executable) -> subprocess.Popen[bytes] | None:
    """Rank 0: torch's own environment report (torch.utils.collect_env: GPUs, driver, CUDA, cuDNN, NCCL's
    libraries, the OS, the packages) into provenance/collect_env.txt. It takes seconds (it asks pip and
    nvidia-smi), so a child at low priority writes it, in its own session: the start is not held up."""
    target = RunDir(run_dir).provenance / "collect_env.txt"
    try:
        target.parent.mkdir(exist_ok=True)
        # Not a task of the job: without the launchers' variables, no tool takes it for a rank.
        env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES) and k not in RANK_NAMES}
        return subprocess.Popen(
            [python, "-c", COLLECT_ENV, str(target)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, env=env,  # no preexec_fn: rank 0 forks it mid-training (threads, CUDA)
        )  # fmt: skip
    except OSError as exc:
        print(f"warning: torch.utils.collect_env: {exc}", file=sys.stderr)
        return None


_REPORTED: set[Path] = set()


def report_environment(run_dir: Path) -> None:
    """Rank 0, once per process and run: torch's environment report, by a child (collect_env). Started after the
    attempt's first step, or as it fails before one: started with the ranks, its own import of torch and its
    pip and nvidia-smi slowed every rank's start by about 1 s on the 2-core test cluster (benchmarks/RESULTS.md,
    start-up), nice 10 or not."""
    if run_dir in _REPORTED:
        return
    _REPORTED.add(run_dir)
    report = collect_env(run_dir)
    if report is not None:  # reaped when it ends: not a zombie child for the rest of the run (py-spy trips on one)
        threading.Thread(target=report.wait, name="collect-env-reaper", daemon=True).start()


def record_start(run_dir: Path, ids: dict[str, Any], slurm_job_id: str | None) -> None:
    """Every rank at the start of every attempt; rank 0 also the environment and the Slurm record (torch's
    report comes after the first step: report_environment)."""
    record_rank(run_dir, ids)
    if ids["rank"] == 0:
        record_environment(run_dir)
        record_slurm_job(run_dir, slurm_job_id)

"""A user's project, shaped like theirs and knowing nothing of this tool: its own trainer.py, jobs.py, utils.py,
data.py, model.py and config.py beside train.py, a tests/ folder, and outputs (runs/, lightning_logs/) inside.

train.py records, at each start, the file each of its modules came from (`RUN_DIR/starts.RANK`, a JSON line
per start), then does what its argument says for that start: `fail` (rank 1 exits 3), `requeue` (exit 144,
README's recipe), `done`; past the list's end, `done`.
"""

import json
import os
import shutil
import sys
from pathlib import Path

MODULES = ("trainer", "jobs", "utils", "data", "model", "config")

TRAIN = """
import json, os, sys
import torch.distributed as dist
import trainer, jobs, utils, data, model, config
dist.init_process_group("gloo")
rank = dist.get_rank()
record = os.path.join(os.environ["RUN_DIR"], f"starts.{rank}")
with open(record, "a") as f:
    f.write(json.dumps({m.__name__: os.path.realpath(m.__file__) for m in (trainer, jobs, utils, data, model, config)}) + "\\n")
start = len(open(record).read().splitlines()) - 1
assert trainer.Trainer().fit() == "the user's own trainer" and jobs.SCHEDULE == ["nightly"]
dist.barrier()
dist.destroy_process_group()
plan = sys.argv[1].split(",") if len(sys.argv) > 1 else []
action = plan[start] if start < len(plan) else "done"
sys.exit({"fail": 3 if rank == 1 else 0, "requeue": 144}.get(action, 0))
"""

# A task class of the user's, in the same folder: it imports the user's own trainer.py, as Python would.
TASK = """
import torch
from torch import nn
import trainer
from model import width

assert trainer.Trainer().fit() == "the user's own trainer", trainer.__file__


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((width(),), float(i % 8) / 8)


class Fit:
    def dataset(self, config):
        return Squares()

    def model(self, config, dataset):
        return nn.Linear(width(), width())

    def forward(self, model, batch):
        loss = nn.functional.mse_loss(model(batch), batch * batch)
        return loss, {}
"""

FILES = {
    "train.py": TRAIN,
    "my_task.py": TASK,
    "trainer.py": 'class Trainer:\n    def fit(self):\n        return "the user\'s own trainer"\n',
    "jobs.py": 'SCHEDULE = ["nightly"]\n',
    "utils.py": "def seed():\n    return 0\n",
    "data.py": "ROOT = 'data'\n",
    "model.py": "def width():\n    return 4\n",
    "config.py": "LR = 1e-3\n",
    "tests/test_model.py": "from model import width\n\n\ndef test_width():\n    assert width() == 4\n",
    "lightning_logs/version_0/events.out": "x" * 4096,  # a framework's output: never copied
}


def make(folder: Path, outputs_mb: float = 0) -> Path:
    """Write the project into `folder`; `outputs_mb` of an old run's checkpoint under its runs/ (a run root
    this tool made, so tagged) to show outputs stay out of the snapshot."""
    for name, text in FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    if outputs_mb:
        old = folder / "runs" / "old-run" / "checkpoints"
        old.mkdir(parents=True)
        (old / "step_00000100.pt").write_bytes(b"\0" * int(outputs_mb * 2**20))
        from trainer.run.prepare import make_run_root

        make_run_root(folder / "runs")
    return folder


def slurm_ddp() -> str:
    """The installed command, as a user's shell finds it (the tests' virtual environment's bin/)."""
    found = Path(sys.executable).parent / "slurm-ddp"
    return str(found) if found.exists() else shutil.which("slurm-ddp") or "slurm-ddp"


def user_environment() -> dict[str, str]:
    """This environment without the tests' PYTHONPATH: the tool found only as installed, as a user's is."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}


def starts(run_dir: Path, rank: int) -> list[dict[str, str]]:
    path = run_dir / f"starts.{rank}"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def all_from(run_dir: Path, record: dict[str, str]) -> bool:
    """Every module of the project came from the run's own copy of the project (code/), none from the tool."""
    code = (run_dir / "code").resolve()
    return all(Path(record[m]).parent == code for m in MODULES)

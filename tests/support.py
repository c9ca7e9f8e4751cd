"""What more than one test module uses: the project's paths, running its commands as a user does, reading what a
run leaves, the profiles, scripts and user tasks the tests submit, and the suite's own layout. Test modules and
conftest.py files import from here; no test module imports another (tests/test_layout.py)."""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tests import userproject
from tests.messages import Golden, refused
from tests.slurm import cluster
from trainer.run.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


# Waiting: poll a condition, never sleep a guessed time.


def poll(
    what: str, condition: Callable[[], T], timeout: float = 120, every: float = 0.1, explain: Callable[[], str] = str
) -> T:
    """condition()'s first true value, checked every `every` seconds; fails after `timeout`, saying `explain()`."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what} {explain()}"
        time.sleep(every)
    return value


def poll_cluster(what: str, condition: Callable[[], T], timeout: float = 120) -> T:
    """poll for the Slurm tests: each check may ask the cluster (squeue, jobs.status), so not too often; a time-out
    says what the queue, the nodes and the job steps were then."""
    from tests.slurm.cluster import describe

    return poll(what, condition, timeout, every=0.5, explain=describe)


def process_start(pid: int) -> int | None:
    """When a live process started (/proc/PID/stat field 22); None once it has ended (a zombie has)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


# Running the project's commands as a user does.


def submit(
    *args: str, cwd: Path | None = None, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m jobs.submit` the way a user does (with `env` added to this environment)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "jobs.submit", *args],
        cwd=cwd or ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def submit_here(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m jobs.submit args` in this process, its output captured as `submit` returns it: for the tests of
    refusals, which stop before any job (no interpreter to start and no imports: about 0.4 s less each, a
    third of the inner loop). An exception that would be a traceback on a terminal fails the test here."""
    from jobs import submit as command
    from jobs.ops.resume import release_claims

    out, err = io.StringIO(), io.StringIO()
    before, saved = Path.cwd(), {key: os.environ.get(key) for key in env or {}}
    try:
        os.environ.update(env or {})
        os.chdir(cwd or ROOT)
        # A warning goes to the terminal as a user runs it (pytest would keep it to itself).
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            warnings.catch_warnings(record=True) as said,
        ):
            warnings.simplefilter("default")
            try:
                code = command.main(list(args))
            except SystemExit as exc:  # argparse's own refusals
                code = exc.code if isinstance(exc.code, int) else 1
        err.write("".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in said))
    finally:
        release_claims()  # a --resume's claim on a run, which the process's end would release
        os.chdir(before)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(["jobs.submit", *args], code, out.getvalue(), err.getvalue())


def cli(
    module: str, *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m MODULE args` (jobs.status, jobs.cancel, ...) from the project's folder (with `env` added)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def slurm_ddp(folder: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The installed `slurm-ddp` command, run from a user's project (tests/userproject.py)."""
    return subprocess.run(
        [userproject.slurm_ddp(), *args], cwd=folder, env=userproject.user_environment(), capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip


def run_benchmark(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A script of benchmarks/, which must succeed."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


# What a run leaves.


def run_dir_of(submitted: str | subprocess.CompletedProcess[str]) -> Path:
    """The run directory `python -m jobs.submit` printed: its one `run directory:` line, in its result or output."""
    output = submitted if isinstance(submitted, str) else submitted.stdout
    [line] = [line for line in output.splitlines() if line.startswith("run directory:")]
    return Path(line.split(":", 1)[1].strip())


def run_dirs(run_root: Path) -> list[Path]:
    """Folders under run_root that look like runs (they hold a config.yaml)."""
    return sorted(p.parent for p in run_root.glob("*/config.yaml")) if run_root.exists() else []


def job_id_of(run_dir: Path) -> str:
    """The job the run was submitted as (job.json): a Slurm job id, or a local controller's pid."""
    return json.loads((run_dir / "job.json").read_text())["job_id"]


def attempts(run_dir: Path) -> list[dict]:
    """The run's attempts (attempts.json); none before its first has started."""
    path = run_dir / "attempts.json"
    return json.loads(path.read_text()) if path.exists() else []


def training(run_dir: Path, attempt: int) -> bool:
    """Attempt number `attempt` (0-based) has started and logged a step past where it resumed."""
    items = attempts(run_dir)
    if len(items) <= attempt or RunDir(run_dir).finished():
        return False
    progress = run_dir / "progress.json"
    return progress.exists() and json.loads(progress.read_text())["step"] > items[attempt]["resumed_step"]


def failure(run_dir: Path) -> dict:
    """The run's first failure, the one error.txt names: its rank's record (errors/rank_N.json: rank, host, kind,
    message, peer, killed), with error.txt's `line`."""
    line = (run_dir / "error.txt").read_text()
    assert line.endswith("\n") and line.count("\n") == 1, line  # one line
    rank = int(re.match(r"rank (\d+)", line).group(1))  # type: ignore[union-attr]
    record = json.loads((run_dir / "errors" / f"rank_{rank}.json").read_text())
    assert line.rstrip("\n").endswith(record["message"]), (line, record)  # the record error.txt was made from
    return record | {"line": line.rstrip("\n")}


def says_error(output: str, line: str) -> bool:
    """The output (--wait's, jobs.status's, a log) gives the run's failure as one of its lines: `error: ` and
    error.txt's line."""
    return f"error: {line}" in output.splitlines()


def exit_codes(run_dir: Path) -> dict:
    """What the local controller recorded when the job's tasks ended (logs/<job>_exit_codes.json): each task's
    exit code, and whether the job was cancelled."""
    job = json.loads((run_dir / "job.json").read_text())
    return json.loads((Path(job["log"]).parent / f"{job['job_id']}_exit_codes.json").read_text())


def job_state(run_dir: Path) -> str:
    """The state jobs.status gives the run's job (RUNNING, COMPLETED, FAILED, CANCELLED): the word after the
    `job <id>:` of the job job.json names."""
    said = cli("jobs.status", str(run_dir))
    assert said.returncode == 0, said.stdout + said.stderr
    [line] = [line for line in said.stdout.splitlines() if line.startswith(f"job {job_id_of(run_dir)}: ")]
    return line.split(": ", 1)[1].split()[0]


def val_scalars(run_dir: Path) -> dict[int, float]:
    """Validation's l1 by step, as the run's TensorBoard events hold it (an evaluation done again after a kill:
    its last)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # few tests read events

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {e.step: e.value for e in events.Scalars("val/l1")}


def summary(run_dir: Path, timeout: float = 240) -> dict:
    """The run's summary.json, once it says the run finished (at once for a run that has)."""
    poll_cluster("the summary", lambda: RunDir(run_dir).finished(), timeout=timeout)
    return json.loads((run_dir / "summary.json").read_text())


# A local job and its processes (the tests of the local executor, benchmarks/hang_naming.py).


# A run that trains until it is stopped, logging every step.
LONG = ["steps=100000", "log.every=1", "checkpoint.every=100000", "batch_size=2", "log.image_every=0"]

# A step's budget of 10 s (its floor: steps take far less); start-up and first times keep hang.first_s.
HANG = ["hang.floor_s=10", "hang.factor=2", "hang.beat_s=2"]


def job_pid(run_dir: Path) -> int:
    return int(job_id_of(run_dir))  # a local job is its controller's pid


def ranks(controller: int) -> dict[int, tuple[int, int]]:
    """rank -> (PID, start time) of the local job's tasks, found by the job id submitit gives each."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            environ = dict(item.split(b"=", 1) for item in (proc / "environ").read_bytes().split(b"\0") if b"=" in item)
        except OSError:
            continue
        if environ.get(b"SUBMITIT_LOCAL_JOB_ID") == str(controller).encode() and (
            start := process_start(int(proc.name))
        ):
            found[int(environ[b"SUBMITIT_LOCAL_GLOBALID"])] = (int(proc.name), start)
    return found


# Records made by hand.


JOB = "999999001"  # beyond any pid_max: a local job whose controller is long gone


def script_run(folder: Path, job_id: str = JOB) -> Path:
    """A finished local `-- python train.py` run's records, as its job leaves them (no config.yaml: a script
    run has none)."""
    logs = folder / "logs"
    logs.mkdir(parents=True)
    command = [sys.executable, "train.py"]
    (folder / "command.json").write_text(json.dumps({"command": command, "cwd": str(folder), "restart_args": []}))
    record = {"job_id": job_id, "executor": "local", "log": str(logs / f"{job_id}_0_log.out"), "tasks": 1}
    (folder / "job.json").write_text(json.dumps(record))
    (logs / f"{job_id}_0_log.out").write_text(f"hello from {folder.name}\n")
    (logs / f"{job_id}_exit_codes.json").write_text(json.dumps({"codes": [0]}))
    (folder / "summary.json").write_text(json.dumps({"command": command, "finished": True}))
    return folder


def state(step: int) -> dict[str, object]:
    """The shape train() saves."""
    import torch  # here: most tests never build a checkpoint

    return {
        "model": {"w": torch.full((3,), float(step))},
        "optimizer": {},
        "scheduler": {},
        "scaler": {},
        "progress": {"step": step, "epoch": 0, "batch_in_epoch": step},
        "rng": {},
        "meta": {},
        "best": {},
    }


# Submitted at 0. Attempt 1: its process at 10, its first step at 15, 4 s blocked on saves, preempted at 100 at
# step 90 (saved there). Requeued: attempt 2's process at 160, first step at 166, a failure at 200 (last
# progress at step 120), the hang named at 230. In the same allocation attempt 3's process at 240, first step at
# 244, resumed at step 100 (20 steps again), finished at 344 at step 200, 2 s on saves.
TIMELINE = [
    {"started": 15.0, "startup": {"process_start": 10.0}, "resumed_step": None, "checkpoint_s": 4.0,
     "stop": {"reason": "preempted", "step": 90, "time": 100.0}, "cost": {"steps_recomputed": 0}, "world_size": 4},
    {"started": 166.0, "startup": {"process_start": 160.0}, "resumed_step": 90,
     "stop": {"reason": "failure", "step": 120, "time": 200.0, "error": "rank 1 on n2: hung: x", "hung_at": 230.0},
     "cost": {"steps_recomputed": 20}, "world_size": 4},
    {"started": 244.0, "startup": {"process_start": 240.0}, "resumed_step": 100, "in_job_restart": 1,
     "checkpoint_s": 2.0, "stop": {"reason": "finished", "step": 200, "time": 344.0}, "world_size": 4},
]  # fmt: skip


# Profiles and the runs the tests submit.


def write_profile(folder: Path, text: str, name: str = "test.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def mini_profile(folder: Path, extra: str = "") -> Path:
    """The cluster's mini profile (tests/slurm/cluster.py) in `folder`, its runs in `folder`/runs."""
    return cluster.mini_profile(folder / "profile.yaml", folder / "runs", extra)


# 2 nodes x 1 task; long enough to be preempted twice, short enough for CI (tests/slurm/test_requeue.py).
ARGS = ["--nodes", "2", "--gpus-per-node", "1", "steps=240", "log.every=5", "checkpoint.every=100", "log.image_every=0"]

# The local reference run: 2 processes, validation and checkpoints every 8 steps, a cosine schedule. Submitted
# as a user does, once per session; the tests of what a run writes read it, every resume and exactness test
# copies it or compares with it.
REFERENCE = ["steps=48", "batch_size=4", "log.every=4", "log.image_every=24", "checkpoint.every=8"]
REFERENCE += [
    "data.val_fraction=0.1",
    "eval.every=8",
    "optim.schedule=cosine",
    "optim.min_lr=0.0001",
    "optim.warmup_steps=4",
]


# Refusals (tests/messages.py holds their golden words).


def assert_refused(result, golden: Golden, named: str, run_root: Path, outside: str = "", **placeholders: str) -> None:  # type: ignore[no-untyped-def]
    """A refusal (tests/messages.py: exit 2, one line naming `named`, its words in the golden file) that left no
    run behind."""
    refused(result, golden, named, outside=outside, **placeholders)
    assert run_dirs(run_root) == []
    assert not any(p.name != "sample_data" for p in run_root.glob("*"))  # no CACHEDIR.TAG: it comes with a run


# Pillow's own words for a file it cannot decode, quoted in ours (they change with Pillow's version).
PILLOWS = r"is corrupt \((.*)\); replace"


# Scripts a user submits with `-- python train.py`.


# A plain DDP script: it imports nothing from this project.
DDP = """
import json, os, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
total = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(total)
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
report = {k: os.environ[k] for k in keys} | {"sum": total.item(), "argv": sys.argv[1:], "cwd": os.getcwd()}
with open(os.path.join(os.environ["RUN_DIR"], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(report, f)
dist.destroy_process_group()
sys.exit(int(os.environ.get("FAIL_RANK", "-1") == os.environ["RANK"]) * 3)
"""


# Saves its step on the requeue signal and asks to be requeued; starts from the saved step.
REQUEUEING = """
import os, sys, time
from trainer import requeue
requeue.install()
state = os.path.join(os.environ["RUN_DIR"], f"step{os.environ['RANK']}")
start = int(open(state).read()) if os.path.exists(state) else 0
with open(os.path.join(os.environ["RUN_DIR"], "starts"), "a") as f:
    f.write(f"{os.environ['RANK']}:{start}\\n")
for step in range(start, 40):
    time.sleep(0.5)
    if requeue.requested():
        open(state, "w").write(str(step + 1))
        requeue.exit_for_requeue()
"""


# Shaped like the DDP tutorial's and nanoGPT's scripts: no signal code at all; it keeps a snapshot every few
# steps under its output folder ($RUN_DIR, else ./out relative to where it runs) and resumes from it.
PLAIN = """
import json, os, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
rank = dist.get_rank()
out_dir = os.environ.get("RUN_DIR", "out")
ckpt = os.path.join(out_dir, "ckpt.pt")
model = DDP(torch.nn.Linear(4, 1))
step = 0
if os.path.exists(ckpt):
    saved = torch.load(ckpt)
    model.module.load_state_dict(saved["model"])
    step = saved["step"]
with open(os.path.join(out_dir, "starts"), "a") as f:
    f.write(f"{rank}:{step}\\n")
total, every = int(sys.argv[1]), 5
while step < total:
    model(torch.ones(2, 4)).sum().backward()
    time.sleep(float(sys.argv[2]))
    step += 1
    if step % every == 0 and rank == 0:
        torch.save({"model": model.module.state_dict(), "step": step}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
dist.barrier()
dist.destroy_process_group()
"""


# PLAIN with a handler, as many scripts have, that takes the requeue signal (and SIGTERM), logs a line and
# carries on: it never stops by itself.
STUBBORN = (
    """
import signal
def carry_on(signum, frame):
    print(f"got {signal.Signals(signum).name}; carrying on", flush=True)
for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM):
    signal.signal(s, carry_on)
"""
    + PLAIN
)


# All-reduces without pause until stopped; a restart (its rank's mark left) finishes at once. Each rank leaves
# its task's pid and its own.
ALL_REDUCING = """
import os
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, run_dir = dist.get_rank(), os.environ["RUN_DIR"]
mark = os.path.join(run_dir, f"started{rank}")
if not os.path.exists(mark):
    open(mark, "w").write(f"{os.getppid()} {os.getpid()}")
    while True:
        dist.all_reduce(torch.ones(1000))
dist.destroy_process_group()
"""


RAISES = """
import time, torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise ValueError("bad batch at step 3")
dist.all_reduce(torch.ones(1))
time.sleep(60)
"""


TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # `torchrun`, wherever the venv's bin/ is on PATH


# Users' own tasks (task=file.py:Class).


EXAMPLE = re.search(
    r"<!-- user-task-example -->\n```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL
).group(1)  # type: ignore[union-attr]

# A user's task whose data is made in code (dataset() never reads data.root), with Dropout; no check().
IN_CODE = """
import torch
from torch import nn


class Regress:
    def dataset(self, config):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 8, generator=g)
        return torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))

    def model(self, config, dataset):
        return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))

    def forward(self, model, batch):
        x, y = batch
        return nn.functional.mse_loss(model(x), y), {}
"""
NAN = IN_CODE.replace("return nn.functional.mse_loss(model(x), y), {}", "return (model(x) * float('nan')).mean(), {}")

# A user's task as they write them: Dropout, and random augmentations drawn from torch, numpy and random in
# __getitem__ (in loader workers or in the training process); a little slow per step, so a kill lands mid-run.
AUGMENTED = """
import random, time
import numpy, torch
from torch import nn


class Noisy(torch.utils.data.Dataset):
    def __init__(self):
        self.x = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        x = self.x[i] + 0.1 * torch.randn(8) + float(numpy.random.rand()) * random.random()
        return x, self.x[i].sum(0, keepdim=True)


class Augmented:
    metrics = {"mse": "min"}

    def dataset(self, config):
        return Noisy()

    def model(self, config, dataset):
        return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))

    def forward(self, model, batch):
        time.sleep(0.15)
        x, y = batch
        return nn.functional.mse_loss(model(x), y), {}

    def evaluate(self, model, batch):
        x, y = batch
        return {"mse": ((model(x) - y) ** 2).mean(1)}
"""
EXACT = ["task=augmented.py:Augmented", "steps=24", "batch_size=4", "data.val_fraction=0.25"]


# Hostlists, as `scontrol show hostnames` reads them.


# Expected values are what `scontrol show hostnames` printed (Slurm 22.05); tests/slurm/test_slurm.py
# compares every case with scontrol itself on the test cluster.
CASES = [
    ("node1", ["node1"]),
    ("a,b,c", ["a", "b", "c"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("n[08-11]", ["n08", "n09", "n10", "n11"]),
    ("n[9-11]", ["n9", "n10", "n11"]),
    ("n[01-2]", ["n01", "n02"]),
    ("node[8-10,07]", ["node8", "node9", "node10", "node07"]),
    ("a[1-2]b[1-2],c", ["a1b1", "a1b2", "a2b1", "a2b2", "c"]),
    ("n[1-2][3-4]", ["n13", "n14", "n23", "n24"]),
    # Three or more groups: the last varies fastest, then the first, then the second...
    ("a[1-2]b[1-2]c[1-2]", ["a1b1c1", "a1b1c2", "a2b1c1", "a2b1c2", "a1b2c1", "a1b2c2", "a2b2c1", "a2b2c2"]),
    ("a[1-2]b[5,3]c[1-2],x", ["a1b5c1", "a1b5c2", "a2b5c1", "a2b5c2", "a1b3c1", "a1b3c2", "a2b3c1", "a2b3c2", "x"]),
    (
        "a[1-2]b[1-2]c[1-2]d[1-2]",
        [f"a{a}b{b}c{c}d{d}" for c in (1, 2) for b in (1, 2) for a in (1, 2) for d in (1, 2)],
    ),
    ("n1 n2", ["n1", "n2"]),  # whitespace separates too
    (" n1\tn2 ", ["n1", "n2"]),
    ("a,,b", ["a", "b"]),
    ("n1,n1", ["n1", "n1"]),  # duplicates are kept
    # Whitespace inside brackets, as scontrol reads it: it counts in the lower bound's width.
    ("n[ 1-2]", ["n01", "n02"]),
    ("1.2.3.[089, 100-102]", ["1.2.3.089", "1.2.3.0100", "1.2.3.0101", "1.2.3.0102"]),
    ("n[1 -2]", ["n01", "n02"]),
    ("n[1- 2]", ["n1", "n2"]),
    ("a[1, 3],b2", ["a1", "a03", "b2"]),
    ("n[1\t-2]", ["n01", "n02"]),
    ("n [1-2]", ["n", "1", "2"]),
]
# scontrol says "Invalid hostlist" for each (and exits 0).
REFUSED = [
    ("node[a-b]", "bad range"),
    ("n[]", "bad range"),
    ("n[1,,2]", "bad range"),
    ("n[3-1]", "runs backwards"),
    ("n[1-2³]", "bad range"),  # only ASCII digits
    ("n[1-70000]", "more than 65536 hosts"),
    ("n[0-99999999999]", "more than 65536 hosts"),  # refused before anything is built
    ("n[1-2]x", "text 'x' after the last bracket"),
    ("a[1-2],b[1-2]c", "text 'c' after the last bracket"),
    ("n[1-2 ]", "bad range '1-2 '"),  # no whitespace may end a range
    ("n[1 ]", "bad range '1 '"),
    ("n[1-2,  5 ]", "bad range '  5 '"),
]


# The suite's layout: what README's test command runs, and which Slurm test cluster a module uses.


# README's test command is the ten-minute suite: the inner loop (pure functions, refusals that start no job)
# and one whole job for each flow a user meets (these, by node id or its start). Every other `job` and `slurm`
# test is `long`: CI runs those next (`python -m pytest -m long`, what .ci/run does), and a run with -m, -k,
# --lf or a path of its own takes them as it asks.
CORE = (
    "tests/jobs/test_local_ddp.py::test_killed_run_resumes_to_the_same_weights",  # the trainer, resumed exactly
    "tests/jobs/test_script.py::test_a_script_that_saves_on_the_signal_is_requeued_and_resumes",  # -- python x.py
    "tests/jobs/test_user_task.py::test_readmes_example_task_trains_from_a_folder_outside_the_project[my_tasks.py",
    "tests/jobs/test_user_project.py::test_python_dash_m_works_beside_a_trainer_py",  # a project's own trainer.py
    "tests/jobs/test_frameworks.py::test_a_frameworks_script_is_preempted_requeued_and_resumes_from_its_own_save[plain",
    "tests/jobs/test_local_jobs.py::test_a_stopped_rank_is_named_by_its_peers_watchdog_within_the_budget[0",  # a hang
    "tests/jobs/test_local_jobs.py::test_cancel_stops_every_rank_and_status_says_cancelled",
    "tests/slurm/test_requeue.py::test_preempted_run_resumes_the_submitted_code_to_the_same_weights",  # on Slurm
    "tests/slurm/test_remote.py::test_a_hostile_script_argument_reaches_the_script_as_text",  # from a laptop
    "tests/slurm/test_script.py::test_a_preempted_script_saves_is_requeued_and_resumes",  # a script, on cluster b
    "tests/slurm/test_slurm.py::test_slurm_refusals_are_one_line",
    "tests/slurm/test_slurm.py::test_dry_run_of_the_example_profile_matches_golden_file",
)

# Two Slurm test clusters (tests/slurm/cluster.py), each with its own worker: these modules run on the second,
# the rest on the first, about half of the Slurm tests' time each.
ON_CLUSTER_B = ("test_script.py", "test_hangs.py", "test_check.py", "test_torchrun.py", "test_no_accounting.py")


def cluster_side(item: pytest.Item) -> str:
    """The Slurm test cluster a test runs on: "a" or "b"."""
    return "b" if Path(item.path).name in ON_CLUSTER_B else "a"


def rehearse(folder: Path, *args: str, timeout: float = 900) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """`python -m jobs.rehearse ARGS` in `folder`: its result, and the faults' verdicts from its certificate."""
    result = cli("jobs.rehearse", *args, cwd=folder, timeout=timeout)
    found = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("certificate: ")]
    assert found, result.stdout + result.stderr
    certificate = Path(found[0])
    assert certificate.exists() and "| fault | verdict |" in certificate.read_text()
    return result, json.loads((certificate.parent / "rehearsal.json").read_text())["faults"]

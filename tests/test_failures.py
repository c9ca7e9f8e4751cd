"""The first failure, named: which rank failed where and why, never hidden by its peers' "connection closed"."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from jobs.tracking import ATTEMPT_START, Target, failure_line, killed_tasks, lost_nodes
from tests.support import ROOT, poll, run_dir_of, says_error, submit
from trainer.errors import UserError
from trainer.run import failures
from trainer.run.failures import Failure, describe, root_cause

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
GLOO_CLOSED = (
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:5512. "
    "This is typically caused by a remote worker crashing."
)


class Unreadable(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        raise UserError(f"cannot read image /data/{index}.png (truncated); fix or remove it")


def test_a_failed_step_is_held_against_a_node_only_for_a_hang_a_kill_or_a_hardware_error(tmp_path: Path) -> None:
    """What the policy counts against a node (trainer.supervise.policy): the root cause's node, for these causes."""

    def suspect(failure: Failure, since: float = 0.0) -> str | None:
        shutil.rmtree(tmp_path / "errors", ignore_errors=True)
        failures.record(tmp_path, failure)
        return failures.suspect_node(tmp_path, since)

    assert suspect(Failure(10.0, 1, "node3", "", "hung: no progress for 30 s at step 4", False)) == "node3"
    assert suspect(Failure(10.0, 0, "node2", "", "killed by SIGKILL", False, killed=True)) == "node2"
    assert suspect(Failure(10.0, 0, "node2", "RuntimeError", "CUDA error: an illegal memory access", False)) == "node2"
    assert suspect(Failure(10.0, 0, "node2", "ValueError", "shapes do not match", False)) is None  # the code's
    assert suspect(Failure(10.0, 1, "node3", "", "hung: no progress", False), since=11.0) is None  # an older step's


def test_a_loader_workers_error_keeps_its_message() -> None:
    with pytest.raises(UserError) as caught:
        next(iter(DataLoader(Unreadable(), batch_size=2, num_workers=1)))
    assert str(caught.value).startswith("Caught UserError in DataLoader worker process 0.")  # what torch gives
    failure = describe(caught.value, 1, "node2", 0.0)
    assert failure.line() == "rank 1 on node2: cannot read image /data/0.png (truncated); fix or remove it"
    assert not failure.peer


def test_peer_errors_never_hide_the_first_failure() -> None:
    peer = describe(RuntimeError(GLOO_CLOSED), 0, "node1", 1.0)
    cause = describe(UserError("no space left writing x; free space"), 1, "node2", 2.0)
    killed = Failure(0, 3, "node2", "", "killed by signal 9 (SIGKILL)", False)
    assert peer.peer and not cause.peer
    # The peer wrote first, in time, but it only saw the other rank go.
    assert root_cause([peer, cause]) == cause
    assert root_cause([peer], [killed]) == killed
    assert root_cause([cause], [killed]) == cause
    later_peer = describe(RuntimeError("Timed out waiting 300000ms for recv operation"), 1, "node2", 3.0)
    assert root_cause([later_peer, peer]) == peer
    # gloo's words for an operation on a pair that timed out before (rank 0's first error once, under load,
    # recorded as its own and naming it instead of the stopped rank: tests/slurm/test_frozen.py in CI).
    closed = describe(RuntimeError("Application timeout caused pair closure"), 0, "node1", 4.0)
    assert closed.peer and root_cause([closed, cause]) == cause
    assert root_cause([]) is None


@pytest.mark.parametrize(
    ("log", "named"),
    [
        ("srun: error: node2: task 3: Killed\n", [(3, "node2")]),
        ("srun: error: node1: tasks 0-1: Killed\n", [(0, "node1")]),
        ("srun: error: node1: task 1: Exited with exit code 1\n", []),
        ("srun: error: localhost: task 0: killed by SIGKILL\n", [(0, "localhost")]),
    ],
)
def test_srun_names_killed_tasks(tmp_path: Path, log: str, named: list[tuple[int, str]]) -> None:
    (tmp_path / "12_0_log.out").write_text("dist: ...\n" + log)
    killed = killed_tasks(Target("12", "slurm", None, tmp_path))
    assert [(k.rank, k.host) for k in killed] == named
    assert all(k.message == "killed by signal 9 (SIGKILL)" for k in killed)


def test_local_exit_codes_name_killed_tasks(tmp_path: Path) -> None:
    (tmp_path / "77_0_log.out").write_text("")
    (tmp_path / "77_exit_codes.json").write_text(json.dumps({"codes": [1, -9]}))
    run_dir = tmp_path / "run"
    (run_dir / "errors").mkdir(parents=True)
    (run_dir / "errors" / "rank_0.json").write_text(
        json.dumps(asdict(describe(RuntimeError(GLOO_CLOSED), 0, "h", 1.0)))
    )
    host = socket.gethostname()
    target = Target("77", "local", run_dir, tmp_path)
    assert failure_line(target) == f"rank 1 on {host}: killed by signal 9 (SIGKILL)"


# The batch log of a job whose tasks could not start: Apptainer named by a profile, missing on the nodes.
NO_APPTAINER = """slurmstepd-node1: error: execve(): apptainer: No such file or directory
srun: error: node1: task 0: Exited with exit code 2
srun: error: node2: task 1: Exited with exit code 2
"""


def test_a_job_whose_tasks_could_not_start_is_named_by_every_reader(tmp_path: Path) -> None:
    """No rank wrote a record: failure_line (jobs.status, a sweep's table, --wait and jobs.wait) says what srun
    said and the fix, not 'Exited with exit code 2'."""
    (tmp_path / "12_0_log.out").write_text(NO_APPTAINER)
    (tmp_path / "run").mkdir()
    line = failure_line(Target("12", "slurm", tmp_path / "run", tmp_path))
    assert line is not None and line.startswith("job 12 failed: apptainer: No such file or directory on the nodes")
    assert "set apptainer_command:" in line, line


@pytest.mark.parametrize(
    ("log", "lost"),
    [
        ("srun: error: Node failure on node2\nslurmstepd-node1: error: *** JOB 5 ON node1 CANCELLED\n", "node2"),
        (  # an earlier attempt lost node1, the last one node3 and node4: the last one's
            "srun: error: Node failure on node1\n" + ATTEMPT_START + "...\nsrun: error: Node failure on node3\n"
            "srun: error: Node failure on node4\nsrun: error: Node failure on node3\n",
            "node3, node4",
        ),
        ("srun: error: node2: task 1: Exited with exit code 143\n", ""),
    ],
)
def test_the_node_srun_lost_is_read_from_its_line(log: str, lost: str) -> None:
    said = lost_nodes(log)
    assert said.startswith(f"{lost} lost (srun: Node failure on ") if lost else said == "", said


def small_data(sample_root: Path, folder: Path, pairs: int) -> Path:
    """The first `pairs` sample pairs in a data root of their own."""
    rows = (sample_root / "pix2pix" / "pairs.csv").read_text().splitlines()[: pairs + 1]
    for row in rows[1:]:
        for name in row.split(","):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(sample_root / "pix2pix" / name, folder / name)
    (folder / "pairs.csv").write_text("\n".join(rows) + "\n")
    return folder


@pytest.mark.job
def test_the_rank_that_failed_is_named_not_its_peer(local_profile: Path, sample_root: Path, tmp_path: Path) -> None:
    data = small_data(sample_root, tmp_path / "data", 16)
    bad = data / "targets" / "0005.png"
    bad.write_bytes(b"not an image")
    result = submit(
        "--profile",
        str(local_profile),
        "--wait",
        f"data.root={data}",
        "data.verify_images=false",  # or the submitter refuses it up front
        "data.num_workers=1",  # the error comes through a loader worker
        "batch_size=4",
        "steps=8",
        "log.image_every=0",
    )
    assert result.returncode == 1, result.stdout + result.stderr
    run_dir = run_dir_of(result.stdout)
    line = (run_dir / "error.txt").read_text().strip()
    match = re.fullmatch(
        r"rank (\d) on (\S+): cannot read image (\S+) \(.*\); fix or remove it, or set data.bad_images=skip", line
    )
    assert match and match.group(2) == socket.gethostname() and match.group(3) == str(bad), line
    assert result.stderr.endswith(f"error: {line}\n"), result.stderr
    failed, peer = int(match.group(1)), 1 - int(match.group(1))
    # The other rank failed too, later, on the closed connection: its record says so, and it did not win.
    records = {r.name: json.loads(r.read_text()) for r in (run_dir / "errors").iterdir()}
    assert records[f"rank_{peer}.json"]["peer"] and not records[f"rank_{failed}.json"]["peer"], records
    status = subprocess.run(
        [sys.executable, "-m", "jobs.status", str(run_dir)], cwd=ROOT, env=ENV, capture_output=True, text=True
    )
    assert says_error(status.stdout, line), status.stdout
    # The traceback went to the task's stderr: jobs.logs shows it after the output.
    logs = subprocess.run(
        [sys.executable, "-m", "jobs.logs", str(run_dir), "--rank", str(failed)],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
    )
    assert logs.returncode == 0, logs.stderr
    assert "dist: source=submitit-local" in logs.stdout and "==> stderr: " in logs.stdout
    assert "Traceback (most recent call last)" in logs.stdout.split("==> stderr: ")[1]


def start(*args: str, out: Path) -> subprocess.Popen[bytes]:
    """`python -m jobs.submit` in a process group of its own: the local job's processes join it."""
    with out.open("w") as f, out.with_suffix(".err").open("w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "jobs.submit", *args],
            cwd=ROOT,
            env=ENV,
            stdout=f,
            stderr=err,
            start_new_session=True,
        )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@pytest.mark.job
def test_a_killed_rank_is_named_and_its_run_refuses_a_second_job(
    local_profile: Path, sample_root: Path, tmp_path: Path
) -> None:
    args = ["--profile", str(local_profile), f"data.root={sample_root / 'pix2pix'}", "batch_size=4"]
    job = start(*args, "--wait", "steps=100000", "log.every=2", "log.image_every=0", out=tmp_path / "job.out")
    second = None
    try:
        run_dir = poll("the run", lambda: next((tmp_path / "runs").glob("*/job.json"), None)).parent
        # While it runs, --resume would start a second job training into the same folder.
        second = start("--profile", str(local_profile), "--resume", str(run_dir), out=tmp_path / "second.out")
        assert second.wait(timeout=120) == 2, (tmp_path / "second.out").read_text()
        refusal = (tmp_path / "second.err").read_text()
        assert refusal.startswith(f"error: {run_dir} is still running as job ") and refusal.count("\n") == 1
        assert len(list((run_dir / "logs").glob("*_submitted.pkl"))) == 1  # no second job

        log1 = next((run_dir / "logs").glob("*_1_log.out"))
        pid = poll("rank 1's pid", lambda: re.findall(r"^dist: .* pid=(\d+)", log1.read_text(), re.M))[-1]
        poll("training", lambda: (run_dir / "progress.json").exists())
        os.kill(int(pid), signal.SIGKILL)  # it writes nothing; rank 0 only sees the connection close
        assert job.wait(timeout=120) == 1
    finally:
        kill_group(job)
        if second is not None:
            kill_group(second)
    line = f"rank 1 on {socket.gethostname()}: killed by signal 9 (SIGKILL)"
    assert (tmp_path / "job.err").read_text().endswith(f"error: {line}\n")
    assert (run_dir / "error.txt").read_text() == line + "\n"
    status = subprocess.run(
        [sys.executable, "-m", "jobs.status", str(run_dir)], cwd=ROOT, env=ENV, capture_output=True, text=True
    )
    assert says_error(status.stdout, line), status.stdout


def test_clearing_an_earlier_attempts_failures_spares_a_peers_record_in_flight(tmp_path: Path) -> None:
    """Rank 0, starting, forgets the earlier attempt's failures while a peer of this attempt writes its own:
    the peer's temporary file survives, and a folder removed under the peer's write is made again."""
    stale = Failure(1.0, 1, "node1", "ValueError", "old", False)
    failures.record(tmp_path, stale)
    in_flight = tmp_path / "errors" / ".rank_0.json.abc.tmp"  # a peer between mkstemp and os.replace
    in_flight.write_text("{}")
    failures.clear(tmp_path, before=2.0)
    assert in_flight.exists() and not (tmp_path / "errors" / "rank_1.json").exists()
    in_flight.unlink()
    failures.clear(tmp_path, before=2.0)  # nothing left: the folder goes
    assert not (tmp_path / "errors").exists()

    real_write = failures.write_text
    removed = []

    def folder_removed_once(path: Path, text: str) -> None:
        if not removed:  # as clear() does between the peer's mkdir and its write
            removed.append(path)
            raise FileNotFoundError(path)
        real_write(path, text)

    failures.write_text = folder_removed_once  # type: ignore[assignment]
    try:
        failures.record(tmp_path, Failure(3.0, 1, "node1", "ValueError", "new", False))
    finally:
        failures.write_text = real_write  # type: ignore[assignment]
    assert json.loads((tmp_path / "errors" / "rank_1.json").read_text())["message"] == "new"

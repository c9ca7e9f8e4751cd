"""Your own torchrun-style script on the real two-node cluster: ranks, preemption with save and resume, failure."""

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import userproject
from tests.slurm import cluster
from tests.slurm.cluster import preempt_normal_jobs, release_when_requeued, squeue_state
from tests.support import (
    ALL_REDUCING,
    DDP,
    PLAIN,
    RAISES,
    REQUEUEING,
    STUBBORN,
    TORCHRUN,
    cli,
    job_id_of,
    mini_profile,
    poll_cluster,
    run_dir_of,
    slurm_ddp,
    submit,
)
from trainer.run.rundir import RunDir

pytestmark = pytest.mark.slurm


def test_a_plain_ddp_script_gets_every_ranks_variables(slurm_cluster: None, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(DDP)
    args = ["--profile", str(mini_profile(tmp_path)), "--nodes", "2", "--gpus-per-node", "2", "--wait"]
    result = submit(*args, "--", sys.executable, "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    reports = [json.loads((run_dir / f"rank{r}.json").read_text()) for r in range(4)]
    assert [r["RANK"] for r in reports] == ["0", "1", "2", "3"]
    assert {r["WORLD_SIZE"] for r in reports} == {"4"} and {r["LOCAL_WORLD_SIZE"] for r in reports} == {"2"}
    assert [(r["GROUP_RANK"], r["LOCAL_RANK"]) for r in reports] == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
    assert {r["MASTER_ADDR"] for r in reports} == {"node1"} and len({r["MASTER_PORT"] for r in reports}) == 1
    assert {r["sum"] for r in reports} == {10.0}  # 1 + 2 + 3 + 4: one process group of four


def test_a_preempted_script_saves_is_requeued_and_resumes(slurm_cluster: None, tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(REQUEUEING)
    args = ["--profile", str(mini_profile(tmp_path)), "--nodes", "2", "--gpus-per-node", "1"]
    result = submit(*args, "--", sys.executable, "loop.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    starts = run_dir / "starts"
    poll_cluster("both ranks to start", lambda: starts.exists() and len(starts.read_text().split()) == 2)
    preempt_normal_jobs()
    release_when_requeued(job_id_of(run_dir))
    poll_cluster("the summary", lambda: RunDir(run_dir).finished(), timeout=240)
    resumed = [int(s.split(":")[1]) for s in starts.read_text().split()[2:]]
    assert len(resumed) == 2 and all(step > 0 for step in resumed), starts.read_text()
    attempts = json.loads((run_dir / "attempts.json").read_text())
    assert attempts[0]["stop"]["reason"] == "preempted" and len(attempts) == 2


# Notes when its own handler got the requeue signal, then asks for a requeue; its next start ends at once.
NOTES_THE_SIGNAL = """
import os, signal, sys, time
note = os.path.join(os.environ["RUN_DIR"], f"got{os.environ['RANK']}")
if os.path.exists(note):
    sys.exit(0)
got = []
signal.signal(getattr(signal, "SIG" + os.environ["REQUEUE_SIGNAL"]), lambda *_: got.append(time.time()))
open(os.path.join(os.environ["RUN_DIR"], f"up{os.environ['RANK']}"), "w").close()
while not got:
    time.sleep(0.05)
open(note, "w").write(repr(got[0]))
time.sleep(3)
sys.exit(144)
"""


def test_a_scripts_tasks_take_the_signal_from_a_copy_on_their_node(slurm_cluster: None, tmp_path: Path) -> None:
    """The supervisor leaves the requeue signal on every node of the job (srun --overlap): each task reads it
    there within a second, not from the shared log folder (looked at every 10 s), and the copy is gone once
    the job has been requeued."""
    from trainer.supervise.attempt import Attempt

    (tmp_path / "notes.py").write_text(NOTES_THE_SIGNAL)
    args = ["--profile", str(mini_profile(tmp_path)), "--nodes", "2", "--gpus-per-node", "1"]
    result = submit(*args, "--", sys.executable, "notes.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir, job_id = run_dir_of(result), job_id_of(run_dir_of(result))
    poll_cluster("both ranks up", lambda: (run_dir / "up0").exists() and (run_dir / "up1").exists())
    preempt_normal_jobs()
    node_file = Attempt(run_dir / "logs", job_id, 0).node_signal
    poll_cluster("the signal's copy on the nodes", node_file.exists, timeout=60)
    notes = [run_dir / "got0", run_dir / "got1"]
    poll_cluster("both ranks to get the signal", lambda: all(n.exists() and n.read_text() for n in notes), timeout=60)
    shared = run_dir / "logs" / f"attempt_{job_id}_0.signal"
    left = os.stat(shared).st_mtime
    assert all(float(n.read_text()) - left < 2.0 for n in notes), [float(n.read_text()) - left for n in notes]
    poll_cluster("the node-local copy gone with the attempt", lambda: not node_file.exists(), timeout=120)
    release_when_requeued(job_id)
    poll_cluster("the summary", lambda: RunDir(run_dir).finished(), timeout=240)


def test_a_failing_script_fails_the_job_naming_its_rank(slurm_cluster: None, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(DDP)
    args = ["--profile", str(mini_profile(tmp_path)), "--nodes", "2", "--gpus-per-node", "2", "--wait"]
    os.environ["FAIL_RANK"] = "3"
    try:
        result = submit(*args, "--", sys.executable, "train.py", cwd=tmp_path)
    finally:
        del os.environ["FAIL_RANK"]
    assert result.returncode == 1, result.stdout + result.stderr
    assert "error: rank 3 on node2: " in result.stderr and "train.py exited with status 3" in result.stderr


def test_a_raising_scripts_exception_line_is_reported_as_the_job_ends(slurm_cluster: None, tmp_path: Path) -> None:
    """The failing rank's exception line, printed by --wait within seconds of the job's end (submitit's own
    polling printed it 16 s later, after waiting for result files the failed task never writes)."""
    (tmp_path / "multinode.py").write_text(RAISES)
    args = ["--profile", str(mini_profile(tmp_path)), "--nodes", "2", "--gpus-per-node", "1", "--wait"]
    result = submit(*args, "--", "python", "multinode.py", cwd=tmp_path)
    returned = time.time()
    assert result.returncode == 1, result.stdout + result.stderr
    assert "error: rank 1 on node2: ValueError: bad batch at step 3 (" in result.stderr, result.stderr
    job = job_id_of(run_dir_of(result))
    end = subprocess.run(["sacct", "-j", job, "-X", "-n", "-P", "-o", "End"], capture_output=True, text=True)
    ended = datetime.datetime.fromisoformat(end.stdout.strip()).timestamp()
    assert returned - ended < 5, (returned, ended)  # whole seconds in sacct, and the submitter's own exit


def started(run_dir: Path, attempt: int, ranks: int) -> bool:
    """Attempt `attempt` (0-based) of the PLAIN script has started on every rank and saved once since."""
    starts = run_dir / "starts"
    lines = starts.read_text().split() if starts.exists() else []
    ckpt = run_dir / "ckpt.pt"
    return len(lines) >= ranks * (attempt + 1) and ckpt.exists() and ckpt.stat().st_mtime > starts.stat().st_mtime


def plain_run(
    tmp_path: Path, extra: str, args: list[str], steps: int, launcher: tuple[str, ...] = ("python",), text: str = PLAIN
) -> Path:
    (tmp_path / "train.py").write_text(text)
    profile = mini_profile(tmp_path)
    profile.write_text(profile.read_text() + extra)
    result = submit("--profile", str(profile), *args, "--", *launcher, "train.py", str(steps), "0.3", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    return run_dir_of(result)


def finish_releasing(run_dir: Path, timeout: float = 300) -> None:
    """Release each requeue of the run (Slurm holds a requeued job ~120 s) until it has a summary."""
    job = job_id_of(run_dir)

    def done() -> bool:
        if squeue_state(job) == "PENDING":
            release_when_requeued(job, seen_pending=True)
        return RunDir(run_dir).finished()

    poll_cluster("the summary", done, timeout=timeout)


def assert_resumed_and_completed(
    run_dir: Path, reason: str, said: str = "requeue signal: the command does not handle SIGUSR2", timeout: float = 300
) -> None:
    """Every attempt but the last stopped for `reason` and was requeued; a later one resumed from the script's
    own snapshot; the last finished; the job COMPLETED, with no error and no failure counted."""
    finish_releasing(run_dir, timeout)
    attempts = json.loads((run_dir / "attempts.json").read_text())
    assert len(attempts) >= 2 and [a["stop"]["reason"] for a in attempts] == [reason] * (len(attempts) - 1) + [
        "finished"
    ], attempts
    starts = (run_dir / "starts").read_text().split()
    assert any(int(s.split(":")[1]) > 0 for s in starts), starts  # resumed from its snapshot
    summary = json.loads((run_dir / "summary.json").read_text())
    counted = {"preempted": summary["preemptions"], "timeout": summary["timeouts"], "failure": summary["failures"]}
    assert counted == {"preempted": 0, "timeout": 0, "failure": 0} | {reason: len(attempts) - 1}, summary
    job = job_id_of(run_dir)
    poll_cluster("COMPLETED", lambda: ": COMPLETED" in cli("jobs.status", str(run_dir)).stdout, timeout=60)
    assert not (run_dir / "error.txt").exists(), (run_dir / "error.txt").read_text()
    assert said in (run_dir / "logs" / f"{job}_0_log.out").read_text()


@pytest.mark.parametrize("launcher", ["python", "torchrun"])
def test_a_script_without_signal_code_survives_preemption(slurm_cluster: None, tmp_path: Path, launcher: str) -> None:
    """No handler anywhere in the script: preempted, it is requeued (not FAILED by the signal) and resumes
    from the snapshot it saved itself. The same under torchrun (one task, two workers), without a trap."""
    if launcher == "python":
        run_dir = plain_run(tmp_path, "", ["--nodes", "2", "--gpus-per-node", "1"], steps=50)
    else:
        torchrun = (*TORCHRUN, "--nproc-per-node", "2")
        run_dir = plain_run(tmp_path, "", ["--gpus-per-node", "1"], steps=50, launcher=torchrun)
    poll_cluster("a snapshot", lambda: started(run_dir, 0, 2), timeout=120)
    preempt_normal_jobs()
    assert_resumed_and_completed(run_dir, "preempted")


def test_a_script_without_signal_code_survives_its_time_limit(slurm_cluster: None, tmp_path: Path) -> None:
    """A two-minute limit, the signal 30 s before it: each stop is a timeout, requeued and resumed, until the
    script completes (90 s of steps: the first attempt cannot finish before the signal)."""
    # Slurm may send the signal up to a minute early. With a one-minute limit it came as the job started, before
    # the batch shell had its trap, and the job failed (seen in CI twice): two minutes leave the first 30 s quiet.
    run_dir = plain_run(tmp_path, "max_num_timeout: 30\n", ["--time", "2"], steps=300)
    assert_resumed_and_completed(run_dir, "timeout", timeout=900)


def test_a_hand_requeue_is_counted_as_a_requeue_not_a_failure(slurm_cluster: None, tmp_path: Path) -> None:
    """`scontrol requeue` by hand: the attempt recorded no stop of its own; Slurm's accounting says why."""
    run_dir = plain_run(tmp_path, "", ["--gpus-per-node", "1"], steps=40)
    poll_cluster("a snapshot", lambda: started(run_dir, 0, 1), timeout=120)
    subprocess.run(["scontrol", "requeue", job_id_of(run_dir)], check=True)
    finish_releasing(run_dir)
    attempts = json.loads((run_dir / "attempts.json").read_text())
    assert [a["stop"]["reason"] for a in attempts] == ["requeued", "finished"], attempts
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["requeues"], summary["failures"], summary["restarts"]) == (1, 0, 1), summary


def test_a_project_with_its_own_trainer_and_jobs_modules_on_two_nodes(slurm_cluster: None, tmp_path: Path) -> None:
    """tests/userproject.py's project, submitted with the installed command from its own folder: each start
    (the first, its in-job restart, the requeue's, a --resume's) imports the project's own modules on both
    nodes; its old local runs/ (2 MiB, over the 1 MiB limit) and lightning_logs/ never travel."""
    project = userproject.make(tmp_path / "project", outputs_mb=2)
    profile = mini_profile(tmp_path, "restarts_in_job: 1\nsnapshot_limit_mb: 1\n")
    args = ["submit", "--profile", str(profile), "--nodes", "2", "--gpus-per-node", "1"]
    result = slurm_ddp(project, *args, "--", "python", "train.py", "fail,requeue")
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    job = job_id_of(run_dir)

    def ended() -> bool:  # its requeue released at once (Slurm holds a requeued job ~120 s)
        if squeue_state(job) == "PENDING":
            release_when_requeued(job, seen_pending=True)
        counts = [len(userproject.starts(run_dir, r)) for r in (0, 1)]
        return counts == [3, 3] and squeue_state(job) in ("", "COMPLETED")

    poll_cluster("the third start on both nodes and the job's end", ended, timeout=300)
    for rank in (0, 1):
        records = userproject.starts(run_dir, rank)
        assert len(records) == 3 and all(userproject.all_from(run_dir, r) for r in records), records
    assert not (run_dir / "code" / "runs").exists() and not (run_dir / "code" / "lightning_logs").exists()
    again = slurm_ddp(project, "submit", "--resume", str(run_dir), "--wait")
    assert again.returncode == 0, again.stdout + again.stderr
    assert [len(userproject.starts(run_dir, r)) for r in (0, 1)] == [4, 4]
    assert all(userproject.all_from(run_dir, userproject.starts(run_dir, r)[-1]) for r in (0, 1))


@pytest.mark.parametrize("stop", ["preempted", "timeout"])
def test_a_script_that_takes_the_signal_and_carries_on_is_still_requeued(
    slurm_cluster: None, tmp_path: Path, stop: str
) -> None:
    """A handler that logs a line and goes on (SIGUSR2 and SIGTERM alike): requeue_grace_s after the signal the
    task stops it (SIGKILL, as it ignores SIGTERM), and the job is requeued, not lost to its time limit."""
    grace = "requeue_grace_s: 5\n"
    said = "the command still runs 5 s after SIGUSR2; stopping it to requeue"
    if stop == "preempted":
        run_dir = plain_run(tmp_path, grace, ["--nodes", "2", "--gpus-per-node", "1"], steps=50, text=STUBBORN)
        poll_cluster("a snapshot", lambda: started(run_dir, 0, 2), timeout=120)
        preempt_normal_jobs()
    else:
        # Slurm may send the signal up to a minute early: a two-minute limit leaves the first 30 s of each attempt
        # quiet (with one minute attempts got almost no time, seen in CI); 90 s of steps outlast the first.
        run_dir = plain_run(tmp_path, grace + "max_num_timeout: 30\n", ["--time", "2"], steps=300, text=STUBBORN)
    assert_resumed_and_completed(run_dir, stop, said, timeout=900)


def test_a_setup_line_that_fails_ends_the_job_naming_it_and_one_that_works_reaches_the_tasks(
    slurm_cluster: None, tmp_path: Path
) -> None:
    """A `source .../activate` or `module load` that fails would leave the job running with another interpreter:
    the job ends there, and --wait (so jobs.wait) names the line. Lines that work keep their effect (exports)."""
    (tmp_path / "show.py").write_text("import os\nprint('FROM_SETUP', os.environ.get('FROM_SETUP'))\n")
    heredoc = "  - read -r FROM_SETUP <<EOF\n  - from-a-here-document\n  - EOF\n  - export FROM_SETUP\n"  # one command over items
    good = mini_profile(tmp_path, f"setup:\n  - export X=1  # a comment ends at the line's end\n{heredoc}")
    result = submit("--profile", str(good), "--gpus-per-node", "1", "--wait", "--", "python", "show.py", cwd=tmp_path)
    assert result.returncode == 0 and "FROM_SETUP from-a-here-document" in result.stdout, result.stdout + result.stderr
    bad = mini_profile(tmp_path, "setup:\n  - export FROM_SETUP=yes\n  - source /nonexistent/venv/bin/activate\n")
    result = submit("--profile", str(bad), "--gpus-per-node", "1", "--wait", "--", "python", "show.py", cwd=tmp_path)
    said = "the profile's setup line 2 failed (exit 1): source /nonexistent/venv/bin/activate; fix that line"
    assert result.returncode == 1 and said in result.stderr, result.stdout + result.stderr
    assert "FROM_SETUP" not in result.stdout  # no task started
    # A line that ends the batch shell itself (`exit 3`; bash left no status to look at) is named as well.
    ends = mini_profile(tmp_path, "setup:\n  - export FROM_SETUP=yes\n  - exit 3\n")
    result = submit("--profile", str(ends), "--gpus-per-node", "1", "--wait", "--", "python", "show.py", cwd=tmp_path)
    said = "the profile's setup line 2 failed (exit 3): exit 3; fix that line"
    assert result.returncode == 1 and said in result.stderr, result.stdout + result.stderr
    assert "FROM_SETUP" not in result.stdout


# Reports its steps, then fails (FAIL set) or trains on until cancelled.
STEPS_THEN = """
import os, sys, time
from trainer import requeue
for step in range(100000):
    time.sleep(0.1)
    requeue.progress(step)
    if step == 20 and os.environ.get("FAIL"):
        sys.exit("error: out of data")
"""


@pytest.mark.parametrize("how", ["failure", "cancelled"])
def test_an_attempt_that_fails_or_is_cancelled_is_closed_and_the_run_says_it_ended(
    slurm_cluster: None, tmp_path: Path, how: str
) -> None:
    """On two nodes the batch step's supervisor closes the attempt rank 0 could not (its stop, its step, the
    first failure's line) and writes summary.json final: a failure after srun ends, a cancel (scancel, told
    apart from a requeue by accounting) as Slurm ends the step."""
    (tmp_path / "steps.py").write_text(STEPS_THEN)
    env = ["--env", "FAIL=1"] if how == "failure" else []
    args = ["--profile", str(mini_profile(tmp_path)), "--nodes", "2", "--gpus-per-node", "1", *env]
    result = submit(*args, "--", sys.executable, "steps.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    if how == "cancelled":
        poll_cluster("a few steps", lambda: (json.loads((run_dir / "progress.json").read_text()) or {}).get("step", 0) > 5
             if (run_dir / "progress.json").exists() else False)  # fmt: skip
        assert cli("jobs.cancel", str(run_dir)).returncode == 0
    summary = poll_cluster("the ended summary", lambda: (s := _summary(run_dir)).get("ended") and s, timeout=180)
    [attempt] = json.loads((run_dir / "attempts.json").read_text())
    assert attempt["stop"]["reason"] == how and attempt["stop"]["final"] is True, attempt
    assert attempt["resumed_step"] == -1 and attempt["stop"]["step"] >= 5, attempt
    assert summary["finished"] is False and summary["ended"] == how, summary
    assert summary["ledger"]["training"] > 1.0, summary
    if how == "failure":
        assert attempt["stop"]["error"].startswith("rank ") and "error: out of data (" in attempt["stop"]["error"]
        assert summary["failures"] == 1


def _summary(run_dir: Path) -> dict:  # type: ignore[type-arg]
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


def test_a_preempted_script_on_two_nodes_leaves_no_peer_error(slurm_cluster: None, tmp_path: Path) -> None:
    """A script without a handler, all-reducing without pause on two nodes, preempted: each node's task sees the
    signal in its own time, and stops its command only once every rank's is frozen. A rank whose command still
    failed on its lost peer (the other node stopped first) stopped for the requeue, not failed: the outcome
    names no error (no error.txt, none in jobs.status), the attempt is a preemption, and the
    restart finishes. The peer's words may stay in that rank's log, where they happened."""
    (tmp_path / "train.py").write_text(ALL_REDUCING)
    args = ["--profile", str(mini_profile(tmp_path)), "--nodes", "2", "--gpus-per-node", "1"]
    result = submit(*args, "--", "python", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    marks = [run_dir / f"started{rank}" for rank in (0, 1)]
    poll_cluster("both ranks all-reducing", lambda: all(m.exists() and m.read_text() for m in marks), timeout=120)
    preempt_normal_jobs()
    finish_releasing(run_dir)
    attempts = json.loads((run_dir / "attempts.json").read_text())
    assert [a["stop"]["reason"] for a in attempts] == ["preempted", "finished"], attempts
    assert not (run_dir / "error.txt").exists()
    status = cli("jobs.status", str(run_dir))
    assert status.returncode == 0 and "error" not in status.stdout.lower(), status.stdout
    assert "connection" not in status.stdout.lower() and "Traceback" not in status.stdout, status.stdout


@pytest.mark.parametrize("requeue", [True, False], ids=["requeued", "ended"])
def test_status_names_the_node_a_job_lost_and_what_slurm_did(
    slurm_cluster: None, tmp_path: Path, requeue: bool
) -> None:
    """node2 set down under a two-node script job: Slurm requeues it (or, told not to, ends it NODE_FAIL), and
    jobs.status names node2 and that, also once node2 is back (Slurm forgets a node's reason then)."""
    (tmp_path / "train.py").write_text(ALL_REDUCING)
    args = ["--profile", str(mini_profile(tmp_path)), "--nodes", "2", "--gpus-per-node", "1"]
    result = submit(*args, "--", "python", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir, job = run_dir_of(result), job_id_of(run_dir_of(result))
    if not requeue:
        subprocess.run(["scontrol", "update", f"jobid={job}", "Requeue=0"], check=True)
    poll_cluster(
        "both ranks all-reducing", lambda: all((run_dir / f"started{r}").exists() for r in (0, 1)), timeout=120
    )
    subprocess.run(["scontrol", "update", "nodename=node2", "state=down", "reason=test"], check=True)
    try:
        poll_cluster("Slurm to act on the lost node", lambda: squeue_state(job) in ("PENDING", ""), timeout=60)
    finally:
        subprocess.run(["scontrol", "update", "nodename=node2", "state=resume"], capture_output=True)
    poll_cluster("both nodes back", lambda: cluster.node_states() == ["idle", "idle"], timeout=120)
    status = cli("jobs.status", str(run_dir)).stdout
    lost = "node2 lost (srun: Node failure on node2)"
    assert "error: rank" not in status, status  # the ranks only saw node2 go
    if requeue:
        assert f"the last attempt ended NODE_FAIL on node[1-2]: {lost}, and Slurm requeued the job" in status, status
    else:
        assert f"job {job}: NODE_FAIL" in status, status
        assert f"{lost}; Slurm ended the job without requeueing it" in status, status

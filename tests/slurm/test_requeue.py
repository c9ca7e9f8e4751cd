"""Preemption, time limits and failures on the real cluster: requeue and resume exactly where it stopped."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests import ranks as forked
from tests.slurm import cluster
from tests.slurm.cluster import preempt_normal_jobs, release_when_requeued, squeue_state
from tests.support import (
    ARGS,
    AUGMENTED,
    EXACT,
    ROOT,
    attempts,
    cli,
    job_id_of,
    mini_profile,
    poll,
    poll_cluster,
    run_dir_of,
    run_dirs,
    submit,
    summary,
    training,
)
from trainer.run import ledger
from trainer.run.rundir import RunDir


def preempt(run_dir: Path, attempt: int) -> None:
    poll_cluster(f"attempt {attempt} to train", lambda: training(run_dir, attempt), timeout=120)
    preempt_normal_jobs()
    release_when_requeued(job_id_of(run_dir))


def git_copy_of_the_project(folder: Path) -> Path:
    """A copy of the project as a git tree, as a user's clone would be."""
    ignored = shutil.ignore_patterns(".git", "runs", "__pycache__", ".venv", "*.egg-info", ".*_cache")
    shutil.copytree(ROOT, folder, ignore=ignored)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)
    return folder


def test_preempted_run_resumes_the_submitted_code_to_the_same_weights(
    reference_hash: str, tmp_path: Path, sample_root: Path
) -> None:
    """Submitted from a git copy of the project whose pix2pix task is then broken, preempted twice (the first
    is the one-preemption case, the second resumes from a resume): each attempt runs the snapshot taken at
    submit, resumes where the last stopped, and the run ends with the uninterrupted run's weights."""
    times, work = 2, git_copy_of_the_project(tmp_path / "work")
    result = submit("--profile", str(mini_profile(tmp_path)), f"data.root={sample_root / 'pix2pix'}", *ARGS, cwd=work)
    assert result.returncode == 0, result.stderr
    task = work / "trainer" / "tasks" / "pix2pix.py"
    task.write_text(
        task.read_text().replace(
            "    def forward(",
            "    def forward(self, *a):\n        raise RuntimeError('edited')\n\n    def _old_forward(",
        )
    )
    run_dir = run_dir_of(result)
    for attempt in range(times):
        preempt(run_dir, attempt)
    data = summary(run_dir)
    assert data["weights_sha256"] == reference_hash
    assert (data["preemptions"], data["timeouts"], data["restarts"], data["steps_recomputed"]) == (times, 0, times, 0)
    stops = [a["stop"] for a in attempts(run_dir)[:-1]]
    assert [s["reason"] for s in stops] == ["preempted"] * times
    # Each stop saved the step it stopped at, and the next attempt resumed there.
    assert [a["resumed_step"] for a in attempts(run_dir)[1:]] == [s["step"] for s in stops]
    status = cli("jobs.status", str(run_dir))
    assert f"restarts: {times}" in status.stdout
    assert "(clean; snapshot in code/)" in status.stdout
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert [e.value for e in events.Scalars("restarts/restarts")][-1] == times
    assert {"restarts/time_lost_s", "restarts/steps_recomputed"} <= set(events.Tags()["scalars"])
    ranks = [json.loads(p.read_text()) for p in sorted((run_dir / "provenance" / "ranks").glob("rank_*.json"))]
    assert [(r["host"], r["trainer"]) for r in ranks] == [
        ("node1", f"{run_dir}/tool/trainer"),  # the tool's own copy, beside the submitted code/
        ("node2", f"{run_dir}/tool/trainer"),
    ]
    job_id = job_id_of(run_dir)
    poll_cluster("sacct's record", lambda: (run_dir / "provenance" / f"sacct_{job_id}.txt").exists(), timeout=60)
    sacct = (run_dir / "provenance" / f"sacct_{job_id}.txt").read_text()
    assert sacct.startswith("JobID|JobName|State|ExitCode") and f"\n{job_id}.0|" in sacct, sacct
    assert f"JobId={job_id} " in (run_dir / "provenance" / f"scontrol_{job_id}.txt").read_text()


def test_time_limit_saves_requeues_resumes_and_stops_past_the_budget(tmp_path: Path, sample_root: Path) -> None:
    """One run meets Slurm's time limit twice with max_num_timeout=1: the first stop saves, requeues and resumes
    where it stopped; the second is past the budget and ends the job with a usable checkpoint."""
    profile = mini_profile(tmp_path, "max_num_timeout: 1\n")
    # The signal 30 s before the limit, and Slurm may send it up to a minute early: with a one-minute limit it
    # came as the job started, before the batch shell's trap, and the job failed (seen in CI). Two minutes.
    profile.write_text(profile.read_text().replace("timeout_min: 10", "timeout_min: 2"))
    cmd = [sys.executable, "-m", "jobs.submit", "--profile", str(profile), "--wait", *ARGS[:4]]
    cmd += [f"data.root={sample_root / 'pix2pix'}", "steps=100000", "log.every=20", "checkpoint.every=100000"]
    waiting = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        run_dir = poll_cluster(
            "the run directory", lambda: run_dirs(tmp_path / "runs") and run_dirs(tmp_path / "runs")[0]
        )
        poll_cluster("the first stop", lambda: len([a for a in attempts(run_dir) if a.get("stop")]) == 1, timeout=240)
        # Slurm would hold the requeued job ~120 s before it is eligible again: release it now.
        release_when_requeued(job_id_of(run_dir))
        stdout, stderr = waiting.communicate(timeout=300)
    finally:
        waiting.kill()
    assert waiting.returncode == 1, stdout + stderr
    first, second = attempts(run_dir)
    assert first["stop"]["reason"] == second["stop"]["reason"] == "timeout"
    assert second["slurm_restart_count"] == 1 and second["resumed_step"] == first["stop"]["step"]
    message = (run_dir / "error.txt").read_text()
    assert "time limit reached 2 time(s), more than max_num_timeout=1" in message and "--resume" in message
    assert "time limit reached" in stderr and stderr.count("\n") == 1, stderr
    last = run_dir / "checkpoints" / f"step_{second['stop']['step']:08d}.pt"
    assert last.exists()
    assert f"last checkpoint: {last}" in cli("jobs.status", str(run_dir)).stdout


def kill_rank(run_dir: Path, rank: int) -> None:
    log = run_dir / "logs" / f"{job_id_of(run_dir)}_{rank}_log.out"
    pid = poll_cluster(
        f"rank {rank}'s pid", lambda: log.exists() and re.findall(r"^dist: .* pid=(\d+)", log.read_text(), re.M)
    )
    os.kill(int(pid[-1]), signal.SIGKILL)


def test_killed_task_ends_the_job_quickly_and_names_it(tmp_path: Path, sample_root: Path) -> None:
    result = submit(
        "--profile",
        str(mini_profile(tmp_path)),
        f"data.root={sample_root / 'pix2pix'}",
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "steps=100000",
        "log.every=5",
    )
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result)
    poll_cluster("training", lambda: training(run_dir, 0))
    kill_rank(run_dir, 3)
    killed = time.monotonic()
    poll_cluster("the job to fail", lambda: "FAILED" in cli("jobs.status", str(run_dir)).stdout, timeout=60)
    assert time.monotonic() - killed < 60
    status = cli("jobs.status", str(run_dir)).stdout
    assert "failed task: node2: task 3: Killed" in status, status
    assert "error: rank 3 on node2: killed by signal 9 (SIGKILL)" in status, status  # not a peer's lost connection


@pytest.mark.parametrize("how", [signal.SIGSTOP, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_stopped_or_killed_rank_restarts_in_its_allocation_to_the_same_weights_on_2_nodes_x_2_tasks(
    reference_hash_of_4: str, tmp_path: Path, sample_root: Path, how: signal.Signals
) -> None:
    """Rank 3 (node2's second task) stopped as a frozen node leaves it, or killed: the others' watchdogs name it
    (stopped: 10 s budget, and 4 more for a rank waiting on its peers) or srun ends the step (killed), and with
    restarts_in_job the supervisor runs srun again in the same allocation (no requeue): it resumes from the
    last checkpoint and ends on the uninterrupted run's weights, bit for bit, over 4 ranks."""
    profile = mini_profile(tmp_path, "restarts_in_job: 1\n")
    args = [a if a != "checkpoint.every=100" else "checkpoint.every=20" for a in ARGS]
    args = [a if a != "1" else "2" for a in args]  # --gpus-per-node 2: 2 tasks a node
    hang = ["hang.floor_s=10", "hang.factor=2", "hang.beat_s=2"]
    result = submit("--profile", str(profile), f"data.root={sample_root / 'pix2pix'}", *args, *hang)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result)
    progress = run_dir / "progress.json"  # rank 0's; heartbeats go to the job's store, not to files
    poll_cluster(
        "the ranks past a checkpoint",
        lambda: progress.exists() and json.loads(progress.read_text() or "{}")["step"] >= 25,
        timeout=300,
    )
    log = run_dir / "logs" / f"{job_id_of(run_dir)}_3_log.out"
    os.kill(int(re.findall(r"^dist: .* pid=(\d+)", log.read_text(), re.M)[-1]), how)
    # The restart within two minutes (the time to name a hang is measured in benchmarks/hang_naming.py; a bound
    # of 45 s here failed by 2 s on a loaded CI machine).
    poll_cluster("the restart", lambda: len(attempts(run_dir)) == 2, timeout=120)
    assert summary(run_dir, timeout=600)["weights_sha256"] == reference_hash_of_4
    first, second = attempts(run_dir)
    assert first["stop"]["reason"] == "failure" and second["in_job_restart"] == 1
    assert first["slurm_restart_count"] == second["slurm_restart_count"] == 0  # not requeued: no queue wait
    log0 = (run_dir / "logs" / f"{job_id_of(run_dir)}_0_log.out").read_text()
    assert "starting the tasks again in this allocation" in log0
    if how == signal.SIGSTOP:
        assert first["stop"]["error"].startswith("rank 3 on node2: hung: its heartbeat stopped ")  # the cause
        peers = "".join(p.read_text() for p in (run_dir / "logs").glob("*_[012]_log.out"))  # whoever found it
        assert "hang: rank 3 on node2: hung: its heartbeat stopped " in peers  # error.txt went with the restart


def test_a_run_watched_hung_restarted_and_preempted_accounts_for_its_wall_time_in_the_ledger(
    tmp_path: Path, sample_root: Path
) -> None:
    """2 nodes x 1 task, watched with jobs.top --once while it trains (a row per rank): rank 1 stopped after
    step 25 (the hang named, the tasks started again in the allocation from step 0: the first checkpoint is
    step 100's, so the hang comes before it however late the stop lands), then the job preempted
    and requeued. summary.json has the ledger as the run goes (said unfinished), and at the end every part, they
    add up to its wall time, the wall time is the clock's from submit to the summary, and each event shows in its part;
    jobs.status, jobs.list and TensorBoard show the goodput."""
    profile = mini_profile(tmp_path, "restarts_in_job: 1\n")
    args = ARGS  # checkpoint.every=100: with every 20, a stop after step 40 once found nothing to recompute (CI)
    hang = ["hang.floor_s=10", "hang.factor=2", "hang.beat_s=2"]
    submitted = time.time()
    result = submit("--profile", str(profile), f"data.root={sample_root / 'pix2pix'}", *args, *hang)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result)
    progress = run_dir / "progress.json"
    poll_cluster(
        "step 25", lambda: progress.exists() and json.loads(progress.read_text() or "{}")["step"] >= 25, timeout=300
    )
    assert not (run_dir / "live.json").exists()  # nobody watched yet: rank 0 wrote nothing for jobs.top
    top = cli("jobs.top", str(run_dir), "--once")
    assert top.returncode == 0, top.stderr
    head, header, *rows = top.stdout.splitlines()
    assert head.startswith(f"job {job_id_of(run_dir)}: RUNNING  attempt 1  elapsed ") and "steps/s" in head, head
    assert [r.split()[:2] for r in rows] == [["0", "node1"], ["1", "node2"]], top.stdout
    assert {r.split()[2] for r in rows} <= {"starting", "training"}, top.stdout  # each as of its beat (2 s apart)
    assert all(int(r.split()[3]) > 0 for r in rows), top.stdout  # a step each, as of its last beat (2 s apart)
    log = run_dir / "logs" / f"{job_id_of(run_dir)}_1_log.out"
    os.kill(int(re.findall(r"^dist: .* pid=(\d+)", log.read_text(), re.M)[-1]), signal.SIGSTOP)
    # Its heartbeat stale (2 x hang.beat_s) before its hang is named (hang.floor_s, 10 s): jobs.top marks it.
    rank_1 = lambda: cli("jobs.top", str(run_dir), "--once").stdout.splitlines()[3].split()[:3]  # noqa: E731
    poll_cluster("jobs.top to show rank 1 hung", lambda: rank_1() == ["1", "node2", "hung"], timeout=30)
    poll_cluster("the restart in the allocation", lambda: len(attempts(run_dir)) == 2, timeout=120)
    # summary.json as the run goes: the second attempt's start wrote the ledger so far, the run not finished.
    live = lambda: json.loads((run_dir / "summary.json").read_text())  # noqa: E731
    poll_cluster("summary.json's ledger of the restart", lambda: live()["in_job_restarts"] == 1, timeout=30)
    assert live()["finished"] is False and not RunDir(run_dir).finished(), live()
    assert live()["ledger"]["hung"] >= 5 and live()["ledger"]["restarting"] > 0, live()
    assert "COMPLETED" not in cli("jobs.status", str(run_dir)).stdout
    preempt(run_dir, 1)
    poll_cluster("the summary", lambda: RunDir(run_dir).finished(), timeout=600)
    ended = time.time()
    parts = json.loads((run_dir / "summary.json").read_text())["ledger"]
    assert set(parts) == {*ledger.PARTS, "wall", "goodput", "gpu_hours"}
    assert sum(parts[k] for k in ledger.PARTS) == pytest.approx(parts["wall"], rel=0.02)
    assert ended - submitted - 10 <= parts["wall"] <= ended - submitted, (parts, ended - submitted)
    reasons = [a["stop"]["reason"] for a in attempts(run_dir)]
    assert reasons == ["failure", "preempted", "finished"], reasons
    assert parts["hung"] >= 5 and parts["restarting"] > 0 and parts["recomputed"] > 0, parts  # the hang, srun again
    assert min(parts["queued"], parts["starting"], parts["checkpointing"], parts["training"]) > 0, parts
    assert parts["gpu_hours"] == pytest.approx(2 * (parts["wall"] - parts["queued"]) / 3600, abs=1e-3)
    assert f"goodput: {parts['goodput']:.0%} of " in cli("jobs.status", str(run_dir)).stdout
    listed = cli("jobs.list", "--root", str(tmp_path / "runs")).stdout
    assert re.search(rf"^\S+\s+profile\s+\d+\s+\w+\s+240\s+{parts['goodput']:.0%}\s", listed, re.M), listed
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert {f"goodput/{k}" for k in parts} <= set(events.Tags()["scalars"])
    assert events.Scalars("goodput/goodput")[-1].value == pytest.approx(parts["goodput"], abs=1e-4)


def test_top_saves_dumps_stacks_and_requeues_a_job_on_the_cluster(tmp_path: Path, sample_root: Path) -> None:
    """jobs.top's keys as flags on a 2-node job: a checkpoint between the run's own (training goes on), every
    rank's stacks read by py-spy on its node into the run folder (a step beside the job's), and the requeue signal to the batch
    shell as the time limit sends it: saved, requeued (Slurm's state and attempts.json say so), resumed there."""
    result = submit("--profile", str(mini_profile(tmp_path)), f"data.root={sample_root / 'pix2pix'}", *ARGS)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result)
    job = job_id_of(run_dir)
    poll_cluster("attempt 0 to train", lambda: training(run_dir, 0), timeout=120)
    assert "at its next step boundary" in cli("jobs.top", str(run_dir), "--save-now").stdout
    saved = lambda: [p for p in (run_dir / "checkpoints").glob("step_*.pt") if int(p.stem[5:]) % 100]  # noqa: E731
    poll_cluster("the checkpoint asked for", saved, timeout=60)
    own = tmp_path / "my_project"  # jobs.top from a user's folder with a trainer.py of its own (srun runs there)
    own.mkdir()
    (own / "trainer.py").write_text("raise SystemExit('the user trainer.py was imported')\n")
    dumped = subprocess.run(
        [sys.executable, "-m", "jobs.top", str(run_dir), "--dump-stacks"], cwd=own, capture_output=True, text=True
    ).stdout
    assert "ranks 0, 1 by py-spy in " in dumped, dumped  # a step on each node, py-spy beside the job's python
    (folder,) = (run_dir / "stacks").iterdir()
    assert all("train (trainer/train.py" in (folder / f"rank_{r}.txt").read_text() for r in (0, 1))
    assert "it saves and is requeued" in cli("jobs.top", str(run_dir), "--requeue-now").stdout
    again = cli("jobs.top", str(run_dir), "--requeue-now")  # at once: refused, one request is enough
    assert again.returncode == 2 and "has not started its next attempt yet" in again.stderr, again.stderr
    release_when_requeued(job)
    data = summary(run_dir)
    first, second = attempts(run_dir)
    assert (first["stop"]["reason"], second["resumed_step"]) == ("preempted", first["stop"]["step"]), attempts(run_dir)
    assert data["final_step"] == 240 and data["preemptions"] == 1


# The dropout task with 100 MB of frozen weights: a save then takes long enough (serialising, writing, fsync)
# for a test to see its temporary file and kill a rank while it is there. Frozen, so DDP does not send them
# each step; they are in every checkpoint.
HEAVY = (
    AUGMENTED
    + """

class Heavy(Augmented):
    def model(self, config, dataset):
        model = super().model(config, dataset)
        model.table = nn.Parameter(torch.zeros(25_000_000), requires_grad=False)
        return model
"""
)


def user_task_on_2_nodes_x_2_tasks(tmp_path: Path, text: str, name: str) -> tuple[Path, Path]:
    """The user task `name` (its file's `text`) forked uninterrupted over 4 ranks, and submitted on 2 nodes x 2
    tasks with one restart in the allocation: the reference run's folder and the job's run folder."""
    (tmp_path / "user_task.py").write_text(text)
    task = [f"task={tmp_path / 'user_task.py'}:{name}", *EXACT[1:], "steps=60", "data.num_workers=1"]
    task += ["checkpoint.every=10", "log.every=5", "log.image_every=0"]
    reference = forked.train(tmp_path / "reference", *task, world=4).run_dir
    profile = mini_profile(tmp_path, "restarts_in_job: 1\n")
    result = submit("--profile", str(profile), "--nodes", "2", "--gpus-per-node", "2", *task)
    assert result.returncode == 0, result.stdout + result.stderr
    return reference, run_dir_of(result)


def test_a_rank_killed_while_a_checkpoint_is_written_restarts_in_its_allocation_to_the_same_weights(
    tmp_path: Path,
) -> None:
    """Rank 3 killed while rank 0 writes checkpoint 20 or later (its temporary file seen in the folder): srun
    ends the step, rank 0 mid-write with it; the tasks start again in the allocation, resume from the newest
    whole checkpoint, leave no temporary file, and end on the uninterrupted run's weights over 4 ranks."""
    reference, run_dir = user_task_on_2_nodes_x_2_tasks(tmp_path, HEAVY, "Heavy")
    folder, log = run_dir / "checkpoints", run_dir / "logs" / f"{job_id_of(run_dir)}_3_log.out"
    poll_cluster("checkpoint 10", (folder / "step_00000010.pt.sha256").exists, timeout=300)

    def writing() -> list[str]:  # polled every 2 ms: a save of 100 MB takes far longer
        return [p.name for p in folder.glob(".step_*.pt.*.tmp") if int(p.name[6:14]) >= 20]

    being_written = poll("a checkpoint being written", writing, timeout=120, every=0.002)
    os.kill(int(re.findall(r"^dist: .* pid=(\d+)", log.read_text(), re.M)[-1]), signal.SIGKILL)
    data = summary(run_dir, timeout=600)
    first, second = attempts(run_dir)
    assert first["stop"]["reason"] == "failure" and second["in_job_restart"] == 1, (first, second, being_written)
    assert second["resumed_step"] >= 10, second
    assert not list(folder.glob("*.tmp")), list(folder.iterdir())  # the torn write was cleared at the restart
    assert data["weights_sha256"] == json.loads((reference / "summary.json").read_text())["weights_sha256"]


def test_a_dropout_user_task_killed_restarts_in_its_allocation_to_the_same_weights_on_2_nodes_x_2_tasks(
    tmp_path: Path,
) -> None:
    """A user's own task as they write them (Dropout, random augmentations from torch, numpy and random in its
    loader worker): rank 3 killed past a checkpoint, the tasks start again in the allocation, and the run ends
    on the weights of the same run forked uninterrupted over 4 ranks."""
    reference, run_dir = user_task_on_2_nodes_x_2_tasks(tmp_path, AUGMENTED, "Augmented")
    poll_cluster("checkpoint 20", (run_dir / "checkpoints" / "step_00000020.pt.sha256").exists, timeout=300)
    log = run_dir / "logs" / f"{job_id_of(run_dir)}_3_log.out"
    os.kill(int(re.findall(r"^dist: .* pid=(\d+)", log.read_text(), re.M)[-1]), signal.SIGKILL)
    data = summary(run_dir, timeout=600)
    first, second = attempts(run_dir)
    assert first["stop"]["reason"] == "failure" and second["in_job_restart"] == 1, (first, second)
    assert second["resumed_step"] >= 20, second  # from a checkpoint, mid-run
    assert data["weights_sha256"] == json.loads((reference / "summary.json").read_text())["weights_sha256"]


def test_requeue_on_failure_resumes_from_the_last_checkpoint(
    reference_hash: str, tmp_path: Path, sample_root: Path
) -> None:
    profile = mini_profile(tmp_path, "requeue_on_failure: 1\n")
    args = [a if a != "checkpoint.every=100" else "checkpoint.every=20" for a in ARGS]
    # The ranks meet through a file in the run directory (dist.init_method=file), a new one for each attempt.
    args.append("dist.init_method=file")
    result = submit("--profile", str(profile), f"data.root={sample_root / 'pix2pix'}", *args)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result)
    poll_cluster("a checkpoint", lambda: list((run_dir / "checkpoints").glob("step_*.pt.sha256")), timeout=120)
    kill_rank(run_dir, 1)
    release_when_requeued(job_id_of(run_dir))
    data = summary(run_dir)
    assert (data["failures"], data["restarts"]) == (1, 1)
    assert data["weights_sha256"] == reference_hash
    # Not asserted: that this run names no straggler. Two one-thread ranks on a shared two-core machine are not
    # even (CI saw rank 1 at 1.36x the median for three intervals). An even run naming none, and a short slow
    # spell naming none: tests/test_stragglers.py; a rank slowed on purpose named: tests/slurm/test_hangs.py.
    # The last attempt's outcome: not the first attempt's killed rank (srun's lines stay in rank 0's log).
    poll_cluster("COMPLETED", lambda: ": COMPLETED" in cli("jobs.status", str(run_dir)).stdout, timeout=60)
    status = cli("jobs.status", str(run_dir)).stdout
    assert "error" not in status and "failed task" not in status, status


def test_truncated_newest_checkpoint_falls_back_to_the_one_before(
    reference_hash: str, tmp_path: Path, sample_root: Path
) -> None:
    args = [a if a != "checkpoint.every=100" else "checkpoint.every=20" for a in ARGS]
    result = submit("--profile", str(mini_profile(tmp_path)), f"data.root={sample_root / 'pix2pix'}", *args)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result)
    poll_cluster(
        "two checkpoints", lambda: len(list((run_dir / "checkpoints").glob("step_*.pt.sha256"))) >= 2, timeout=120
    )
    assert cli("jobs.cancel", str(run_dir)).returncode == 0
    poll_cluster("the job to end", lambda: squeue_state(job_id_of(run_dir)) == "", timeout=60)
    newest, previous = (
        sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1],
        sorted((run_dir / "checkpoints").glob("step_*.pt"))[-2],
    )
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    resumed = submit("--profile", str(mini_profile(tmp_path)), "--resume", str(run_dir), "--wait")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"warning: skipping checkpoint {newest}" in resumed.stdout
    assert f"resumed from {previous}" in resumed.stdout
    assert summary(run_dir)["weights_sha256"] == reference_hash


def test_resume_goes_on_on_the_cluster_in_the_shape_the_run_ran(tmp_path: Path, sample_root: Path) -> None:
    """Submitted to 2 nodes of the test cluster; --resume alone runs there again, on 2 nodes (not on this machine
    with the local profile); a flag given with it changes that one field; --dry-run prints the script."""
    args = ["--nodes", "2", "--gpus-per-node", "1", f"data.root={sample_root / 'pix2pix'}", "log.image_every=0"]
    result = submit("--profile", str(mini_profile(tmp_path)), "--wait", *args, "steps=4", "log.every=2")
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    dry = submit("--resume", str(run_dir), "--dry-run", "steps=8")
    assert dry.returncode == 0, dry.stderr
    assert "#SBATCH --nodes=2\n" in dry.stdout and "#SBATCH --partition=normal\n" in dry.stdout, dry.stdout
    assert f"#SBATCH --chdir={run_dir}/code\n" in dry.stdout
    one = submit("--resume", str(run_dir), "--dry-run", "--time", "7", "steps=8")
    assert "#SBATCH --time=7\n" in one.stdout and "#SBATCH --nodes=2\n" in one.stdout, one.stdout
    fewer = submit("--resume", str(run_dir), "--dry-run", "--nodes", "1", "steps=8")  # two micro-batches a step
    assert fewer.returncode == 0 and "#SBATCH --nodes=1\n" in fewer.stdout, fewer.stderr
    three = submit("--resume", str(run_dir), "--dry-run", "--nodes", "3", "steps=8")  # 3 cannot share 2 x 4
    assert three.returncode == 2 and "resume on one of 1, 2, 4, 8 processes" in three.stderr, three.stderr
    resumed = submit("--resume", str(run_dir), "--wait", "steps=8")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    record = json.loads((run_dir / "job.json").read_text())
    assert record["executor"] == "slurm" and len(record["history"]) == 1
    assert json.loads((run_dir / "summary.json").read_text())["world_size"] == 2
    assert "nodes: node[1-2]" in cli("jobs.status", str(run_dir)).stdout


def test_a_lost_node_is_recorded_as_a_node_failure(tmp_path: Path, sample_root: Path) -> None:
    """node2 goes down under a 2-node job (as a dead node is marked): Slurm requeues the job; the next attempt
    records the lost one as a failure with Slurm's NODE_FAIL, and the run completes."""
    args = [
        "--nodes",
        "2",
        "--gpus-per-node",
        "1",
        "steps=120",
        "log.every=5",
        "checkpoint.every=20",
        "log.image_every=0",
    ]
    # requeue_on_failure: on this one-host cluster the lost node's old step may end under the requeued attempt
    # (the same step id) and kill it; a site's profile would requeue that failure too (seen once in CI).
    profile = mini_profile(tmp_path, "requeue_on_failure: 1\n")
    result = submit("--profile", str(profile), f"data.root={sample_root / 'pix2pix'}", *args)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result)
    poll_cluster("training", lambda: training(run_dir, 0), timeout=120)
    subprocess.run(["scontrol", "update", "nodename=node2", "state=down", "reason=test"], check=True)
    job = job_id_of(run_dir)

    seen: list[str] = []  # jobs.status while the job waits to run again

    def done() -> bool:
        # node2 back (resume it while Slurm still holds it down), each requeue released: Slurm may requeue the
        # job more than once as node2 comes back.
        if "down" in " ".join(cluster.node_states()):
            subprocess.run(["scontrol", "update", "nodename=node2", "state=resume"], capture_output=True)
        elif squeue_state(job) in cluster.WAITING:
            seen.append(cli("jobs.status", str(run_dir)).stdout)
            release_when_requeued(job, seen_pending=True)
        finished = RunDir(run_dir).finished()
        assert finished or squeue_state(job) != "" or RunDir(run_dir).finished(), attempts(run_dir)
        return finished

    poll_cluster("the run to finish after node2 came back", done, timeout=300)
    first = attempts(run_dir)[0]["stop"]
    assert (first["reason"], first["slurm_state"]) == ("failure", "NODE_FAIL"), first
    # Why it went back to the queue, and which node: Slurm's accounting of the attempt, sinfo's reason.
    assert any("the last attempt ended NODE_FAIL on node[1-2]" in status for status in seen), seen


def test_a_job_ended_by_a_lost_node_says_so(tmp_path: Path, sample_root: Path) -> None:
    """The same loss in a job Slurm may not requeue: it ends NODE_FAIL, and jobs.status says a node failed
    rather than blaming a rank its peers only saw go."""
    args = ["--nodes", "2", "--gpus-per-node", "1", "steps=100000", "log.every=5", "log.image_every=0"]
    result = submit("--profile", str(mini_profile(tmp_path)), f"data.root={sample_root / 'pix2pix'}", *args)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result)
    job = job_id_of(run_dir)
    subprocess.run(["scontrol", "update", f"jobid={job}", "Requeue=0"], check=True)
    poll_cluster("training", lambda: training(run_dir, 0), timeout=120)
    subprocess.run(["scontrol", "update", "nodename=node2", "state=down", "reason=test"], check=True)
    try:
        poll_cluster("the job to end", lambda: squeue_state(job) == "", timeout=60)
    finally:
        subprocess.run(["scontrol", "update", "nodename=node2", "state=resume"], capture_output=True)
    poll_cluster("both nodes back", lambda: cluster.node_states() == ["idle", "idle"], timeout=120)
    status = cli("jobs.status", str(run_dir)).stdout
    assert f"job {job}: NODE_FAIL" in status and "error: a node of the job failed (Slurm: NODE_FAIL" in status, status
    assert "error: rank" not in status, status

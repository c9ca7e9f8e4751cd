"""Local jobs do what jobs.submit, jobs.status and jobs.cancel say: cancel, failures, Ctrl-C, sweeps, the
caller's environment. Real two-process runs (gloo on CPU) where the controller is what is tested."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import ranks as forked
from tests.messages import Golden, refused
from tests.support import (
    HANG,
    LONG,
    NAN,
    ROOT,
    assert_refused,
    cli,
    exit_codes,
    failure,
    job_pid,
    job_state,
    poll,
    process_start,
    ranks,
    run_dir_of,
    run_dirs,
    says_error,
    submit,
    write_profile,
)
from trainer.supervise import relay


def alive(pid: int, start: int) -> bool:
    return process_start(pid) == start  # a zombie, or another process with the PID, is not it


def started(run_dir: Path, tasks: int = 2) -> dict[int, tuple[int, int]]:
    """Wait until the run trains (progress.json), then its tasks."""
    poll("the run to train", lambda: (run_dir / "progress.json").exists())
    return poll("its tasks", lambda: len(found := ranks(job_pid(run_dir))) == tasks and found)


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    """Whatever a failing test leaves running under tmp_path (submitter, controller, tasks) is killed."""
    yield
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if f"{tmp_path}/".encode() in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            pass


def test_cancel_stops_every_rank_and_status_says_cancelled(local_profile: Path, sample_root: Path) -> None:
    result = submit("--profile", str(local_profile), f"data.root={sample_root / 'pix2pix'}", *LONG)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result.stdout)
    tasks = started(run_dir)
    controller = (job_pid(run_dir), process_start(job_pid(run_dir)))

    cancelled = cli("jobs.cancel", str(run_dir))
    assert cancelled.returncode == 0 and cancelled.stdout == f"cancelled job {controller[0]}\n", cancelled.stderr
    poll("every process to end", lambda: not any(alive(*p) for p in [controller, *tasks.values()]), timeout=15)
    assert exit_codes(run_dir)["cancelled"] is True and job_state(run_dir) == "CANCELLED"


def test_a_reused_pid_is_not_the_job(golden: Golden, tmp_path: Path) -> None:
    """job.json names a PID that another process has taken since: neither status nor cancel may act on it."""
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        log = run_dir / "logs" / f"{stranger.pid}_0_log.out"
        job = {"job_id": str(stranger.pid), "executor": "local", "log": str(log), "tasks": 2}
        (run_dir / "job.json").write_text(json.dumps(job))
        assert job_state(run_dir) == "FAILED"
        refused(cli("jobs.cancel", str(run_dir)), golden, str(stranger.pid), pid=str(stranger.pid))
        assert stranger.poll() is None, "cancel killed a process that is not the job's"
    finally:
        stranger.kill()
        stranger.wait()


def test_a_failed_rank_ends_the_local_job(local_profile: Path, sample_root: Path, tmp_path: Path) -> None:
    """Rank 1 is stuck (stopped), rank 0 dies: like srun --kill-on-bad-exit, the whole job ends at once."""
    out = tmp_path / "submit.out"
    with out.open("w") as f:
        args = ["--profile", str(local_profile), "--wait", f"data.root={sample_root / 'pix2pix'}", *LONG]
        proc = subprocess.Popen([sys.executable, "-m", "jobs.submit", *args], cwd=ROOT, stdout=f, stderr=f)
    run_dir = poll("the run directory", lambda: (found := run_dirs(tmp_path / "runs")) and found[0])
    tasks = started(run_dir)
    os.kill(tasks[1][0], signal.SIGSTOP)
    os.kill(tasks[0][0], signal.SIGKILL)
    assert proc.wait(timeout=60) == 1, out.read_text()
    failed = failure(run_dir)
    assert (failed["rank"], failed["host"], failed["killed"]) == (0, socket.gethostname(), True), failed
    assert failed["message"] == "killed by signal 9 (SIGKILL)", failed
    assert says_error(out.read_text(), failed["line"])
    assert not any(alive(*p) for p in tasks.values())
    assert job_state(run_dir) == "FAILED"
    assert says_error(cli("jobs.status", str(run_dir)).stdout, failed["line"])


def test_ctrl_c_stops_waiting_and_leaves_the_job_running(
    local_profile: Path, sample_root: Path, tmp_path: Path
) -> None:
    out, err = tmp_path / "submit.out", tmp_path / "submit.err"
    with out.open("w") as o, err.open("w") as e:
        args = ["--profile", str(local_profile), "--wait", f"data.root={sample_root / 'pix2pix'}", *LONG]
        # A session of its own, signalled as a whole: what a Ctrl-C in a terminal does. SIGINT's default
        # restored: a shell without job control starts a background command (`(cmd &)`) with SIGINT ignored,
        # Python then keeps it ignored, and this test failed twice so. faulthandler: should the submitter
        # not end, SIGABRT makes it print where it is.
        cmd = [sys.executable, "-X", "faulthandler", "-m", "jobs.submit", *args]
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=o,
            stderr=e,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    run_dir = poll("the run directory", lambda: (found := run_dirs(tmp_path / "runs")) and found[0])
    tasks = started(run_dir)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=30)
        pytest.fail(f"the submitter did not end within 30 s of SIGINT; its threads:\n{err.read_text()}")
    assert code == 130, err.read_text()
    assert err.read_text() == (
        f"interrupted: the job keeps running (python -m jobs.status {run_dir}); "
        f"stop it with python -m jobs.cancel {run_dir}\n"
    )
    assert all(alive(*p) for p in tasks.values())
    assert job_state(run_dir) == "RUNNING"
    assert cli("jobs.cancel", str(run_dir)).returncode == 0


def test_status_and_cancel_take_a_sweep_folder(local_profile: Path, sample_root: Path) -> None:
    data = f"data.root={sample_root / 'pix2pix'}"
    result = submit("--profile", str(local_profile), "--gpus-per-node", "1", "--sweep", "seed=0,1", data, *LONG)
    assert result.returncode == 0, result.stderr
    sweep = run_dir_of(result.stdout)
    points = [sweep / "0-0", sweep / "1-1"]
    for point in points:
        started(point, tasks=1)
    status = cli("jobs.status", str(sweep))
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[0] == f"sweep {sweep}: 2 points; RUNNING 2"
    assert [line.split()[:3] for line in status.stdout.splitlines()[2:4]] == [  # then the goodput total
        [p.name, str(job_pid(p)), "RUNNING"] for p in points
    ]
    cancelled = cli("jobs.cancel", str(sweep))
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.splitlines() == [f"{p.name}: cancelled job {job_pid(p)}" for p in points]
    status = cli("jobs.status", str(sweep)).stdout
    assert [line.split()[:3] for line in status.splitlines()[2:4]] == [
        [p.name, str(job_pid(p)), "CANCELLED"] for p in points
    ]


def test_the_callers_job_variables_do_not_reach_local_tasks(local_profile: Path, sample_root: Path) -> None:
    """Submitting from inside a Slurm allocation or a torchrun worker: the local job is still one job of 2."""
    caller = {
        "SLURM_JOB_ID": "999",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS": "4",
        "SLURM_JOB_NODELIST": "localhost",
        "RANK": "0",
        "WORLD_SIZE": "4",
        "TORCHELASTIC_RUN_ID": "999",
        # ...and an srun step's and torchrun's others (what test_local_run_inside_another_launcher leaked)
        "SLURM_STEP_ID": "0",
        "SLURM_CPUS_PER_TASK": "1",
        "LOCAL_RANK": "0",
        "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
    }
    args = ["--profile", str(local_profile), "--wait", f"data.root={sample_root / 'pix2pix'}", "steps=2"]
    result = cli("jobs.submit", *args, "log.every=1", "dist.timeout_s=30", env=caller)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((run_dir_of(result.stdout) / "summary.json").read_text())["world_size"] == 2
    assert not (run_dir_of(result.stdout) / "errors").exists()


def run_controller(tmp_path: Path, signal_name: str) -> subprocess.CompletedProcess[str]:
    """The local controller itself, on tasks that report the signal they get: a 60 s limit, the signal after 1 s."""
    task = tmp_path / "task.py"
    task.write_text(
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as submitit's task wrapper does\n"
        "def got(signum, frame):\n"
        "    open(os.environ['SUBMITIT_LOCAL_GLOBALID'], 'w').write(signal.Signals(signum).name)\n"
        "    sys.exit(0)\n"
        "for name in ('SIGUSR1', 'SIGUSR2'):\n"
        "    signal.signal(getattr(signal, name), got)\n"
        "time.sleep(120)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SUBMITIT_LOCAL_NTASKS": "2",
        "SUBMITIT_LOCAL_COMMAND": f"{sys.executable} {task}",
        "SUBMITIT_LOCAL_TIMEOUT_S": "60",
        "SUBMITIT_LOCAL_SIGNAL_DELAY_S": "59",
        "SUBMITIT_STDERR_TO_STDOUT": "",
        "SUBMITIT_LOCAL_WITH_SHELL": "",
        "SUBMITIT_PREEMPT_SIGNAL": signal_name,
    }
    cmd = [sys.executable, "-m", "jobs.local_controller", str(tmp_path / "logs")]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("signal_name", ["USR1", "USR2"])
def test_the_local_controller_sends_the_profiles_signal(tmp_path: Path, signal_name: str) -> None:
    result = run_controller(tmp_path, signal_name)
    assert result.returncode == 0, result.stderr
    assert [(tmp_path / str(rank)).read_text() for rank in (0, 1)] == [f"SIG{signal_name}"] * 2


REQUEUED_TASK = """import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as submitit's task wrapper does
rank = os.environ["SUBMITIT_LOCAL_GLOBALID"]
with open(f"starts_{rank}", "a") as f:
    f.write("start\\n")
first = open(f"starts_{rank}").read().count("start") == 1
def save(signum, frame):
    open(f"got_{rank}", "w").close()
    time.sleep(1.0)  # saving
    sys.exit(144)  # saved: requeue me (submitit's local code)
time.sleep(1.0)  # a task's start-up: no handler yet (the trainer imports before it installs its own)
signal.signal(signal.SIGUSR2, save)
open(f"ready_{rank}", "w").close()
time.sleep(60 if first else 0.5)
"""


@pytest.mark.parametrize("when", ["before the handlers", "twice"])
def test_a_requeue_request_reaches_only_tasks_that_take_it(tmp_path: Path, when: str) -> None:
    """The requeue signal sent to the local controller (jobs.top --requeue-now) while its tasks start, or twice
    in a row: each task gets it once its handler is in place, once, and the requeued start is not killed by a
    second request (both ranks died of SIGUSR2 once)."""
    (tmp_path / "task.py").write_text(REQUEUED_TASK)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SUBMITIT_LOCAL_NTASKS": "2", "SUBMITIT_PREEMPT_SIGNAL": "USR2"}
    env |= {"SUBMITIT_LOCAL_COMMAND": f"{sys.executable} task.py", "SUBMITIT_LOCAL_TIMEOUT_S": "120"}
    env |= {"SUBMITIT_LOCAL_SIGNAL_DELAY_S": "1", "SUBMITIT_STDERR_TO_STDOUT": "", "SUBMITIT_LOCAL_WITH_SHELL": ""}
    cmd = [sys.executable, "-m", "jobs.local_controller", str(tmp_path / "logs")]
    controller = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        poll("the controller's handler", lambda: relay.catches(controller.pid, signal.SIGUSR2), 30, every=0.01)
        if when == "twice":
            poll("the tasks' handlers", lambda: (tmp_path / "ready_0").exists() and (tmp_path / "ready_1").exists())
        os.kill(controller.pid, signal.SIGUSR2)
        if when == "twice":  # again while the tasks save
            poll("the tasks saving", lambda: (tmp_path / "got_0").exists() and (tmp_path / "got_1").exists())
            os.kill(controller.pid, signal.SIGUSR2)
        assert controller.wait(timeout=60) == 0, controller.communicate()[0]
    finally:
        controller.kill()
    codes = json.loads((tmp_path / "logs" / f"{controller.pid}_exit_codes.json").read_text())["codes"]
    assert codes == [0, 0], codes  # the requeued start ran to its end
    assert [(tmp_path / f"starts_{r}").read_text().count("start") for r in (0, 1)] == [2, 2]


def test_a_time_limit_within_the_signal_delay_is_refused(golden: Golden, local_profile: Path, tmp_path: Path) -> None:
    result = submit("--profile", str(local_profile), "--time", "1")  # the signal would come 120 s before it
    assert_refused(result, golden, "1 min", tmp_path / "runs")  # its golden line gives the fix: --time 3 or more


def test_a_slurm_profile_without_slurm_is_one_line(golden: Golden, tmp_path: Path, sample_root: Path) -> None:
    profile = write_profile(tmp_path, f"executor: slurm\nrun_root: {tmp_path / 'runs'}\n")
    no_slurm = tmp_path / "bin"
    no_slurm.mkdir()
    (no_slurm / "python").symlink_to(sys.executable)
    result = cli(
        "jobs.submit", "--profile", str(profile), f"data.root={sample_root / 'pix2pix'}", env={"PATH": str(no_slurm)}
    )
    assert_refused(result, golden, "sbatch", tmp_path / "runs")


def test_a_local_job_id_works_with_status_and_cancel_and_never_reaches_slurm(
    local_profile: Path, sample_root: Path, tmp_path: Path
) -> None:
    """The id printed for a local job (its controller's PID): status and cancel act on it here, with Slurm's
    commands out of reach (a PATH without them: any call to Slurm would fail)."""
    result = submit("--profile", str(local_profile), f"data.root={sample_root / 'pix2pix'}", *LONG)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result.stdout)
    tasks = started(run_dir)
    job = str(job_pid(run_dir))
    (tmp_path / "bin").mkdir()
    for name in ("scontrol", "scancel", "sacct", "squeue"):  # a call to Slurm would fail loudly
        (tmp_path / "bin" / name).write_text("#!/bin/sh\necho 'Slurm was asked' >&2\nexit 1\n")
        (tmp_path / "bin" / name).chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}

    def run(module: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", module, job], env=env, capture_output=True, text=True, timeout=60)

    status = run("jobs.status")
    assert status.returncode == 0 and status.stdout.splitlines()[0] == f"job {job}: RUNNING", status.stdout
    cancelled = run("jobs.cancel")
    assert cancelled.returncode == 0 and cancelled.stdout == f"cancelled job {job}\n", cancelled.stderr
    poll("every rank to end", lambda: not any(alive(*p) for p in tasks.values()), timeout=15)
    assert job_state(run_dir) == "CANCELLED"


def test_cancel_ends_the_processes_a_script_started(tmp_path: Path) -> None:
    """A script that starts a child of its own (a data server, a shell pipeline), or a daemon whose parent is
    gone: cancel ends it too, as a Slurm step's end does; status says CANCELLED."""
    (tmp_path / "spawn.py").write_text(
        "import os, subprocess, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        "open(os.path.join(os.environ['RUN_DIR'], f\"child{os.environ['RANK']}\"), 'w').write(str(child.pid))\n"
        "daemon = os.path.join(os.environ['RUN_DIR'], f\"daemon{os.environ['RANK']}\")\n"
        "subprocess.run(['bash', '-c', f'setsid sleep 300 & echo $! > {daemon}.tmp; mv {daemon}.tmp {daemon}'])\n"
        "time.sleep(300)\n"
    )
    profile = write_profile(tmp_path, f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'runs'}\n")
    result = submit("--profile", str(profile), "--", sys.executable, "spawn.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result.stdout)
    files = [run_dir / "child0", run_dir / "child1", run_dir / "daemon0", run_dir / "daemon1"]  # a daemon: orphaned
    poll("both children", lambda: all(f.exists() and f.read_text() for f in files))
    children = [(int(pid), process_start(int(pid))) for pid in (f.read_text() for f in files)]
    assert cli("jobs.cancel", str(run_dir)).returncode == 0
    poll("the scripts' children to end", lambda: not any(alive(*c) for c in children), timeout=15)
    assert exit_codes(run_dir)["cancelled"] is True and job_state(run_dir) == "CANCELLED"
    # The attempt is closed as cancelled, and summary.json says the run ended so, not as one still going.
    summary = poll(
        "the ended summary", lambda: "ended" in (s := json.loads((run_dir / "summary.json").read_text())) and s
    )
    stop = json.loads((run_dir / "attempts.json").read_text())[-1]["stop"]
    assert stop["reason"] == "cancelled" and stop["final"] is True, stop
    assert summary["finished"] is False and summary["ended"] == "cancelled" and summary["cancelled"] == 1, summary
    assert summary["failures"] == 0 and summary["ledger"]["training"] > 0, summary


def test_ranks_die_with_their_controller_and_a_live_rank_blocks_resume(
    golden: Golden, local_profile: Path, sample_root: Path, tmp_path: Path
) -> None:
    """The local controller killed alone (SIGKILL): its ranks end too, instead of training on where no command
    reaches them. And while any process of the run still lives, --resume refuses: one writer per run."""
    result = submit("--profile", str(local_profile), f"data.root={sample_root / 'pix2pix'}", *LONG)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result.stdout)
    tasks = started(run_dir)
    os.kill(job_pid(run_dir), signal.SIGKILL)
    poll("the ranks to end with their controller", lambda: not any(alive(*p) for p in tasks.values()), timeout=15)
    straggler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(run_dir / "logs")])
    try:
        blocked = submit("--profile", str(local_profile), "--resume", str(run_dir))
        refused(blocked, golden, f"(pid {straggler.pid})", pid=str(straggler.pid), run=run_dir.name)
    finally:
        straggler.kill()
        straggler.wait()
    resumed = submit("--profile", str(local_profile), "--resume", str(run_dir), "--wait", "steps=20")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr


def test_a_local_sweep_runs_as_many_points_at_once_as_the_machine_allows(tmp_path: Path) -> None:
    """3 points x 2 processes on this machine's CPUs: the points wait for a free share, as Slurm queues array
    tasks, instead of starting 6 processes at once; --array-parallelism 1 runs them one by one."""
    (tmp_path / "point.py").write_text(
        "import os, sys, time\nstarted = time.time()\ntime.sleep(1.5)\n"
        "open(os.path.join(os.environ['RUN_DIR'], f\"span{os.environ['RANK']}\"), 'w').write(f'{started} {time.time()}')\n"
    )
    profile = write_profile(tmp_path, f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'runs'}\n")
    args = ["--profile", str(profile), "--wait", "--sweep", "x=1,2,3", "--array-parallelism", "1"]
    result = submit(*args, "--", sys.executable, "point.py", "{x}", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    spans = sorted(tuple(map(float, f.read_text().split())) for f in (tmp_path / "runs").glob("*/*/span0"))
    assert len(spans) == 3
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)), spans  # one at a time


def submit_long(
    local_profile: Path, sample_root: Path, tmp_path: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], Path]:
    """A long local run submitted with --wait in the background, its output in tmp_path/submit.out."""
    out = tmp_path / "submit.out"
    with out.open("w") as f:
        args = ["--profile", str(local_profile), "--wait", f"data.root={sample_root / 'pix2pix'}", *LONG, *extra]
        proc = subprocess.Popen([sys.executable, "-m", "jobs.submit", *args], cwd=ROOT, stdout=f, stderr=f)
    return proc, out


@pytest.mark.parametrize("rank", [1, 0])
def test_a_stopped_rank_is_named_by_its_peers_watchdog_within_the_budget(
    local_profile: Path, sample_root: Path, tmp_path: Path, rank: int
) -> None:
    """Rank 1 is stopped (SIGSTOP, as a dead NIC or a frozen node leaves it): rank 0 waits in the all-reduce, and
    within its budget its watchdog names rank 1 from the heartbeats (rank 1's stopped), writes every thread's
    stack into its log and exits; the controller stops the rest. Long before gloo's own timeout (300 s).
    Rank 0 stopped: the job's store, which it holds, does not answer rank 1's watchdog, which names it."""
    other = 1 - rank
    proc, out = submit_long(local_profile, sample_root, tmp_path, *HANG)
    run_dir = poll("the run directory", lambda: (found := run_dirs(tmp_path / "runs")) and found[0])
    tasks = started(run_dir)
    progress = run_dir / "progress.json"  # rank 0's; heartbeats go to the job's store, not to files
    poll("the ranks training", lambda: progress.exists() and json.loads(progress.read_text() or "{}")["step"] >= 2)
    stopped = time.monotonic()
    os.kill(tasks[rank][0], signal.SIGSTOP)
    assert proc.wait(timeout=90) == 1, out.read_text()
    assert time.monotonic() - stopped < 15 + 15
    line = (run_dir / "error.txt").read_text()
    if rank == 1:
        assert line.startswith(f"rank 1 on {socket.gethostname()}: hung: its heartbeat stopped "), line
        assert "(stopped or frozen); seen by rank 0 after " in line
    else:
        assert line.startswith(
            f"rank 0 on {socket.gethostname()}: hung: the job's store on rank 0 does not answer at step "
        )
        assert "(rank 0 stopped or frozen, or its node gone); seen by rank 1 after " in line
    log = "".join(p.read_text() for p in (run_dir / "logs").glob(f"*_{other}_log.*"))  # stderr holds the stacks
    assert f"hang: rank {other} made no progress for" in log and 'File "' in log and "Thread 0x" in log
    assert not any(alive(*p) for p in tasks.values())
    assert line.strip() in cli("jobs.status", str(run_dir)).stdout


def test_a_stopped_rank_is_named_when_torchs_timeout_comes_before_the_budget(
    local_profile: Path, sample_root: Path, tmp_path: Path
) -> None:
    """dist.timeout_s=20, below the hang budget (hang.floor_s=120 by default): gloo's timeout comes first on
    rank 0, which names rank 1 from its heartbeat, not its own timeout."""
    proc, out = submit_long(local_profile, sample_root, tmp_path, "dist.timeout_s=20")
    run_dir = poll("the run directory", lambda: (found := run_dirs(tmp_path / "runs")) and found[0])
    tasks = started(run_dir)
    os.kill(tasks[1][0], signal.SIGSTOP)
    stopped = time.monotonic()
    assert proc.wait(timeout=120) == 1, out.read_text()
    assert time.monotonic() - stopped < 20 + 15, out.read_text()
    line = (run_dir / "error.txt").read_text()
    assert line.startswith(f"rank 1 on {socket.gethostname()}: hung: its heartbeat stopped "), line
    assert "seen by rank 0 when torch timed out" in line, line


def test_every_rank_frozen_at_once_is_named_by_the_supervisor(
    local_profile: Path, sample_root: Path, tmp_path: Path
) -> None:
    """Both ranks stopped at once (a stalled filesystem freezes them all): no watchdog thread can name it, each
    froze with its process. The controller sees rank 0's node-local heartbeat go silent past the time its
    peers would have named it, names the hang in error.txt and ends the tasks, long before the time limit."""
    proc, out = submit_long(local_profile, sample_root, tmp_path, *HANG)
    run_dir = poll("the run directory", lambda: (found := run_dirs(tmp_path / "runs")) and found[0])
    tasks = started(run_dir)
    progress = run_dir / "progress.json"
    # Long enough for a heartbeat with the step's own budget, not a first time's (hang.first_s)
    poll("the ranks training", lambda: json.loads(progress.read_text() or '{"step": 0}')["step"] >= 40)
    for pid, _ in tasks.values():
        os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    assert proc.wait(timeout=120) == 1, out.read_text()
    # The peers' budget (10 s, 4 more waiting on a peer), the store's 5 s, the supervisor's margin and look.
    assert time.monotonic() - stopped < 14 + 15 + 5, out.read_text()
    line = (run_dir / "error.txt").read_text()
    assert line.startswith(f"rank 0 on {socket.gethostname()}: hung: every rank stopped: rank 0's heartbeat stopped")
    assert "no rank named a hang" in line and "seen by the supervisor" in line, line
    assert not any(alive(*p) for p in tasks.values())


def test_a_damaged_store_file_is_named_in_one_line_within_the_groups_timeout(
    local_profile: Path, sample_root: Path, tmp_path: Path
) -> None:
    """dist.init_method=file with garbage at the attempt's store file (a stale one, a damaged disk): torch's
    FileStore never times out on it; the watchdog names the file a few seconds past dist.timeout_s."""
    proc, out = submit_long(local_profile, sample_root, tmp_path, "dist.init_method=file", "dist.timeout_s=20")
    run_dir = poll("the run directory", lambda: (found := run_dirs(tmp_path / "runs")) and found[0])
    job = poll("the job", lambda: (run_dir / "job.json").exists() and job_pid(run_dir))
    store = run_dir / "rendezvous" / f"store_{job}_0_0"
    store.parent.mkdir(exist_ok=True)
    store.write_bytes(bytes(range(256)) * 64)
    started_at = time.monotonic()
    assert proc.wait(timeout=120) == 1, out.read_text()
    # The group's timeout and 5 s, the supervisor's margin and look, and torch's import before the join: 26 s
    # alone, 56 s in CI's three workers; a store file nobody names would hold the job to its time limit.
    assert time.monotonic() - started_at < 20 + 5 + 5 + 60, out.read_text()
    line = (run_dir / "error.txt").read_text()
    assert "hung: the process group did not form in " in line and f"its store file {store}" in line, line
    assert line.strip().endswith("may be stale or damaged; delete it"), line


def test_a_rank_frozen_before_the_group_forms_is_named_not_rank_0(
    local_profile: Path, sample_root: Path, tmp_path: Path
) -> None:
    """Rank 1 stopped as it starts: rank 0 waits for it to join the process group until dist.timeout_s, then
    names rank 1 from the heartbeat files (it froze, or never wrote one), not its own timeout."""
    out = tmp_path / "submit.out"
    with out.open("w") as f:
        args = ["--profile", str(local_profile), "--wait", f"data.root={sample_root / 'pix2pix'}", *LONG]
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobs.submit", *args, "dist.timeout_s=20"], cwd=ROOT, stdout=f, stderr=f
        )
    run_dir = poll("the run directory", lambda: (found := run_dirs(tmp_path / "runs")) and found[0])
    job = poll("the job", lambda: (run_dir / "job.json").exists() and job_pid(run_dir))
    tasks = poll("its tasks", lambda: len(found := ranks(job)) == 2 and found)
    os.kill(tasks[1][0], signal.SIGSTOP)
    stopped = time.monotonic()
    assert proc.wait(timeout=120) == 1, out.read_text()
    assert time.monotonic() - stopped < 20 + 15 + 15  # the group's timeout, and torch's import on rank 0
    line = (run_dir / "error.txt").read_text()
    assert line.startswith("rank 1"), line  # on its host, when its heartbeat said where it runs
    assert "hung: it kept the process group from forming: " in line and "seen by rank 0" in line, line
    assert not (run_dir / "progress.json").exists()


STALLS = """
import os
import time

import torch
import torch.distributed as dist
from torch import nn


class Stalling(torch.utils.data.Dataset):
    # Rank 1's loader worker stops delivering after a few batches, once: a deadlocked worker, as a lock held
    # across fork or a stuck read on a network filesystem leaves it.
    def __init__(self, marker):
        self.rank, self.marker = dist.get_rank(), marker

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        if self.rank == 1 and torch.utils.data.get_worker_info() is not None:
            self.served = getattr(self, "served", 0) + 1
            if self.served > 40 and not os.path.exists(self.marker):
                with open(self.marker, "w") as f:
                    f.write(str(os.getpid()))
                time.sleep(3600)
        return torch.randn(4)


class Regress:
    def dataset(self, config):
        return Stalling(os.path.join(config.run_dir, "stalled-once"))

    def model(self, config, dataset):
        return nn.Linear(4, 1)

    def forward(self, model, batch):
        return model(batch).pow(2).mean(), {}
"""


def test_a_deadlocked_loader_worker_is_named_and_the_job_restarts_in_place_to_the_same_weights(
    tmp_path: Path,
) -> None:
    """Rank 1 waits for its batch from a worker that never answers, rank 0 waits for rank 1 in the all-reduce:
    both watchdogs name rank 1 (waiting on its own loader, not on a peer), rank 1's log holds its stacks, and
    with restarts_in_job the controller starts the tasks again at once: they resume from the last checkpoint and
    end on the weights of a run that never stalled."""
    (tmp_path / "stalls.py").write_text(STALLS)
    task = [f"task={tmp_path / 'stalls.py'}:Regress", "data.num_workers=1", "steps=60", "batch_size=2"]
    args = [*task, "log.every=5", "log.image_every=0", "checkpoint.every=10", *HANG]
    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "stalled-once").touch()  # it never stalls
    forked.train(reference, *task)
    text = f"executor: local\ngpus_per_node: 2\nrestarts_in_job: 1\nrun_root: {tmp_path / 'runs'}\n"
    profile = write_profile(tmp_path, text)
    result = submit("--profile", str(profile), "--wait", *args, cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    [run_dir] = run_dirs(tmp_path / "runs")
    log1 = "".join(p.read_text() for p in (run_dir / "logs").glob("*_1_log.*"))
    assert "hang: rank 1 made no progress for" in log1 and "waiting for its batch from the loader" in log1
    first, second = json.loads((run_dir / "attempts.json").read_text())
    assert first["stop"]["reason"] == "failure" and second["in_job_restart"] == 1 and second["resumed_step"] >= 10
    assert first["stop"]["error"].startswith(f"rank 1 on {socket.gethostname()}: hung: no progress for ")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["in_job_restarts"] == 1 and summary["failures"] == 1
    assert summary["weights_sha256"] == json.loads((reference / "summary.json").read_text())["weights_sha256"]
    # The stuck worker went with its rank, not left asleep for the hour (os._exit runs no clean-up).
    worker = int((run_dir / "stalled-once").read_text())
    poll("the stuck loader worker to end", lambda: process_start(worker) is None, timeout=10)


def test_a_run_that_stops_on_purpose_is_not_started_again_in_its_allocation(tmp_path: Path) -> None:
    """log.nonfinite=stop ends the run with a UserError: a restart would end the same way, so none is made."""

    (tmp_path / "regress.py").write_text(NAN)
    text = f"executor: local\ngpus_per_node: 1\nrestarts_in_job: 2\nrun_root: {tmp_path / 'runs'}\n"
    args = ["task=regress.py:Regress", "steps=4", "log.every=2", "log.nonfinite=stop", "log.image_every=0"]
    result = submit("--profile", str(write_profile(tmp_path, text)), "--wait", *args, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    [run_dir] = run_dirs(tmp_path / "runs")
    assert len(json.loads((run_dir / "attempts.json").read_text())) == 1
    assert json.loads((run_dir / "summary.json").read_text())["in_job_restarts"] == 0


def test_jobs_wait_reattaches_to_a_local_run_and_jobs_list_shows_it(local_profile: Path, sample_root: Path) -> None:
    """Submitted without --wait, the terminal closed: jobs.wait follows rank 0's log from the start and exits
    with the outcome as --wait would have; jobs.list then shows the run with its state and last step."""
    data = f"data.root={sample_root / 'pix2pix'}"
    result = submit("--profile", str(local_profile), data, "steps=8", "log.every=4", "log.image_every=0")
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result)
    waited = cli("jobs.wait", str(run_dir))
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert "step 4/8" in waited.stdout and "done: step 8" in waited.stdout and waited.stdout.endswith("finished\n")
    listing = cli("jobs.list", "--root", str(run_dir.parent))
    assert listing.returncode == 0, listing.stderr
    header, row = listing.stdout.splitlines()
    assert header.split() == ["name", "profile", "job", "state", "step", "goodput", "validation"]
    assert row.split()[:5] == [run_dir.name, "test", json.loads((run_dir / "job.json").read_text())["job_id"],
                               "COMPLETED", "8"]  # fmt: skip
    assert cli("jobs.wait", str(run_dir / "nope")).returncode == 2


def test_env_from_the_command_line_reaches_every_local_task(tmp_path: Path) -> None:
    """--env KEY=VALUE (repeatable), as a profile's env: mapping, for the local executor's tasks too."""
    profile = write_profile(tmp_path, f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'runs'}\n")
    (tmp_path / "show.py").write_text(
        "import os\nopen(os.path.join(os.environ['RUN_DIR'], 'seen' + os.environ['RANK']), 'w')"
        ".write(os.environ['GREETING'])\n"
    )
    result = submit(
        "--profile", str(profile), "--env", "GREETING=hello world", "--wait", "--", "python", "show.py", cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    assert [(run_dir / f"seen{rank}").read_text() for rank in (0, 1)] == ["hello world"] * 2


def test_a_job_cancelled_while_wait_follows_it_is_reported_as_cancelled(tmp_path: Path) -> None:
    """jobs.cancel from another terminal while --wait follows: --wait says cancelled, with how to continue,
    not that the job failed (exit 1: it did not finish)."""
    profile = write_profile(tmp_path, f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'runs'}\n")
    (tmp_path / "long.py").write_text(
        "import time\nfor i in range(600):\n    print(i, flush=True)\n    time.sleep(0.1)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.submit", "--profile", str(profile), "--wait", "--", "python", "long.py"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines = iter(proc.stdout.readline, "")
    run_dir = run_dir_of(next(line for line in lines if line.startswith("run directory:")))
    next(line for line in lines if line.strip() == "3")  # the command runs
    assert cli("jobs.cancel", str(run_dir)).returncode == 0
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, out + err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"cancelled: job {job_pid(run_dir)} was cancelled (jobs.cancel or scancel); continue it")
    assert "error" not in err, err

"""The supervisor's policy (pure) and the batch script that hands srun to it."""

import dataclasses
import os
import subprocess
import time
from pathlib import Path

import pytest

from jobs.profiles import profile_of
from tests.support import poll
from trainer.config.schema import HangConfig
from trainer.supervise.policy import Ended, Policy, State, decide, step_args
from trainer.supervise.signals import JobSettings


def test_a_failed_start_restarts_in_the_allocation_up_to_the_profiles_count() -> None:
    policy, state = Policy(restarts_in_job=2), State()
    assert [decide(policy, state, Ended(1)).action for _ in range(3)] == ["restart", "restart", "end"]
    assert state.in_job == 2


def test_no_restart_after_the_requeue_signal_a_stop_on_purpose_or_a_success() -> None:
    policy = Policy(restarts_in_job=3, requeue_on_failure=1)
    for ended in (Ended(1, stopped=True), Ended(0)):
        assert decide(policy, State(), ended).action == "end", ended
    assert decide(policy, State(), Ended(1, signalled=True)).action == "requeue"  # died of it: requeued here
    assert decide(Policy(restarts_in_job=3), State(), Ended(1, signalled=True)).action == "end"


def test_a_node_that_failed_twice_is_left_out_while_a_spare_node_is_left_then_excluded_by_a_requeue() -> None:
    policy, state = Policy(restarts_in_job=5, spare_nodes=1, nodes=2, tasks_per_node=4), State()
    assert step_args(policy, state) == ["--nodes=2", "--ntasks=8"]  # tasks per node, not GPUs per node
    decide(policy, state, Ended(1, node="n1"))
    decision = decide(policy, state, Ended(1, node="n1"))
    assert decision.action == "restart" and "node n1 failed twice: the next step leaves it out" in decision.say[1]
    assert step_args(policy, state) == ["--nodes=2", "--ntasks=8", "--exclude=n1"]
    decide(policy, state, Ended(1, node="n2"))
    decision = decide(policy, state, Ended(1, node="n2"), partition_nodes=["n1", "n2", "n3", "n4", "n5"])
    assert decision.action == "requeue_without" and decision.excluded == "n1,n2"
    spent = State(in_job=1, failed_nodes=["n1"])
    few = decide(Policy(restarts_in_job=1, nodes=2), spent, Ended(1, node="n1"), ["n1", "n2"])
    assert few.action == "end" and "too few other nodes: it stays in" in few.say[-1]


def test_a_traceback_holds_no_node_and_a_failure_requeues_up_to_its_count() -> None:
    policy, state = Policy(requeue_on_failure=1), State()
    first = decide(policy, state, Ended(1))
    assert (
        first.action == "requeue"
        and not state.failed_nodes
        and first.say == ["srun failed with status 1: requeueing (failure 1 of 1)"]
    )
    assert decide(policy, state, Ended(1)).action == "end"


def test_the_profiles_exclude_list_is_a_hostlist_and_stays_excluded() -> None:
    policy = Policy(nodes=1, exclude="n[1-2]", requeue_on_failure=1)
    state = State(failed_nodes=["n3"])
    decision = decide(policy, state, Ended(1, node="n3"), ["n1", "n2", "n3", "n4"])
    assert decision.action == "requeue_without" and decision.excluded == "n[1-2],n3"


def test_the_batch_script_hands_srun_to_the_supervisor_and_bash_parses_it(tmp_path: Path) -> None:
    from jobs.plan import make_plan, sbatch_script
    from jobs.profiles import profile_of

    profile = profile_of({"name": "p", "executor": "slurm", "restarts_in_job": 2})
    plan = make_plan(profile, [], tmp_path / "logs", False, "py")
    script = sbatch_script(plan)
    line = next(line for line in script.splitlines() if "srun" in line)
    supervisor = 'exec py -m trainer.supervise.slurm \'{"policy": {"restarts_in_job": 2,'
    assert line.startswith("py -c 'import trainer.supervise.slurm' 2>/dev/null && " + supervisor), line
    assert script.rstrip().splitlines()[-1].startswith("srun --unbuffered ")  # no python for it: srun once
    assert " -- srun --unbuffered " in line and " -- py -u -m submitit.core._submit " in line
    assert "while :; do" not in script  # no generated bash policy
    # Only the one trap that keeps a requeue signal sent as the job starts from killing the shell.
    assert [t for t in script.splitlines() if t.startswith("trap ")] == ["""trap 'touch "$early_signal"' USR2"""]
    (tmp_path / "job.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sh")], capture_output=True).returncode == 0


def test_rank_0s_silence_is_named_only_once_its_peers_would_have_named_it(tmp_path: Path) -> None:
    """Rank 0 alone frozen is named by its peers (the budget rank 0 wrote, their look once a second, the store's
    5 s): the supervisor names a hang only after that and a margin (4 s and 5% of the budget, 0.7 s here), when
    nobody did: every rank froze."""
    from trainer.run.failures import read
    from trainer.supervise.watch import frozen, name_and_end, write_beat

    beat = tmp_path / "beat.json"
    write_beat(beat, {"rank": 0, "host": "n1", "step": 40, "section": "step", "since": 100.0, "written": 104.0,
                      "budget": 14.0, "beat_s": 2.0, "run_dir": str(tmp_path)})  # fmt: skip
    assert frozen(beat, 107.0) is None  # two beats late at most: alive
    assert frozen(beat, 100.0 + 14 + 1 + 5 + 4 + 0.6) is None  # its peers may still be naming it
    found = frozen(beat, 100.0 + 14 + 1 + 5 + 4 + 0.8)
    assert found is not None and found[0].message.startswith("hung: every rank stopped: rank 0's heartbeat stopped")
    assert name_and_end(beat, 130.0) and not beat.exists()  # recorded once, the file gone
    assert [f.rank for f in read(tmp_path)] == [0] and (tmp_path / "error.txt").read_text().startswith("rank 0 on n1")
    assert frozen(tmp_path / "none.json", 1e12) is None


def test_the_signals_node_local_copy_is_left_until_the_job_ends_its_steps(tmp_path: Path) -> None:
    """The fan-out's command (run by srun on each node) leaves the file, and removes it on the SIGTERM with
    which Slurm ends a job's steps (a requeue, the job's end)."""
    from trainer.supervise import relay

    node_file = tmp_path / "attempt_7_0.signal"
    proc = subprocess.Popen(["bash", "-c", relay.FAN_OUT, "bash", str(node_file)])
    poll("the node-local file", node_file.exists, timeout=10)
    proc.terminate()
    assert proc.wait(timeout=10) == 0 and not node_file.exists()
    from trainer.supervise.attempt import Attempt

    attempt = Attempt(Path("/logs"), "7", 0)
    cmd = relay.fan_out_command(attempt.node_signal, "7", 3)
    assert cmd[:8] == ["srun", "--overlap", "--jobid=7", "-N", "3", "--ntasks", "3", "--ntasks-per-node=1"]
    assert cmd[-1] == str(Attempt.of("/logs/attempt_7_0").node_signal)
    assert cmd[-1].endswith("/slurm-ddp-attempt_7_0.signal")
    # srun would read the running step's task count, CPUs and GPUs from these: the fan-out asks for its own.
    environ = {"SLURM_NTASKS": "16", "SLURM_CPUS_PER_TASK": "8", "SLURM_CONF": "/etc/s.conf", "PATH": "/bin"}
    assert relay.fan_out_environment(environ) == {"SLURM_CONF": "/etc/s.conf", "PATH": "/bin"}


def test_a_task_takes_the_signal_from_the_node_file_at_once_or_the_shared_one_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node-local copy is looked at every 0.2 s; the shared file (an srun that could not start) only every
    FALLBACK_S, so that thousands of ranks make no more than 0.1 metadata calls a second on the share."""
    import signal

    from trainer.supervise import relay

    got: list[float] = []
    previous = signal.signal(signal.SIGUSR2, lambda *_: got.append(time.monotonic()))
    try:
        node, shared = tmp_path / "node.signal", tmp_path / "shared.signal"
        relay.watch(str(node), signal.SIGUSR2, fallback=str(shared))
        node.touch()
        poll("the signal from the node file", lambda: got, timeout=5)
        monkeypatch.setattr(relay, "FALLBACK_S", 1.0)
        other, later = tmp_path / "never.signal", tmp_path / "later.signal"
        shared.touch()
        relay.watch(str(other), signal.SIGUSR2, fallback=str(shared))  # the shared file looked at first of all
        poll("the signal from the shared file at the start", lambda: len(got) == 2, timeout=5)
        relay.watch(str(other), signal.SIGUSR2, fallback=str(later))
        time.sleep(0.3)  # the watcher's first look has found nothing: the file comes after it
        later.touch()
        begun = time.monotonic()
        poll("the signal from the shared file", lambda: len(got) == 3, timeout=10)
        assert 0.4 <= got[2] - begun < 5, got[2] - begun  # at its next look, FALLBACK_S after the first
    finally:
        signal.signal(signal.SIGUSR2, previous)


@pytest.mark.parametrize("idle_s", [0, 10, 12.06, 13.01, 1800])
def test_a_commands_hang_settings_reach_its_task_as_the_trainers_hang_config(idle_s: float) -> None:
    """One hang configuration: the profile's script_hang_s becomes a HangConfig (0: off), sent as plain values
    and rebuilt in the task, its heartbeat three times within the budget at least."""
    sent = dataclasses.asdict(profile_of({"name": "t", "executor": "local", "script_hang_s": idle_s}).recovery.requeue)
    hang = HangConfig(**JobSettings(**sent).hang)
    assert (hang.enabled, hang.timeout_s) == (idle_s > 0, idle_s)
    assert 3 * hang.beat_s <= (idle_s or 15) and hang.beat_s <= 5


def test_a_heartbeat_left_by_a_dead_supervisor_of_the_same_pid_is_not_read_as_this_starts(tmp_path: Path) -> None:
    """A local job's id is its controller's pid, and pids are reused: a heartbeat file a killed controller left
    in /dev/shm under this start's name must not name this start's healthy ranks frozen."""
    import json

    from trainer.supervise import agent
    from trainer.supervise.attempt import Attempt

    class Backend:
        nodes: set[str] = set()

        def __init__(self) -> None:
            self.stopped, self.polls = False, 0

        def attempt(self, in_job: int, start: int) -> Attempt:
            return Attempt(tmp_path, "stale-beat-test", 0, in_job, start)

        def start(self, attempt: Attempt, extra: list[str]) -> None:
            pass

        def poll(self) -> agent.Ended | None:
            self.polls += 1
            return agent.Ended(0) if self.polls > 3 else None

        def stop(self) -> None:
            self.stopped = True

        def clean_up(self) -> None:
            pass

        def room(self) -> list[str] | None:
            return None

        def remember(self, state: State) -> None:
            pass

        def may_go_on(self, ended: agent.Ended, run_dir: Path | None) -> bool:
            return False

        def act(self, decision: object, attempt: Attempt, ended: agent.Ended) -> int:
            return ended.status

    backend = Backend()
    stale = backend.attempt(0, 0).beat
    long_ago = time.time() - 25_000
    beat = {"written": long_ago, "since": long_ago, "budget": 60, "beat_s": 1, "step": 3, "section": "startup"}
    stale.write_text(json.dumps(beat | {"host": "h", "run_dir": str(tmp_path)}))
    try:
        assert agent.run(backend, Policy(), State(), None) == 0
        assert not backend.stopped, "a dead supervisor's heartbeat named this start's ranks frozen"
    finally:
        stale.unlink(missing_ok=True)


@pytest.mark.parametrize(
    ("later", "reason"), [("CANCELLED by 0", "cancelled"), ("TIMEOUT", "timeout"), ("REQUEUED", None)]
)
def test_a_cancel_accounting_has_not_heard_of_yet_is_still_told_from_a_requeue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, later: str, reason: str | None
) -> None:
    """Under load, slurmdbd records the end after the batch step's SIGTERM: the job is still RUNNING there for
    a moment, and the attempt must still be closed as the run's end (CI lost a cancelled run's summary so)."""
    from trainer.supervise.slurm import ended_by_slurm

    calls = tmp_path / "calls"
    sacct = tmp_path / "sacct"  # RUNNING for the first two questions, then the job's end
    sacct.write_text(f'#!/bin/sh\necho x >> {calls}\n[ $(wc -l < {calls}) -le 2 ] && echo RUNNING || echo "{later}"\n')
    sacct.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert ended_by_slurm("42") == reason
    assert len(calls.read_text().split()) == 3
    # Accounting that never hears of it (or is off) leaves the answer to the readers, within the wait.
    sacct.write_text("#!/bin/sh\necho RUNNING\n")
    assert ended_by_slurm("42", wait_s=0.5) is None

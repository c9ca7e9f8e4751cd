"""The batch step of a Slurm job: `python3 -m trainer.supervise.slurm SPEC -- srun ...` starts the tasks,
takes the requeue signal, and after each start does what trainer.supervise.policy decides: start them again in
the allocation, leave a node out, requeue the job (without a node), or end with srun's status.

It runs on the job's first node, outside any container, with the node's own python3: stdlib only. SPEC is
jobs.restarts.spec's JSON: the policy, the log folder, the run folders (one per array task), the signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainer.run.atomic import write_text
from trainer.supervise import agent
from trainer.supervise.agent import careful, close_attempt
from trainer.supervise.attempt import Attempt
from trainer.supervise.attempts import requeued_by_rank_0
from trainer.supervise.hostlist import expand_hostlist
from trainer.supervise.policy import Decision, Ended, Policy, State
from trainer.supervise.relay import fan_out_command, fan_out_environment

CHECK_S = 1.0  # how long one poll waits for srun (the agent looks at rank 0's heartbeat between polls)


def load_state(path: Path) -> State:
    try:
        saved = json.loads(path.read_text())
        return State(failed_nodes=list(saved["failed_nodes"]), failure_requeues=int(saved["failure_requeues"]))
    except (OSError, ValueError, KeyError, TypeError):
        return State()


def save_state(path: Path, state: State) -> None:
    record = {"failed_nodes": state.failed_nodes, "failure_requeues": state.failure_requeues}
    write_text(path, json.dumps(record) + "\n")


def scontrol(*args: str) -> bool:
    return subprocess.run(["scontrol", *args], stdout=subprocess.DEVNULL).returncode == 0


def partition_nodes(partition: str) -> list[str]:
    """The partition's nodes, one name each; empty when Slurm does not say."""
    lists = subprocess.run(["sinfo", "-h", "-p", partition, "-o", "%N"], capture_output=True, text=True).stdout
    hostlist = ",".join(line.strip() for line in lists.splitlines() if line.strip())
    if not hostlist:
        return []
    names = subprocess.run(["scontrol", "show", "hostnames", hostlist], capture_output=True, text=True).stdout
    return sorted(set(names.split()))


def requeue_without(job_id: str, excluded: str) -> bool:
    """A running job's ExcNodeList cannot change: hold the requeued job, set it, release it; whether it was set.
    The requeue's SIGTERM is ignored meanwhile (Slurm's KillWait, 30 s by default, leaves the time)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    scontrol("requeuehold", job_id)
    done = False
    for _ in range(40):
        if scontrol("update", f"JobId={job_id}", f"ExcNodeList={excluded}"):
            done = True
            break
        time.sleep(0.5)
    scontrol("release", job_id)
    return done


def record_sacct(folder: Path, job_id: str) -> None:
    """The job's accounting record (steps, states, exit codes) into the run's provenance/ folder; the job
    still runs, so its own line says RUNNING."""
    fields = "JobID,JobName,State,ExitCode,Start,End,Elapsed,NodeList"
    try:
        done = subprocess.run(
            ["sacct", "-j", job_id, "--parsable2", f"--format={fields}"], capture_output=True, text=True
        )
        (folder / "provenance").mkdir(parents=True, exist_ok=True)  # a job whose tasks never started made none
        write_text(folder / "provenance" / f"sacct_{job_id}.txt", done.stdout + done.stderr)
    except OSError:
        pass  # no sacct here, a full disk: the record is a courtesy


def ended_by_slurm(job_id: str, wait_s: float = 5.0) -> str | None:
    """Why Slurm ends the batch step (SIGTERM): "cancelled" or "timeout", when the run ends with it; None for a
    requeue, or where accounting cannot say (the next attempt's start, or the readers, tell then).

    slurmctld tells slurmdbd of the end a moment after it signals the step, later on a loaded controller: a job
    accounting still calls RUNNING is asked again, for up to wait_s (well within KillWait)."""
    deadline, pause = time.monotonic() + wait_s, 0.25
    while True:
        done = subprocess.run(
            ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State"], capture_output=True, text=True, timeout=20
        )
        states = [line.split(" ")[0] for line in done.stdout.split("\n") if line.strip()]  # "CANCELLED by 0"
        last = states[-1] if states else ""
        if done.returncode != 0 or last not in ("", "RUNNING") or time.monotonic() >= deadline:
            return {"CANCELLED": "cancelled", "TIMEOUT": "timeout"}.get(last)
        time.sleep(pause)
        pause = min(2 * pause, 1.0)  # each requeue asks too: a few questions, not twenty, of a busy slurmdbd


class Steps:
    """The agent's Slurm backend: each start of the tasks is an srun step in the job's allocation, started with
    its own options after srun's others; the requeue signal comes to this process (--signal=B:...)."""

    def __init__(self, spec: dict, srun: list[str], env: Mapping[str, str]) -> None:
        self.srun, self.env = srun, env
        self.log_dir = Path(spec["log_dir"])
        self.run_dir = Path(spec["run_dirs"][int(env.get("SLURM_ARRAY_TASK_ID") or 0)])
        self.job_id = env.get("SLURM_JOB_ID", "0")
        self.requeue = int(env.get("SLURM_RESTART_COUNT") or 0)
        self.nodes = set(expand_hostlist(env["SLURM_JOB_NODELIST"])) if env.get("SLURM_JOB_NODELIST") else set()
        # What survives a requeue (the same job id): the nodes held against failures, the failure requeues.
        self.saved = self.log_dir / f"supervise_{self.job_id}.json"
        self.current = Attempt(self.log_dir, self.job_id, self.requeue)
        self.proc: subprocess.Popen[bytes] | None = None

    def attempt(self, in_job: int, start: int) -> Attempt:
        self.current = Attempt(self.log_dir, self.job_id, self.requeue, in_job, start)
        return self.current

    def start(self, attempt: Attempt, extra: list[str]) -> None:
        split = self.srun.index("--") if "--" in self.srun else len(self.srun)
        self.proc = subprocess.Popen([*self.srun[:split], *extra, *self.srun[split:]])

    def poll(self) -> Ended | None:
        assert self.proc is not None
        try:
            status = self.proc.wait(timeout=CHECK_S)  # a signal's handler runs meanwhile
        except subprocess.TimeoutExpired:
            return None
        return Ended(status, signalled=self.current.signal.exists())

    def stop(self) -> None:
        """srun's abort: two SIGINTs within a second end the step, every task killed (stopped ones too)."""
        assert self.proc is not None
        for _ in range(2):
            self.proc.send_signal(signal.SIGINT)
            time.sleep(0.2)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def clean_up(self) -> None:
        pass  # srun's step ends with its tasks

    def room(self) -> list[str] | None:
        return partition_nodes(self.env.get("SLURM_JOB_PARTITION", ""))

    def remember(self, state: State) -> None:
        careful("save what survives a requeue", lambda: save_state(self.saved, state))

    def may_go_on(self, ended: Ended, run_dir: Path | None) -> bool:
        """After the requeue signal, or a requeue rank 0 asked for, the job may come back."""
        return ended.signalled or (run_dir is not None and requeued_by_rank_0(run_dir))

    def act(self, decision: Decision, attempt: Attempt, ended: Ended) -> int:
        if decision.action in ("requeue_without", "requeue"):
            careful("mark the attempt failed", attempt.failed.touch)  # the next counts it a failure, not a requeue
        if decision.action == "requeue_without" and not requeue_without(self.job_id, decision.excluded):
            print("the job's ExcNodeList could not be set: it is requeued as it is", flush=True)
        elif decision.action == "requeue":
            scontrol("requeue", self.job_id)
        careful("record sacct", lambda: record_sacct(self.log_dir.parent, self.job_id))  # the run's (a sweep's)
        return ended.status if ended.status >= 0 else 128 - ended.status  # killed by N: 128 + N, as a shell says


def supervise(spec: dict, srun: list[str]) -> int:
    env = os.environ
    steps = Steps(spec, srun, env)
    nodes_n = int(env.get("SLURM_JOB_NUM_NODES") or 1)

    def take_signal(signum: int, frame: object) -> None:
        # Nothing may escape this handler (srun must still be waited for): careful() warns instead, and a full
        # disk fails the warnings too. A script's tasks watch a node-local copy (one task per node leaves it),
        # first: a stalled shared filesystem must not hold it up; without srun they find the shared file, later.
        command = fan_out_command(steps.current.node_signal, steps.job_id, nodes_n)
        environment = fan_out_environment(dict(env))
        careful("leave the requeue signal on each node", lambda: subprocess.Popen(command, env=environment))
        # The trainer's rank 0 watches this one.
        careful("leave the requeue signal's file", lambda: write_text(steps.current.signal, f"{int(time.time())}\n"))

    def take_term(signum: int, frame: object) -> None:
        # Slurm ends the batch step with SIGTERM (a requeue, a cancel, the time limit): a cancel or the limit
        # ends the run, and its attempt is closed; then exit through the finally blocks, so that rank 0's
        # node-local heartbeat file is not left in /dev/shm (requeue_without ignores the signal).
        if reason := careful("ask Slurm why the job ends", lambda: ended_by_slurm(steps.job_id)):
            close_attempt(steps.run_dir, reason, final=True)
        sys.exit(128 + signum)

    signal.signal(getattr(signal, f"SIG{spec['signal']}"), take_signal)
    signal.signal(signal.SIGTERM, take_term)
    return agent.run(steps, Policy(**spec["policy"]), load_state(steps.saved), steps.run_dir)


def main(argv: Sequence[str]) -> int:
    """`SPEC -- srun ...`: the job's status (srun's), so that a failed step leaves the job FAILED."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python3 -m trainer.supervise.slurm SPEC -- srun ...", file=sys.stderr)
        return 2
    return supervise(json.loads(argv[0]), list(argv[2:]))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

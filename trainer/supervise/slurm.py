"""The batch step of a Slurm job: `python3 -m trainer.supervise.slurm SPEC -- srun ...` starts the tasks,
takes the requeue signal, and after each start does what trainer.supervise.policy decides: start them again in
the allocation, leave a node out, requeue the job (without a node), or end with srun's status.

It runs on the job's first node, outside any container, with the node's own python3: stdlib only. SPEC is
jobs.restarts.spec's JSON: the policy, the log folder, the run folders (one per array task), the signal.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from trainer.env.hostlist import expand_hostlist
from trainer.env.launcher import IN_JOB_RESTART, WATCH_BEAT
from trainer.run import failures
from trainer.run.atomic import write_text
from trainer.supervise.attempts import close, requeued_by_rank_0
from trainer.supervise.policy import Decision, Ended, Policy, State, decide, step_args
from trainer.supervise.relay import ATTEMPT, fan_out_command, fan_out_environment
from trainer.supervise.watch import beat_path, name_and_end

T = TypeVar("T")
CHECK_S = 2.0  # how often rank 0's node-local heartbeat is looked at while srun runs


def attempt_prefix(log_dir: Path, job_id: str, restart_count: str) -> str:
    """This Slurm attempt's file prefix in the log folder: .signal, .stopped, .failed (trainer.supervise.relay)."""
    return str(log_dir / f"attempt_{job_id}_{restart_count}")


def state_path(log_dir: Path, job_id: str) -> Path:
    """What survives a requeue (the same job id): the nodes held against failures, the failure requeues."""
    return log_dir / f"supervise_{job_id}.json"


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


def careful(what: str, act: Callable[[], T]) -> T | None:
    """`act()`, or None with a warning: a full disk must not keep the supervisor from requeueing, or from
    exiting with srun's status."""
    try:
        return act()
    except Exception as exc:
        print(f"warning: could not {what}: {exc}", flush=True)
        return None


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


def run_step(srun: list[str], extra: list[str], beat: Path) -> int:
    """srun with this start's own options after its others, before the `--` that ends them; its status. While
    it runs, rank 0's node-local heartbeat is watched (trainer.supervise.watch): when every rank froze, the
    supervisor names it and ends the step as srun's second Ctrl-C does (its tasks killed)."""
    split = srun.index("--") if "--" in srun else len(srun)
    os.environ[WATCH_BEAT] = str(beat)
    with contextlib.suppress(OSError):
        beat.unlink()
    proc = subprocess.Popen([*srun[:split], *extra, *srun[split:]])
    try:
        while True:
            try:
                return proc.wait(timeout=CHECK_S)  # a signal's handler runs meanwhile
            except subprocess.TimeoutExpired:
                pass
            if name_and_end(beat, time.time()):
                end_step(proc)
    finally:
        with contextlib.suppress(OSError):
            beat.unlink()


def end_step(proc: subprocess.Popen[bytes]) -> None:
    """srun's abort: two SIGINTs within a second end the step, every task killed (stopped ones too)."""
    for _ in range(2):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.2)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def ended_by_slurm(job_id: str) -> str | None:
    """Why Slurm ends the batch step (SIGTERM): "cancelled" or "timeout", when the run ends with it; None for a
    requeue, or where accounting cannot say (the next attempt's start, or the readers, tell then)."""
    out = subprocess.run(
        ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State"], capture_output=True, text=True, timeout=20
    ).stdout.split("\n")
    states = [line.split(" ")[0] for line in out if line.strip()]  # "CANCELLED by 0": the word Slurm's own
    return {"CANCELLED": "cancelled", "TIMEOUT": "timeout"}.get(states[-1] if states else "")


def say(lines: Sequence[str]) -> None:
    for line in lines:
        print(line, flush=True)


def supervise(spec: dict, srun: list[str], environ: dict | None = None) -> int:
    env = os.environ if environ is None else environ
    policy = Policy(**spec["policy"])
    log_dir = Path(spec["log_dir"])
    run_dir = Path(spec["run_dirs"][int(env.get("SLURM_ARRAY_TASK_ID") or 0)])
    job_id = env.get("SLURM_JOB_ID", "0")
    attempt = attempt_prefix(log_dir, job_id, env.get("SLURM_RESTART_COUNT") or "0")
    os.environ[ATTEMPT] = attempt  # every task's: where the signal file appears, where a stop on purpose is marked

    def take_signal(signum: int, frame: object) -> None:
        # Nothing may escape this handler (srun must still be waited for): a full disk fails the warnings too.
        # A script's tasks watch a node-local copy (one task per node leaves it), first: a stalled shared
        # filesystem must not hold it up.
        try:
            subprocess.Popen(fan_out_command(attempt, job_id, nodes_n), env=fan_out_environment(dict(env)))
        except OSError as exc:  # no srun: the tasks still find the shared file, later
            with contextlib.suppress(OSError):
                print(f"warning: could not leave the requeue signal on each node: {exc}", flush=True)
        try:
            write_text(Path(attempt + ".signal"), f"{int(time.time())}\n")  # the trainer's rank 0 watches it
        except Exception as exc:  # a full disk: srun still runs, and must still be waited for
            with contextlib.suppress(OSError):
                print(f"warning: could not leave the requeue signal's file: {exc}", flush=True)

    nodes_n = int(env.get("SLURM_JOB_NUM_NODES") or 1)

    def take_term(signum: int, frame: object) -> None:
        # Slurm ends the batch step with SIGTERM (a requeue, a cancel, the time limit): a cancel or the limit
        # ends the run, and its attempt is closed; then exit through the finally blocks, so that rank 0's
        # node-local heartbeat file is not left in /dev/shm (requeue_without ignores the signal).
        if reason := careful("ask Slurm why the job ends", lambda: ended_by_slurm(job_id)):
            careful("close the attempt", lambda: close(run_dir, reason, final=True))
        sys.exit(128 + signum)

    signal.signal(getattr(signal, f"SIG{spec['signal']}"), take_signal)
    signal.signal(signal.SIGTERM, take_term)
    nodes = set(expand_hostlist(env["SLURM_JOB_NODELIST"])) if env.get("SLURM_JOB_NODELIST") else set()
    saved = state_path(log_dir, job_id)
    state, starts = load_state(saved), 0
    while True:
        os.environ[IN_JOB_RESTART] = str(state.in_job)
        started = time.time()
        status = run_step(srun, step_args(policy, state), beat_path(job_id, starts))
        starts += 1
        signalled, stopped = os.path.exists(attempt + ".signal"), os.path.exists(attempt + ".stopped")
        node = None
        if status != 0 and policy.tracks_nodes and not signalled and not stopped:
            node = careful("read the failure records", lambda since=started: failures.suspect_node(run_dir, since))
            if node not in nodes:  # only a node of this job is held (never a name from elsewhere)
                node = None
        wants_room = policy.tracks_nodes and node is not None
        room = partition_nodes(env.get("SLURM_JOB_PARTITION", "")) if wants_room else None
        decision: Decision = decide(policy, state, Ended(status, signalled, stopped, node), room)
        say(decision.say)
        careful("save what survives a requeue", lambda: save_state(saved, state))
        # The attempt closed (rank 0 records a requeue's stop itself); the run's end when nothing follows: not
        # after the requeue signal, unless the run stopped for good there (a spent budget).
        final = decision.action == "end" and (stopped or not (signalled or requeued_by_rank_0(run_dir)))
        careful("close the attempt", lambda final=final: close(run_dir, "failure", final))
        if decision.action == "restart":
            continue
        if decision.action in ("requeue_without", "requeue"):
            # The next attempt counts this one as a failure, not a requeue.
            careful("mark the attempt failed", Path(attempt + ".failed").touch)
        if decision.action == "requeue_without" and not requeue_without(job_id, decision.excluded):
            print("the job's ExcNodeList could not be set: it is requeued as it is", flush=True)
        elif decision.action == "requeue":
            scontrol("requeue", job_id)
        careful("record sacct", lambda: record_sacct(log_dir.parent, job_id))  # the run's folder (a sweep's)
        return status if status >= 0 else 128 - status  # killed by signal N: 128 + N, as a shell says it


def main(argv: Sequence[str]) -> int:
    """`SPEC -- srun ...`: the job's status (srun's), so that a failed step leaves the job FAILED."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python3 -m trainer.supervise.slurm SPEC -- srun ...", file=sys.stderr)
        return 2
    return supervise(json.loads(argv[0]), list(argv[2:]))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

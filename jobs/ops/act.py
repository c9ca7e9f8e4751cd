"""What jobs.top's keys (and its --save-now, --requeue-now, --dump-stacks flags) do to a running job: ask for a
checkpoint without stopping, requeue it now, write every rank's Python stacks; and cancel it (jobs.cancel's, and
jobs.top's c key). Each returns the line jobs.top shows; a job that is not running is refused in one line."""

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobs.snapshot import tool_environment
from jobs.tracking import TERMINAL, Target, info, is_local_job, run_settings, slurm_info
from trainer.errors import UserError
from trainer.run.atomic import json_or_none
from trainer.run.procfs import children
from trainer.run.rundir import RunDir
from trainer.supervise import live, relay, signals, stacks


def _running(target: Target, between: Callable[[], None] | None = None) -> Target:
    """`target`, if it runs. The state is read once (a job between attempts moves on): `between` is called first
    when a Slurm job is between attempts."""
    if target.executor == "debug":
        raise UserError(f"job {target.job_id} runs in its submitter's process (debug executor): act on it there")
    state = info(target).state
    if between is not None and target.executor == "slurm" and state in _BETWEEN_ATTEMPTS:
        between()
    if state != "RUNNING" or (target.executor == "local" and not is_local_job(target)):
        raise UserError(f"job {target.job_id} is {state}, not running; python -m jobs.status tells how it ended")
    return target


def _trainer(target: Target, what: str) -> None:
    if target.run_dir is None or RunDir(target.run_dir).command.exists():
        raise UserError(f"{what} needs the trainer; a -- COMMAND run saves when its own code does (requeue it instead)")


def _heartbeats_on(target: Target) -> None:
    """Rank 0's watchdog threads read the save request: none run with hang.enabled=false."""
    assert target.run_dir is not None
    hang = run_settings(RunDir(target.run_dir)).get("hang") or {}
    if isinstance(hang, dict) and hang.get("enabled") is False:
        raise UserError(
            f"job {target.job_id} runs with hang.enabled=false: no thread reads the request; requeue it instead "
            "(r, --requeue-now), or resubmit with hang.enabled=true"
        )


def save_now(target: Target) -> str:
    """Rank 0 takes the request at the next vote (dist.stop_check_every steps); every rank saves and trains on."""
    _trainer(_running(target), "a save now")
    _heartbeats_on(target)
    assert target.run_dir is not None
    live.request(target.run_dir, save=True)
    return f"asked job {target.job_id} for a checkpoint at its next step boundary (it trains on)"


def requeue_now(target: Target) -> str:
    """The requeue signal, as the time limit sends it: the ranks save where they are and the job is requeued
    (recorded as a preemption: time was left)."""
    name = _requeue_signal(target)
    # A second request as the first one requeues the job: say that, not "ended".
    _running(target, between=lambda: _not_requeueing(target, name))
    _not_requeueing(target, name)
    if target.executor == "slurm":
        _scancel(["-b", "-s", name, target.job_id])  # to the batch shell, as sbatch's --signal=B: does
    else:
        os.kill(int(target.job_id), signals.number(name))  # the local controller takes it as a preemption
    if target.run_dir is not None:
        live.request(target.run_dir, requeue=True)
    script = target.run_dir is not None and RunDir(target.run_dir).command.exists()
    then = (
        "your command gets it (it saves if it handles it) and the job is requeued"
        if script
        else "it saves and is requeued"
    )
    return f"sent SIG{name} to job {target.job_id}: {then}"


_BETWEEN_ATTEMPTS = ("COMPLETING", "PENDING", "REQUEUED", "REQUEUE_HOLD", "CONFIGURING")


def _not_requeueing(target: Target, name: str) -> None:
    """One request at a time: until the attempt it stops has a successor, a second signal would only reach the
    ranks as they save or exit, or the next start's before they can take it."""
    if target.run_dir is None or not (asked := live.asked(target.run_dir, "requeue")):
        return
    attempts = json_or_none(RunDir(target.run_dir).attempts)
    started = [a.get("started") for a in attempts if isinstance(a, dict)] if isinstance(attempts, list) else []
    if not any(isinstance(s, int | float) and s > asked for s in started):
        raise UserError(
            f"job {target.job_id} was sent SIG{name} at {time.strftime('%H:%M:%S', time.localtime(asked))} and "
            "has not started its next attempt yet: one request is enough (python -m jobs.top shows it start)"
        )


def dump_stacks(target: Target) -> str:
    """Every rank's Python stacks into the run folder's stacks/<time>/ (py-spy, from outside the ranks, on their
    nodes), or, where py-spy is missing or may not trace them, into each rank's log (faulthandler, on SIGURG)."""
    _trainer(_running(target), "dumping stacks")
    assert target.run_dir is not None
    run_dir, stamp = target.run_dir, time.strftime("%Y%m%d-%H%M%S")
    records = stacks.ranks_of(run_dir, None)
    if target.executor != "slurm":
        how = stacks.dump_node(run_dir, stamp, None, stacks.Job(target.job_id, local=True))  # on this machine
    elif records and isinstance(records[0].get("python"), str):
        how = _dump_on_nodes(target, records, stamp)
    else:  # a run started by an older version records no interpreter: the signal alone
        _scancel(["-s", stacks.DUMP_SIGNAL.name.removeprefix("SIG"), target.job_id])  # the steps' tasks
        how = {str(r["rank"]): "faulthandler" for r in records}
    spied = sorted(int(rank) for rank, way in how.items() if way == "py-spy")
    logged = sorted(int(rank) for rank, way in how.items() if way == "faulthandler")
    parts = [f"ranks {_ranks(spied)} by py-spy in {RunDir(run_dir).stacks / stamp}"] if spied else []
    if logged:
        why = (
            f"; {RunDir(run_dir).stacks / stamp}/rank_N.txt says why"
            if (RunDir(run_dir).stacks / stamp).is_dir()
            else ""
        )
        parts.append(f"ranks {_ranks(logged)} into their logs by faulthandler{why}")
    missed = sorted(int(r) for r, way in how.items() if way not in ("py-spy", "faulthandler"))
    if missed:  # ended, not the job's process, or neither traced nor signalled: each rank's file says which
        parts.append(f"ranks {_ranks(missed)} not dumped ({RunDir(run_dir).stacks / stamp}/rank_N.txt says why)")
    return f"stacks of job {target.job_id}: " + ("; ".join(parts) or "no rank was running")


def _dump_on_nodes(target: Target, records: list[dict], stamp: str) -> dict[str, str]:
    """One step on each of the job's nodes beside its own (srun --overlap), running trainer.supervise.stacks
    with the job's interpreter and the run's copy of the trainer; each node prints how its ranks were dumped."""
    assert target.run_dir is not None
    # The records are the run folder's, so data: node names as Slurm spells them, an absolute interpreter path.
    hosts = sorted({str(r.get("host")) for r in records if NODE_NAME.fullmatch(str(r.get("host")))})
    python = str(records[0].get("python"))
    if not hosts or not python.startswith("/"):
        raise UserError(f"the rank records in {RunDir(target.run_dir).provenance / 'ranks'} name no node or no "
                        f"interpreter; dump with scancel -s URG {target.job_id}")  # fmt: skip
    command = [python, "-m", "trainer.supervise.stacks", str(target.run_dir), stamp]
    tool = RunDir(target.run_dir).path / "tool"  # the run's own copy of the trainer; else the installed one
    # PYTHONSAFEPATH: srun runs it in this folder, which may hold a trainer.py of the user's.
    environ = relay.fan_out_environment(dict(os.environ)) | tool_environment(tool if tool.is_dir() else None)
    try:
        done = subprocess.run(
            [*_step_on(target, hosts), *command], capture_output=True, text=True, timeout=300, env=environ
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(
            f"srun could not reach the job's nodes ({exc}); try again, or dump with scancel -s URG"
        ) from None
    how: dict[str, str] = {}
    for line in done.stdout.splitlines():
        with contextlib.suppress(ValueError):
            found = json.loads(line)
            if isinstance(found, dict):
                how |= {str(k): str(v) for k, v in found.items() if str(k).isdigit()}  # data
    if not how and done.returncode:
        last = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise UserError(f"srun refused the stack dump: {last}; try again, or dump with scancel -s URG {target.job_id}")
    return how


NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


ONCE_S = 120  # how long signal_ranks waits for the files it is to signal at


def signal_ranks(
    target: Target, ranks: list[int], sig: signal.Signals, command: bool = False, once: tuple[Path, str] | None = None
) -> list[int]:
    """`sig` to each of `ranks` of the attempt now running (a -- COMMAND run's: its command, the task's child),
    all at once: on Slurm one step on their nodes beside the job's (srun --overlap), locally here; `once`
    (folder, glob): as soon as such a file appears there, seen from the ranks' node (a checkpoint's temporary
    file lives for milliseconds). The ranks it reached: none if the file never appeared within ONCE_S."""
    assert target.run_dir is not None
    # The records are the run folder's, so data: ints, node names as Slurm spells them.
    records = [r for r in stacks.ranks_of(target.run_dir, None) if r["rank"] in ranks]
    if target.executor != "slurm":
        if once is not None and not poll(lambda: any(once[0].glob(once[1])), ONCE_S, 0.002):
            return []
        kids = children() if command else {}
        for record in records:
            os.kill(kids.get(record["pid"], [record["pid"]])[0], sig)
        return sorted(r["rank"] for r in records)
    by_node: dict[str, list[int]] = {}
    for record in records:
        if NODE_NAME.fullmatch(str(record.get("host"))):
            by_node.setdefault(str(record["host"]), []).append(int(record["pid"]))
    if not by_node:
        return []
    # Each node signals its own: for a command the task's oldest child, else the task.
    who = "$(pgrep -o -P {0} || echo {0})" if command else "{0}"
    kill = f"kill -s {sig.name.removeprefix('SIG')}"
    cases = "".join(f"{node}) {kill} {' '.join(who.format(p) for p in pids)};; " for node, pids in by_node.items())
    script = f'case "$SLURMD_NODENAME" in {cases}esac'
    if once is not None:
        wait = f"{shlex.quote(str(once[0]))}/{once[1]}"
        script = f"i=0; until ls {wait} >/dev/null 2>&1; do i=$((i+1)); [ $i -gt {ONCE_S * 200} ] && exit 3; sleep 0.005; done; {script}"
    step = _step_on(target, list(by_node))
    environ = relay.fan_out_environment(dict(os.environ))  # srun's own words, not an enclosing job's
    done = subprocess.run(
        [*step, "sh", "-c", script], capture_output=True, text=True, timeout=ONCE_S + 120, env=environ
    )
    if done.returncode == 3:
        return []
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise UserError(f"srun could not signal the ranks of job {target.job_id}: {last}; try again")
    return sorted(r["rank"] for r in records if NODE_NAME.fullmatch(str(r.get("host"))))


def _step_on(target: Target, hosts: list[str]) -> list[str]:
    """srun's words for one task on each of `hosts`, a step beside the job's own (--overlap)."""
    n = str(len(hosts))
    step = ["srun", "--overlap", f"--jobid={target.job_id}", "-N", n, "--ntasks", n, "--ntasks-per-node=1"]
    return [*step, f"--nodelist={','.join(hosts)}", "--kill-on-bad-exit=0"]


def poll(condition: Callable[[], Any], timeout: float, every: float = 0.05) -> Any:
    """`condition`'s first true answer within `timeout` seconds, asked every `every`; None after that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(every)
    return None


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) < 8 else f"{ranks[0]}-{ranks[-1]} ({len(ranks)})"


def _requeue_signal(target: Target) -> str:
    job = json_or_none(RunDir(target.run_dir).job) if target.run_dir else None
    profile = job.get("profile") if isinstance(job, dict) else None
    name = profile.get("signal") if isinstance(profile, dict) else None
    return signals.normalise(name) if isinstance(name, str) else signals.DEFAULT


def _scancel(args: list[str]) -> None:
    done = subprocess.run(["scancel", *args], capture_output=True, text=True, timeout=60)
    if done.returncode:
        raise UserError(f"scancel refused: {(done.stderr.strip().splitlines() or ['no reason given'])[-1]}")


STOP_WAIT_S = 30  # the local controller stops its tasks within seconds (SIGTERM, then SIGKILL)


def cancel(target: Target, whole_array: bool = False) -> str:
    if target.executor == "slurm":
        # scancel exits 0 for a job that already ended (or one it does not know): ask Slurm before and after.
        before = None if whole_array else slurm_info(target.job_id).state
        if before in TERMINAL:
            raise UserError(f"job {target.job_id} already ended ({before}): nothing to cancel")
        _scancel([target.job_id])
        if not whole_array:
            deadline = time.monotonic() + STOP_WAIT_S
            while (state := slurm_info(target.job_id).state) not in TERMINAL:
                if time.monotonic() > deadline:
                    raise UserError(
                        f"job {target.job_id} is still {state} {STOP_WAIT_S} s after scancel; scancel it again"
                    )
                time.sleep(0.2)
        return f"cancelled job {target.job_id}"
    # The local controller stops every task on SIGTERM and records the job as cancelled. Only its own
    # process is signalled: after the job ended, its PID may belong to anything.
    if not is_local_job(target):
        raise UserError(f"job {target.job_id} is not running; python -m jobs.status shows how it ended")
    os.kill(int(target.job_id), signal.SIGTERM)
    if not poll(lambda: not is_local_job(target), STOP_WAIT_S, 0.1):
        raise UserError(f"job {target.job_id} did not stop within {STOP_WAIT_S} s; kill -9 {target.job_id}")
    return f"cancelled job {target.job_id}"

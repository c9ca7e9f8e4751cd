"""Every rank's Python stacks into the run folder, taken from outside the ranks (jobs.top's dump key).

py-spy, where it is installed beside the job's interpreter or on PATH, reads a process from outside: it works
while the training thread is stuck in C (an NCCL call, a read of a hung filesystem), shows every thread, and
needs nothing of the rank (not --subprocesses: one child that has ended and is not yet reaped fails the whole
dump, seen here). It needs the right to trace the rank
(the same user where the kernel's ptrace_scope is 0, or root): where that is refused, or py-spy is missing, the
rank gets the dump signal instead and faulthandler writes its stacks into the rank's log. Each rank's file,
`stacks/<stamp>/rank_N.txt`, holds py-spy's dump or the one line that says where the stacks went instead.
The rank records are the run folder's, so data: a pid in them is traced or signalled only once /proc says it is
that rank of this job (job_process), never another process that holds the number.

Stdlib only: on Slurm it runs on each node as a step beside the job's (`srun --overlap`, one task per node),
with the job's interpreter and the run's own copy of the trainer (`python -m trainer.supervise.stacks RUN STAMP`).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from trainer.run import procfs
from trainer.run.atomic import json_or_none
from trainer.supervise import relay

DUMP_SIGNAL = signal.SIGURG  # faulthandler's, in every rank of the trainer (trainer.supervise.live)
PY_SPY_S = 60  # one rank's dump; py-spy pauses the process while it reads it


def py_spy() -> str | None:
    """py-spy beside this interpreter (the job's environment), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def ranks_of(run_dir: Path, node: str | None) -> list[dict[str, Any]]:
    """The latest attempt's rank records (provenance/ranks: a resume with fewer ranks leaves older ones), those
    on `node` only where one is named. Read as data: a pid must be a real process's (not 0 or -1, which
    os.kill takes for a whole group)."""
    records = []
    for path in sorted((run_dir / "provenance" / "ranks").glob("rank_*.json")):
        record = json_or_none(path)
        if isinstance(record, dict) and type(record.get("pid")) is int and record["pid"] > 1:
            if type(record.get("rank")) is int and (node is None or record.get("host") == node):
                records.append(record)
    if not records:
        return []
    newest = max(records, key=lambda r: r.get("time") if isinstance(r.get("time"), int | float) else 0)
    attempt = (newest.get("job_id"), newest.get("restart"))
    return [r for r in records if (r.get("job_id"), r.get("restart")) == attempt]


class Job(NamedTuple):
    """The job whose ranks are dumped: its id, and whether the local executor runs it (its id is then its
    controller's pid, every rank a process below it)."""

    id: str
    local: bool


def job_process(pid: int, record: dict[str, Any], job: Job) -> str:
    """Why process `pid` is not the rank `record` names, of `job` ("" when it is). Taken from /proc, not from
    the record: the task's environment names the job (SLURM_JOB_ID, or submitit's local job id), the process
    started before the rank wrote its record (a later one only reuses its number), and a local job's rank
    descends from the job's controller."""
    if not job.id:
        return "this step does not know its job's id (SLURM_JOB_ID)"
    try:
        environ = procfs.environ(pid)
    except FileNotFoundError:
        return ""  # ended: dump_rank says so
    except OSError as exc:
        return f"its environment cannot be read ({exc.strerror or exc}): another user's process"
    key = "SUBMITIT_LOCAL_JOB_ID" if job.local else "SLURM_JOB_ID"
    if f"{key}={job.id}" not in environ:
        return f"its environment does not name job {job.id} ({key})"
    written = record.get("time")
    if isinstance(written, int | float) and procfs.start_time(pid) > written + 1.0:  # now, if /proc cannot say
        return "it started after the rank wrote its record: another process has the rank's pid"
    if job.local and not (job.id.isdigit() and pid in relay.tree(int(job.id))):
        return f"it does not descend from job {job.id}'s controller"
    return ""


def dump_rank(record: dict[str, Any], folder: Path, tool: str | None, job: Job) -> str:
    """One rank's stacks into folder/rank_N.txt: "py-spy", "faulthandler" (the signal was sent), "ended", or
    "not the job's" (the record names a process that is not this job's rank: neither traced nor signalled)."""
    pid, out = record["pid"], folder / f"rank_{record['rank']}.txt"
    if not_ours := job_process(pid, record, job):
        out.write_text(f"pid {pid} of rank {record['rank']}'s record is not job {job.id}'s: {not_ours}; not dumped\n")
        return "not the job's"
    why = "py-spy is not installed beside the job's python or on PATH"
    if tool is not None:
        try:
            done = subprocess.run([tool, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=PY_SPY_S)
            if done.returncode == 0 and done.stdout.strip():
                out.write_text(done.stdout)
                return "py-spy"
            why = f"py-spy: {(done.stderr.strip().splitlines() or ['exit ' + str(done.returncode)])[-1]}"
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = f"py-spy: {exc}"
    try:
        os.kill(pid, DUMP_SIGNAL)
    except ProcessLookupError:
        out.write_text(f"rank {record['rank']} (pid {pid}) had ended\n")
        return "ended"
    except OSError as exc:  # another user's process: neither traced nor signalled
        out.write_text(f"{why}; the dump signal was refused too ({exc})\n")
        return "refused"
    out.write_text(f"{why}; faulthandler wrote rank {record['rank']}'s stacks into its log instead\n")
    return "faulthandler"


def dump_node(run_dir: Path, stamp: str, node: str | None, job: Job) -> dict[str, str]:
    """The stacks of every rank of `job` on `node` (None: every rank recorded, the local executor's one machine),
    by rank: how each was taken."""
    folder = run_dir / "stacks" / stamp  # RunDir(run_dir).stacks: this module runs with the standard library alone
    folder.mkdir(parents=True, exist_ok=True)
    tool, records = py_spy(), ranks_of(run_dir, node)
    # A node's ranks all at once: one after another, eight ranks py-spy cannot read would take 8 x PY_SPY_S,
    # past the step's own limit (jobs.ops.act), and the ranks' stacks would be minutes apart.
    with ThreadPoolExecutor(max_workers=min(max(len(records), 1), 32)) as pool:
        how = list(pool.map(lambda r: dump_rank(r, folder, tool, job), records))
    return {str(r["rank"]): h for r, h in zip(records, how, strict=True)}


def main() -> None:
    run_dir, stamp = Path(sys.argv[1]), sys.argv[2]
    job = Job(os.environ.get("SLURM_JOB_ID", ""), local=False)  # srun's, for the step beside the job's (--jobid)
    how = dump_node(run_dir, stamp, os.environ.get("SLURMD_NODENAME") or None, job)
    print(json.dumps(how), flush=True)


if __name__ == "__main__":
    main()

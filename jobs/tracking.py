"""Finding a submitted job again, and asking Slurm (or the local process table) how it is doing."""

import argparse
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import submitit
import yaml

from jobs.local_controller import exit_codes_path
from jobs.profiles import DEFAULT_PROFILE, load_profile, run_root_of
from jobs.remote.runs import LOCAL_ROOT, RECORD
from trainer.errors import UserError
from trainer.run import failures, procfs
from trainer.run.atomic import NotAFile, open_file, read_json, read_text
from trainer.run.checkpoint_names import has_checksum, list_checkpoints
from trainer.run.failures import Failure
from trainer.run.prepare import NAME, is_job_id, not_a_run
from trainer.run.rundir import RunDir
from trainer.supervise.hostlist import expand_hostlist

TERMINAL = {
    "ENDED",  # a forgotten job without accounting, neither finished nor failed by its run directory
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "PREEMPTED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
}


def aligned(rows: list[Sequence[str]]) -> list[str]:
    """A table's lines: every column but the last padded to its widest cell, two spaces between columns."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip() for r in rows]


@dataclass(frozen=True)
class Target:
    job_id: str
    executor: str  # "slurm" | "local" | "debug"
    run_dir: Path | None
    log_dir: Path | None  # submitit's folder: each task's log, the local controller's exit codes

    def logs(self, rank: int) -> tuple[Path, Path]:
        """The task's stdout and stderr files."""
        if self.log_dir is None:
            raise UserError(f"the log folder of job {self.job_id} is unknown; pass its run directory instead")
        return task_logs(self.log_dir, self.job_id, rank)

    @property
    def log0(self) -> Path | None:
        return self.logs(0)[0] if self.log_dir is not None else None


@dataclass(frozen=True)
class JobInfo:
    state: str
    restarts: int
    nodes: str
    note: str = ""  # where the state came from, when not from Slurm
    reason: str = ""  # Slurm's reason a job pends (Dependency, Priority, DependencyNeverSatisfied, ...)


def parse_scontrol(text: str) -> list[dict[str, str]]:
    """`scontrol show job -o` output: one record per line of key=value pairs."""
    records = []
    for line in text.splitlines():
        try:
            words = shlex.split(line)
        except ValueError:  # a quote in a job's name or command: its words as they stand
            words = line.split()
        pairs = (item.split("=", 1) for item in words if "=" in item)
        records.append({k: v for k, v in pairs})
    return [r for r in records if r]


def _slurm(*cmd: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise UserError(f"{cmd[0]} not found: run this on a Slurm login node") from None


def scontrol_text(*args: str) -> str:
    """What `scontrol ARGS` prints; empty where it fails (the caller decides what silence means)."""
    return _slurm("scontrol", *args).stdout


def by_name(target: str, profile: str | None = None) -> str:
    """What a command's RUN stands for, as the path or job id it takes: a run's name (`--name`, or the folder's
    name jobs.submit printed) is its folder under a run root (run_roots: the default profile's, `profile`'s),
    refused when no root or several hold it. A path to a run, a job id or a path stays as it is; a file or
    folder here of the run's name that is no run (./jobs, README.md) does not hide it."""
    if is_job_id(target) or not NAME.fullmatch(target) or is_run(Path(target)):
        return target
    roots = run_roots(profile)
    named = [root / target for root in roots if (root / target).is_dir()]
    found = [path for path in named if is_run(path)] or named
    if len(found) > 1:
        raise UserError(
            f"{target!r} names a run in {len(found)} run roots ({', '.join(map(str, found))}); pass its path"
        )
    if found:
        return str(found[0])
    if Path(target).exists():
        return target  # a folder here that is no run: find says what it lacks
    raise UserError(
        f"no run named {target!r} in {' or '.join(map(str, roots))}; pass its run directory or job id, or "
        "--profile NAME of the profile whose run_root holds it"
    )


RUN_OR_SWEEP = "a run or sweep directory printed by jobs.submit, a run's name, or a Slurm job id"


def run_parser(module: str, doc: str, help: str = RUN_OR_SWEEP) -> argparse.ArgumentParser:
    """The parser of `python -m module` (described by its docstring's first line), with RUN as every command takes
    it (a path, a run's name or a job id: by_name), and --profile, whose run_root a name is looked up in too."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.splitlines()[0])
    parser.add_argument("target", metavar="RUN", help=help)
    parser.add_argument(
        "--profile",
        metavar="NAME|PATH",
        help="the profile that ran it: a run's name is looked up in its run_root too (always: ./runs and the "
        f"{DEFAULT_PROFILE} profile's)",
    )
    return parser


def run_roots(profile: str | None = None) -> list[Path]:
    """Where a run's name is looked up: ./runs (where runs submitted over SSH are recorded), the default
    profile's run_root and `profile`'s. A profile for another machine (login:) keeps its runs there: their
    records here are in ./runs."""
    roots = [Path(LOCAL_ROOT).resolve()]
    for name in dict.fromkeys((DEFAULT_PROFILE, profile or DEFAULT_PROFILE)):
        if not (loaded := load_profile(name)).remote.login:
            roots.append(run_root_of(loaded))
    return list(dict.fromkeys(roots))


def is_run(path: Path) -> bool:
    """A folder jobs.submit made: a run (its job, settings or command), a sweep of them, a run on a cluster."""
    files = RunDir(path)
    records = (files.job, files.config, files.command, path / RECORD)
    return path.is_dir() and (any(r.is_file() for r in records) or bool(point_dirs(path)))


def find_all(target: str) -> list[tuple[str, Target]]:
    """The jobs behind a run directory or job id (one, named ""), or behind a sweep's folder (one per point,
    named after the point's folder)."""
    target = by_name(target)
    path = Path(target)
    if path.is_dir() and not RunDir(path).job.exists() and (points := point_dirs(path)):
        return [(point.name, find(str(point))) for point in points]
    return [("", find(target))]


def find(target: str) -> Target:
    """A run directory (holding job.json), its name (by_name), or a job id."""
    target = by_name(target)
    path = Path(target)
    if path.is_dir():
        record_file = RunDir(path).job
        if not record_file.exists() and (points := point_dirs(path)):
            raise UserError(f"{path} is a sweep; pass one of its points, e.g. {points[0]}")
        if not record_file.exists():
            raise UserError(
                not_a_run(path)
                or f"{path} holds no job.json: it was never submitted; pass a run directory printed by jobs.submit"
            )
        record = read_json(
            record_file,
            "pass the Slurm job id instead (the files in logs/ are named <job id>_<rank>_log.out)",
            lambda r: isinstance(r, dict) and {"job_id", "executor", "log"} <= r.keys(),
        )
        return Target(str(record["job_id"]), record["executor"], path.resolve(), Path(record["log"]).parent)
    if not is_job_id(target):
        raise UserError(f"{target!r} is neither a run directory, a run's name nor a job id; pass one of them")
    if (log_dir := local_controller_folder(target)) is not None:  # a local job's id: never sent to Slurm
        return Target(target, "local", _run_dir_above(log_dir), log_dir)
    records = _scontrol_job(target)
    log_dir = Path(records[0]["StdOut"]).parent if records and "StdOut" in records[0] else None
    return Target(target, "slurm", _run_dir_above(log_dir) if log_dir else None, log_dir)


def _run_dir_above(log_dir: Path) -> Path | None:
    """The run directory holding a job's log folder: one with its settings or command, else None."""
    files = RunDir(log_dir.parent)
    return files.path if files.config.exists() or files.command.exists() else None


def _scontrol_job(job_id: str) -> list[dict[str, str]]:
    return parse_scontrol(_slurm("scontrol", "show", "job", "-o", job_id).stdout)


def run_processes(run_dir: Path, log_dir: Path | None) -> list[int]:
    """Live processes of a run on this machine: its tasks and controller (their command line names its logs
    folder) and what they started (RUN_DIR in their environment)."""
    needles = [f"RUN_DIR={run_dir}"] + ([str(log_dir)] if log_dir else [])
    found = []
    for pid in procfs.pids():
        if pid == os.getpid():
            continue
        try:
            words = procfs.cmdline(pid) + procfs.environ(pid)
        except OSError:
            continue  # ended, or another user's
        if any(word.endswith(n) for word in words for n in needles) and _alive(str(pid)):
            found.append(pid)
    return sorted(found)


def local_controller_folder(pid: str) -> Path | None:
    """The log folder of the local controller running as `pid` (a local job's id), or None: no such job here."""
    try:
        args = procfs.cmdline(pid)
    except OSError:
        return None
    for i, arg in enumerate(args[:-1]):
        if arg == "jobs.local_controller" and _alive(pid):
            return Path(args[i + 1]).resolve()
    return None


def slurm_info(job_id: str) -> JobInfo:
    records = _scontrol_job(job_id)
    if records:
        return scontrol_info(records[0])
    # Gone from the controller's memory: accounting still knows.
    out = _slurm("sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,NodeList").stdout.split("\n")[0]
    if not out:
        raise UserError(f"Slurm knows no job {job_id}; check the id with squeue or sacct")
    state, _, nodes = out.partition("|")
    return JobInfo(state.split()[0], 0, nodes)


def scontrol_info(record: dict[str, str]) -> JobInfo:
    """A job's state from its `scontrol show job -o` record; the reason only where it says something."""
    reason = record.get("Reason", "")
    restarts = record.get("Restarts", "0")
    return JobInfo(
        record.get("JobState", "UNKNOWN"),
        int(restarts) if restarts.isdigit() else 0,
        record.get("NodeList", "") if record.get("NodeList") != "(null)" else "",
        reason="" if reason in ("", "None") else reason,
    )


def array_tasks(spec: str) -> list[str]:
    """Slurm's array task list, e.g. "2-5%3" or "[0,4-6]", as the task ids it names."""
    out: list[str] = []
    for part in spec.strip("[]").split("%")[0].split(","):
        first, _, last = part.partition("-")
        if first.isdigit():
            out += [str(i) for i in range(int(first), int(last or first) + 1)]
    return out


def slurm_infos(job_ids: list[str], with_tasks: bool = False) -> dict[str, JobInfo]:
    """Many jobs' states in one scontrol call, then one sacct call for those the controller has forgotten; a
    sweep of 1,000 points, or jobs.list over 200 runs, costs two commands, not 1,000."""
    found: dict[str, JobInfo] = {}
    bases = sorted({job_id.split("_")[0] for job_id in job_ids})
    # One job: its own record. Several (jobs.list over many runs): every job the controller holds, in one call.
    asks = (
        [["scontrol", "show", "job", "-o", base] for base in bases]
        if len(bases) == 1
        else [["scontrol", "show", "job", "-o"]]
    )
    for ask in asks if bases else []:
        for r in parse_scontrol(_slurm(*ask).stdout):
            info = scontrol_info(r)
            if "ArrayTaskId" in r:
                for task in array_tasks(r["ArrayTaskId"]):
                    found[f"{r['ArrayJobId']}_{task}"] = info
            found[r.get("JobId", "")] = info
    # An array's tasks the controller has purged are in accounting only: with_tasks asks it for every array.
    missing = job_ids if with_tasks else [job_id for job_id in job_ids if job_id not in found]
    if missing:
        arrays = sorted({job_id.split("_")[0] for job_id in missing})
        out = _slurm("sacct", "-j", ",".join(arrays), "-X", "-n", "-P", "-o", "JobID,State,NodeList").stdout
        for line in out.splitlines():
            job, state, nodes = (line.split("|") + ["", ""])[:3]
            base, _, tasks = job.partition("_")
            info = JobInfo(state.split()[0] if state else "UNKNOWN", 0, nodes)
            for task in array_tasks(tasks) if tasks else [""]:
                found.setdefault(f"{base}_{task}" if task else base, info)
    if with_tasks:  # an array job's id: each of its tasks' states too (ID_N)
        return {k: v for k, v in found.items() if any(k == j or k.startswith(f"{j}_") for j in job_ids)}
    return {job_id: found[job_id] for job_id in job_ids if job_id in found}


def infos(targets: list[Target]) -> list[JobInfo]:
    """info() of each target, the Slurm ones asked together."""
    slurm = slurm_infos([t.job_id for t in targets if t.executor == "slurm"])
    out = []
    for target in targets:
        if (found := known_info(target, slurm)) is None:
            raise UserError(f"Slurm knows no job {target.job_id}; check the id with squeue or sacct")
        out.append(found)
    return out


def known_info(target: Target, slurm: dict[str, JobInfo]) -> JobInfo | None:
    """A job's state: a local one's from this machine, a Slurm one's from `slurm` (slurm_infos), else (forgotten,
    and no accounting to ask) from its run directory; None when nothing knows it."""
    if target.executor != "slurm":
        return local_info(target)
    return slurm[target.job_id] if target.job_id in slurm else run_dir_info(target)


def local_info(target: Target) -> JobInfo:
    if is_local_job(target):
        return JobInfo("RUNNING", 0, "localhost")
    record = local_exit_record(target)
    if record.get("cancelled"):
        state = "CANCELLED"
    else:
        # Every rank's exit decides, as srun's would: rank 0's summary.json says nothing of rank 1's crash.
        codes = record.get("codes")
        done = target.run_dir is not None and RunDir(target.run_dir).finished()
        state = "COMPLETED" if done and (codes is None or all(c == 0 for c in codes)) else "FAILED"
    return JobInfo(state, 0, "localhost")


def local_exit_record(target: Target) -> dict[str, Any]:
    """What the local controller wrote when its tasks ended: {"codes": [...], "cancelled": bool}."""
    path = exit_codes_path(target.log_dir, target.job_id) if target.log_dir else None
    if path is None or not path.exists():
        return {}
    fix = "delete it; jobs.status then reads the run directory alone"
    return read_json(path, fix, lambda r: isinstance(r, dict))  # type: ignore[no-any-return]


def is_local_job(target: Target) -> bool:
    """The job's local controller is alive: its PID runs the controller on this job's log folder.

    A PID alone is not enough: once the job ended, the system may give it to any other process.
    """
    if not _alive(target.job_id):
        return False
    if not procfs.available():
        return True  # no /proc to check with (macOS): trust the PID
    try:
        args = procfs.cmdline(target.job_id)
    except OSError:
        return False  # ended since
    folder = str(target.log_dir) if target.log_dir else None
    return any(a.endswith("local_controller") or a.endswith("local._local") for a in args) and folder in args


def _alive(pid: str) -> bool:
    """The process exists and is not a zombie (killed, its parent gone, not yet reaped)."""
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError, OverflowError):
        return False
    except PermissionError:
        return True  # another user's: it exists
    return procfs.alive(pid) or not procfs.available()  # no /proc to tell a zombie by (macOS): it exists


def info(target: Target) -> JobInfo:
    if target.executor != "slurm":
        return local_info(target)
    try:
        return slurm_info(target.job_id)
    except UserError:
        if (found := run_dir_info(target)) is None:
            raise
        return found


def run_dir_info(target: Target) -> JobInfo | None:
    """A Slurm job the controller has forgotten, on a cluster without accounting (sacct fails): its state from
    the run directory alone. None when there is none to read."""
    if target.run_dir is None or not target.run_dir.is_dir():
        return None
    files = RunDir(target.run_dir)
    note = "from the run directory: Slurm no longer knows the job, and its accounting (if any) does not either"
    if files.finished():
        return JobInfo("COMPLETED", 0, "", note)
    if files.error.exists():
        return JobInfo("FAILED", 0, "", note)
    return JobInfo("ENDED", 0, "", note)  # no summary, no error: cancelled, or stopped past a budget


def progress(run_dir: Path) -> tuple[int | None, Path | None]:
    """The last step reached and the newest checkpoint of a run that has its checksum (a torn one has none)."""
    step, files = None, RunDir(run_dir)
    if (summary := files.finished_summary()) is not None:  # the live one has no final step
        step = summary.get("final_step")
    elif files.progress.exists():
        fix = "move it aside (rewritten at the next log)"
        step = read_json(files.progress, fix, lambda r: isinstance(r, dict) and type(r.get("step")) is int)["step"]
    checkpoints = [path for _, path in list_checkpoints(files.checkpoints) if has_checksum(path)]
    return step, checkpoints[0] if checkpoints else None


def run_settings(files: RunDir) -> dict[str, Any]:
    """The run's config.yaml as a mapping, for views that do without it: {} when it is missing, unreadable, not
    UTF-8 text or not a regular file."""
    try:
        config = yaml.safe_load(read_text(files.config))
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return config if isinstance(config, dict) else {}


ATTEMPT_START = "Starting with JobEnvironment("  # what submitit's task prints first, at every start


def failed_tasks(target: Target) -> list[str]:
    """srun's own lines naming the task and node that failed, e.g. 'node2: task 3: Killed'."""
    if not (text := log_text(target.log0, limit=None)):
        return []
    text = text[max(0, text.rfind(ATTEMPT_START)) :]  # this attempt's: the log holds every requeue's
    lines = [
        line.split("srun: error:", 1)[1].strip()
        for line in text.splitlines()
        if "srun: error:" in line and (": task" in line or "Node failure" in line)  # "task 3", "tasks 0-1"
    ]
    return list(dict.fromkeys(lines))


def killed_tasks(target: Target) -> list[Failure]:
    """Ranks killed by a signal, which wrote no error of their own: from the local controller's exit codes,
    or from srun's `node2: task 3: Killed` lines in rank 0's log."""
    codes = local_exit_record(target).get("codes")
    if codes is not None:
        host = socket.gethostname()
        killed = [(rank, host, -c) for rank, c in enumerate(codes) if c and c < 0]
    else:
        # srun says `Killed` for SIGKILL; a line naming the signal (`killed by SIGTERM`) is read the same way.
        pattern = r"(\S+): tasks? (\d+)(?:-\d+)?: (?:Killed|killed by (SIG[A-Z0-9]+))"
        said = (re.fullmatch(pattern, line) for line in failed_tasks(target))
        killed = [
            (int(m.group(2)), m.group(1), signal.Signals[m.group(3) or "SIGKILL"])
            for m in said
            if m and (m.group(3) or "SIGKILL") in signal.Signals.__members__
        ]
    return [Failure(0, rank, host, "", _killed_by(signum), False, killed=True) for rank, host, signum in killed]


def _killed_by(signum: int) -> str:
    try:
        return f"killed by signal {signum} ({signal.Signals(signum).name})"
    except ValueError:
        return f"killed by signal {signum}"


def first_failure(target: Target) -> Failure | None:
    """The rank and host that failed first, and why (see trainer.run.failures)."""
    run_dir = target.run_dir
    return failures.root_cause(failures.read(run_dir) if run_dir else [], killed_tasks(target))


def failure_line(target: Target) -> str | None:
    """Why a job failed, in one line: the rank that failed first, else error.txt, else what kept every task from
    starting (srun's words in the batch log, with the fix: no Apptainer on the nodes, say)."""
    if (first := first_failure(target)) is not None:
        return first.line()
    # No rank record to read (damaged, or removed by hand): error.txt, written beside them, names the first.
    if target.run_dir and (line := log_text(RunDir(target.run_dir).error).strip()):
        return line
    return f"job {target.job_id} failed: {line}" if (line := start_failure(log_text(target.log0))) else None


# What the batch log says when a task could not start at all, and what to change (no rank wrote a record).
START_FAILURES = (
    (re.compile(r"error: (the profile's setup line \d+ failed .*?; fix that line of the profile's setup:)"), "{0}"),
    (
        re.compile(r"unrecognized option '--container-(?:image|mounts)"),
        "srun does not know --container-image: this cluster has no pyxis; ask the site for pyxis/enroot, or set "
        "container_runtime: apptainer",
    ),
    (
        re.compile(r"execve\(\): (\S*(?:apptainer|singularity)): No such file or directory"),
        "{0}: No such file or directory on the nodes: no Apptainer there; set apptainer_command: to the site's "
        "(e.g. singularity), or container_runtime: pyxis",
    ),
    (
        re.compile(r"execve\(\): (\S+): No such file or directory"),
        "{0}: No such file or directory on the nodes; set python: in the profile to an interpreter they have",
    ),
)


def requeue_line(job_id: str, log: str = "", now: str = "") -> tuple[str, str] | None:
    """Why a job Slurm requeued went back to the queue: its previous attempt's state and nodes (sacct keeps
    one record per attempt), the node srun lost (from `log`, rank 0's) when it ended NODE_FAIL, and which of
    them Slurm holds down and why; with that attempt's state. None without accounting or an earlier attempt.
    `now`: the job's state; PENDING after an attempt accounting has ended is a requeue whose next record
    accounting does not list yet (seen for a node failure's)."""
    out = _slurm("sacct", "-j", job_id, "-D", "-X", "-n", "-P", "-o", "Start,State,NodeList").stdout
    records = sorted(line.split("|") for line in out.splitlines() if line.count("|") == 2)
    requeued = requeued_records(records)
    if now == "PENDING" and records and records[-1][1].split(" ")[0] not in ("PENDING", "RUNNING", "REQUEUED"):
        requeued = records
    if not requeued:
        return None
    _, state, nodes = requeued[-1]
    state = state.split(" ")[0]
    line = f"requeued {len(requeued)} time(s); the last attempt ended {state} on {nodes}"
    if state == "NODE_FAIL" and (lost := lost_nodes(log)):
        line += f": {lost}, and Slurm requeued the job"
    return line + "".join(f"; {node} is down ({why})" for node, why in down_nodes(nodes)), state


def down_nodes(nodes: str) -> list[tuple[str, str]]:
    """Which of `nodes` (a hostlist) Slurm holds down or drained now, with its reason (sinfo -R)."""
    mine = set(_hosts(nodes))
    down = []
    for entry in _slurm("sinfo", "-h", "-R", "-o", "%N|%E").stdout.splitlines():
        hosts, _, why = entry.partition("|")
        down += [(node, why) for node in _hosts(hosts) if node in mine]
    return down


NODE_FAILURE = re.compile(r"srun: error: Node failure on (\S+)")


def lost_nodes(log: str) -> str:
    """The nodes srun lost in the latest attempt that lost any, as its lines in rank 0's log name them (durable,
    unlike sinfo's down list, which forgets a node once it is back): "node2 lost (srun: Node failure on node2)",
    or "" (pure)."""
    found = list(NODE_FAILURE.finditer(log))
    if not found:
        return ""
    start = log.rfind(ATTEMPT_START, 0, found[-1].start())  # that attempt's lines only
    nodes = list(dict.fromkeys(m.group(1) for m in found if m.start() > start))
    return f"{', '.join(nodes)} lost (srun: {'; '.join(f'Node failure on {n}' for n in nodes)})"


def requeued_records(records: list[list[str]]) -> list[list[str]]:
    """sacct's records of a job's attempts (-D, by start) that a requeue followed: every one but the newest,
    and the newest too while Slurm still calls it REQUEUED (the next is not listed yet). Not the job's final
    record, once it ended."""
    return [r for k, r in enumerate(records) if k < len(records) - 1 or r[1].startswith("REQUEUED")]


def _hosts(hostlist: str) -> list[str]:
    try:
        return expand_hostlist(hostlist)
    except (ValueError, UserError):
        return []


def start_failure(log: str) -> str | None:
    """Why the tasks could not start, from a batch log's text (srun's own words), with the fix; None if it
    says nothing known (pure)."""
    for pattern, fix in START_FAILURES:
        if found := pattern.search(log):
            return fix.format(*found.groups())
    return None


def log_text(log: Path | None, limit: int | None = 65536) -> str:
    """The end of a log file (of any run file read as text); empty when there is none or it is not a regular
    file."""
    try:
        return read_text(log, errors="replace")[-limit if limit else 0 :] if log else ""
    except OSError:
        return ""


FULL_BELOW = 1 << 20  # a run directory's disk with less free space than this cannot take a rank's error record


def full_disk_line(run_dir: Path) -> str | None:
    """For a failed job that left no record at all: the full disk it could not write to, if that is why."""
    from trainer.run.atomic import free_space

    try:
        full = run_dir.is_dir() and shutil.disk_usage(run_dir).free < FULL_BELOW
    except OSError:
        return None
    if not full:
        return None
    return (
        f"no space left in {run_dir} ({free_space(run_dir)}): no rank could record its error there; free space "
        f"on that disk, then python -m jobs.submit --resume {run_dir}"
    )


def point_dirs(folder: Path) -> list[Path]:
    """A sweep folder's points: the run directories in it that name their job."""
    return sorted(d for d in folder.iterdir() if RunDir(d).job.is_file())


def task_logs(log_dir: Path, job_id: str, rank: int) -> tuple[Path, Path]:
    """Where submitit writes a task's stdout and stderr (on Slurm, stderr goes to stdout's file)."""
    paths = submitit.core.utils.JobPaths(log_dir, job_id, rank)
    return Path(paths.stdout), Path(paths.stderr)


def tail(
    path: Path,
    done: Callable[[], bool],
    poll_s: float,
    sink: TextIO | None = None,
    offset: int = 0,
    stderr: Path | None = None,
) -> None:
    """Copy what is written to `path` from byte `offset` to `sink` (stdout), until a read made after done()
    said yes; with `stderr`, the task's stderr file too (a local task's: on Slurm it is stdout's file), line by
    line in the order the polls find them. On a terminal the trainer's progress lines become one line kept at
    the bottom (ProgressLine)."""
    sink = sink or sys.stdout
    out = ProgressLine(sink) if sink.isatty() else None
    streams = [_Stream(path, offset)] + ([_Stream(stderr, 0)] if stderr is not None and stderr != path else [])
    while True:
        finished = done()
        for stream in streams:
            text = stream.read(whole=finished or len(streams) == 1)
            if text:
                out.write(text) if out is not None else sink.write(text)
        sink.flush()
        if finished:
            if out is not None:
                out.close()
            return
        time.sleep(poll_s)


class _Stream:
    """One log file followed from a byte offset. With another beside it, only whole lines (or a `\r` progress
    bar's redraws) are handed on, so the two never interleave inside a line."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path, self.position, self.held = path, offset, ""

    def read(self, whole: bool) -> str:
        try:
            with open_file(self.path) as f:  # bytes: an offset is a byte count (a follow over SSH resumes there)
                f.seek(self.position)
                self.held += f.read().decode(errors="replace")
                self.position = f.tell()
        except (FileNotFoundError, NotAFile):  # not written yet; or a FIFO, a folder: no log to follow
            pass
        cut = len(self.held) if whole else max(self.held.rfind("\n"), self.held.rfind("\r")) + 1
        text, self.held = self.held[:cut], self.held[cut:]
        return text


# The trainer's progress line as its log has it (trainer.meter.Progress, one per log interval).
PROGRESS_LINE = re.compile(r"^step \d+/\d+ elapsed \S+ eta \S+ ")


class ProgressLine:
    """What --wait and jobs.wait print on a terminal: the log's other lines as they are, and its progress lines
    (step of total, elapsed, ETA, steps per second, the last loss) as one line redrawn in place below them, as
    tqdm does. Not a terminal (CI, a pipe, a file): the log's lines unchanged, one progress line each."""

    def __init__(self, sink: TextIO) -> None:
        self.sink, self.partial, self.shown = sink, "", ""
        self.midline = False  # a plain line's start was written, its end not yet: pass text through to it

    def write(self, text: str) -> None:
        if self.midline:
            head, newline, text = text.partition("\n")
            self.sink.write(head + newline)
            if not newline:
                return
            self.midline = False
            self._show(self.shown)
        *lines, self.partial = (self.partial + text).split("\n")
        for line in lines:
            if PROGRESS_LINE.match(line):
                self._show(line)
            else:
                self._clear()
                self.sink.write(line + "\n")
                self._show(self.shown)
        if self.partial and not "step "[: len(self.partial)] == self.partial[:5]:
            # Not the start of a progress line (a command's own \r progress bar, a prompt): shown as it comes.
            self._clear()
            self.sink.write(self.partial)
            self.partial, self.midline = "", True

    def close(self) -> None:
        if self.partial or self.midline:
            self.write("\n")
        if self.shown:
            self.sink.write("\n")  # the last progress line stays, above what follows
        self.shown = ""

    def _show(self, line: str) -> None:
        if line:
            self.sink.write("\r" + line.ljust(len(self.shown)))
        self.shown = line

    def _clear(self) -> None:
        if self.shown:
            self.sink.write("\r" + " " * len(self.shown) + "\r")

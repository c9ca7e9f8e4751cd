"""jobs.top's live view as data: a frame is the job's line and a row per rank (from rank 0's live.json, else from
the run's files), made here or streamed from a login node as JSON lines; the keys read between frames and what
they do, here or on the login node; the frame as text."""

import json
import math
import select
import statistics
import subprocess
import sys
import termios
import time
import tty
from typing import Any

from jobs.ops import act
from jobs.remote import runs
from jobs.remote.ssh import Connection
from jobs.tracking import TERMINAL, JobInfo, Target, aligned, find, info, run_settings
from trainer.errors import UserError, printable
from trainer.run import failures, ledger
from trainer.run.atomic import json_or_none
from trainer.run.rundir import RunDir
from trainer.supervise import live
from trainer.supervise.attempts import slurm_time_left

COLUMNS = ("rank", "node", "state", "step", "step_s", "median_s", "data", "loss", "idle_s", "seen_s", "mem_mb", "gpu")
STATES = {  # a training rank's section (trainer.supervise.watchdog) as the view names it
    "startup": "starting",
    "rendezvous": "starting",
    "data": "training",
    "step": "training",
    "eval": "training",
    "checkpoint": "checkpointing",
    "requeue": "checkpointing",
    "finish": "done",
    "command": "running",
    "frozen": "hung",
}
FORMATS = {"data": ".0%", "step_s": ".3f", "median_s": ".3f", "loss": ".4g", "mem_mb": ".0f"}  # numbers' cells
FRESH_S = 3.0  # --once waits this long for rank 0's first live.json after asking
STRAGGLER = 1.5  # a rank whose own work per step is this many times the ranks' median is marked
MIN_LAG_S = 0.005  # and longer than the median by this much (a few ms of data wait is no straggler)


def view(
    target: Target, job: JobInfo, beats: list[dict[str, Any]] | None, now: float, world_size: int | None = None
) -> dict[str, Any]:
    """What the screen shows, as plain data: the job's line and a row per rank (what a login node sends)."""
    run_dir = target.run_dir
    files = RunDir(run_dir) if run_dir is not None else None
    attempts = json_or_none(files.attempts) if files else None
    attempts = attempts if isinstance(attempts, list) else []
    config = run_settings(files) if files else {}
    steps = config.get("steps") if isinstance(config.get("steps"), int) else None
    hang = config.get("hang") if isinstance(config.get("hang"), dict) else {}
    head: dict[str, Any] = {"job": target.job_id, "state": job.state, "attempt": len(attempts) or None}
    if attempts and isinstance(attempts[0], dict) and isinstance(attempts[0].get("started"), int | float):
        head["elapsed_s"] = round(now - attempts[0]["started"])
    if attempts and isinstance(attempts[-1], dict) and attempts[-1].get("in_job_restart"):
        head["restarted_in_job"] = attempts[-1]["in_job_restart"]
    if target.executor == "slurm" and job.state == "RUNNING":
        head["remaining_s"] = _time_left(target.job_id, now)
    running = job.state
    if job.state == "RUNNING" and not beats and files and not files.command.exists():  # the trainer, silent
        running = "no heartbeats: hang.enabled=false" if hang.get("enabled") is False else ""
        # Between attempts a failure is on record (the restart clears it); without one, rank 0 does not answer.
        failed = run_dir is not None and bool(failures.read(run_dir))
        running = running or ("starting" if not attempts else "restarting" if failed else "no answer from rank 0")
    rows = _rows(target, beats or [], running, now, stale_s=2 * float(hang.get("beat_s", 5.0)) + 1)
    known = {r["rank"] for r in rows}
    rows += [{"rank": r, "state": "no heartbeat yet"} for r in range(world_size or 0) if r not in known and beats]
    rows.sort(key=lambda r: r["rank"] if isinstance(r.get("rank"), int) else -1)
    zero = next((r for r in rows if r["rank"] == 0), None)
    if zero and zero.get("median_s"):
        head["steps_per_s"] = round(1 / zero["median_s"], 3)
        if isinstance(zero.get("step"), int) and steps:
            head["eta_s"] = round(max(steps - zero["step"], 0) * zero["median_s"])
    if run_dir is not None and (parts := ledger.read(run_dir, job.state)):
        head["goodput"], head["elapsed_s"] = parts["goodput"], round(parts["wall"])  # from the submission
    return {"head": head, "rows": rows}


def _rows(target: Target, beats: list[dict[str, Any]], state: str, now: float, stale_s: float) -> list[dict[str, Any]]:
    """A row per rank: from the live heartbeats where there are some, else what the run folder tells (a
    script's ranks: their node and the age of their log). A beat older than `stale_s`: a rank that stopped."""
    rows, own = [], {}
    # A straggler by its own work: DDP's all-reduce makes every rank's step time the slowest's. With
    # log.stragglers, the ranks' own data and compute time per step; else their wait for data alone.
    key = "own_s" if any(isinstance((b.get("stats") or {}).get("own_s"), int | float) for b in beats) else "data_s"
    for beat in sorted(beats, key=lambda b: b.get("rank") if isinstance(b.get("rank"), int) else -1):
        try:
            row, mine = _row(beat, now, stale_s), (beat.get("stats") or {}).get(key)
        except (AttributeError, TypeError, ValueError):
            continue  # a damaged beat: the others still show
        rows.append(row)
        own[row["rank"]] = mine
    if not rows and target.run_dir is not None:
        rows = _rows_from_files(target, state, now)
    times = [v for v in own.values() if isinstance(v, int | float)]
    if len(times) > 1:
        typical = statistics.median(times)
        for row in rows:
            value = own.get(row["rank"])
            if isinstance(value, int | float) and value > STRAGGLER * typical and value - typical > MIN_LAG_S:
                row["mark"] = "straggler"
    for row in rows:
        if row["state"] == "hung":
            row["mark"] = "hung"
    return rows


def _row(beat: dict[str, Any], now: float, stale_s: float) -> dict[str, Any]:
    stats = beat.get("stats") or {}
    written = float(beat.get("written") or now)
    progressed = float(beat.get("progressed") or beat.get("since") or written)
    hung = now - written > stale_s or beat.get("section") == "frozen"  # it stopped beating, or its command froze
    return {
        "rank": beat.get("rank"),
        "node": beat.get("host", ""),
        "state": "hung" if hung else STATES.get(str(beat.get("section")), str(beat.get("section"))),
        "step": beat.get("step") if isinstance(beat.get("step"), int) and beat["step"] >= 0 else None,
        "step_s": stats.get("step_s"),
        "median_s": stats.get("step_s_median"),
        "data": stats.get("data_share"),
        "loss": stats.get("loss"),
        "idle_s": round(max(written - progressed, 0.0), 1),  # as of its beat: no step since then
        "seen_s": round(max(now - written, 0.0), 1),  # its beat's age (hang.beat_s apart; rank 0's is now)
        "mem_mb": stats.get("host_mem_mb"),
        "gpu": _gpu(stats),
    }


def _rows_from_files(target: Target, state: str, now: float) -> list[dict[str, Any]]:
    """No live heartbeats (a -- COMMAND run, a job not running, a trainer between attempts): each rank's node from
    its provenance record, the seconds since its log last grew, and `state` (the job's, or the view's own word)."""
    assert target.run_dir is not None
    rows = []
    for path in sorted((RunDir(target.run_dir).provenance / "ranks").glob("rank_*.json")):
        record = json_or_none(path)
        if not isinstance(record, dict) or not isinstance(record.get("rank"), int):
            continue
        rank = record["rank"]
        idle = None
        try:
            idle = round(now - target.logs(rank)[0].stat().st_mtime, 1)
        except (OSError, UserError):
            pass
        what = {"RUNNING": "running", "COMPLETED": "done"}.get(state, state if state.islower() else state.lower())
        rows.append({"rank": rank, "node": record.get("host", ""), "state": what, "idle_s": idle})
    return sorted(rows, key=lambda r: r["rank"])


def _gpu(stats: dict[str, Any]) -> str | None:
    if "gpu_mem_mb" not in stats:
        return None
    util = f" {stats['gpu_util']:.0f}%" if isinstance(stats.get("gpu_util"), int | float) else ""
    return f"{stats['gpu_mem_mb']:.0f}MB{util}"


def head_line(head: dict[str, Any]) -> str:
    parts = [f"job {head.get('job')}: {head.get('state')}"]
    if head.get("attempt"):
        again = f", restarted in the job {head['restarted_in_job']}x" if head.get("restarted_in_job") else ""
        parts.append(f"attempt {head['attempt']}{again}")
    for key, label in (("elapsed_s", "elapsed"), ("remaining_s", "remaining"), ("eta_s", "eta")):
        if isinstance(head.get(key), int | float):
            parts.append(f"{label} {_clock(head[key])}")
    if isinstance(head.get("steps_per_s"), int | float):
        parts.append(f"{head['steps_per_s']:.3g} steps/s")
    if isinstance(head.get("goodput"), int | float):
        parts.append(f"goodput {head['goodput']:.0%}")
    return "  ".join(parts)


def cells(row: dict[str, Any]) -> list[str]:
    """A row's cells as text (plain printable text: a login node's reply is data)."""
    out = []
    for column in COLUMNS:
        value = row.get(column)
        if value is None:
            text = "-"
        elif column in FORMATS and isinstance(value, int | float):
            text = format(value, FORMATS[column])
        else:
            text = str(value)
        out.append(printable(text))
    if row.get("mark") and row["mark"] != row.get("state"):  # a hung rank's state says so already
        out[2] += f" ({row['mark']})"
    return out


def text(frame: dict[str, Any]) -> str:
    """The --once table: the job's line, the header, a line per rank with the rank first."""
    table = [list(COLUMNS), *[cells(r) for r in frame["rows"]]]
    return "\n".join([head_line(frame["head"]), *aligned(table)])


def frame_of(target: Target, wait_s: float) -> dict[str, Any]:
    """Ask rank 0 for live.json and build the view from the freshest one within `wait_s`."""
    beats, world_size = None, None
    job = info(target)
    if target.run_dir is not None and job.state == "RUNNING" and not RunDir(target.run_dir).command.exists():
        asked = time.time()
        live.request(target.run_dir)
        deadline = time.monotonic() + wait_s
        while True:
            record = live.read(target.run_dir)
            if record is not None and record.get("time", 0) >= asked - 1.0:
                beats = [b for b in record["beats"] if isinstance(b, dict)]
                world_size = record.get("world_size") if isinstance(record.get("world_size"), int) else None
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
    return view(target, job, beats, time.time(), world_size)


class Keyboard:
    """Single key presses from a terminal (cbreak: no Enter needed, Ctrl-C still works); none elsewhere."""

    def __init__(self) -> None:
        self.fd = sys.stdin.fileno() if sys.stdin.isatty() else None
        self.saved: Any = None

    def __enter__(self) -> "Keyboard":
        if self.fd is not None:
            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None and self.saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def read(self, timeout: float) -> str:
        """A key pressed within `timeout` seconds, else "" (after waiting them out)."""
        if self.fd is None:
            time.sleep(timeout)
            return ""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        return sys.stdin.read(1) if ready else ""


CONFIRM_S = 10.0  # how long cancel's question waits for its y


def acting(do: Any, keyboard: Keyboard, every_s: float) -> Any:
    """Between frames: wait up to `every_s` for a key, act on it, and yield the line to show; returns on q (the
    view ends). `do(action)` runs "save", "requeue", "dump" or "cancel" here or on the login node."""
    confirm, note, asked = False, "", 0.0
    while True:
        key = keyboard.read(every_s)
        if confirm and not key and time.monotonic() < asked + CONFIRM_S:
            yield note  # still waiting for the answer
            continue
        if confirm:
            confirm, note = False, do("cancel") if key == "y" else "not cancelled"
        elif key == "c":
            confirm, note, asked = True, "cancel the job? y to confirm, any other key not to", time.monotonic()
        elif key in ("s", "r", "d"):
            note = do({"s": "save", "r": "requeue", "d": "dump"}[key])
        elif key == "q":
            return
        yield note


def do_here(target: Target) -> Any:
    def do(action: str) -> str:
        try:
            actions = {"cancel": act.cancel, "save": act.save_now, "requeue": act.requeue_now, "dump": act.dump_stacks}
            return actions[action](target)
        except (UserError, OSError, ValueError) as exc:  # a rank gone meanwhile, a damaged record: said, not raised
            return f"error: {exc}"

    return do


def do_there(run: runs.RemoteRun) -> Any:
    flags = {"save": "--save-now", "requeue": "--requeue-now", "dump": "--dump-stacks"}

    def do(action: str) -> str:
        module, args = (
            ("jobs.cancel", [run.run_dir]) if action == "cancel" else ("jobs.top", [run.run_dir, flags[action]])
        )
        argv = Connection(run.login).argv("run", run.cwd, module, *args)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return f"error: the login node did not answer {action} within 60 s"
        said = (done.stdout + done.stderr).strip().splitlines()
        return printable(said[-1] if said else f"exit {done.returncode}")

    return do


def local_frames(target: Target, every_s: float, between: Any = None) -> Any:
    """A frame each `every_s` until the job ends; `between` (acting) waits for a key meanwhile."""
    note = ""
    while True:
        frame = frame_of(target, wait_s=FRESH_S) | {"note": note}  # rank 0 answers within its second
        yield frame
        if frame["head"].get("state") in TERMINAL:
            return
        if between is None:
            time.sleep(every_s)
        elif (note := next(between, None)) is None:  # q
            return


def remote_frames(run: runs.RemoteRun, every_s: float, between: Any = None) -> Any:
    """The login node's frames over one connection: one JSON object a line, each checked before use. Between
    frames, `between` (acting) takes a key pressed meanwhile."""
    argv = Connection(run.login).argv("run", run.cwd, "jobs.top", run.run_dir, "--stream", "--every", str(every_s))
    note, shown = "", 0
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as ssh:
        assert ssh.stdout is not None and ssh.stderr is not None
        try:
            for raw in ssh.stdout:
                try:
                    frame = json.loads(raw)
                except ValueError:
                    continue  # not a frame: a banner, a stray line
                if not (isinstance(frame, dict) and isinstance(frame.get("head"), dict)):
                    continue
                rows = frame.get("rows")
                frame["rows"] = [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []
                shown += 1
                yield frame | {"note": note}
                if between is not None and (note := next(between, None)) is None:  # q
                    return
            said = ssh.stderr.read().decode(errors="replace").strip().splitlines()  # the stream ended: why
            if ssh.wait() != 0 and not shown:
                line = printable(said[-1] if said else "no reason given")
                raise UserError(f"jobs.top on {run.login} failed: {line.removeprefix('error: ')}")
        finally:
            ssh.kill()


_TIME_LEFT: dict[str, tuple[float, int | None]] = {}  # job -> (asked at, seconds left then): squeue each 10 s


def _time_left(job_id: str, now: float) -> int | None:
    asked, left = _TIME_LEFT.get(job_id, (0.0, None))
    if now - asked > 10.0:
        asked, left = now, slurm_time_left(job_id)
        _TIME_LEFT[job_id] = (asked, left)
    return None if left is None else max(int(left - (now - asked)), 0)


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):  # a login node's reply is data
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


def frames(run: str, every_s: float, keyboard: Keyboard | None = None) -> Any:
    """The run's frames, made here or streamed from its login node (a run submitted over SSH); with a
    keyboard, its keys act on the run between frames, here or there."""
    if (remote := runs.load(run)) is not None:
        between = acting(do_there(remote), keyboard, 0.05) if keyboard is not None else None
        return remote_frames(remote, every_s, between)
    target = find(run)
    return local_frames(target, every_s, acting(do_here(target), keyboard, every_s) if keyboard is not None else None)

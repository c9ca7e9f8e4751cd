"""What each task runs for `python -m jobs.submit [flags] -- COMMAND ...`: your command, with torchrun's variables.

Torch-free: the task only starts your command, hands the requeue signal to it where it can take it, and acts
on its exit code.
- RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR,
  MASTER_PORT from the same reading of the environment the trainer uses (trainer.supervise.launcher), RUN_DIR, and
  REQUEUE_SIGNAL: `torch.distributed.init_process_group("env://")` just works.
- The requeue signal goes to the command's processes that handle it; a command with none is stopped
  (trainer.supervise.relay). After the signal, any non-zero exit is a stop to requeue, not a failure.
- Exit 0: done. Exit 144 (trainer.requeue.REQUEUE_EXIT): saved, requeue me; rank 0 records the stop and
  requeues the job as the trainer does, and the command starts again in the same run directory. Any other
  exit: this rank failed; it is recorded (errors/, error.txt) with the exception that torch's `@record` wrote
  to TORCHELASTIC_ERROR_FILE (its traceback kept in errors/), else the last line of the traceback the command
  wrote, and the job ends. SIGTERM to the task (a cancel, a requeue) stops the command and records nothing.
"""

import contextlib
import glob
import json
import os
import re
import resource
import runpy
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trainer.config.schema import HangConfig
from trainer.errors import UserError
from trainer.imports import user_imports
from trainer.requeue import PROGRESS_ENV, REQUEUE_EXIT
from trainer.run import failures, ledger, procfs, provenance
from trainer.run.atomic import write_text
from trainer.run.rundir import RunDir
from trainer.supervise import relay, signals
from trainer.supervise.attempt import Attempt, exit_word
from trainer.supervise.attempts import Attempts, leave, record_stop
from trainer.supervise.launcher import DistEnv, resolve, torchrun_variables
from trainer.supervise.rendezvous import agree_port
from trainer.supervise.signals import JobSettings
from trainer.supervise.watchdog import CHECK_S, Beat, CommandWatch, FileBoard, culprit, progress_path

RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?")
PYTHON_ENV = "SLURM_DDP_PYTHON"
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"  # torch.distributed.elastic's name: where @record writes
PEER_WAIT_S = 30.0  # rank 0, after its command asked for a requeue: how long the others get to save and exit


def variables(env: DistEnv, run_dir: str, settings: JobSettings) -> dict[str, str]:
    """What the command gets on top of the task's environment (OMP_NUM_THREADS only when unset)."""
    given = torchrun_variables(env)
    if "OMP_NUM_THREADS" in os.environ:
        del given["OMP_NUM_THREADS"]
    # No NVIDIA device on this node (the driver's control file, read without importing torch):
    if not os.path.exists("/dev/nvidiactl") and "ACCELERATE_USE_CPU" not in os.environ:
        # accelerate distributes over CPU processes only when told (`accelerate launch` says so on a machine
        # without GPUs); without it every rank trains alone, undistributed
        given["ACCELERATE_USE_CPU"] = "true"
    # PYTHONFAULTHANDLER: a Python command stopped as hung (SIGABRT) writes every thread's stack first.
    # PYTHON_ENV: the interpreter the task runs in, for a command that names it (bash -c), whatever PATH holds.
    return given | {
        "RUN_DIR": run_dir,
        signals.ENV: settings.signal,
        "PYTHONFAULTHANDLER": "1",
        PYTHON_ENV: sys.executable,
    }


def run(
    command: list[str],
    cwd: str,
    run_dir: str,
    job: dict[str, Any],
    in_process: bool = False,
    restart_args: list[str] | None = None,
) -> None:
    """Run `command` as this task's rank; `job` is the JobSettings as a plain dict (what submitit sends)."""
    settings = JobSettings(**job)
    folder = Path(run_dir)
    command = with_restart_args(command, restart_args or [], run_dir, cwd)
    env = agree_port(resolve(os.environ), folder)
    print(env.describe(), flush=True)
    provenance.record_start(folder, env.ids(), env.slurm_job_id)
    if env.is_main:  # at once: a command's steps are its own (the trainer's rank 0 waits for its first step)
        provenance.report_environment(folder)
    attempts = Attempts(folder) if env.is_main else None
    if env.is_main:
        cause = failures.clear(folder, procfs.start_time())
        _clear_other_attempts(RunDir(folder).exits, env.attempt_key)
        RunDir(folder).progress.unlink(missing_ok=True)  # an earlier attempt's: this one's steps are its own
        assert attempts is not None
        attempts.start(None, env.restart_count, env=env, cause=cause)  # known once the command reports one
    started = time.time()
    ended = (
        _run_in_process(command, cwd, env, run_dir, settings)
        if in_process
        else _run(command, cwd, env, run_dir, settings, Reported(attempts))
    )
    ended = after_the_signal(ended, env)
    if ended.terminated:  # a cancel, a requeue, a peer's failure: whoever stopped the job says why
        raise SystemExit(128 + signal.SIGTERM)
    exited = RunDir(folder).exits
    if ended.code == 0 or ended.code == REQUEUE_EXIT or ended.signalled:
        # This rank's word for rank 0, which waits for every rank's before it requeues: a rank whose command
        # finished before the signal came says so too, or rank 0 would wait out PEER_WAIT_S past the limit.
        write_text(exited / exit_word(env.attempt_key, env.rank), str(ended.code))
    if ended.code == REQUEUE_EXIT or ended.signalled:
        _stop_for_requeue(env, attempts, settings, folder, ended)  # it returns when rank 0 had finished the run
        return
    if ended.code != 0:
        failures.record(folder, failure(command, ended, env))
        raise SystemExit(1)
    if attempts is not None:
        attempts.stop("finished", None)
        summary = {"finished": True, "command": command, "exit_code": 0, "world_size": env.world_size}
        summary |= {"wall_time_s": round(attempts.wall_time_s(), 3), "last_attempt_s": round(time.time() - started, 3)}
        # The command's own start-up (imports, its process group) counts as training: the tool cannot see it.
        parts = ledger.of_run(folder, attempts.items, attempts.items[-1]["stop"]["time"], env.world_size)
        summary |= script_totals(attempts) | {"ledger": parts}
        write_text(RunDir(folder).summary, json.dumps(summary, indent=2) + "\n")


def _stop_for_requeue(
    env: DistEnv, attempts: Attempts | None, settings: JobSettings, folder: Path, ended: "Ended"
) -> None:
    """Leave for a requeue (rank 0 first waits for its peers' exit words), unless rank 0 finished the run."""
    # Asked for (exit 144), or the command ended after the requeue signal, whatever its code: it saved what
    # it could and stopped (an exit 0 from a handler too: Lightning's), or was stopped for the requeue
    # (no handler, or past its grace). The tool cannot know it had finished its work: it is requeued, and
    # a command that resumes from its own save finishes at once. Requeue, neither fail nor finish.
    if attempts is None:
        if finished_by_rank_0(folder):  # the signal came as the commands ended: rank 0 finished the run
            return
        raise leave(env, True)
    # Each rank saves on its own signal; a requeue now would kill a peer still saving. Wait for them
    # (bounded: a peer that never got the signal must not hold the job until its time limit).
    exited = RunDir(folder).exits
    relay.until(lambda: len(list(exited.glob(f"{env.attempt_key}_rank_*"))) >= env.world_size, PEER_WAIT_S, 0.1)
    requeued = record_stop(env, attempts, settings, None, folder, ended.signalled_at)
    raise leave(env, requeued)


SIGNAL_LAG_S = 3.0  # how long after its peer a node's task may see the requeue signal (the fan-out, a poll)


def after_the_signal(ended: "Ended", env: DistEnv, wait_s: float = SIGNAL_LAG_S) -> "Ended":
    """`ended`, signalled when its command failed on a peer's lost connection because the job is stopping for a
    requeue: a peer's task saw the signal first and stopped its command, this one's had not seen it yet. Then
    the error is a consequence of the tool's stop, said in one line on stderr, not this rank's failure."""
    if ended.signalled or ended.terminated or ended.code in (0, REQUEUE_EXIT) or not env.attempt:
        return ended
    head, sep, message = ended.error.partition(": ")
    if not ended.error or not failures.is_peer_error(head.rsplit(".", 1)[-1] if sep else "", message or head):
        return ended
    files = [Attempt.of(env.attempt).node_signal, Attempt.of(env.attempt).signal]
    if not relay.until(lambda: any(os.path.exists(f) for f in files), wait_s, relay.POLL_S):
        return ended
    print(f"requeue signal: the command ended on a peer's lost connection ({ended.error}) as the job stopped "
          "for a requeue: a consequence of the stop, not a failure", file=sys.stderr, flush=True)  # fmt: skip
    return replace(ended, signalled_at=time.time(), error="", words="")


def script_totals(attempts: Attempts) -> dict[str, Any]:
    """What the tool knows of a command's attempts: how many, why each stopped, how long each ran; the steps
    done again only where the command reports its step (trainer.requeue.progress(step)), else null: unknown."""
    ran = [round(a["stop"]["time"] - a["started"], 3) for a in attempts.items if a.get("stop")]
    return attempts.totals() | {"attempts": len(attempts.items), "attempt_s": ran}


# In --restart-args: the newest of a pattern's matches (the Trainer's checkpoint-N/ folders), once one exists.
LATEST = re.compile(r"\{LATEST:([^{}]+)\}")


def with_restart_args(command: list[str], words: list[str], run_dir: str, cwd: str) -> list[str]:
    """`command` with {RUN_DIR} filled in, and `words` (--restart-args, the same) added once their last word
    names a file that exists: the script's own checkpoint, after a start that saved one (never the first).
    Words that hold {LATEST:pattern} are added once each pattern matches, the newest match in its place."""
    command, words = (
        [w.replace("{RUN_DIR}", run_dir) for w in command],
        [w.replace("{RUN_DIR}", run_dir) for w in words],
    )
    patterns = [pattern for word in words for pattern in LATEST.findall(word)]
    if patterns:
        found = {pattern: newest(pattern, cwd) for pattern in patterns}
        if None in found.values():
            return command
        return [*command, *(LATEST.sub(lambda m: found[m.group(1)] or "", word) for word in words)]
    return [*command, *words] if words and (Path(cwd) / words[-1]).is_file() else command


def newest(pattern: str, cwd: str) -> str | None:
    """The newest of the files or folders `pattern` matches, relative to `cwd` as the command reads it: by the
    numbers in their names where only those differ (checkpoint-10 after checkpoint-9, whichever was written
    last), else the last modified; None while nothing matches."""
    matches = glob.glob(pattern, root_dir=cwd)
    if len({re.sub(r"\d+", "#", match) for match in matches}) == 1:
        return max(matches, key=lambda match: [int(n) for n in re.findall(r"\d+", match)])
    return max(matches, key=lambda match: _mtime(os.path.join(cwd, match)), default=None)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:  # removed since it was listed (the Trainer's save_total_limit drops its oldest)
        return float("-inf")


def _clear_other_attempts(exits: Path, attempt_key: str) -> None:
    """Remove the exit words of earlier attempts; this attempt's may be there already (a command that ended
    before rank 0 got here), so those stay, and so do words being written (write_text's hidden temporary file:
    removing one made a fast peer's rename fail, seen once in CI)."""
    for path in exits.glob("*rank_*"):
        if not path.name.startswith((f"{attempt_key}_rank_", f"{attempt_key}_frozen_", ".")):
            path.unlink(missing_ok=True)


def finished_by_rank_0(folder: Path) -> bool:
    """Rank 0's word on this attempt, which it records once its own command ended: finished, or stopped. A
    peer whose command the requeue signal stopped after the last step must not requeue a finished run (the
    local controller restarts the tasks if any exits 144)."""
    deadline = time.monotonic() + PEER_WAIT_S
    while time.monotonic() < deadline:
        try:
            stop = Attempts(folder).items[-1].get("stop")
        except (UserError, IndexError):  # not started yet, or a history the main rank reports itself
            stop = None
        if stop:
            return bool(stop.get("reason") == "finished")
        time.sleep(0.1)
    return False


@dataclass(frozen=True)
class Ended:
    """How the command ended: its exit code (negative: killed by that signal) and what happened meanwhile."""

    code: int
    signalled_at: float | None = None  # when the requeue signal came, if it did
    terminated: bool = False  # the task was told to stop (SIGTERM, SIGINT) and stopped the command
    error: str = ""  # the last line of the last Python traceback the command wrote to stderr
    words: str = ""  # else its last non-empty line there (argparse's `error: ...`, a sys.exit("...") message)
    cannot_start: str = ""  # why the command could not be started (not found, permission denied)
    hung: str = ""  # why the task stopped it as hung (CommandWatch)
    culprit: tuple[int, str] | None = None  # the rank and host a hang is blamed on, when another rank's

    @property
    def signalled(self) -> bool:
        return self.signalled_at is not None


def failure(command: list[str], ended: Ended, env: DistEnv) -> failures.Failure:
    """This rank's failure record: the command's own exception line where it wrote one."""
    if ended.cannot_start:
        return failures.Failure(time.time(), env.rank, env.node_name, "", f"{command[0]}: {ended.cannot_start}", False)
    if ended.hung:
        rank, host = ended.culprit or (env.rank, env.node_name)
        return failures.Failure(time.time(), rank, host, "", ended.hung, False)
    status = f"{' '.join(command)} exited with status {ended.code}"
    status += f" ({_signal_name(-ended.code)})" if ended.code < 0 else ""
    if ended.code < 0 or not (ended.error or ended.words):
        # killed by a signal (the OOM killer, a lost node's kill): killed, as the node may be why
        return failures.Failure(time.time(), env.rank, env.node_name, "", status, False, killed=ended.code < 0)
    if not ended.error:  # no traceback: the command's own last words say why
        return failures.Failure(time.time(), env.rank, env.node_name, "", f"{ended.words} ({status})", False)
    head, sep, message = ended.error.partition(": ")
    kind = head.rsplit(".", 1)[-1] if sep else ended.error
    message = f"{message} ({status})" if sep else f"({status})"
    return failures.Failure(time.time(), env.rank, env.node_name, kind, message, failures.is_peer_error(kind, message))


def command_error(error_file: Path, log: "StderrTail", run_dir: Path, rank: int) -> tuple[str, str]:
    """The failed command's exception line: from torch's error file where it wrote one (kept in errors/ with
    its traceback), else the last traceback in its stderr; else ("", its last words there)."""
    recorded = failures.torch_error(error_file)
    if recorded is None:
        text = log.read()
        return last_exception(text), last_words(text)
    failures.keep_traceback(run_dir, rank, error_file)
    kind, message = recorded
    return (f"{kind}: {message}" if kind else message), ""


WORDS_LIMIT = 300  # characters of a command's last line kept in its failure's one line


def last_words(text: str) -> str:
    """The last non-empty line of `text` (a command's stderr), without torch's `[rankN]: ` prefix, shortened."""
    for line in reversed(text.splitlines()):
        line = RANK_PREFIX.sub("", line, count=1).strip()
        if line:
            return line if len(line) <= WORDS_LIMIT else line[: WORDS_LIMIT - 3] + "..."
    return ""


def last_exception(text: str) -> str:
    """The exception line closing the last `Traceback (most recent call last):` block in `text`, or "".
    torch prefixes a rank's stderr lines with `[rankN]: ` once its process group is up."""
    lines = [RANK_PREFIX.sub("", line, count=1) for line in text.splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    if not starts:
        return ""
    for line in lines[starts[-1] + 1 :]:
        if line.strip() and not line[0].isspace():
            return line.strip()
    return ""


class StderrTail:
    """What this task's stderr log (submitit's; stdout's file on Slurm) gains from now on, last 64 KiB."""

    LIMIT = 64 * 1024

    def __init__(self) -> None:
        self.path: Path | None = None
        try:
            import submitit

            paths = submitit.JobEnvironment().paths
            self.path = next((Path(p) for p in (paths.stderr, paths.stdout) if Path(p).exists()), None)
        except Exception:  # not a submitit task (torchrun, a test): no log to read
            self.path = None
        self.offset = self.path.stat().st_size if self.path else 0

    def read(self) -> str:
        if self.path is None:
            return ""
        sys.stderr.flush()
        try:
            with self.path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(self.offset, size - self.LIMIT))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


class Reported:
    """Rank 0's reading of the steps its command reports (trainer.requeue.progress(step)), at most once a
    second: the first says where this attempt went on from (the steps before it), each where it got to
    (progress.json, which the attempt's stop and the ledger read). Other ranks, and commands that report no
    step, leave no trace."""

    EVERY_S = 1.0

    def __init__(self, attempts: Attempts | None) -> None:
        self.attempts, self.path, self.due, self.last = attempts, "", 0.0, None

    def look(self, now: float) -> None:
        if self.attempts is None or now < self.due or not self.path:
            return
        self.due = now + self.EVERY_S
        try:
            with open(self.path) as f:
                first, step = (int(word) for word in f.read(64).split())
        except (OSError, ValueError):  # no step reported (yet), or caught between truncate and write
            return
        if step == self.last:
            return
        try:
            if self.last is None:
                self.attempts.resumed_at(first - 1)
            write_text(RunDir(self.attempts.run_dir).progress, json.dumps({"step": step, "time": time.time()}))
        except (OSError, UserError) as exc:  # a full disk: the command goes on, the records lag
            print(f"warning: the command's progress not recorded ({exc})", file=sys.stderr, flush=True)
        self.last = step


def _run(
    command: list[str],
    cwd: str,
    env: DistEnv,
    run_dir: str,
    settings: JobSettings,
    reported: Reported | None = None,
) -> Ended:
    requeue = settings.signum
    reported = reported or Reported(None)
    received: dict[int, float] = {}

    def note(signum: int, frame: Any) -> None:
        received.setdefault(signum, time.time())  # acted on by the loop below: nothing blocking in a handler

    for signum in (requeue, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, note)
    log = StderrTail()
    progress = progress_path()
    reported.path = progress
    child, error_file = _launch(command, cwd, env, run_dir, settings, progress)
    if isinstance(child, Ended):  # it could not start
        return child
    # On Slurm the batch step, not this task, gets the signal: its node-local copy here, the shared file after.
    if env.attempt:
        relay.watch(Attempt.of(env.attempt).node_signal, requeue, fallback=Attempt.of(env.attempt).signal)
    acted: set[int] = set()
    hang = HangConfig(**settings.hang)
    watch = CommandWatch(progress)
    hung, checked, beat_due = "", time.monotonic(), 0.0
    stuck: tuple[int, str] | None = None
    over = False  # the command outlived its grace after the requeue signal, and was stopped
    while (code := _wait(child, 0.1)) is None:
        reported.look(time.monotonic())
        over = _act_on_signals(child, received, acted, settings, Path(run_dir), env, over)
        if hang.enabled and not hung and time.monotonic() - checked >= CHECK_S:
            checked = time.monotonic()
            pids = relay.tree(child.pid)
            idle = watch.idle_s(pids)
            if checked >= beat_due:  # every hang.beat_s: what this rank's peers read when they find a hang
                _beat(run_dir, watch.beat(env.rank, env.node_name, pids), env.rank)
                beat_due = checked + hang.beat_s
            if idle > hang.timeout_s:
                hung, stuck = _hang_verdict(run_dir, env, watch, pids, idle, hang)
                _stop_hung(child, hung)
    signal.signal(requeue, signal.SIG_IGN)  # the command ended: a late signal must not kill this task as it exits
    reported.due = 0.0
    reported.look(time.monotonic())  # its last step, for the stop
    with contextlib.suppress(OSError):
        os.unlink(progress)
    terminated = bool(acted - {requeue})
    # After the requeue signal any exit is a stop to requeue, never a failure: no exception line, no traceback.
    stopped = code == 0 or terminated or requeue in received
    error, words = ("", "") if stopped else command_error(error_file, log, Path(run_dir), env.rank)
    error_file.unlink(missing_ok=True)
    if hang.enabled:
        _beat(run_dir, None, env.rank)
    return Ended(code, received.get(requeue), terminated, error, words, hung=hung, culprit=stuck)


def _launch(
    command: list[str], cwd: str, env: DistEnv, run_dir: str, settings: JobSettings, progress: str
) -> tuple["subprocess.Popen[bytes] | Ended", Path]:
    """The command started with the job's variables (or why it could not start), and its error file's path."""
    # torch's error file, as torchrun gives each worker one: a script whose main is wrapped in torch's @record
    # (torchtitan's is), or torchrun itself, writes its exception and traceback there. Node-local, like progress.
    error_file = Path(f"{progress}.error.json")
    error_file.unlink(missing_ok=True)  # a process before this one, with the same pid, left it
    given = variables(env, run_dir, settings) | {PROGRESS_ENV: progress, ERROR_FILE_ENV: str(error_file)}
    # The task's environment less PYTHONSAFEPATH (the tool's own, jobs.snapshot: your script's folder comes
    # first on its sys.path, as Python's rule says), plus `given`.
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"} | given
    try:
        child = subprocess.Popen(command, cwd=cwd, env=environ, preexec_fn=relay.die_with_parent)
    except OSError as exc:  # not found, not executable: the rank says so, as a shell would
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        return Ended(code, cannot_start=exc.strerror or str(exc)), error_file
    return child, error_file


def _act_on_signals(
    child: subprocess.Popen[bytes],
    received: dict[int, float],
    acted: set[int],
    settings: JobSettings,
    run_dir: Path,
    env: DistEnv,
    over: bool,
) -> bool:
    """The signals received since the last look passed on to the command; whether it outlived its grace."""
    requeue = settings.signum
    for signum in sorted(set(received) - acted):
        acted.add(signum)
        if signum == requeue:
            _pass_on(child.pid, requeue, lambda: _stop_together(run_dir, env))
        else:
            relay.stop_tree(child.pid)
    if requeue in received and not over and time.time() - received[requeue] > settings.grace_s:
        over = True  # it took the signal and kept going (a handler that logs a line): the job still ends
        name = signal.Signals(requeue).name
        print(f"requeue signal: the command still runs {settings.grace_s:g} s after {name}; stopping it to requeue")
        relay.stop_tree(child.pid)
    return over


def _beat(run_dir: str, beat: Beat | None, rank: int) -> None:
    """Write this rank's heartbeat (trainer.supervise.watchdog's file), or remove it (None) as the command ends."""
    board = FileBoard(Path(run_dir), rank)
    try:
        if beat is None:
            board.close()
        else:
            board.put(beat)
    except (OSError, UserError):
        pass  # a full or lost disk: the budget still holds


def _hang_verdict(
    run_dir: str, env: DistEnv, watch: CommandWatch, pids: list[int], idle: float, hang: HangConfig
) -> tuple[str, tuple[int, str] | None]:
    """Whom a hang is blamed on: this task sees only its own command, idle; its peers' heartbeats say whose
    stopped first (a frozen process, a stopped heartbeat, else the one idle longest). A rank blocked in a
    collective is idle too, so the ranks' own view alone would often name a victim."""
    me = watch.beat(env.rank, env.node_name, pids)
    others = FileBoard(Path(run_dir), env.rank).read()
    beats = [b for b in others if b.rank < env.world_size and b.rank != env.rank] + [me]
    found = culprit(beats, time.time(), stale_s=2 * hang.beat_s + CHECK_S)
    budget = hang.timeout_s  # the profile's script_hang_s, as the user set it
    own = f"its command {watch.how()} for {idle:.0f} s (script_hang_s={budget:g})"
    if found is None or found[0].rank == env.rank:
        frozen = ", stopped or in uninterruptible sleep (frozen)" if me.section == "frozen" else ""
        return f"hung: its command {watch.how()} for {idle:.0f} s{frozen} (script_hang_s={budget:g})", None
    stuck, why = found
    return f"hung: {why}; seen by rank {env.rank}, idle itself: {own}", (stuck.rank, stuck.host)


def _stop_hung(child: subprocess.Popen[bytes], why: str) -> None:
    """Every thread's stack of each Python process of the command into the log (SIGABRT: faulthandler), then
    the whole command stopped."""
    print(f"hang: {why.removeprefix('hung: ')}; stopping it (its Python stacks follow)", file=sys.stderr, flush=True)
    pids = relay.tree(child.pid)
    for pid in pids:  # SIGABRT's default action dumps core: not gigabytes of a CUDA process into the folder
        with contextlib.suppress(OSError, ValueError):
            resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
    relay.signal_all(pids, signal.SIGCONT)  # a stopped process dumps nothing
    relay.signal_all(pids, signal.SIGABRT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(5)
    relay.stop_tree(child.pid)


def _wait(child: subprocess.Popen[bytes], timeout: float) -> int | None:
    try:
        return child.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def _pass_on(pid: int, signum: int, together: Callable[[], None] = lambda: None) -> None:
    """The requeue signal to the command's processes that handle it; a command with none is stopped (it
    would die of the signal's default action, failing the job) so the job is requeued all the same: frozen
    first, and ended once `together` says every rank's is frozen too. A rank's command ended while a peer's
    still ran made that peer fail on its lost connection, a traceback above the stop (seen on two nodes)."""
    pids = relay.tree(pid)
    handlers = [p for p in pids if relay.catches(p, signum)]
    name = signal.Signals(signum).name
    if handlers:
        relay.signal_all(handlers, signum)
        print(f"requeue signal: {name} passed on to {len(handlers)} process(es) of the command", flush=True)
    else:
        print(f"requeue signal: the command does not handle {name}; stopping it to requeue", flush=True)
        relay.signal_all(pids, signal.SIGSTOP)  # its connections stay open: its peers wait, they do not fail
        together()
        relay.stop_tree(pid)


TOGETHER_S = 2 * relay.FALLBACK_S  # how long a frozen command waits for its peers' (a task on the shared file)


def _stop_together(run_dir: Path, env: DistEnv) -> None:
    """Say that this rank's command is frozen for the requeue, and wait until every rank's is, or has ended
    (its exit word), for at most TOGETHER_S: a peer whose task is gone must not hold the stop."""
    exits = RunDir(run_dir).exits
    with contextlib.suppress(OSError, UserError):
        write_text(exits / exit_word(env.attempt_key, env.rank, frozen=True), "")

    def all_said() -> bool:
        return len({p.name.rpartition("_")[2] for p in exits.glob(f"{env.attempt_key}_*rank_*")}) >= env.world_size

    relay.until(all_said, TOGETHER_S, 0.05)


def _run_in_process(command: list[str], cwd: str, env: DistEnv, run_dir: str, settings: JobSettings) -> Ended:
    """The debug profile: `python X.py ...` or `python -m mod ...` in this process, so breakpoints work."""
    if Path(command[0]).name not in ("python", "python3", Path(sys.executable).name) or len(command) < 2:
        return _run(command, cwd, env, run_dir, settings)
    saved_env, saved_argv, saved_cwd, saved_path = dict(os.environ), list(sys.argv), os.getcwd(), list(sys.path)
    os.environ.update(variables(env, run_dir, settings))
    os.chdir(cwd)
    # As Python would run it: the script's folder (or, for -m, the working folder) first on sys.path.
    first = Path(cwd) if command[1] == "-m" else (Path(cwd) / command[1]).resolve().parent
    try:
        with user_imports(first):
            if command[1] == "-m":
                sys.argv = command[2:]
                runpy.run_module(command[2], run_name="__main__", alter_sys=True)
            else:
                sys.argv = command[1:]
                runpy.run_path(command[1], run_name="__main__")
        return Ended(0)
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            return Ended(exc.code or 0)
        return Ended(1, words=last_words(str(exc.code)))  # sys.exit("message"): its words, as Python prints them
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)


def _signal_name(signum: int) -> str:
    try:
        return f"killed by {signal.Signals(signum).name}"
    except ValueError:
        return f"killed by signal {signum}"

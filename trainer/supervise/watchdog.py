"""Hang detection: a thread per rank that notices when the training thread makes no progress, and says which
rank is stuck (torch-free).

The training thread only records where it is: a section name, when it began, the step (one tuple assignment,
no lock, no I/O). The watchdog thread checks that every second against the section's budget, and every
`hang.beat_s` seconds writes this rank's heartbeat file (the run directory is on a filesystem every node sees:
one small file per rank every few seconds, never one per step). A budget is `hang.timeout_s` when set, else
the longest time this section took so far in this attempt times `hang.factor`, never below `hang.floor_s`;
a section's first time, and start-up, get `hang.first_s`. NVIDIA's resiliency extension derives its timeouts
the same way.

On a hang the rank writes every thread's Python stack into its log (faulthandler), reads the heartbeats to
name the rank that is stuck (one whose heartbeat stopped, a stopped or frozen process; else the one furthest
behind: a lower step, or waiting on its own data while the others wait on it in a collective), records that
in errors/ (error.txt names it), and exits, its loader workers killed first: srun's --kill-on-bad-exit, or
the local controller, stops the others. The stuck rank itself, when its process still runs (a deadlocked loader worker), does the same.
"""

import contextlib
import dataclasses
import faulthandler
import json
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from trainer.config.schema import HangConfig
from trainer.errors import UserError
from trainer.run import failures, procfs
from trainer.run.atomic import write_text
from trainer.run.rundir import RunDir
from trainer.supervise.watch import CHECK_S, STORE_WAIT_S, write_beat

HANG_EXIT = 75  # what a rank that detected a hang exits with
# Sections in which a rank waits on its own work, not on its peers: when no heartbeat stopped and the steps
# agree, the rank in one of these is the one the others wait for.
OWN_WORK = ("data", "frozen")
SECTIONS = {  # what a rank is doing in each section, as a message says it
    "startup": "starting up (imports, data, model, checkpoint)",
    "rendezvous": "joining the process group",
    "data": "waiting for its batch from the loader",
    "step": "in the step (forward, backward and its all-reduce, logging)",
    "eval": "evaluating",
    "checkpoint": "saving a checkpoint",
    "requeue": "saving for a requeue",
    "finish": "finishing",
    # A -- COMMAND run's ranks, seen by their tasks (CommandWatch): no steps known
    "command": "in its command",
    "frozen": "with its command stopped or in uninterruptible sleep (frozen)",
}


@dataclass(frozen=True)
class Beat:
    """A rank's heartbeat: where its training thread is, and when that was written."""

    rank: int
    host: str
    step: int
    section: str
    since: float  # wall time the section began
    written: float  # wall time of this beat
    attempt: str = ""  # DistEnv.attempt_key: a file an earlier attempt left is not this attempt's rank
    progressed: float = 0.0  # wall time its step last changed (jobs.top: seconds since its last progress)
    stats: dict[str, float] | None = None  # its last log interval's figures, for jobs.top (trainer.supervise.live)

    def where(self) -> str:
        what = SECTIONS.get(self.section, self.section)
        return f"at step {self.step}, {what}" if self.step >= 0 else what


def culprit(beats: list[Beat], now: float, stale_s: float) -> tuple[Beat, str] | None:
    """The rank the job waits for, and why it is named; None without heartbeats."""
    if not beats:
        return None
    stopped = sorted((b for b in beats if now - b.written > stale_s), key=lambda b: b.written)
    if stopped:
        first = stopped[0]
        # Its last beat is up to beat_s old (steps ago); the ranks still beating wait for it in the step they
        # are in, the lowest of them the first it did not join: in its step, whatever its last beat was doing.
        if (low := min((b.step for b in beats if b not in stopped), default=first.step)) > first.step:
            first = dataclasses.replace(first, step=low, section="step")
        return (
            first,
            f"its heartbeat stopped {now - first.written:.0f} s ago {first.where()} (stopped or frozen)",
        )
    behind = min(b.step for b in beats)
    candidates = [b for b in beats if b.step == behind]
    own = [b for b in candidates if b.section in OWN_WORK]
    first = min(own or candidates, key=lambda b: b.since)
    why = f"no progress for {now - first.since:.0f} s {first.where()}"
    if not own and len(candidates) > 1:  # all wait on each other: the first to stop moving, no more certain
        where = "at that step" if behind >= 0 else "making progress"
        why += f" (no rank stands out: ranks {', '.join(str(b.rank) for b in candidates)} all stopped {where})"
    return first, why


class FileBoard:
    """Heartbeats as one small file per rank in the run directory: before the process group forms (no store
    yet), and with dist.init_method=file (no TCP store at all)."""

    def __init__(self, run_dir: Path, rank: int) -> None:
        self.run_dir, self.rank = run_dir, rank

    def put(self, beat: Beat) -> None:
        write_text(RunDir(self.run_dir).heartbeat(self.rank), json.dumps(beat.__dict__) + "\n")

    def read(self) -> list[Beat]:
        beats = []
        for path in sorted(RunDir(self.run_dir).heartbeats.glob("rank_*.json")):
            try:
                beats.append(Beat(**json.loads(path.read_text())))
            except (OSError, ValueError, TypeError):
                continue  # being replaced, or damaged: the others still tell
        return beats

    def close(self) -> None:
        files = RunDir(self.run_dir)
        with contextlib.suppress(OSError):
            files.heartbeat(self.rank).unlink(missing_ok=True)
            files.heartbeats.rmdir()  # the last rank out removes the folder


class KeyValue(Protocol):
    """What StoreBoard needs of a torch.distributed Store: a client of the job's TCPStore (trainer.distributed)."""

    def set(self, key: str, value: str) -> None: ...
    def multi_get(self, keys: list[str]) -> list[bytes]: ...
    def check(self, keys: list[str]) -> bool: ...
    def delete_key(self, key: str) -> bool: ...


STORE_PREFIX = "slurm_ddp/beat/"


T = TypeVar("T")


def within(seconds: float, read: Callable[[], T]) -> T:
    """`read()`'s answer, or TimeoutError after `seconds`: a TCPStore client whose server is stopped (SIGSTOP)
    can wait on its socket for ever, its own timeout notwithstanding."""
    answer: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            answer.append(read())
        except BaseException as exc:  # handed to the caller
            failed.append(exc)

    thread = threading.Thread(target=run, name="hang-read-beats", daemon=True)
    thread.start()
    thread.join(seconds)
    if failed:
        raise failed[0]
    if not answer:
        raise TimeoutError(f"no answer within {seconds:g} s")
    return answer[0]


class StoreBoard:
    """Heartbeats as keys of the job's TCPStore, on rank 0, once the process group has formed: no file on the
    shared filesystem per rank. A store that does not answer is itself the news: rank 0 holds it."""

    def __init__(self, store: KeyValue, rank: int, world_size: int) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size

    def put(self, beat: Beat) -> None:
        self.store.set(f"{STORE_PREFIX}{self.rank}", json.dumps(beat.__dict__))

    def read(self) -> list[Beat]:
        """Every rank's beat: two round trips when all have one (a hang's detectors all read at once), one per
        rank only when some have none yet."""
        keys = [f"{STORE_PREFIX}{r}" for r in range(self.world_size)]
        present = keys if self.store.check(keys) else [k for k in keys if self.store.check([k])]
        beats = []
        for raw in self.store.multi_get(present) if present else []:
            with contextlib.suppress(ValueError, TypeError):
                beats.append(Beat(**json.loads(raw)))
        return beats

    def close(self) -> None:
        """This rank left (finished, or leaving for a requeue): its last beat must not read as a frozen rank."""
        with contextlib.suppress(Exception):  # a store gone with rank 0, or that does not answer
            within(STORE_WAIT_S, lambda: self.store.delete_key(f"{STORE_PREFIX}{self.rank}"))


def absent(beats: list[Beat], world_size: int, now: float, stale_s: float) -> tuple[Beat, str] | None:
    """While the process group forms: the rank that keeps it from forming, by its heartbeat file (there is
    no store yet): one whose heartbeat stopped (frozen), else one that never wrote one; None if every rank beats."""
    stopped = [b for b in beats if now - b.written > stale_s and b.rank < world_size]
    if stopped:
        return culprit(stopped, now, stale_s)
    missing = sorted(set(range(world_size)) - {b.rank for b in beats})
    if missing:
        return Beat(missing[0], "", -1, "startup", now, now), "wrote no heartbeat: it never started, or froze first"
    return None


# Sections in which a rank waits on its peers (a collective): a rank stuck there gets a little longer than one
# stuck on its own work, so that the stuck rank, when its process still runs, finds itself first and writes
# its own stacks.
WAITS_ON_PEERS = ("step", "checkpoint", "eval", "requeue")


@dataclass
class Watchdog:
    """One per rank: `enter(name)` or `section(name)` around each phase, `stop()` at the end."""

    settings: HangConfig
    run_dir: Path
    rank: int
    host: str
    world_size: int = 1
    current: tuple[str, float, float, int] = ("startup", 0.0, 0.0, 0)  # name, monotonic and wall start, step
    longest: dict[str, float] = field(default_factory=dict)
    # Called on a hang after the stacks, before the exit (NCCL's flight recorder: trainer.distributed); may return
    # the path it wrote, for the log.
    on_hang: Callable[[], str | None] | None = None
    # Where heartbeats go: files until the process group forms, then the job's store (use_store). The address
    # of rank 0's store names it when the store does not answer.
    board: "FileBoard | StoreBoard | None" = None
    store_host: str = ""
    # Rank 0 under a supervisor: its node-local heartbeat, with the budget it is under (trainer.supervise.watch)
    local_beat: Path | None = None
    # Joining the process group: a few seconds past dist.timeout_s (torch's own timeout, then blame_absent, names
    # a rank that never came); a join that never times out (a damaged store file) is named then, with this hint.
    rendezvous_s: float = 0.0
    rendezvous_hint: str = ""
    attempt: str = ""  # DistEnv.attempt_key, in each beat: only this attempt's beats are read
    beat_budget: float = math.inf  # the budget in rank 0's last node-local beat
    # What jobs.top shows of this rank: its last log interval's figures (set by the training thread, one
    # assignment) and when its step last changed.
    stats: dict[str, float] | None = None
    progressed: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _local_lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self, step: int = 0) -> "Watchdog":
        self.board = self.board or FileBoard(self.run_dir, self.rank)
        self.current = ("startup", time.monotonic(), time.time(), step)
        if self.settings.enabled:
            # Two threads: a heartbeat write that blocks (a hung shared filesystem) must not stop the check.
            threads = [(self._watch, "hang-watchdog"), (self._beats, "hang-heartbeat")]
            for target, name in threads:
                self._threads.append(threading.Thread(target=target, name=name, daemon=True))
                self._threads[-1].start()
        return self

    def use_store(self, store: KeyValue, host: str) -> None:
        """The process group formed: heartbeats go to the job's store from now on, and this rank's file goes."""
        files = self.board
        self.board, self.store_host = StoreBoard(store, self.rank, self.world_size), host
        if files is not None:
            files.close()
        name, _, since, step = self.current  # a beat there now: jobs.top shows every rank from the start
        self._beat(Beat(self.rank, self.host, step, name, since, time.time(), "", self.progressed, self.stats))

    def _record_rendezvous(self, waited: float, now: float) -> None:
        """The group did not form in its budget and torch never said so: a rank absent or frozen, by the files,
        else the join itself stuck (the hint: a damaged store file)."""
        stale_s = 2 * self.settings.beat_s + CHECK_S
        found = absent(self._ours(FileBoard(self.run_dir, self.rank).read()), self.world_size, now, stale_s)
        if found is not None:
            stuck, why = found
            message = f"hung: it kept the process group from forming: {why}; seen by rank {self.rank}"
        else:
            stuck = Beat(self.rank, self.host, -1, "rendezvous", now - waited, now)
            budget = "dist.timeout_s" if self.budget("rendezvous") == self.rendezvous_s else "hang.first_s"
            message = f"hung: the process group did not form in {waited:.0f} s ({budget}){self.rendezvous_hint}"
        self._record(stuck, message, now)

    def _record(self, stuck: Beat, message: str, now: float) -> None:
        """The hang's record against `stuck`: said on stderr, and into errors/ unless the disk refuses it."""
        failure = failures.Failure(now, stuck.rank, stuck.host, "", message, False)
        self._say(f"hang: {failure.line()}")
        with contextlib.suppress(OSError, ValueError, UserError):
            failures.record(self.run_dir, failure)

    @contextmanager
    def blaming(self, timeout_s: float) -> Iterator[None]:
        """Around what torch may time out (the group's forming, the collectives): see `blame`."""
        try:
            yield
        except Exception as exc:
            self.blame(exc, timeout_s)
            raise

    def blame(self, exc: BaseException, timeout_s: float) -> None:
        """torch gave up waiting on a peer (`exc`, dist.timeout_s, before this rank's hang budget): record the
        rank it waited for, named by the heartbeats, before this rank records its own timeout (error.txt names
        the first). While the group forms: one absent or frozen, when the join ran out its time (a join that
        failed sooner failed for a cause of its own, a bad network interface). Later: one whose heartbeat
        stopped, or rank 0's store that does not answer; a peer that failed records its own cause."""
        name, began, _, step = self.current
        if (
            not self.settings.enabled
            or self.world_size < 2
            or not failures.is_peer_error(*failures.cause(type(exc).__name__, str(exc)))
        ):
            return
        now, stale_s = time.time(), 2 * self.settings.beat_s + CHECK_S
        if name == "rendezvous":
            if time.monotonic() - began < 0.9 * timeout_s:
                return
            found = absent(self._ours(FileBoard(self.run_dir, self.rank).read()), self.world_size, now, stale_s)
            message = "hung: it kept the process group from forming: {why}; seen by rank {rank} ({kind})"
        else:
            found, _ = self._suspect(name, step, now - (time.monotonic() - began), now, stopped_only=True)
            message = "hung: {why}; seen by rank {rank} when torch timed out ({kind}, dist.timeout_s)"
        if found is None or found[0].rank == self.rank:
            return
        stuck, why = found
        self._record(stuck, message.format(why=why, rank=self.rank, kind=type(exc).__name__), now)

    def enter(self, name: str, step: int | None = None) -> None:
        """The training thread begins section `name`; the time since the last one began counts for that one."""
        last, began, _, at = self.current
        now, wall = time.monotonic(), time.time()
        if last != "startup":
            self.longest[last] = max(self.longest.get(last, 0.0), now - began)
        if step is not None and step != at:
            self.progressed = wall
        self.current = (name, now, wall, at if step is None else step)
        if self.local_beat is not None and ("rendezvous" in (name, last) or self.budget(name) < self.beat_budget):
            # The join begun or over (the supervisor words a freeze in it apart, and the join may hold every
            # thread), or a tighter budget than rank 0's node-local beat holds (the first step done): written
            # now, not at the next beat. A job frozen in between was named only once the old budget ran out
            # (325 s, the join's, and as a group that did not form, for a freeze 2 s into training).
            self.beat_now()

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        """A phase of its own budget (a checkpoint, an evaluation); the step's clock starts again after it."""
        step = self.current[3]
        self.enter(name)
        try:
            yield
        finally:
            self.enter("step", step)

    def budget(self, name: str) -> float:
        if name == "rendezvous" and self.rendezvous_s:  # start-up's budget, or the group's own timeout first
            return min(self.settings.timeout_s or self.settings.first_s, self.rendezvous_s)
        if self.settings.timeout_s:
            budget = self.settings.timeout_s
        elif name not in self.longest:
            budget = self.settings.first_s
        else:
            budget = max(self.settings.floor_s, self.longest[name] * self.settings.factor)
        return budget + (2 * self.settings.beat_s if name in WAITS_ON_PEERS else 0.0)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2 * CHECK_S)  # a heartbeat stuck on a hung filesystem is left behind
        if isinstance(self.board, StoreBoard):
            self.board.close()
        FileBoard(self.run_dir, self.rank).close()  # a beat written as the store took over leaves no file
        if self.local_beat is not None:
            with contextlib.suppress(OSError):
                self.local_beat.unlink(missing_ok=True)

    def _watch(self) -> None:
        while not self._stop.wait(CHECK_S):
            name, began, _, step = self.current
            waited = time.monotonic() - began
            if waited > self.budget(name):
                # Whatever happens in _hung (a full disk, a blocked log), the rank exits: others wait on it.
                threading.Timer(30.0, os._exit, (HANG_EXIT,)).start()
                try:
                    self._hung(name, waited, step)
                finally:
                    end_children()
                    os._exit(HANG_EXIT)

    def _beats(self) -> None:
        while True:
            name, _, since, step = self.current
            beat = Beat(self.rank, self.host, step, name, since, time.time(), "", self.progressed, self.stats)
            self._local_beat(beat)  # first: a beat to the store may wait on a rank 0 that froze
            self._beat(beat)
            if self._stop.wait(self.settings.beat_s):
                return

    def beats_now(self) -> list[dict]:
        """Rank 0's beat as of now and every other rank's latest of this attempt, for jobs.top (live.Channel);
        raises when the store or the heartbeat files cannot be read."""
        name, _, since, step = self.current
        own = Beat(self.rank, self.host, step, name, since, time.time(), self.attempt, self.progressed, self.stats)
        others = within(STORE_WAIT_S, (self.board or FileBoard(self.run_dir, self.rank)).read)
        return [own.__dict__] + [b.__dict__ for b in self._ours(others) if b.rank != self.rank]

    def beat_now(self) -> None:
        """Rank 0's node-local heartbeat written now, by the calling thread: before a call that may hold every
        thread of the process (a damaged store file spins in torch's FileStore with the GIL held)."""
        name, _, since, step = self.current
        self._local_beat(Beat(self.rank, self.host, step, name, since, time.time()))

    def _local_beat(self, beat: Beat) -> None:
        """Where the training thread is as this is written (under a lock): the heartbeat thread must never
        overwrite beat_now's section with the one it read before (the join's budget with start-up's)."""
        if self.local_beat is None or not self.settings.enabled:
            return
        with self._local_lock:
            name, _, since, step = self.current
            beat = dataclasses.replace(beat, section=name, since=since, step=step)
            self.beat_budget = self.budget(name)
            extra = {"budget": self.beat_budget, "beat_s": self.settings.beat_s, "run_dir": str(self.run_dir)}
            with contextlib.suppress(OSError):
                write_beat(self.local_beat, {**beat.__dict__, **extra, "hint": self.rendezvous_hint})

    def _ours(self, beats: list[Beat]) -> list[Beat]:
        return [b for b in beats if b.attempt == self.attempt]

    def _beat(self, beat: Beat) -> None:
        beat = dataclasses.replace(beat, attempt=self.attempt)
        try:
            board = self.board or FileBoard(self.run_dir, self.rank)
            board.put(beat)
            if isinstance(board, FileBoard) and isinstance(self.board, StoreBoard):
                board.close()  # use_store ran while this beat was written: its file goes too (seen left under load)
        except (OSError, UserError, RuntimeError):
            pass  # a full or lost disk, a store that does not answer: the budget still holds

    def _say(self, text: str) -> None:
        """A line on stderr with one write(2): the training thread may hold sys.stderr's lock, stuck."""
        with contextlib.suppress(OSError):
            os.write(2, (text + "\n").encode())

    def _suspect(
        self, name: str, step: int, since: float, now: float, stopped_only: bool = False
    ) -> tuple[tuple[Beat, str] | None, bool]:
        """The rank this one waits for, by this attempt's heartbeats, and whether rank 0's store did not answer
        (then rank 0 is named); `stopped_only`: only a rank whose heartbeat stopped, never the one behind."""
        stale_s = 2 * self.settings.beat_s + CHECK_S
        try:
            beats = within(STORE_WAIT_S, (self.board or FileBoard(self.run_dir, self.rank)).read)
            beats = [b for b in self._ours(beats) if b.rank < self.world_size and b.section != "hung"]
            found = culprit(beats, now, stale_s)
            if stopped_only and found is not None and now - found[0].written <= stale_s:
                return None, False
            return found, False
        except (OSError, RuntimeError, TimeoutError):
            if not isinstance(self.board, StoreBoard):
                return None, False  # a stalled shared filesystem (heartbeat files): no rank's beat to go by
            zero = Beat(0, self.store_host, step, name, since, now)  # rank 0, which holds the store, is silent
            why = (
                f"the job's store on rank 0 does not answer {zero.where()} (rank 0 stopped or frozen, or its node gone)"
            )
            return (zero, why), True

    def _hung(self, name: str, waited: float, step: int) -> None:
        me = Beat(self.rank, self.host, step, name, time.time() - waited, time.time())
        self._say(
            f"hang: rank {self.rank} made no progress for {waited:.0f} s {me.where()} "
            f"(budget {self.budget(name):.0f} s); every thread's stack follows"
        )
        faulthandler.dump_traceback(file=2, all_threads=True)
        if self.on_hang is not None:
            try:
                written = self.on_hang()
                if written:
                    self._say(f"hang: this rank's NCCL flight recorder is in {written}")
            except Exception as exc:  # a dump that fails must not keep the rank from exiting
                self._say(f"warning: could not dump the NCCL flight recorder: {exc}")
        now = time.time()
        if name == "rendezvous":
            self._record_rendezvous(waited, now)
            return
        found, silent_store = self._suspect(name, step, me.since, now)
        stuck, why = found if found else (me, f"no progress for {waited:.0f} s {me.where()}")
        message = f"hung: {why}; seen by rank {self.rank} after {waited:.0f} s (budgets: hang.timeout_s, hang.factor)"
        failure = failures.Failure(now, stuck.rank, stuck.host, "", message, False)
        self._say(f"hang: {failure.line()}")  # kept here when a restart clears error.txt
        # This rank's heartbeat says it detected, so a later detector does not take its silence for the cause;
        # not to a store that just did not answer: another wait for it would only put the record off.
        with contextlib.suppress(TimeoutError):
            if not silent_store:
                within(STORE_WAIT_S, lambda: self._beat(Beat(self.rank, self.host, step, "hung", me.since, now)))
        try:
            failures.record(self.run_dir, failure)
        except (OSError, ValueError, UserError) as exc:
            self._say(f"warning: could not record the hang: {exc}")


def end_children() -> None:
    """Kill this rank's worker processes (its DataLoader's) before it exits. os._exit runs no clean-up, and a
    worker stuck in a read never notices its parent is gone: it would outlive the job where Slurm tracks
    processes by their parent (proctrack/linuxproc, pgid), keeping its memory and the task's open files."""
    for child in multiprocessing.active_children():
        with contextlib.suppress(OSError, ValueError):
            child.kill()


# A `-- COMMAND` run: the command is not ours to instrument, so its task watches it from outside.


def progress_path() -> str:
    """A node-local file for this task's command to touch on each step (never the shared filesystem)."""
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    return os.path.join(folder, f"slurm-ddp-progress-{os.getpid()}")


TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _output_bytes() -> int:
    total = 0
    for fd in (1, 2):  # the command writes into this task's own log files
        with contextlib.suppress(OSError):
            total += os.fstat(fd).st_size
    return total


# A command using less than this share of one core since its last progress counts as idle: a process blocked
# in a collective still wakes now and then (gloo's and torch's threads: a few 10 ms ticks a minute, measured).
IDLE_CPU = 0.05


@dataclass
class CommandWatch:
    """Whether a command makes progress, seen from its task: once the command calls trainer.requeue.progress(),
    those calls alone count; before (or never), output to the log, or CPU time of its processes above IDLE_CPU
    of one core since the last progress, does. A command idle for the hang timeout is a hang (a rank blocked in a
    gloo collective uses next to no CPU and prints nothing; NCCL's proxy thread spins: call progress() there)."""

    progress: str  # progress_path()
    last: tuple[int, int, float] = (-1, -1, -1.0)  # CPU ticks and output bytes at the last progress; touched
    since: float = field(default_factory=time.monotonic)

    def idle_s(self, pids: list[int]) -> float:
        """Seconds since the command last made progress (sampled now)."""
        now = time.monotonic()
        try:
            touched = os.stat(self.progress).st_mtime
        except OSError:
            touched = -1.0
        if touched >= 0:
            progressed = touched != self.last[2]
            sample = (0, 0, touched)
        else:
            # CPU ticks of the command's processes (one that ended meanwhile counts 0), output bytes
            sample = (sum(procfs.cpu_ticks(pid) for pid in pids), _output_bytes(), touched)
            cpu_s = (sample[0] - self.last[0]) / TICKS_PER_S
            progressed = sample[1] != self.last[1] or self.last[0] < 0 or cpu_s > IDLE_CPU * max(now - self.since, 1.0)
        if progressed:
            self.last, self.since = sample, now
        return now - self.since

    def how(self) -> str:
        return "calls no trainer.requeue.progress()" if self.last[2] >= 0 else "uses no CPU and prints nothing"

    def beat(self, rank: int, host: str, pids: list[int]) -> Beat:
        """This rank's heartbeat for its peers: since when its command made no progress, and whether it is
        frozen (a process stopped, or in uninterruptible sleep: a dead mount): the likeliest culprit."""
        frozen = any(procfs.state(pid) in ("T", "t", "D") for pid in pids)
        now = time.time()
        since = now - (time.monotonic() - self.since)
        return Beat(rank, host, -1, "frozen" if frozen else "command", since, now)

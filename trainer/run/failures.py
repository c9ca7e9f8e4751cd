"""Which rank failed first, and why (torch-free: the submitter reads it too).

Every failing rank writes its own record, `errors/rank_N.json`. When one rank dies, its peers fail a moment
later with "Connection closed by peer" or a collective timeout: those are consequences, not the cause. The
root cause is the earliest error that is not such a peer error; only when every rank saw a peer error is
the earliest of those reported. `error.txt` holds the root cause's one line, `rank R on HOST: cause`.
"""

import contextlib
import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer.errors import UserError
from trainer.run.atomic import json_or_none, write_text
from trainer.run.rundir import RunDir

# What a rank sees when another rank died or hangs: gloo's and NCCL's transport errors and timeouts.
PEER_TYPES = {"DistBackendError", "DistNetworkError", "DistStoreError"}
PEER_MARKERS = (
    "connection closed by peer",
    "connection reset",
    "connection refused",
    "broken pipe",
    "gloo/transport",
    "timed out",
    "timeout waiting",
    "timeout caused pair closure",  # gloo, once a pair timed out: the next operation on it (seen under load)
    "nccl communicator was aborted",
    "watchdog caught collective",
)
# A failure that may be the node's rather than the code's: hardware or driver words in its message. A Python
# traceback is the code's (it follows the run to any node); a hang or a killed task may be either.
NODE_WORDS = re.compile(r"\b(cuda|nccl|ecc|xid|nvlink|infiniband|ib_\w+|uncorrectable)\b", re.I)
WORKER_TRACEBACK = re.compile(r"^Caught (\w+) in DataLoader worker process \d+\.\nOriginal Traceback")


@dataclass(frozen=True)
class Failure:
    time: float
    rank: int
    host: str
    kind: str  # the exception's type name; empty for a UserError, whose message says it all
    message: str  # one line
    peer: bool  # a consequence of another rank's failure (connection closed, collective timeout)
    killed: bool = False  # by a signal: it wrote nothing itself, the exit codes or srun's lines tell

    def line(self) -> str:
        kind = f"{self.kind}: " if self.kind else ""
        where = f" on {self.host}" if self.host else ""  # a rank that never said where it runs
        return f"rank {self.rank}{where}: {kind}{self.message}"


def cause(kind: str, text: str) -> tuple[str, str]:
    """An exception's type name and one-line message, looking through a DataLoader worker's wrapper.

    torch re-raises a worker's exception as `Caught X in DataLoader worker process N.` followed by the
    worker's traceback; the original message is the traceback's last `...X: message` line.
    """
    match = WORKER_TRACEBACK.match(text)
    if match:
        original = match.group(1)
        for line in reversed(text.splitlines()):
            head, sep, message = line.partition(": ")
            if sep and head.rsplit(".", 1)[-1] == original:
                return original, message.strip()
    return kind, (text.strip().splitlines() or [""])[0]


def is_peer_error(kind: str, message: str) -> bool:
    text = message.lower()
    return kind in PEER_TYPES or any(marker in text for marker in PEER_MARKERS)


def describe(exc: BaseException, rank: int, host: str, when: float) -> Failure:
    kind, message = cause(type(exc).__name__, str(exc))
    if isinstance(exc, UserError):  # bad input or a full disk: this rank's own cause, whatever its words
        return Failure(when, rank, host, "", message, False)
    return Failure(when, rank, host, kind, message, is_peer_error(kind, message))


def root_cause(failures: Sequence[Failure], killed: Sequence[Failure] = ()) -> Failure | None:
    """The earliest error that is not a peer's consequence; else a rank killed by a signal (it wrote nothing
    itself); else the earliest peer error."""
    own = sorted((f for f in failures if not f.peer), key=lambda f: f.time)
    peers = sorted((f for f in failures if f.peer), key=lambda f: f.time)
    return next((group[0] for group in (own, list(killed), peers) if group), None)


def torch_error(path: Path) -> tuple[str, str] | None:
    """The exception's type name and one-line message from an error file that torch's `@record` wrote
    (torch.distributed.elastic.multiprocessing.errors: `{"message": {"message": "Type: text", ...}}`)."""
    try:
        text = json.loads(path.read_text())["message"]["message"]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none written (no @record, killed), or not torch's format: the caller has other words
    if not isinstance(text, str):
        return None
    kind, sep, message = text.partition(": ")
    return (kind, message) if sep else ("", kind)


def keep_traceback(run_dir: Path, rank: int, error_file: Path) -> None:
    """A rank's torch error file (written node-local) kept in errors/, where error.txt's reader looks."""
    try:
        write_text(RunDir(run_dir).traceback(rank), error_file.read_text())
    except (OSError, UserError):
        pass  # the one-line record is what matters; a traceback that cannot be kept is not another failure


def read(run_dir: Path) -> list[Failure]:
    failures = []
    for path in sorted(RunDir(run_dir).errors.glob("rank_*.json")):
        try:
            failures.append(Failure(**json_or_none(path)))
        except (ValueError, TypeError):
            continue  # not a record (a stray or damaged file): the other records still name the cause
    return failures


def record(run_dir: Path, failure: Failure) -> None:
    """This rank's record, then error.txt refreshed from every record written so far."""
    files = RunDir(run_dir)
    for tries_left in (2, 1, 0):
        try:
            write_text(files.errors / f"rank_{failure.rank}.json", json.dumps(asdict(failure)) + "\n")
            break
        except FileNotFoundError:
            # Rank 0 of this attempt, still starting, removed the (then empty) folder under our write: again.
            if not tries_left:
                raise
    first = root_cause(read(run_dir))
    if first is not None:  # error.txt has this one writer
        write_text(files.error, first.line() + "\n")


def clear(run_dir: Path, before: float) -> Failure | None:
    """Forget the failures of earlier attempts (recorded before `before`, this process's start): a peer of
    this attempt that failed while rank 0 was still starting must keep its record. Returns the earlier
    attempts' first failure, for attempts.json."""
    files = RunDir(run_dir)
    stale = [f for f in read(run_dir) if f.time < before]
    cause = root_cause(stale)
    for failure in stale:
        (files.errors / f"rank_{failure.rank}.json").unlink(missing_ok=True)
        files.traceback(failure.rank).unlink(missing_ok=True)
    for traceback in files.errors.glob("traceback_rank_*.json"):  # one whose record never came (a full disk)
        with contextlib.suppress(OSError):
            if traceback.stat().st_mtime < before:
                traceback.unlink()
    current = read(run_dir)
    if not current:
        files.error.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # only when empty: a peer's record may be on its way in
            files.errors.rmdir()
    elif (first := root_cause(current)) is not None:
        write_text(files.error, first.line() + "\n")
    return cause


def suspect_node(run_dir: Path, since: float) -> str | None:
    """The node to hold against a step that failed after `since` (the policy counts them, trainer.supervise.policy):
    the root cause's, when it is a hang, a task killed by a signal, or a hardware or driver error."""
    first = root_cause([f for f in read(run_dir) if f.time >= since])
    if first is None:
        return None
    if not first.host:  # not known (a rank that never said where it runs): no node is held
        return None
    if first.killed or first.message.startswith("hung:") or NODE_WORDS.search(f"{first.kind} {first.message}"):
        return first.host
    return None

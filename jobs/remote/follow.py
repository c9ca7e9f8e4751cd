"""jobs.status, logs, cancel, wait and fetch for a run on a cluster: the same modules run on the login node (in
the run's code snapshot) over SSH. A follow (`--wait`, `jobs.wait`, `jobs.logs --follow`) counts the bytes it
has shown; when the connection drops it connects again and asks for the log from there (`--offset`), so
nothing is shown twice or lost, and the job never depends on the laptop."""

import contextlib
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from jobs.remote.agent import FETCHED
from jobs.remote.runs import RemoteRun
from jobs.remote.ssh import SSH_FAILED, Connection, with_retries
from trainer.errors import UserError


def run_module(run: RemoteRun, module: str, *args: str) -> int:
    """`python -m module args` on the login node, its output ours; its exit code."""
    connection = Connection(run.login)
    sys.stdout.flush()
    done = subprocess.run(connection.argv("run", run.cwd, module, *args), stderr=subprocess.PIPE)
    if done.returncode == SSH_FAILED or (done.returncode == 2 and b"error: " in done.stderr):
        raise UserError(connection.explain(done.returncode, done.stderr.decode(errors="replace")))
    sys.stderr.write(done.stderr.decode(errors="replace"))
    return done.returncode


def follow(run: RemoteRun, what: str, module: str, *args: str) -> int:
    """Stream `module args --offset N` from the login node, N being what was shown so far; again after a
    dropped connection. The module's own exit code."""
    connection = Connection(run.login)
    shown = 0

    def attempt() -> int:
        nonlocal shown
        argv = connection.argv("run", run.cwd, module, *args, "--offset", str(shown))
        with subprocess.Popen(argv, stdout=subprocess.PIPE) as proc:
            assert proc.stdout is not None
            for chunk in iter(lambda: proc.stdout.read1(1 << 16), b""):  # type: ignore[union-attr]
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                shown += len(chunk)
            return proc.wait()

    return with_retries(what, attempt)


def wait(run: RemoteRun) -> int:
    return follow(run, f"following job {run.job_id}", "jobs.wait", run.run_dir)


def fetched_name(name: str) -> bool:
    """What an honest pack (jobs.remote.agent's) sends: one of the run's records, or a file under tensorboard/.
    Nothing else is written here: never remote.json, the laptop's own record of the run."""
    if name in FETCHED:
        return True
    parts = name.split("/")
    clean = all(p not in ("", ".", "..") for p in parts) and "\\" not in name and "\0" not in name
    return len(parts) > 1 and parts[0] == "tensorboard" and clean


def fetch(run: RemoteRun, folder: Path) -> list[str]:
    """The run's records and TensorBoard events into `folder` (the run's local folder), streamed a file at a
    time; the names written. A member an honest pack would not send stops it, in one line: what came before
    it stays (each file whole: written to NAME.part, then renamed), nothing after it is written."""
    names: list[str] = []
    with Connection(run.login).stream("pack", run.run_dir) as data, tarfile.open(fileobj=data, mode="r|") as tar:
        for member in tar:
            if not member.isfile() or not fetched_name(member.name):
                kind = "a folder" if member.isdir() else "a link" if member.issym() or member.islnk() else "a file"
                raise UserError(
                    f"the cluster sent {member.name!r} ({kind}), not a record or event file of the run; "
                    f"kept the {len(names)} file(s) before it, wrote nothing more"
                )
            source = tar.extractfile(member)
            assert source is not None
            target = folder / member.name
            part = target.with_name(target.name + ".part")
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                with part.open("wb") as out:
                    shutil.copyfileobj(source, out)
                part.replace(target)
            except BaseException as exc:  # a full disk, a folder in the way, Ctrl-C: no .part is left
                with contextlib.suppress(OSError):
                    part.unlink()
                if not isinstance(exc, OSError):
                    raise
                raise UserError(
                    f"cannot write {target}: {exc.strerror} (a folder where the run's file goes?); move it "
                    "aside and fetch again"
                ) from None
            names.append(member.name)
    return names

"""jobs.status, logs, cancel, wait and fetch for a run on a cluster: the same modules run on the login node (in
the run's code snapshot) over SSH. A follow (`--wait`, `jobs.wait`, `jobs.logs --follow`) counts the bytes it
has shown; when the connection drops it connects again and asks for the log from there (`--offset`), so
nothing is shown twice or lost, and the job never depends on the laptop."""

import io
import subprocess
import sys
import tarfile
from pathlib import Path

from jobs.remote.agent import safe
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


def fetch(run: RemoteRun, folder: Path) -> list[str]:
    """The run's records and TensorBoard events into `folder` (the run's local folder); the names written."""
    data = Connection(run.login).call("pack", run.run_dir)
    names = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar.getmembers():
            if not member.isfile() or not safe(member.name):
                raise UserError(f"the cluster sent {member.name!r}, not a file of the run; nothing more was written")
            source = tar.extractfile(member)
            target = folder / member.name
            target.parent.mkdir(parents=True, exist_ok=True)
            part = target.with_name(target.name + ".part")
            part.write_bytes(source.read() if source else b"")
            part.replace(target)
            names.append(member.name)
    return names

"""The one place where a command's run is on a cluster: jobs.status, logs, cancel and wait ask `elsewhere`
first, and for a run submitted over SSH (runs/NAME/remote.json) the same module runs on the login node (in
the run's code snapshot); jobs.fetch and a submit's --wait come here too (jobs.list asks each login node once,
from the same records). What comes back is data:
printed, never taken as a file name, a command or a record; a line of advice that names the run's folder
there (`--resume /scratch/...`) names its folder here, where the laptop's commands take it. A follow
(`--wait`, `jobs.wait`, `jobs.logs --follow`) counts the bytes it has shown; when the connection drops it
connects again and asks for the log from there (`--offset`), so nothing is shown twice or lost, and the job
never depends on the laptop."""

import codecs
import contextlib
import re
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import IO

from jobs.remote import runs
from jobs.remote.agent import FETCHED
from jobs.remote.runs import RemoteRun
from jobs.remote.ssh import SSH_FAILED, Connection, with_retries
from jobs.tracking import ProgressLine, by_name
from trainer.errors import UserError


def elsewhere(target: str, module: str, *args: str, follow_it: bool = False) -> int | None:
    """When `target` (a folder here, or a run's name) is a run on a cluster: `python -m module RUN_DIR args`
    on its login node, followed to its end when `follow_it`; that command's exit code. None: the run is here."""
    run = runs.load(by_name(target))
    if run is None:
        return None
    if follow_it:
        return follow(run, f"following job {run.job_id}", module, run.run_dir, *args)
    # A log is shown as it comes, untouched; a status or a cancel is a few lines of the tool's own words.
    return run_module(run, module, run.run_dir, *args, advice_in_output=module != "jobs.logs")


def as_here(text: str, run: RemoteRun) -> str:
    """Lines from the login node as the laptop acts on them: where a line advises a command (`python -m jobs.`
    or `--resume`), the run's folder there becomes its folder here. Other lines, and paths inside the run's
    folder (a checkpoint there), stay the cluster's words."""
    there = run.run_dir.rstrip("/")
    if not run.folder or not there:
        return text
    # The whole folder, as a word of its own (not the tail of a longer path, nor the head of one inside it).
    whole = re.compile(r"(?<![\w/.-])" + re.escape(there) + r"/?(?![\w/.-])")
    return "".join(
        whole.sub(lambda _: run.folder, line) if "python -m jobs." in line or "--resume" in line else line
        for line in text.splitlines(keepends=True)
    )


def run_module(run: RemoteRun, module: str, *args: str, advice_in_output: bool = True) -> int:
    """`python -m module args` on the login node, its output ours; its exit code. Its standard error, and its
    standard output when `advice_in_output`, with advice as here; else its standard output as it comes."""
    connection = Connection(run.login)
    sys.stdout.flush()
    output = subprocess.PIPE if advice_in_output else None
    done = subprocess.run(connection.argv("run", run.cwd, module, *args), stdout=output, stderr=subprocess.PIPE)
    out = as_here(done.stdout.decode(errors="replace"), run) if advice_in_output else ""
    err = as_here(done.stderr.decode(errors="replace"), run)
    sys.stdout.write(out)
    sys.stdout.flush()
    if done.returncode == SSH_FAILED or (done.returncode == 2 and "error: " in err):
        raise UserError(connection.explain(done.returncode, err))
    sys.stderr.write(err)
    return done.returncode


def follow(run: RemoteRun, what: str, module: str, *args: str) -> int:
    """Stream `module args --offset N` from the login node, N being what was shown so far; again after a
    dropped connection. Its standard output is the log, shown as it came; its standard error, line by line,
    with advice as here. The module's own exit code."""
    connection = Connection(run.login)
    shown = 0
    # jobs.wait's (and --wait's) progress lines as one line on this terminal, as a local wait shows them.
    screen = ProgressLine(sys.stdout) if module == "jobs.wait" and sys.stdout.isatty() else None
    text = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def errors(stream: IO[bytes]) -> None:
        for line in iter(stream.readline, b""):
            sys.stderr.write(as_here(line.decode(errors="replace"), run))
            sys.stderr.flush()

    def attempt() -> int:
        nonlocal shown
        argv = connection.argv("run", run.cwd, module, *args, "--offset", str(shown))
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            relay = threading.Thread(target=errors, args=(proc.stderr,), daemon=True)
            relay.start()
            try:
                for chunk in iter(lambda: proc.stdout.read1(1 << 16), b""):  # type: ignore[union-attr]
                    if screen is not None:
                        screen.write(text.decode(chunk))
                    else:
                        sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
                    shown += len(chunk)
            except BaseException:  # Ctrl-C, a closed pipe (| head): ssh goes now, not when the job ends
                proc.kill()
                raise
            code = proc.wait()
            relay.join()
            return code

    try:
        return with_retries(what, attempt)
    finally:
        if screen is not None:
            screen.close()


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

"""`python -m jobs.submit --profile mysite ...` where the profile names a `login`: the submit runs on the login
node. Here: the profile and flags are checked, the code snapshot is sent (jobs.remote.sync), then the login
node's own `python -m jobs.submit` runs on that copy with the same arguments and a profile of the same fields
whose run_root is `remote_root`, and its lines are printed as they come. A folder of the run's name under
./runs records where it lives (jobs.remote.runs), so jobs.status NAME and the others work from here."""

import contextlib
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from jobs.ops import follow
from jobs.profiles import Profile
from jobs.remote import runs, sync
from jobs.remote.runs import RemoteRun
from jobs.remote.ssh import SSH_FAILED, Connection, Login, dropped
from jobs.snapshot import git_diff, plan_snapshot
from jobs.tracking import by_name
from trainer.errors import UserError, printable

PROFILE = ".slurm-ddp/profile.yaml"  # in the login node's copy of the folder: the profile as the cluster runs it
LOCAL_ONLY = ("name", "login", "remote_root", "ssh_options")


def login_of(profile: Profile) -> Login:
    if profile.executor != "slurm":
        raise UserError(
            f"profile {profile.name} names login {profile.remote.login} but runs {profile.executor}; set executor: slurm"
        )
    remote = profile.remote
    return Login(remote.login, remote.remote_root, list(remote.ssh_options), profile.environment.python or "python3")


def cluster_profile(profile: Profile, root: str) -> dict[str, object]:
    """The profile the login node's submit reads: every field but those of the connection; runs in `root`
    (remote_root as the login node expanded it)."""
    fields = {key: value for key, value in profile.flat().items() if key not in LOCAL_ONLY}
    return fields | {"run_root": root}


def greeting(reply: bytes, login: Login) -> dict:
    """The agent's hello (root, python, missing), or one line: a reply is data, never trusted as shaped."""
    try:
        hello = json.loads(reply)
    except ValueError:
        hello = None
    if not isinstance(hello, dict) or not isinstance(hello.get("missing"), list) or "python" not in hello:
        raise UserError(
            f"{login.login} did not answer as this tool's agent does ({reply[:80]!r}); check python: in the "
            "profile names the cluster's interpreter, and that its shell prints nothing for a command"
        )
    return hello


def root_of(hello: dict, login: Login) -> str:
    """The absolute folder the login node's agent made of remote_root, checked as data."""
    root = hello.get("root")
    if not isinstance(root, str) or not root.startswith("/") or "\n" in root or "\0" in root or "/../" in f"{root}/":
        raise UserError(
            f"{login.login} answered {root!r} for remote_root {login.remote_root}, not an absolute folder; "
            "check python: in the profile names the cluster's interpreter"
        )
    return root


def with_profile(argv: list[str], path: str) -> list[str]:
    """The submit's arguments with --profile replaced by `path`, and without --wait (followed from here)."""
    end = options_end(argv)
    return [*replaced(argv[:end], "--profile", []), "--profile", path, *argv[end:]]


def options_end(argv: list[str]) -> int:
    """Where the submit's own options end: at `--` (the words after it are the command's), else at the end."""
    return argv.index("--") if "--" in argv else len(argv)


def with_resume(argv: list[str], run_dir: str) -> list[str]:
    """The submit's arguments for the login node: --resume (either form) naming the run directory there, and
    without --wait (followed from here). Words after `--` are the command's, left as they are."""
    end = options_end(argv)
    return replaced(argv[:end], "--resume", ["--resume", run_dir]) + argv[end:]


def replaced(options: list[str], flag: str, words: list[str]) -> list[str]:
    """The submit's own `options` with `flag` (`flag VALUE` or `flag=VALUE`) replaced by `words` where it
    stood, and without --wait (followed from here)."""
    out, skip = [], False
    for arg in options:
        if skip:
            skip = False
        elif arg == flag:
            out += words
            skip = True
        elif arg.startswith(f"{flag}="):
            out += words
        elif arg != "--wait":
            out.append(arg)
    return out


def with_after(argv: list[str], login: Login) -> list[str]:
    """--after (either form) naming a run recorded here (runs/NAME) as its run directory on the login node,
    where the submit resolves it; a run of another login node is refused."""
    end = options_end(argv)
    out, after = [], False
    for arg in argv[:end]:
        value = arg.removeprefix("--after=") if arg.startswith("--after=") else arg if after else None
        after = arg == "--after"
        if value is not None and (run := runs.load(by_name(value))) is not None:
            if run.login.login != login.login:
                raise UserError(f"--after {value}: that run lives on {run.login.login}, not {login.login}")
            arg = f"--after={run.run_dir}" if arg.startswith("--after=") else run.run_dir
        out.append(arg)
    return out + argv[end:]


def ready(login: Login) -> tuple[Connection, dict, str]:
    """A connection to the login node whose python can run the project's modules; its greeting, and the
    absolute folder its remote_root is there."""
    connection = Connection(login)
    hello = greeting(connection.call("hello", login.remote_root, timeout=60), login)
    root = root_of(hello, login)
    if hello["missing"]:
        raise UserError(
            f"the cluster's python ({hello['python']!s}) cannot import {', '.join(map(str, hello['missing']))}: install the "
            "project's dependencies there (pip install -e . in a clone), or set python: in the profile"
        )
    return connection, hello, root


def submit(
    argv: list[str],
    profile: Profile,
    wait: bool,
    resume: RemoteRun | None,
    name: str = "",
    resume_folder: Path | None = None,
) -> int:
    """Send the code, record the run here, submit on the login node, settle the record with what it did;
    follow it with --wait. `name`: the run's folder name, chosen here for a new run (the laptop must know it
    before the submit, to find the job again if the connection drops during it)."""
    login = resume.login if resume else login_of(profile)
    argv = with_after(argv, login)
    connection, hello, root = ready(login)
    cwd, args = code_and_args(connection, login, profile, root, argv, resume, name)
    run_dir = resume.run_dir if resume else f"{root}/{name}"
    fresh = (profile.code.snapshot and not resume) or "--current-code" in argv
    where = f"{run_dir}/code" if fresh else cwd
    run = RemoteRun(login, run_dir, resume.job_id if resume else "", resume.profile if resume else profile.name, where)
    folder = resume_folder if resume and resume_folder else runs.local_folder(run.run_dir)
    if not resume and folder.exists() and not unqueued(connection, folder, run_dir, host=str(hello.get("host", ""))):
        raise UserError(f"{folder} already exists here; pick another --name, or move that folder aside")
    runs.save(folder, run)  # first: whatever happens to the connection now, this machine knows the run
    run = dataclasses.replace(run, folder=runs.shown(folder))
    try:
        out = submit_there(connection, cwd, run, args)
    except Unsettled as exc:
        run = settle(connection, run, folder, str(exc), made_here=not resume, host=str(hello.get("host", "")))
        out = f"submitted job {run.job_id}\n"
    except KeyboardInterrupt:  # the submit there may go on and queue the job: the record stays to find it
        print(f"\ninterrupted: the submit on {login.login} may still queue the job; python -m jobs.status "
              f"{folder.name} tells, python -m jobs.cancel {folder.name} stops it", file=sys.stderr)  # fmt: skip
        raise
    except UserError:
        if not resume:  # refused there, one line: nothing was queued
            _forget(folder)
        raise
    job = re.search(r"^submitted (?:array )?job (\d+)", out, re.M)
    if job is None:
        if not resume:
            _forget(folder)
        return 0  # a run that had already finished: nothing queued
    # The record keeps the run directory this machine asked for: what the login node prints is shown, not kept.
    run = dataclasses.replace(run, job_id=job.group(1))
    runs.save(folder, run)
    print(f"here:          {folder} (jobs.status, jobs.logs, jobs.wait, jobs.fetch take it or its name)", flush=True)
    return follow.wait(run) if wait else 0


def code_and_args(
    connection: Connection,
    login: Login,
    profile: Profile,
    root: str,
    argv: list[str],
    resume: RemoteRun | None,
    name: str,
) -> tuple[str, list[str]]:
    """Where the submit there runs (the code sent now, or a resumed run's own copy), and its arguments."""
    if resume and "--current-code" not in argv:  # in the run's own snapshot, with the profile it ran with
        return resume.cwd, with_resume(argv, resume.run_dir)
    cwd = send_folder(connection, login, profile, root)
    if resume:  # --current-code: this folder's code, sent as for a new run, resumed from there
        return cwd, with_resume(argv, resume.run_dir)
    return cwd, with_name(with_profile(argv, PROFILE), name)  # relative: the submit there runs in that copy


class Unsettled(UserError):
    """The submit on the login node ended without saying what it did (the connection dropped, or it died)."""


def settle(
    connection: Connection,
    run: RemoteRun,
    folder: Path,
    why: str,
    made_here: bool,
    host: str = "",
    window_s: float = 60,
) -> RemoteRun:
    """After `why` cut the submit off: ask the login node (again and again, for `window_s`) whether the run
    has a new job. One: adopted, said here. None, no run directory and no submit of it still running there:
    a record made here goes, one line says to run again. Otherwise the record stays for jobs.status and
    jobs.list, and one line says so."""
    print(f"{why}; asking {run.login.login} what the submit did", file=sys.stderr, flush=True)
    started, seen, quiet = time.monotonic(), None, 0
    while True:
        try:
            seen = json.loads(connection.call("job", run.run_dir, Path(run.run_dir).name, timeout=30))
        except (UserError, ValueError):
            seen = None  # still unreachable: try again
        job = str(seen.get("job_id") or "") if isinstance(seen, dict) else ""
        if job.isdigit() and job != run.job_id:  # a new job (a --resume's run names its old one until then)
            print(f"the job was queued all the same: job {job}, recorded here", file=sys.stderr, flush=True)
            return dataclasses.replace(run, job_id=job)
        quiet = quiet + 1 if host and nothing_came(seen, host) else 0
        if time.monotonic() - started > window_s or quiet >= 3:  # nothing there, nothing on its way, 3 times
            break
        time.sleep(3)
    if quiet and made_here:
        _forget(folder)
        raise UserError(f"{why}, before any job was queued ({run.run_dir} was never made); run the same command again")
    raise UserError(
        f"{why}; whether a job was queued is not known yet: python -m jobs.status {folder.name} asks the login node "
        "again, and jobs.list shows the run"
    )


def unqueued(connection: Connection, folder: Path, run_dir: str, host: str) -> bool:
    """Whether `folder` holds only the record of an earlier submit of this same run that a dropped connection
    left unsettled, and the login node says nothing came of it (no run directory, no submit of it running):
    then the record goes, and the same command, run again as advised, simply works. A job queued meanwhile is
    said in one line."""
    try:
        record = runs.load(str(folder))
    except UserError:
        return False
    if record is None or record.job_id or record.run_dir != run_dir:
        return False
    seen = json.loads(connection.call("job", run_dir, Path(run_dir).name, timeout=30) or b"null")
    if isinstance(seen, dict) and str(seen.get("job_id") or "").isdigit():
        raise UserError(
            f"{folder.name} was queued as job {seen['job_id']} as the connection dropped: python -m jobs.status "
            f"{folder.name} follows it"
        )
    if not nothing_came(seen, host):
        return False
    _forget(folder)
    return True


def nothing_came(seen: object, host: str) -> bool:
    """Whether the login node's answer to `job` says: no run directory and no submit of it running, as seen
    from the login node the submit ran on, `host` (another one behind the same name cannot see that node's
    processes; "": not known)."""
    if not (isinstance(seen, dict) and seen.get("exists") is False and seen.get("submitting") is False):
        return False
    return not host or seen.get("host") == host


def _forget(folder: Path) -> None:
    """Remove the record this submit made here: remote.json, and its folder if that is all it held."""
    (folder / runs.RECORD).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()


def with_name(args: list[str], name: str) -> list[str]:
    """`--name NAME` for the login node's submit, unless the arguments name the run themselves."""
    end = options_end(args)
    if not name or any(a == "--name" or a.startswith("--name=") for a in args[:end]):
        return args
    return [*args[:end], "--name", name, *args[end:]]


def send_folder(connection: Connection, login: Login, profile: Profile, root: str) -> str:
    """This folder's snapshot into the login node's copy of it; the folder there the submit runs in."""
    snapshot = plan_snapshot(
        Path.cwd(), [Path(runs.LOCAL_ROOT).resolve()], profile.code.snapshot_exclude, profile.code.snapshot_limit_mb,
        profile.code.snapshot_include,
    )  # fmt: skip
    cache = sync.cache_dir(root, Path.cwd())
    text = yaml.safe_dump(cluster_profile(profile, root), sort_keys=False).encode()
    extra = {PROFILE: text, **sync.origin_files(snapshot, git_diff(Path.cwd()) if snapshot.git else "")}
    sent = sync.send(connection, snapshot, cache, extra)
    total = len(snapshot.files) + len(snapshot.tool_files)
    print(f"sent {sent.files} new or changed file(s) of {total} ({sent.bytes} bytes) to {login.login}", flush=True)
    return f"{cache}/code"  # the tool beside it, in tool/ (jobs.remote.agent's run)


def submit_there(connection: Connection, cwd: str, run: RemoteRun, args: list[str]) -> str:
    """The login node's jobs.submit in `cwd` (the copy sent, or a resumed run's snapshot), its lines printed
    (advice naming `run` as here); what it printed."""
    argv = connection.argv("run", cwd, "jobs.submit", *args)
    done = subprocess.run(argv, capture_output=True, text=True, errors="replace")
    sys.stdout.write(follow.as_here(done.stdout, run))
    if dropped(done.returncode, done.stderr, answered=True):  # it answered a moment ago: the connection dropped
        said = " ".join(done.stderr.split())[-200:] or "no word from ssh"
        raise Unsettled(f"the connection to {connection.login.login} dropped during the submit ({said})")
    if done.returncode != 0 and "error: " in done.stderr:  # refused there: one line, nothing queued
        raise UserError(connection.explain(done.returncode, follow.as_here(done.stderr, run)))
    sys.stderr.write(follow.as_here(done.stderr, run))
    if done.returncode != 0:
        raise Unsettled(f"the submit on {connection.login.login} ended with exit {done.returncode}")
    return done.stdout


# The one line of the login node's rehearsal this machine acts on: a folder of the rehearsal's own name, under
# the cluster's run root; anything else is only shown.
CERTIFICATE = re.compile(
    r"certificate: (/[A-Za-z0-9._/+-]+/(rehearse-\d{8}-\d{6})/rehearsal\.md) \(and rehearsal\.json\)"
)


def rehearse_there(argv: list[str], profile: Profile) -> int:
    """`python -m jobs.rehearse ARGV` on the login node, where its runs' records are: this folder's code sent
    as for a submit, the rehearsal's lines printed as they come (plain text), its certificate copied into
    ./runs/rehearse-TIME/. Its exit code. The rehearsal lasts as long as the connection: a dropped one ends it."""
    login = login_of(profile)
    connection, _, root = ready(login)
    cwd = send_folder(connection, login, profile, root)
    found = None
    with tempfile.TemporaryFile() as errors:  # a file, not a pipe: a long stderr cannot block the rehearsal
        process = subprocess.Popen(
            connection.argv("run", cwd, "jobs.rehearse", *with_profile(argv, PROFILE)),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, text=True, errors="replace",
        )  # fmt: skip
        assert process.stdout is not None
        for line in process.stdout:
            print(printable(line.rstrip("\n")), flush=True)
            found = CERTIFICATE.fullmatch(line.strip()) or found
        code = process.wait()
        errors.seek(0)
        err = errors.read().decode(errors="replace")
    if code == SSH_FAILED or (code == 2 and "error: " in err):  # the connection, or refused there: one line
        raise UserError(connection.explain(code, err))
    sys.stderr.write(printable(err, escaped=True) + "\n" if err.strip() else "")
    if found and Path(found.group(1)).parent.parent == Path(root):
        here = Path(runs.LOCAL_ROOT).resolve() / found.group(2)
        here.mkdir(parents=True, exist_ok=True)
        for name in ("rehearsal.md", "rehearsal.json"):
            (here / name).write_bytes(connection.call("read", str(Path(found.group(1)).with_name(name)), "0"))
        print(f"certificate here: {here / 'rehearsal.md'}")
    return code

"""What runs on the login node for a laptop's command (jobs.remote): this file's text is sent as `python -c`,
so it needs nothing installed there but Python (3.8 or later) and, for the actions that run this project's
modules, the project's dependencies. Standard library only; no import of this project at the top.

    python -c AGENT hello ROOT                    ROOT absolute once expanded here, made, writable; the
                                                  dependencies
    python -c AGENT manifest DIR                  {path: sha256} of the files the last receive put in DIR
    python -c AGENT receive DIR < TAR             unpack changed files into DIR; drop those the last receive
                                                  put there that its manifest no longer names
    python -c AGENT read PATH OFFSET [LIMIT]      the bytes of PATH from OFFSET (a log, tailed)
    python -c AGENT pack RUN_DIR > TAR            the run's records and TensorBoard events, for jobs.fetch
    python -c AGENT job RUN_DIR                   whether RUN_DIR exists, and the job its job.json names
    python -c AGENT run CWD MODULE ARGS...        python -m MODULE ARGS in CWD (a code snapshot), the tool from
                                                  CWD/../tool

Paths arrive quoted, never through a shell; `$VARS` and `~` in them are expanded here, on the cluster.
Exit 2 with one `error: ...` line on stderr for what the laptop should report as bad input.
"""

import hashlib
import importlib.util
import io
import json
import os
import re
import runpy
import socket
import sys
import tarfile

MANIFEST = ".slurm-ddp/manifest.json"  # inside a received tar: every path the snapshot holds
NEEDED = ("torch", "submitit", "yaml", "tensorboard", "PIL", "pandas", "torchvision")
FETCHED = ("summary.json", "attempts.json", "error.txt", "progress.json")  # no job.json: not a run to resume here


def expand(path: str) -> str:
    return os.path.abspath(os.path.expanduser(os.path.expandvars(path)))


def fail(message: str) -> None:
    sys.stderr.write(f"error: {message}\n")
    sys.exit(2)


def root_folder(root: str) -> str:
    """remote_root as this login node's shell-less process expands it: an absolute folder, or exit 2. Never
    taken relative to where this process runs (a submit runs in the snapshot cache, whose clean-up is not
    for runs), and never with a `$VAR` left as text (unset here, as $SCRATCH often is without a login shell)."""
    folder = os.path.expanduser(os.path.expandvars(root))
    if "$" in folder:
        unset = sorted(set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", folder))) or ["$"]
        fail(
            f"remote_root {root}: {', '.join(unset)} is not set on the login node (ssh runs no login shell); "
            f"write the folder itself, e.g. remote_root: {os.path.expanduser('~')}/runs"
        )
    if not os.path.isabs(folder):
        fail(
            f"remote_root {root} is {folder} on the login node, not an absolute folder; write one, e.g. /scratch/$USER/runs"
        )
    return os.path.normpath(folder)


def hello(root: str) -> None:
    folder = root_folder(root)
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".write-test-{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.unlink(probe)
    except OSError as exc:
        fail(f"remote_root {root} ({folder}) is not writable on the login node: {exc.strerror}; pick a folder you own")
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    version = sys.version.split()[0]
    print(
        json.dumps({"root": folder, "python": sys.executable, "missing": missing, "version": version, "host": host()})
    )


def host() -> str:
    return socket.gethostname()


def digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def placed(base: str) -> list:
    """The files the last `receive` put under `base` (its manifest): the only ones this agent ever reads back
    or deletes there. Whatever else lies in the folder (a run a relative run_root once put there) is not its."""
    try:
        with open(os.path.join(base, MANIFEST)) as f:
            names = json.load(f)
    except (OSError, ValueError):
        return []
    return [n for n in names if isinstance(n, str) and safe(n)] if isinstance(names, list) else []


def manifest(folder: str) -> None:
    base, out = expand(folder), {}
    for name in placed(base):
        path = os.path.join(base, name)
        if os.path.isfile(path) and not os.path.islink(path):
            out[name] = digest(path)
    print(json.dumps(out))


def safe(name: str) -> bool:
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and ".." not in parts and "\\" not in name


def receive(folder: str) -> None:
    base = expand(folder)
    os.makedirs(base, exist_ok=True)
    before = placed(base)
    data = sys.stdin.buffer.read()
    keep = None
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar.getmembers():
            if not member.isfile() or not safe(member.name):
                fail(f"refusing {member.name!r} in the snapshot: not a plain file inside the folder")
            source = tar.extractfile(member)
            content = source.read() if source else b""
            if member.name == MANIFEST:
                keep = set(json.loads(content.decode()))
            target = os.path.join(base, member.name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            part = target + ".part"
            with open(part, "wb") as f:
                f.write(content)
            os.chmod(part, member.mode & 0o777 or 0o644)
            os.replace(part, target)
    if keep is not None:  # files the snapshot no longer has (deleted on the laptop), of those it put here
        for name in set(before) - keep:
            path = os.path.join(base, name)
            if os.path.isfile(path) or os.path.islink(path):
                os.unlink(path)
    print(json.dumps({"received": len(data)}))


def read(path: str, offset: str, limit: str = "4194304") -> None:
    try:
        with open(expand(path), "rb") as f:
            f.seek(int(offset))
            sys.stdout.buffer.write(f.read(int(limit)))
    except FileNotFoundError:
        pass  # not written yet: nothing new


def pack(run_dir: str) -> None:
    base = expand(run_dir)
    if not os.path.isdir(base):
        fail(f"{run_dir} is not a run directory on the cluster")
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|") as tar:
        # Plain files only, never through a link: the run folder is data, and a link in it may point anywhere.
        for name in FETCHED:
            path = os.path.join(base, name)
            if os.path.isfile(path) and not os.path.islink(path):
                tar.add(path, arcname=name)
        events = os.path.join(base, "tensorboard")
        for root, _, files in [] if os.path.islink(events) else os.walk(events):  # walk follows no link below
            for name in sorted(files):
                path = os.path.join(root, name)
                if os.path.isfile(path) and not os.path.islink(path):  # the laptop takes plain files only
                    tar.add(path, arcname=os.path.relpath(path, base))


def job(run_dir: str, name: str = "") -> None:
    """Whether a run directory exists here, the job its job.json names (a sweep's: its first point's), and
    whether a jobs.submit naming it still runs on this machine: how a laptop whose connection dropped during
    a submit learns what the submit did."""
    base = expand(run_dir)
    found = [os.path.join(base, "job.json")]
    if os.path.isdir(base):
        found += sorted(os.path.join(base, d, "job.json") for d in os.listdir(base))
    job_id = None
    for path in found:
        try:
            with open(path) as f:
                job_id = str(json.load(f)["job_id"]).split("_")[0]
            if job_id.isdigit():
                break
            job_id = None
        except (OSError, ValueError, KeyError, TypeError):
            continue
    found_there = {"exists": os.path.isdir(base), "job_id": job_id, "submitting": submitting(name), "host": host()}
    print(json.dumps(found_there))


def submitting(name: str) -> bool:
    """A jobs.submit of the run `name` (its --name) still runs on this machine (Linux: /proc)."""
    if not name or not os.path.isdir("/proc"):
        return False
    for pid in os.listdir("/proc"):
        try:
            with open(os.path.join("/proc", pid, "cmdline"), "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if b"jobs.submit" in words and (name.encode() in words or b"--name=" + name.encode() in words):
            return True
    return False


def run(cwd: str, module: str, *args: str) -> None:
    folder = expand(cwd)
    if not os.path.isdir(folder):
        fail(f"{cwd} does not exist on the cluster; was the run submitted from here?")
    missing = [name for name in ("submitit", "yaml") if importlib.util.find_spec(name) is None]
    if missing:
        fail(f"the cluster's python ({sys.executable}) cannot import {', '.join(missing)}: install the project there")
    # The tool's own packages lie beside the code, in tool/ (a run made before they did: inside it). The
    # working folder is your code: never on this process's sys.path (`python -c` put "" there), so your
    # trainer.py or jobs.py stays yours, and what this process starts imports the tool the same way.
    tool = os.path.join(os.path.dirname(folder), "tool")
    tool = tool if os.path.isdir(os.path.join(tool, "jobs")) else folder
    sys.path[:] = [tool, *(p for p in sys.path if p not in ("", ".") and os.path.abspath(p) != folder)]
    os.environ["PYTHONSAFEPATH"] = "1"
    os.environ["PYTHONPATH"] = tool + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    os.chdir(folder)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


ACTIONS = {"hello": hello, "manifest": manifest, "receive": receive, "read": read, "pack": pack, "job": job, "run": run}


def main(argv: list) -> None:
    if not argv or argv[0] not in ACTIONS:
        fail(f"unknown action {argv[:1]}; this agent does {', '.join(ACTIONS)}")
    ACTIONS[argv[0]](*argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])

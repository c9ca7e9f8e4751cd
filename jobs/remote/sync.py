"""The code snapshot sent to the login node, incrementally: the login node keeps one copy per folder submitted
from (`REMOTE_ROOT/.snapshots/<id>/`), says what it holds by checksum, and only new or changed files travel
(one tar over the ssh connection); files deleted here are deleted there. The remote submit then takes its
snapshot of that copy, as a submit on the login node takes one of your folder."""

import hashlib
import io
import json
import socket
import tarfile
from dataclasses import dataclass
from pathlib import Path

from jobs.remote.agent import MANIFEST, digest  # one checksum on both sides
from jobs.remote.ssh import Connection
from jobs.snapshot import Snapshot

ORIGIN = ".slurm-ddp/origin.json"  # the laptop's folder, host and git state, for the run's provenance
DIFF = ".slurm-ddp/git.diff"  # its uncommitted changes


def origin_files(snapshot: Snapshot, diff: str) -> dict[str, bytes]:
    """What the login node's submit records as where the code came from (it sees only a copy, not a git tree)."""
    origin = {"host": socket.gethostname(), "cwd": str(snapshot.workspace), "git": snapshot.git}
    return {ORIGIN: json.dumps(origin | {"project_git": snapshot.project_git}).encode(), DIFF: diff.encode()}


def origin(cwd: Path) -> tuple[dict, str] | None:
    """The laptop's record in a copy received from it, and its diff; None in any other folder."""
    try:
        return json.loads((cwd / ORIGIN).read_text()), (cwd / DIFF).read_text()
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class Sent:
    files: int  # new or changed files sent
    bytes: int  # the tar's size, what went over the connection


def cache_dir(remote_root: str, workspace: Path) -> str:
    """The login node's copy of this folder: one per (machine, folder), so two laptops do not fight over it."""
    key = hashlib.sha256(f"{socket.gethostname()}:{workspace.resolve()}".encode()).hexdigest()[:16]
    return f"{remote_root.rstrip('/')}/.snapshots/{workspace.name or 'root'}-{key}"


def changed_tar(snapshot: Snapshot, remote: dict[str, str], extra: dict[str, bytes]) -> tuple[bytes, int]:
    """A tar of the files the login node lacks or holds otherwise (yours under code/, the tool's under tool/),
    the manifest of every file, and `extra` (name in code/: content, written every time); and how many
    snapshot files were sent."""
    buffer, sent = io.BytesIO(), 0
    files = [(s, f"code/{n}") for s, n in snapshot.files] + [(s, f"tool/{n}") for s, n in snapshot.tool_files]
    extra = {f"code/{name}": content for name, content in extra.items()}
    names = [name for _, name in files]
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for source, name in files:
            if remote.get(name) != digest(source):
                tar.add(str(source), arcname=name, recursive=False)
                sent += 1
        for name, content in {MANIFEST: json.dumps([*names, *extra]).encode(), **extra}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o644
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue(), sent


def send(connection: Connection, snapshot: Snapshot, folder: str, extra: dict[str, bytes]) -> Sent:
    remote = json.loads(connection.call("manifest", folder) or b"{}")
    data, sent = changed_tar(snapshot, remote, extra)
    connection.call("receive", folder, data=data)
    return Sent(sent, len(data))

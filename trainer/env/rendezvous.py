"""A master port every rank agrees on, even when the one derived from the job id is taken (torch-free).

On Slurm the port comes from the job id (trainer.env.launcher), the same on every node without a word exchanged.
Another program may hold it on the first node: then rank 0 takes a free port instead, and publishes the one
it chose in the run directory, which every node sees; the other ranks wait for it there. An exported
MASTER_PORT is used as it is. The local controller picks a free port itself (jobs.local_controller).
"""

import dataclasses
import socket
import time
from pathlib import Path

from trainer.env.launcher import DistEnv
from trainer.errors import UserError
from trainer.run.atomic import write_text
from trainer.run.rundir import RunDir

WAIT_S = 300.0  # the other ranks' wait for rank 0's choice: rank 0 may start late on a busy node


def free(port: int) -> bool:
    """Whether this host could listen on `port` as torch's TCPStore does (all addresses, SO_REUSEADDR)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


def any_free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return int(probe.getsockname()[1])


def agree_port(env: DistEnv, run_dir: Path, wait_s: float = WAIT_S) -> DistEnv:
    """`env` with the master port every rank of this attempt uses (see the module's docstring)."""
    if not env.port_derived or not env.distributed:
        return env
    path = RunDir(run_dir).rendezvous / f"port_{env.attempt_key}"
    if env.is_main:
        port = env.master_port if free(env.master_port) else any_free_port()
        if port != env.master_port:
            print(f"dist: port {env.master_port} is taken on {env.node_name}: rank 0 listens on {port}", flush=True)
        write_text(path, str(port))
        return dataclasses.replace(env, master_port=port)
    deadline = time.monotonic() + wait_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise UserError(f"rank 0 published no port in {path} within {wait_s:.0f} s; see rank 0's log")
        time.sleep(0.2)
    return dataclasses.replace(env, master_port=int(path.read_text()))

"""A master port every rank agrees on, even when the one derived from the job id is taken (torch-free).

On Slurm the port comes from the job id (trainer.supervise.launcher), the same on every node without a word exchanged.
Another program may hold it on the first node: then rank 0 takes a free port instead, and publishes the one
it chose in the run directory, which every node sees; the other ranks wait for it there. An exported
MASTER_PORT is used as it is. The local controller picks a free port itself (jobs.local_controller).
"""

import dataclasses
import socket
from pathlib import Path

from trainer.errors import UserError
from trainer.run.atomic import write_text
from trainer.run.rundir import RunDir
from trainer.supervise.launcher import DistEnv
from trainer.supervise.relay import until

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


def interface_address(name: str) -> str | None:
    """This host's IPv4 address on network interface `name` (SIOCGIFADDR, as `ip addr` reads it); None when the
    host has no such interface, or it has no IPv4 address."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            packed = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def own_address(env: DistEnv) -> str | None:
    """This host's address on the profile's network_interface; None without one. A host that lacks it is refused
    in one line that names the node: NCCL and gloo would fail on it later, less clearly."""
    if not env.interface:
        return None
    address = interface_address(env.interface)
    if address is None:
        names = ", ".join(name for _, name in socket.if_nameindex())
        raise UserError(
            f"node {env.node_name} has no network interface {env.interface} with an IPv4 address (network_interface "
            f"in the profile); it has {names}: name one every node has"
        )
    return address


def agree_port(env: DistEnv, run_dir: Path, wait_s: float = WAIT_S) -> DistEnv:
    """`env` with the master address and port every rank of this attempt uses (see the module's docstring). With
    a network_interface the address is rank 0's on it, published with the port: the other nodes cannot read it."""
    own = own_address(env)
    if own is not None and (env.source in ("submitit-local", "single") or not env.distributed):
        return dataclasses.replace(env, master_addr=own)  # one machine: its own address is rank 0's
    if env.source != "slurm" or not env.distributed or not (env.port_derived or own is not None):
        return env
    path = RunDir(run_dir).rendezvous / f"port_{env.attempt_key}"
    if env.is_main:
        port = env.master_port
        if env.port_derived and not free(port):
            port = any_free_port()
            print(f"dist: port {env.master_port} is taken on {env.node_name}: rank 0 listens on {port}", flush=True)
        address = own or env.master_addr
        write_text(path, f"{address} {port}")
        return dataclasses.replace(env, master_addr=address, master_port=port)
    if not until(path.exists, wait_s, 0.2):
        raise UserError(f"rank 0 published no port in {path} within {wait_s:.0f} s; see rank 0's log")
    address, _, port = path.read_text().strip().rpartition(" ")
    return dataclasses.replace(env, master_addr=address or env.master_addr, master_port=int(port))

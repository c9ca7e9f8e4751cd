"""The distributed environment, read in one place from a mapping of environment variables.

Order: torchrun, then Slurm (srun tasks), then submitit's local executor, else one process.
Functions take a Mapping so tests pass a dict instead of patching os.environ.
"""

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from trainer.errors import UserError
from trainer.hostlist import expand_hostlist

# Ports derived from the job id stay in [10000, 30000): clear of well-known ports and of
# Linux's default ephemeral range (32768-60999), where a derived port could already be taken.
PORT_BASE = 10000
PORT_SPAN = 20000
DEFAULT_PORT = 29500


@dataclass(frozen=True)
class DistEnv:
    source: str  # "torchrun" | "slurm" | "submitit-local" | "single"
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    job_id: str | None
    cpus_per_task: int
    node_name: str = ""
    restart_count: int = 0  # SLURM_RESTART_COUNT: times Slurm has requeued this job

    def describe(self) -> str:
        return (
            f"dist: source={self.source} rank={self.rank} local_rank={self.local_rank} world_size={self.world_size} "
            f"node={self.node_name} node_rank={self.node_rank} master={self.master_addr}:{self.master_port} "
            f"pid={os.getpid()} restart={self.restart_count}"
        )

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def port_from_job_id(job_id: str | None) -> int:
    """A port all tasks of one job agree on, different for neighbouring jobs."""
    digits = "".join(ch for ch in (job_id or "") if ch.isdigit())
    if not digits:
        return DEFAULT_PORT
    return PORT_BASE + int(digits) % PORT_SPAN


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise UserError(f"environment variable {key}={env[key]!r} is not an integer; unset or fix it") from None


def _cpus(env: Mapping[str, str], local_world_size: int) -> int:
    if "SLURM_CPUS_PER_TASK" in env:
        return max(1, _int(env, "SLURM_CPUS_PER_TASK"))
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, available // max(1, local_world_size))


def _address(env: Mapping[str, str], default_addr: str, job_id: str | None) -> tuple[str, int]:
    addr = env.get("MASTER_ADDR") or default_addr
    port = _int(env, "MASTER_PORT") if env.get("MASTER_PORT") else port_from_job_id(job_id)
    return addr, port


def resolve(env: Mapping[str, str]) -> DistEnv:
    """Work out rank, world size and rendezvous address from environment variables."""
    # Slurm names the node (several slurmd can share a host); elsewhere the host name does.
    return dataclasses.replace(
        _resolve(env),
        node_name=env.get("SLURMD_NODENAME") or socket.gethostname(),
        restart_count=_int(env, "SLURM_RESTART_COUNT") if env.get("SLURM_RESTART_COUNT") else 0,
    )


def _resolve(env: Mapping[str, str]) -> DistEnv:
    if all(k in env for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        local_ws = _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else _int(env, "WORLD_SIZE")
        world = _int(env, "WORLD_SIZE")
        return DistEnv(
            source="torchrun",
            rank=_int(env, "RANK"),
            local_rank=_int(env, "LOCAL_RANK"),
            world_size=world,
            local_world_size=local_ws,
            node_rank=_int(env, "GROUP_RANK") if "GROUP_RANK" in env else 0,
            num_nodes=max(1, world // max(1, local_ws)),
            master_addr=env["MASTER_ADDR"],
            master_port=_int(env, "MASTER_PORT"),
            job_id=env.get("TORCHELASTIC_RUN_ID"),
            cpus_per_task=_cpus(env, local_ws),
        )
    if all(k in env for k in ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_NODELIST")):
        hosts = expand_hostlist(env["SLURM_JOB_NODELIST"])
        if not hosts:
            raise UserError("SLURM_JOB_NODELIST is empty; run the trainer inside a Slurm allocation with srun")
        world = _int(env, "SLURM_NTASKS")
        num_nodes = _int(env, "SLURM_JOB_NUM_NODES") if "SLURM_JOB_NUM_NODES" in env else len(hosts)
        # Tasks are spread evenly: one task per GPU on every node.
        local_ws = (
            _int(env, "SLURM_NTASKS_PER_NODE")
            if env.get("SLURM_NTASKS_PER_NODE", "").isdigit()
            else max(1, world // num_nodes)
        )
        job_id = env.get("SLURM_JOB_ID")
        addr, port = _address(env, hosts[0], job_id)
        return DistEnv(
            source="slurm",
            rank=_int(env, "SLURM_PROCID"),
            local_rank=_int(env, "SLURM_LOCALID"),
            world_size=world,
            local_world_size=local_ws,
            node_rank=_int(env, "SLURM_NODEID") if "SLURM_NODEID" in env else 0,
            num_nodes=num_nodes,
            master_addr=addr,
            master_port=port,
            job_id=job_id,
            cpus_per_task=_cpus(env, local_ws),
        )
    if all(k in env for k in ("SUBMITIT_LOCAL_GLOBALID", "SUBMITIT_LOCAL_LOCALID", "SUBMITIT_LOCAL_NTASKS")):
        world = _int(env, "SUBMITIT_LOCAL_NTASKS")
        job_id = env.get("SUBMITIT_LOCAL_JOB_ID")
        addr, port = _address(env, "127.0.0.1", job_id)
        return DistEnv(
            source="submitit-local",
            rank=_int(env, "SUBMITIT_LOCAL_GLOBALID"),
            local_rank=_int(env, "SUBMITIT_LOCAL_LOCALID"),
            world_size=world,
            local_world_size=world,
            node_rank=0,
            num_nodes=1,
            master_addr=addr,
            master_port=port,
            job_id=job_id,
            cpus_per_task=_cpus(env, world),
        )
    addr, port = _address(env, "127.0.0.1", None)
    return DistEnv("single", 0, 0, 1, 1, 0, 1, addr, port, None, _cpus(env, 1))

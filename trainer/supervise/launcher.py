"""The distributed environment, read in one place from a mapping of environment variables.

The launcher that started this process is read first, each by the variable it alone sets: torchrun
(TORCHELASTIC_RUN_ID, as torch.distributed.is_torchelastic_launched does), submitit's local executor
(SUBMITIT_EXECUTOR=local), an srun task (SLURM_STEP_ID), then plain env:// variables, else one process.
Variables left over from an enclosing launcher (an salloc shell, a login shell that once ran torchrun)
never decide on their own. Functions take a Mapping so tests pass a dict instead of patching os.environ.
"""

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.errors import UserError
from trainer.supervise.attempt import ATTEMPT, IN_JOB_RESTART, WATCH_BEAT, Attempt
from trainer.supervise.hostlist import expand_hostlist

# Ports derived from the job id stay in [10000, 30000): clear of well-known ports and of
# Linux's default ephemeral range (32768-60999), where a derived port could already be taken.
PORT_BASE = 10000
PORT_SPAN = 20000
DEFAULT_PORT = 29500
LOCAL_PORT = "SLURM_DDP_LOCAL_PORT"  # set by the local controller for each start of its tasks
# The profile's gpus_per_task, exported by the batch script and the local executor: devices per process.
GPUS_PER_TASK = "SLURM_DDP_GPUS_PER_TASK"
# The profile's network_interface: MASTER_ADDR is node 0's address on it (trainer.supervise.rendezvous)
IFNAME_VAR = "SLURM_DDP_NETWORK_INTERFACE"


@dataclass(frozen=True)
class DistEnv:
    source: str  # "torchrun" | "slurm" | "submitit-local" | "env" | "single"
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    num_nodes: int
    master_addr: str
    master_port: int
    job_id: str | None
    cpus_per_task: int  # compute threads for this process
    node_name: str = ""
    restart_count: int = 0  # SLURM_RESTART_COUNT: times Slurm has requeued this job
    slurm_job_id: str | None = None  # the Slurm job this process runs in: time-left queries and requeue
    attempt: str | None = None  # this attempt's prefix in the logs (trainer.supervise.attempt): $SLURM_DDP_ATTEMPT
    note: str = ""  # why the environment was read the way it was, when that could surprise
    port_derived: bool = False  # master_port comes from the job id, not from MASTER_PORT: it may be taken
    in_job_restart: int = 0  # this allocation's restarts after a failed step, before this start
    interactive: bool = False  # submitit's debug executor: in the submitting process, where pdb may stop it
    gpus_per_task: int = 1  # devices this process drives (a model split over them inside each DDP rank)
    watch_beat: str = ""  # rank 0: the supervisor's node-local heartbeat file (WATCH_BEAT), when there is one
    interface: str = ""  # the profile's network_interface: rank 0's address on it is the master address
    first_node: str = ""  # the node rank 0 runs on (Slurm's first of the step; this one, locally); "": unknown

    def describe(self) -> str:
        return (
            f"dist: source={self.source} rank={self.rank} local_rank={self.local_rank} world_size={self.world_size} "
            f"node={self.node_name} node_rank={self.node_rank} master={self.master_addr}:{self.master_port} "
            f"threads={self.cpus_per_task} pid={os.getpid()} restart={self.restart_count}"
            + (f" gpus_per_task={self.gpus_per_task}" if self.gpus_per_task > 1 else "")
            + (f" ({self.note})" if self.note else "")
        )

    def ids(self) -> dict[str, Any]:
        """Who this process is in the job, as the run records it (trainer.run.provenance.record_rank)."""
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "node_rank": self.node_rank,
            "host": self.node_name,
            "job_id": self.job_id,
            "restart": self.restart_count,
        }

    @property
    def attempt_key(self) -> str:
        """One start of this job's tasks: job id, Slurm's requeue count, restart in the allocation. What each
        start agrees on anew (its port, its store) is named by it, so no start reads an earlier one's."""
        return Attempt(Path(), str(self.job_id), self.restart_count, self.in_job_restart).key

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
    """Threads per process: the task's CPUs shared by the processes that run in it."""
    if env.get("SLURM_CPUS_PER_TASK"):
        # Under srun each process is one task. torchrun inside a task starts local_world_size
        # workers that share the task's CPUs; each taking them all would oversubscribe them.
        share = 1 if "SLURM_STEP_ID" in env and "TORCHELASTIC_RUN_ID" not in env else local_world_size
        return max(1, _int(env, "SLURM_CPUS_PER_TASK") // max(1, share))
    return max(1, available_cpus() // max(1, local_world_size))


def available_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _address(env: Mapping[str, str], default_addr: str, job_id: str | None) -> tuple[str, int, bool]:
    """MASTER_ADDR and MASTER_PORT as exported, else the first host and a port from the job id (derived)."""
    addr = env.get("MASTER_ADDR") or default_addr
    if env.get("MASTER_PORT"):
        return addr, _int(env, "MASTER_PORT"), False
    return addr, port_from_job_id(job_id), True


def tasks_on_node(tasks_per_node: str, node_id: int) -> int:
    """This node's task count from Slurm's compressed list: `3,1` or `2(x3),1` (node ids count from 0)."""
    counts: list[int] = []
    for item in tasks_per_node.split(","):
        count, _, times = item.partition("(x")
        if not count.isascii() or not count.isdigit() or (times and not times.rstrip(")").isdigit()):
            raise UserError(f"SLURM_STEP_TASKS_PER_NODE={tasks_per_node!r} is not Slurm's format; unset or fix it")
        counts += [int(count)] * (int(times.rstrip(")")) if times else 1)
        if len(counts) > node_id:
            return counts[node_id]
    raise UserError(f"SLURM_STEP_TASKS_PER_NODE={tasks_per_node!r} names no node {node_id}; unset or fix it")


def resolve(env: Mapping[str, str]) -> DistEnv:
    """Work out rank, world size and rendezvous address from environment variables."""
    # Slurm names the node (several slurmd can share a host); elsewhere the host name does.
    found = _resolve(env)
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    one_machine = found.source in ("submitit-local", "single")
    return dataclasses.replace(
        found,
        first_node=found.first_node or (node if one_machine else ""),
        node_name=node,
        restart_count=_int(env, "SLURM_RESTART_COUNT") if env.get("SLURM_RESTART_COUNT") else 0,
        slurm_job_id=env.get("SLURM_JOB_ID") or None,
        attempt=env.get(ATTEMPT) or None,
        in_job_restart=_int(env, IN_JOB_RESTART) if env.get(IN_JOB_RESTART) else 0,
        interactive="SUBMITIT_DEBUG_JOB_ID" in env,
        gpus_per_task=_int(env, GPUS_PER_TASK) if env.get(GPUS_PER_TASK) else 1,
        watch_beat=env.get(WATCH_BEAT, ""),
        interface=env.get(IFNAME_VAR, ""),
    )


def _resolve(env: Mapping[str, str]) -> DistEnv:
    if "TORCHELASTIC_RUN_ID" in env and "RANK" in env:  # set, even empty: as is_torchelastic_launched reads it
        return _env_init(env, "torchrun", env.get("TORCHELASTIC_RUN_ID"))
    if env.get("SUBMITIT_EXECUTOR") == "local" or ("SUBMITIT_LOCAL_GLOBALID" in env and "SLURM_STEP_ID" not in env):
        return _submitit_local(env)
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env and "SLURM_PTY_PORT" not in env:
        return _slurm_task(env)
    if all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")) and "SLURM_PROCID" not in env:
        return _env_init(env)
    if "SLURM_PTY_PORT" in env and env.get("SLURM_PROCID", "0") != "0":
        # `srun -n4 --pty python ...` starts four copies, only the first on the terminal.
        raise UserError(
            f"this is task {env['SLURM_PROCID']} of an interactive (--pty) srun step, which runs every task as a "
            f"separate copy; start the trainer with srun without --pty, or with --pty and -n 1"
        )
    note = ""
    if "SLURM_JOB_ID" in env:
        # An salloc or `srun --pty bash` shell, or a batch script outside srun: its SLURM_NTASKS
        # describes the allocation, not processes that will ever join this one (Lightning decides alike).
        note = "a Slurm shell, not an srun task: one process; use srun to start one process per task"
    addr, port, _ = _address(env, "127.0.0.1", None)
    return DistEnv("single", 0, 0, 1, 1, 0, 1, addr, port, None, _cpus(env, 1), note=note)


def _submitit_local(env: Mapping[str, str]) -> DistEnv:
    world = _int(env, "SUBMITIT_LOCAL_NTASKS")
    job_id = env.get("SUBMITIT_LOCAL_JOB_ID")
    # The local controller picks a free port for each start (jobs.local_controller); else one from the job id.
    port = _int(env, LOCAL_PORT) if env.get(LOCAL_PORT) else port_from_job_id(job_id)
    return DistEnv(
        source="submitit-local",
        rank=_int(env, "SUBMITIT_LOCAL_GLOBALID"),
        local_rank=_int(env, "SUBMITIT_LOCAL_LOCALID"),
        world_size=world,
        local_world_size=world,
        node_rank=0,
        num_nodes=1,
        # Its own address and CPUs, even inside a Slurm allocation: an enclosing job's MASTER_* and
        # SLURM_CPUS_PER_TASK describe another rendezvous and other processes.
        master_addr="127.0.0.1",
        master_port=port,
        job_id=job_id,
        cpus_per_task=max(1, available_cpus() // max(1, world)),
    )


def _slurm_task(env: Mapping[str, str]) -> DistEnv:
    # The step's variables, not the job's: a step may run on a subset of the job's nodes.
    variable = "SLURM_STEP_NODELIST" if env.get("SLURM_STEP_NODELIST") else "SLURM_JOB_NODELIST"
    if not env.get(variable):
        raise UserError("SLURM_STEP_NODELIST and SLURM_JOB_NODELIST are unset; start the trainer with srun")
    try:
        hosts = expand_hostlist(env[variable])
    except UserError as exc:
        raise UserError(f"{variable}: {exc}") from None
    world = _int(env, "SLURM_STEP_NUM_TASKS") if env.get("SLURM_STEP_NUM_TASKS") else _int(env, "SLURM_NTASKS")
    node_id = _int(env, "SLURM_NODEID") if "SLURM_NODEID" in env else 0
    num_nodes = (
        _int(env, "SLURM_STEP_NUM_NODES")
        if env.get("SLURM_STEP_NUM_NODES")
        else (_int(env, "SLURM_JOB_NUM_NODES") if "SLURM_JOB_NUM_NODES" in env else len(hosts))
    )
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    # Slurm may place tasks unevenly (`3,1`): this node's own count, not world // nodes.
    local_ws = tasks_on_node(per_node, node_id) if per_node else max(1, world // max(1, num_nodes))
    job_id = env.get("SLURM_JOB_ID")
    addr, port, derived = _address(env, hosts[0], job_id)
    return DistEnv(
        source="slurm",
        rank=_int(env, "SLURM_PROCID"),
        local_rank=_int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0,
        world_size=world,
        local_world_size=local_ws,
        node_rank=node_id,
        num_nodes=num_nodes,
        master_addr=addr,
        master_port=port,
        job_id=job_id,
        cpus_per_task=_cpus(env, local_ws),
        port_derived=derived,
        first_node=hosts[0],
    )


def _env_init(env: Mapping[str, str], source: str = "env", job_id: str | None = None) -> DistEnv:
    """RANK/WORLD_SIZE/MASTER_* of torch.distributed's env:// contract: torchrun's, or another launcher's."""
    world = _int(env, "WORLD_SIZE")
    local_ws = _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world
    return DistEnv(
        source=source,
        rank=_int(env, "RANK"),
        local_rank=_int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0,
        world_size=world,
        local_world_size=local_ws,
        node_rank=_int(env, "GROUP_RANK") if "GROUP_RANK" in env else 0,
        num_nodes=max(1, world // max(1, local_ws)),
        master_addr=env["MASTER_ADDR"],
        master_port=_int(env, "MASTER_PORT"),
        job_id=job_id,
        cpus_per_task=_cpus(env, local_ws),
    )


def torchrun_variables(env: DistEnv) -> dict[str, str]:
    """What torchrun gives each worker, for a script the submitter runs in every task.

    TORCHELASTIC_RUN_ID is left out on purpose: it says "an elastic agent started me", and resolve() would
    then read these variables as torchrun's rather than the Slurm task's or the local executor's.
    """
    return {
        "RANK": str(env.rank),
        "LOCAL_RANK": str(env.local_rank),
        "WORLD_SIZE": str(env.world_size),
        "LOCAL_WORLD_SIZE": str(env.local_world_size),
        "GROUP_RANK": str(env.node_rank),  # torchrun's node index
        "ROLE_RANK": str(env.rank),  # one role ("default"): its ranks are the global ranks
        "ROLE_WORLD_SIZE": str(env.world_size),
        "MASTER_ADDR": env.master_addr,
        "MASTER_PORT": str(env.master_port),
        "OMP_NUM_THREADS": str(env.cpus_per_task),  # torchrun sets 1; the task's CPUs are a better default
    }

import pytest

from trainer.errors import UserError
from trainer.supervise.launcher import PORT_BASE, PORT_SPAN, port_from_job_id, resolve, tasks_on_node

TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "abc",
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29400",
}


def slurm(
    procid: int, localid: int, nodeid: int, nodelist: str, ntasks: int = 4, nodes: int = 2, **extra: str
) -> dict[str, str]:
    env = {
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": str(localid),
        "SLURM_NODEID": str(nodeid),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_JOB_ID": "123456",
        "SLURM_CPUS_PER_TASK": "4",
        "SLURM_STEP_ID": "0",  # set in srun tasks, not in the batch script or an salloc shell
    }
    return env | extra


LOCAL = {
    "SUBMITIT_EXECUTOR": "local",
    "SUBMITIT_LOCAL_GLOBALID": "1",
    "SUBMITIT_LOCAL_LOCALID": "1",
    "SUBMITIT_LOCAL_NTASKS": "2",
    "SUBMITIT_LOCAL_JOB_ID": "4242",
}

# (env, expected fields) — the first matching source wins: torchrun, Slurm, submitit local, single.
CASES = [
    (
        TORCHRUN,
        dict(
            source="torchrun",
            rank=3,
            local_rank=1,
            world_size=4,
            local_world_size=2,
            node_rank=1,
            num_nodes=2,
            master_addr="10.0.0.1",
            master_port=29400,
        ),
    ),
    (TORCHRUN | slurm(0, 0, 0, "node[1-2]"), dict(source="torchrun", rank=3)),
    # torch's is_torchelastic_launched asks whether the variable is set, not whether it is empty.
    (TORCHRUN | {"TORCHELASTIC_RUN_ID": ""}, dict(source="torchrun", rank=3)),
    # RANK/WORLD_SIZE/MASTER_* from another launcher (env://), outside Slurm.
    ({k: v for k, v in TORCHRUN.items() if k != "TORCHELASTIC_RUN_ID"}, dict(source="env", rank=3, world_size=4)),
    (
        slurm(2, 0, 1, "node[1-2]"),
        dict(
            source="slurm",
            rank=2,
            local_rank=0,
            node_rank=1,
            world_size=4,
            local_world_size=2,
            num_nodes=2,
            master_addr="node1",
            cpus_per_task=4,
        ),
    ),
    (slurm(0, 0, 0, "gpu[07-08,10]", ntasks=6, nodes=3), dict(master_addr="gpu07", local_world_size=2)),
    (slurm(0, 0, 0, "rack[1-2]-n[01-02]", ntasks=8, nodes=4), dict(master_addr="rack1-n01", num_nodes=4)),
    (slurm(0, 0, 0, "login5,node[1-2]", ntasks=3, nodes=3), dict(master_addr="login5")),
    (slurm(1, 1, 0, "node[1-2]", MASTER_ADDR="head", MASTER_PORT="1234"), dict(master_addr="head", master_port=1234)),
    (slurm(0, 0, 0, "n1", ntasks=4, nodes=2, SLURM_NTASKS_PER_NODE="2(x2)"), dict(local_world_size=2)),
    (
        LOCAL,
        dict(
            source="submitit-local",
            rank=1,
            local_rank=1,
            world_size=2,
            num_nodes=1,
            master_addr="127.0.0.1",
            job_id="4242",
        ),
    ),
    # The local executor started from inside a Slurm allocation: its own variables win.
    (
        LOCAL | slurm(0, 0, 0, "node[1-2]", ntasks=4) | {"MASTER_ADDR": "node1", "MASTER_PORT": "1234"},
        dict(source="submitit-local", rank=1, world_size=2, master_addr="127.0.0.1", cpus_per_task=1),
    ),
    # Leftovers of a torchrun session without TORCHELASTIC_RUN_ID do not make an srun task "torchrun".
    (
        slurm(2, 0, 1, "node[1-2]") | {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"},
        dict(source="slurm", rank=2, world_size=4),
    ),
    # `srun -n4 bash -c "python ..."`: the job is named bash, but these are real tasks.
    (slurm(3, 1, 1, "node[1-2]", SLURM_JOB_NAME="bash"), dict(source="slurm", rank=3, world_size=4)),
    # An interactive `srun --pty bash` shell of a 4-task step: one process, not rank 0 of 4.
    (
        slurm(0, 0, 0, "node[1-2]", SLURM_PTY_PORT="39191", SLURM_JOB_NAME="bash"),
        dict(source="single", rank=0, world_size=1, distributed=False),
    ),
    # An salloc shell, or a batch script outside srun: no step, so not a task.
    (
        {k: v for k, v in slurm(0, 0, 0, "node[1-2]").items() if k != "SLURM_STEP_ID"},
        dict(source="single", world_size=1),
    ),
    # torchrun inside a Slurm task: its 4 workers share the task's 32 CPUs; the Slurm job still counts.
    (
        TORCHRUN | {"LOCAL_WORLD_SIZE": "4"} | slurm(0, 0, 0, "node1", SLURM_CPUS_PER_TASK="32"),
        dict(source="torchrun", cpus_per_task=8, slurm_job_id="123456", job_id="abc"),
    ),
    # A step on a subset of the job's nodes rendezvouses on the step's first node.
    (
        slurm(
            0,
            0,
            0,
            "node[1-2]",
            ntasks=2,
            SLURM_STEP_NODELIST="node2",
            SLURM_STEP_NUM_NODES="1",
            SLURM_STEP_NUM_TASKS="2",
            SLURM_STEP_TASKS_PER_NODE="2",
        ),
        dict(master_addr="node2", num_nodes=1, world_size=2, local_world_size=2),
    ),
    # Slurm may place tasks unevenly: 3 on the first node, 1 on the second.
    (slurm(3, 0, 1, "node[1-2]", SLURM_STEP_TASKS_PER_NODE="3,1"), dict(local_world_size=1, node_rank=1)),
    (slurm(0, 0, 0, "node[1-2]", SLURM_STEP_TASKS_PER_NODE="3,1"), dict(local_world_size=3)),
    ({}, dict(source="single", rank=0, world_size=1, master_addr="127.0.0.1", is_main=True, distributed=False)),
    ({"MASTER_ADDR": "h", "MASTER_PORT": "7"}, dict(source="single", master_addr="h", master_port=7)),
]


@pytest.mark.parametrize(("env", "expected"), CASES)
def test_resolves_rank_world_and_address(env: dict[str, str], expected: dict[str, object]) -> None:
    resolved = resolve(env)
    assert {k: getattr(resolved, k) for k in expected} == expected


def test_slurm_port_comes_from_the_job_id_and_avoids_ephemeral_ports() -> None:
    assert resolve(slurm(0, 0, 0, "n1")).master_port == port_from_job_id("123456")
    ports = {port_from_job_id(str(job)) for job in range(100000, 100500)}
    assert len(ports) == 500
    assert all(PORT_BASE <= p < PORT_BASE + PORT_SPAN < 32768 for p in ports)


def test_every_task_of_a_job_agrees_on_the_address() -> None:
    envs = [slurm(r, r % 2, r // 2, "node[1-2]") for r in range(4)]
    assert len({(resolve(e).master_addr, resolve(e).master_port) for e in envs}) == 1


@pytest.mark.parametrize(("text", "node", "count"), [("2(x3)", 2, 2), ("3,1", 1, 1), ("2(x2),1", 2, 1), ("4", 0, 4)])
def test_tasks_on_node_reads_slurms_compressed_list(text: str, node: int, count: int) -> None:
    assert tasks_on_node(text, node) == count


@pytest.mark.parametrize(("text", "node"), [("2(x2)", 2), ("x", 0), ("2(xa)", 0)])
def test_tasks_on_node_refuses_what_slurm_never_writes(text: str, node: int) -> None:
    with pytest.raises(UserError, match="SLURM_STEP_TASKS_PER_NODE"):
        tasks_on_node(text, node)


def test_a_slurm_shell_says_why_it_runs_one_process() -> None:
    env = resolve(slurm(0, 0, 0, "node[1-2]", SLURM_PTY_PORT="1"))
    assert "use srun" in env.note and "use srun" in env.describe()


def test_a_second_task_of_an_interactive_step_refuses_to_run_a_copy() -> None:
    with pytest.raises(UserError, match="without --pty"):
        resolve(slurm(1, 1, 0, "node[1-2]", SLURM_PTY_PORT="39191"))


def test_a_restart_in_the_allocation_never_reads_the_port_of_the_start_before(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Rank 0 of the first start published its port; the next start's rank 1 waits for its own rank 0's."""
    import dataclasses

    from trainer.supervise.rendezvous import agree_port

    env = {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_JOB_ID": "77", "SLURM_NODEID": "0", "SLURM_TASKS_PER_NODE": "1(x2)"}  # fmt: skip
    first = resolve(env)
    chosen = agree_port(first, tmp_path)
    assert agree_port(dataclasses.replace(first, rank=1), tmp_path).master_port == chosen.master_port
    restarted = resolve({**env, "SLURM_PROCID": "1", "SLURM_DDP_IN_JOB_RESTART": "1"})
    with pytest.raises(UserError, match="rank 0 published no port"):
        agree_port(restarted, tmp_path, wait_s=0.3)


def test_a_network_interface_gives_its_address_or_a_one_line_refusal_naming_the_node() -> None:
    import dataclasses

    from trainer.supervise.rendezvous import interface_address, own_address

    assert interface_address("lo") == "127.0.0.1" and interface_address("nosuch0") is None
    env = dataclasses.replace(resolve({}), node_name="node7", interface="nosuch0")
    with pytest.raises(
        UserError, match=r"^node node7 has no network interface nosuch0 with an IPv4 address .* it has lo"
    ):
        own_address(env)
    assert own_address(dataclasses.replace(env, interface="lo")) == "127.0.0.1"

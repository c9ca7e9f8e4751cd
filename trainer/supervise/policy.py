"""What follows a start of the tasks that ended: the one policy of restarts, node exclusion and failure
requeues, for the Slurm batch step (trainer.supervise.slurm) and the local controller alike (stdlib only, pure).

A failed start is held against a node only when its root cause may be the node's: a hang, a task killed by a
signal, or a hardware or driver error (trainer.run.failures.suspect_node). A Python traceback follows the code
to any node, so it never holds one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.supervise.hostlist import expand_hostlist


@dataclass(frozen=True)
class Policy:
    """The profile's say, as plain values (jobs.restarts builds it)."""

    restarts_in_job: int = 0  # starts again in the allocation after a failed one
    requeue_on_failure: int = 0  # requeues of a failed job, per job id
    spare_nodes: int = 0  # allocated nodes beyond the step's, to take a failed node's place
    nodes: int = 1  # the step's nodes
    tasks_per_node: int = 1
    exclude: str = ""  # the profile's own exclude list

    @property
    def tracks_nodes(self) -> bool:
        """Whether a failed start may be followed by another, and so whether its node is held against it."""
        return bool(self.restarts_in_job or self.requeue_on_failure)


@dataclass(frozen=True)
class Ended:
    """How one start of the tasks ended: as its backend saw it (trainer.supervise.agent), with what the agent
    found after (stopped, node)."""

    status: int  # srun's exit status, or 1 when a local task failed; a negative one: killed by that signal
    signalled: bool = False  # the requeue signal came: the run saved and stops, or the job is being requeued
    stopped: bool = False  # a task stopped on purpose (a budget spent, bad input): a restart would stop alike
    node: str | None = None  # the node its failure is held against, if any
    reason: str = "failure"  # how an attempt rank 0 did not close is recorded: failure, timeout
    cancelled: bool = False  # the job was cancelled: nothing follows
    requeued: bool = False  # the tasks asked for a requeue that the backend makes itself (the local controller)


@dataclass
class State:
    """What the supervisor remembers across the starts of one allocation."""

    in_job: int = 0  # restarts made in this allocation
    failed_nodes: list[str] = field(default_factory=list)  # one entry per failure held, across requeues (job id)
    left_out: list[str] = field(default_factory=list)  # nodes the next step leaves out (spare nodes took over)
    failure_requeues: int = 0  # requeues after a failure, across requeues (job id)


@dataclass(frozen=True)
class Decision:
    action: str  # "restart" | "requeue_without" | "requeue" | "end"
    say: list[str]  # lines for the job's log
    excluded: str = ""  # requeue_without: the ExcNodeList


def step_args(policy: Policy, state: State) -> list[str]:
    """srun's options for the next start: with spare nodes, the step asks for its own nodes (not the
    allocation's) and leaves out the nodes that failed twice."""
    if not policy.spare_nodes:
        return []
    args = [f"--nodes={policy.nodes}", f"--ntasks={policy.nodes * policy.tasks_per_node}"]
    return args + ([f"--exclude={','.join(state.left_out)}"] if state.left_out else [])


def decide(policy: Policy, state: State, ended: Ended, partition_nodes: list[str] | None = None) -> Decision:
    """The next action after `ended`; `state` is updated in place. `partition_nodes`: the partition's nodes,
    asked for only when a requeue without a node is weighed (None: unknown, the node stays in)."""
    say: list[str] = []
    failed = ended.status != 0 and not ended.signalled and not ended.stopped
    exclude_node = ""
    if failed and policy.tracks_nodes and ended.node:
        state.failed_nodes.append(ended.node)
        times = state.failed_nodes.count(ended.node)
        say.append(f"the step failed on node {ended.node} (its failure {times} in this job)")
        if times >= 2 and ended.node not in state.left_out:
            if len(state.left_out) < policy.spare_nodes:
                state.left_out.append(ended.node)
                say.append(
                    f"node {ended.node} failed twice: the next step leaves it out "
                    f"(--exclude={','.join(state.left_out)}), a spare node takes its place"
                )
            else:
                exclude_node = ended.node
    if failed and state.in_job < policy.restarts_in_job and not exclude_node:
        state.in_job += 1
        say.append(
            f"srun failed with status {ended.status}: starting the tasks again in this allocation "
            f"({state.in_job} of {policy.restarts_in_job})"
        )
        return Decision("restart", say)
    if exclude_node:
        twice = sorted({n for n in state.failed_nodes if state.failed_nodes.count(n) >= 2})
        excluded = ",".join([*([policy.exclude] if policy.exclude else []), *twice])
        gone = {*twice, *(expand_hostlist(policy.exclude) if policy.exclude else [])}
        room = [n for n in (partition_nodes or []) if n not in gone]
        if len(room) >= policy.nodes + policy.spare_nodes:
            say.append(
                f"node {exclude_node} failed twice and no spare node is left: requeueing the job without it "
                f"(ExcNodeList={excluded})"
            )
            return Decision("requeue_without", say, excluded)
        say.append(f"node {exclude_node} failed twice, but the partition has too few other nodes: it stays in")
    # After the signal too: a command that died of it, rather than requeue itself, is requeued here.
    if ended.status != 0 and not ended.stopped and state.failure_requeues < policy.requeue_on_failure:
        state.failure_requeues += 1
        say.append(
            f"srun failed with status {ended.status}: requeueing (failure {state.failure_requeues} of "
            f"{policy.requeue_on_failure})"
        )
        return Decision("requeue", say)
    return Decision("end", say)

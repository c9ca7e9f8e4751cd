"""The one supervisor loop, in the shape of torch's elastic agent: start the tasks, monitor them, ask the policy
what follows, act. Two backends run it: a Slurm job's batch step, whose tasks are an srun step
(trainer.supervise.slurm), and the local profile's controller, whose tasks are processes (jobs.local_controller).
What they share is here, once: the attempt (trainer.supervise.attempt names it), the hang no rank can name (every rank frozen at once), the
failure held against a node, the attempt's record closed, the policy. Standard library only: the batch step runs
on the node's own python3.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol, TypeVar

from trainer.run import failures
from trainer.supervise.attempt import Attempt
from trainer.supervise.attempts import close
from trainer.supervise.policy import Decision, Ended, Policy, State, decide, step_args
from trainer.supervise.watch import name_and_end

T = TypeVar("T")
LOOK_S = 1.0  # how often rank 0's node-local heartbeat is looked at while the tasks run


class Backend(Protocol):
    """What the loop asks of the place the tasks run."""

    nodes: set[str]  # the job's nodes: only one of these is held against a failure

    def attempt(self, in_job: int, start: int) -> Attempt: ...
    def start(self, attempt: Attempt, extra: list[str]) -> None: ...
    def poll(self) -> Ended | None: ...  # waits a moment; None while the tasks run
    def stop(self) -> None: ...  # end every task now: a hang was named
    def clean_up(self) -> None: ...  # after every start, however it ended
    def room(self) -> list[str] | None: ...  # the partition's nodes, for a requeue without one
    def remember(self, state: State) -> None: ...  # what survives a requeue
    def may_go_on(self, ended: Ended, run_dir: Path | None) -> bool: ...  # a requeue may still follow the end
    def act(self, decision: Decision, attempt: Attempt, ended: Ended) -> int: ...  # the job's exit status


def careful(what: str, act: Callable[[], T]) -> T | None:
    """`act()`, or None with a warning: a full disk must not keep the supervisor from requeueing, or from
    exiting with the tasks' status."""
    try:
        return act()
    except Exception as exc:
        with contextlib.suppress(OSError):
            print(f"warning: could not {what}: {exc}", flush=True)
        return None


def monitor(backend: Backend, attempt: Attempt) -> Ended:
    """Until the tasks end. Each rank's watchdog names a hang inside the job; when every rank froze at once
    (a stalled filesystem, a stopped job) none can: rank 0's node-local heartbeat going silent past the time
    its peers would have named it is named here, and the tasks are ended."""
    next_look = time.monotonic()
    while (ended := backend.poll()) is None:
        if time.monotonic() >= next_look:
            next_look = time.monotonic() + LOOK_S
            if name_and_end(attempt.beat, time.time()):
                backend.stop()
    return ended


def held_node(backend: Backend, run_dir: Path | None, since: float) -> str | None:
    """The node the start's failure is held against: one of the job's (never a name from elsewhere)."""
    if run_dir is None:
        return None
    node = careful("read the failure records", lambda: failures.suspect_node(run_dir, since))
    return node if node in backend.nodes else None


def close_attempt(run_dir: Path | None, reason: str, final: bool) -> None:
    if run_dir is not None:
        careful(f"close the attempt in {run_dir}", lambda: close(run_dir, reason, final))


def run(backend: Backend, policy: Policy, state: State, run_dir: Path | None) -> int:
    """Start the tasks until the policy says otherwise; the job's exit status."""
    starts = 0
    while True:
        attempt = backend.attempt(state.in_job, starts)
        starts += 1
        os.environ.update(attempt.environ())  # the tasks inherit it
        began = time.time()
        # A file of this name can only be a dead supervisor's (a local job's id is its controller's pid, and
        # pids are reused): read as this start's, it would name healthy ranks frozen.
        with contextlib.suppress(OSError):
            attempt.beat.unlink()
        try:
            backend.start(attempt, step_args(policy, state))
            ended = monitor(backend, attempt)
        finally:
            backend.clean_up()
            with contextlib.suppress(OSError):
                attempt.beat.unlink()
        if ended.cancelled:
            close_attempt(run_dir, "cancelled", final=True)
            return ended.status
        if ended.requeued:
            state = State()  # as on Slurm: a requeued job's restarts begin anew
            continue
        stopped = attempt.stopped.exists()
        failed = ended.status != 0 and not ended.signalled and not stopped
        node = held_node(backend, run_dir, began) if failed and policy.tracks_nodes else None
        room = backend.room() if node is not None else None
        decision = decide(policy, state, replace(ended, stopped=stopped, node=node), room)
        for line in decision.say:
            print(line, flush=True)
        backend.remember(state)
        # The attempt closed (rank 0 records a requeue's stop itself); the run's end when nothing follows.
        final = decision.action == "end" and (stopped or not backend.may_go_on(ended, run_dir))
        close_attempt(run_dir, ended.reason, final)
        if decision.action != "restart":
            return backend.act(decision, attempt, ended)

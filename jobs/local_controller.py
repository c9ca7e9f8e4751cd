"""submitit's local executor, with a controller that behaves like srun and scancel.

submitit's own controller waits for every task whatever happens: a cancel (SIGTERM, which submitit's task
wrapper ignores) left the ranks training, and a failed rank left its peers hanging. This one:
- stops every task when one fails (srun's --kill-on-bad-exit), and when the job is cancelled (scancel);
- sends the profile's signal (SUBMITIT_PREEMPT_SIGNAL) signal_delay_s before the time limit, and restarts
  the tasks up to the profile's max_num_timeout times;
- runs in a session of its own, so a Ctrl-C in the submitter's terminal leaves the job running, as on Slurm;
- keeps each task's exit code beside the logs: a rank killed by a signal writes nothing itself, and its
  peers only see a closed connection, so the exit codes are what names it (srun's `task N: Killed` lines).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import submitit
from submitit.local import local

from trainer.run import failures
from trainer.run.atomic import try_lock, write_text
from trainer.supervise import agent, relay, signals
from trainer.supervise.attempt import Attempt
from trainer.supervise.launcher import LOCAL_PORT, available_cpus
from trainer.supervise.policy import Decision, Ended, Policy, State
from trainer.supervise.relay import die_with_parent
from trainer.supervise.rendezvous import any_free_port
from trainer.supervise.signals import JobSettings

RESTARTS_IN_JOB = "SLURM_DDP_RESTARTS_IN_JOB"  # the profile's restarts_in_job, for the controller
GRACE_S = 3.0  # between SIGTERM and SIGKILL when stopping tasks (Slurm's KillWait, shortened)
# After a task failed, how long its peers may take to notice (a closed connection) and record that they failed
# as a consequence before they are stopped: error.txt then shows both, and still names the first.
PEER_NOTICE_S = 2.0
SIGNALS = {int(s) for s in signal.Signals}
PARALLEL = "SLURM_DDP_LOCAL_PARALLEL"  # how many jobs of one log folder (a sweep's points) run at once
RUN_DIR = "SLURM_DDP_LOCAL_RUN_DIR"  # the job's run directory, whose attempts the controller closes


def parallel_jobs(tasks: int, uses_gpus: bool, array_parallelism: int) -> int:
    """Jobs of `tasks` processes this machine runs at once: its CPUs shared out, at least one (one, on GPUs:
    every point is given the same devices), and no more than the profile's array_parallelism (0: no cap)."""
    fits = 1 if uses_gpus else max(1, available_cpus() // max(1, tasks))
    return min(fits, array_parallelism) if array_parallelism > 0 else fits


def exit_codes_path(log_dir: Path, job_id: str) -> Path:
    return log_dir / f"{job_id}_exit_codes.json"


class Controller(local.Controller):  # type: ignore[misc]
    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.requeue_signal = signals.number(os.environ.get(signals.SUBMITIT_ENV, signals.DEFAULT))
        self.cancelled = False
        self.signalled = False  # this start's tasks were sent the requeue signal
        signal.signal(signal.SIGTERM, self._cancel)  # replaces submitit's forwarding to tasks that ignore it
        # The requeue signal sent to the controller (kill -USR2 JOB_ID) is a preemption: the tasks get it now,
        # as a Slurm job's do when a higher-priority job needs its nodes.
        self.preempted = False
        signal.signal(self.requeue_signal, self._preempt)
        self.timed_out = False  # this start's tasks were still running at the time limit
        self.hung = False  # this start was ended as frozen (the agent named every rank frozen)
        self.requeues, self.max_num_timeout = 0, signals.DEFAULT_MAX_NUM_TIMEOUT
        self.signal_at = self.deadline = 0.0
        self.nodes: set[str] = set()  # no node is held against a failure on one machine
        self.run_dir = Path(os.environ[RUN_DIR]) if os.environ.get(RUN_DIR) else None

    def _cancel(self, signum: int, frame: Any) -> None:
        self.cancelled = True  # acted on by poll(): nothing blocking in a handler

    def _preempt(self, signum: int, frame: Any) -> None:
        # Acted on by poll(). A second request while this start stops for the first is absorbed: kept, it would
        # reach the next start's tasks before their handler is in place, and kill them (the signal's default).
        self.preempted = self.preempted or not self.signalled

    def _stop(self, running: list[subprocess.Popen[Any]], notice_s: float = 0.0) -> dict[int, int]:
        """SIGCONT (a stopped task cannot act on SIGTERM), SIGTERM, then SIGKILL after GRACE_S; first, up to
        `notice_s` for the tasks to end by themselves. The exit codes of those that did, by pid."""
        relay.until(lambda: all(t.poll() is not None for t in running), notice_s, 0.05)
        own = {t.pid: t.returncode for t in running if t.poll() is not None}
        for sig in (signal.SIGCONT, signal.SIGTERM):
            for task in running:
                if task.poll() is None:
                    task.send_signal(sig)
        relay.until(lambda: all(t.poll() is not None for t in running), GRACE_S, 0.05)
        for task in running:
            if task.poll() is None:
                task.kill()
            task.wait()
        return own

    # The agent's backend (trainer.supervise.agent): a start is this machine's processes.

    def attempt(self, in_job: int, start: int) -> Attempt:
        return Attempt(self.folder, self.pid, self.requeues, in_job, start)

    def start(self, attempt: Attempt, extra: list[str]) -> None:
        self.signalled = self.timed_out = self.hung = False
        now = time.monotonic()
        self.signal_at, self.deadline = now + self.timeout_s - self.signal_delay_s, now + self.timeout_s
        self.start_tasks()

    def poll(self, freq: int = 24) -> Ended | None:
        """Whether every task ended, one failed, the job was cancelled, or the time limit came; the requeue
        signal sent when due. Exit codes: negative, killed by that signal; None, stopped here (a peer failed,
        cancelled, the time limit)."""
        codes = [t.poll() for t in self.tasks]
        running = [t for t, c in zip(self.tasks, codes, strict=True) if c is None]
        failed = any(c not in (None, 0, local.LOCAL_REQUEUE_RETURN_CODE) for c in codes)
        if not running:
            return self.ended(codes)
        if self.cancelled or failed or time.monotonic() >= self.deadline:
            self.timed_out = not (self.cancelled or failed)
            # A task that ended by itself within the notice (rank 0 finishing as a peer failed) keeps its code.
            own = self._stop(running, PEER_NOTICE_S if failed and not self.cancelled else 0.0)
            return self.ended([own.get(t.pid, c) for t, c in zip(self.tasks, codes, strict=True)])
        due = not self.signalled and (time.monotonic() >= self.signal_at or self.preempted)
        # Sent once every running task has a handler for it: a task just started has none yet, and the signal
        # would kill it instead of stopping it to save. Until then it waits (the time limit's own stop comes anyway).
        if due and all(relay.catches(t.pid, self.requeue_signal) for t in running):
            self.preempted = False
            self._forward_signal(self.requeue_signal)
            self.signalled = True
        time.sleep(1.0 / freq)
        return None

    def stop(self) -> None:
        self.hung = True  # named by the agent: the kills that follow are this controller's
        self._stop([t for t in self.tasks if t.poll() is None])

    def ended(self, codes: list[int | None]) -> Ended:
        record = {"codes": codes, "cancelled": self.cancelled}  # a requeue overwrites it
        write_text(exit_codes_path(self.folder, self.pid), json.dumps(record) + "\n")
        if self.cancelled:
            return Ended(1, cancelled=True)
        self.record_killed(codes)
        if local.LOCAL_REQUEUE_RETURN_CODE in codes and self.requeues < self.max_num_timeout:
            self.requeues += 1
            return Ended(0, requeued=True)
        status = int(any(c != 0 for c in codes))
        return Ended(status, self.signalled, reason="timeout" if self.timed_out else "failure")

    def clean_up(self) -> None:
        self.kill_tasks()
        # Then whatever the tasks started and left (the environment report's child, loader workers, a command's
        # daemon): nothing of a start outlives it, as nothing outlives a Slurm step.
        relay.end_descendants(GRACE_S)

    def room(self) -> list[str] | None:
        return None  # one machine: no node to leave out

    def remember(self, state: State) -> None:
        pass  # no requeue through a queue: nothing survives the controller

    def may_go_on(self, ended: Ended, run_dir: Path | None) -> bool:
        return False  # the controller's own requeues come back through poll; its end is the run's

    def act(self, decision: Decision, attempt: Attempt, ended: Ended) -> int:
        return ended.status

    def start_tasks(self) -> None:
        """submitit's, with a free port for each start (not one from the job id, which something may hold),
        and tasks that die with the controller: a killed controller must not leave ranks training where no
        command reaches them (srun's tasks end with their step)."""
        os.environ[LOCAL_PORT] = str(any_free_port())
        self.folder.mkdir(exist_ok=True)
        paths = [submitit.core.utils.JobPaths(self.folder, self.pid, k) for k in range(self.ntasks)]
        self.stdouts = [p.stdout.open("a") for p in paths]
        self.stderrs = self.stdouts if self.stderr_to_stdout else [p.stderr.open("a") for p in paths]
        for k in range(self.ntasks):
            env = os.environ | {"SUBMITIT_LOCAL_LOCALID": str(k), "SUBMITIT_LOCAL_GLOBALID": str(k)}
            env["SUBMITIT_LOCAL_JOB_ID"] = self.pid
            out, err = self.stdouts[k], self.stderrs[k]
            task = subprocess.Popen(
                self.command, env=env, stdout=out, stderr=err, encoding="utf-8", preexec_fn=die_with_parent
            )
            self.tasks.append(task)

    def take_slot(self) -> Any:
        """Wait for one of the machine's slots for jobs of this log folder (a sweep's points share it): at most
        SLURM_DDP_LOCAL_PARALLEL of them run at once, the rest wait here, as Slurm queues array tasks. A slot
        is a locked file: it is free again when its holder ends, however it ends."""
        slots = int(os.environ.get(PARALLEL, "0"))
        if slots <= 0:
            return None
        while not self.cancelled:
            for k in range(slots):
                if (handle := try_lock(self.folder / f"slot_{k}.lock")) is not None:
                    return handle  # held until the job ends
            time.sleep(0.2)
        return None

    def run(self) -> None:
        relay.become_subreaper()  # what the tasks leave running is below this controller, to be ended with them
        slot = self.take_slot()  # noqa: F841 - held while the tasks run
        if self.cancelled:  # cancelled while it waited: nothing ran (its exit codes say so)
            self.ended([])
            return
        # Up to max_num_timeout restarts after a signal (submitit's own controller allows 6 in all, whatever
        # the profile says), and up to restarts_in_job after a failed start, as the batch step on Slurm.
        self.max_num_timeout = int(os.environ.get("SUBMITIT_LOCAL_MAX_NUM_TIMEOUT", signals.DEFAULT_MAX_NUM_TIMEOUT))
        policy = Policy(restarts_in_job=int(os.environ.get(RESTARTS_IN_JOB, "0")))
        agent.run(self, policy, State(), self.run_dir)

    def record_killed(self, codes: Sequence[int | None]) -> None:
        """A task killed by a signal from outside (the OOM killer, a kill -9) writes nothing, and its peers
        record only a closed connection: its record names it in error.txt (trainer.run.failures), as srun's
        `task N: Killed` line does on Slurm. Tasks this controller stopped have no code here (None)."""
        if self.run_dir is None or self.hung:
            return
        for rank, code in enumerate(codes):
            if code is not None and code < 0:
                name = f" ({signal.Signals(-code).name})" if -code in SIGNALS else ""
                why = f"killed by signal {-code}{name}"
                failure = failures.Failure(time.time(), rank, socket.gethostname(), "", why, False, killed=True)
                try:
                    failures.record(self.run_dir, failure)
                except Exception as exc:
                    print(f"warning: could not record rank {rank}'s kill: {exc}", flush=True)


class LocalExecutor(submitit.LocalExecutor):  # type: ignore[misc]
    def __init__(
        self,
        folder: Path,
        settings: JobSettings,
        cwd: Path | None,
        array_parallelism: int,
        run_dirs: Sequence[Path],
    ) -> None:
        super().__init__(folder)
        self.run_dirs = list(run_dirs)  # one per job, in the order they are submitted (a sweep's points)
        self.settings = settings  # the requeue signal it sends, and how often it restarts the tasks after one
        self.array_parallelism = array_parallelism  # 0: as many as the machine's CPUs (GPUs) allow
        self.cwd = cwd  # the code snapshot: the controller and its tasks (and their restarts) run in it

    def _submit_command(self, command: str) -> local.LocalJob[Any]:
        # submitit's start_controller, running this module's controller instead of submitit.local._local.
        params = self.parameters
        ntasks = params.get("tasks_per_node", 1)
        visible_gpus = params.get("visible_gpus", ())
        gpus = range(params.get("gpus_per_node", 0)) if visible_gpus == () else visible_gpus[: params["gpus_per_node"]]
        env = dict(os.environ)
        env.update(
            SUBMITIT_LOCAL_NTASKS=str(ntasks),
            SUBMITIT_LOCAL_COMMAND=command,
            SUBMITIT_LOCAL_TIMEOUT_S=str(int(60 * params.get("timeout_min", 2.0))),
            SUBMITIT_LOCAL_SIGNAL_DELAY_S=str(self.settings.signal_delay_s),
            SUBMITIT_LOCAL_NODEID="0",
            SUBMITIT_LOCAL_JOB_NUM_NODES="1",
            SUBMITIT_STDERR_TO_STDOUT="1" if params.get("stderr_to_stdout", False) else "",
            SUBMITIT_EXECUTOR="local",
            **{signals.SUBMITIT_ENV: self.settings.signal},  # the controller sends it, the tasks wait for it
            SUBMITIT_LOCAL_MAX_NUM_TIMEOUT=str(self.settings.max_num_timeout),
            **{RESTARTS_IN_JOB: str(self.settings.restarts_in_job)},
            SLURM_DDP_LOCAL_PARALLEL=str(parallel_jobs(ntasks, bool(gpus), self.array_parallelism)),
            CUDA_VISIBLE_DEVICES=",".join(str(k) for k in gpus),
            SUBMITIT_LOCAL_WITH_SHELL="",
        )
        if self.run_dirs:
            env[RUN_DIR] = str(self.run_dirs.pop(0))
        # Not the submitter's terminal: the job outlives it (and a caller reading its output to the end).
        self.folder.mkdir(parents=True, exist_ok=True)
        with (self.folder / "controller.log").open("a") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "jobs.local_controller", str(self.folder)],
                env=env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        return local.LocalJob(folder=self.folder, job_id=str(process.pid), process=process, tasks=list(range(ntasks)))


if __name__ == "__main__":
    Controller(Path(sys.argv[1])).run()

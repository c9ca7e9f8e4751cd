"""submitit's local executor, with a controller that keeps each task's exit code beside the logs.

A task killed by a signal (SIGKILL, the OOM killer) writes nothing itself, and its peers only see a closed
connection: the exit codes are what names it, as srun's `task N: Killed` lines do on Slurm.
"""

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import submitit
from submitit.local import local

from trainer.atomic import write_text


def exit_codes_path(log_dir: Path, job_id: str) -> Path:
    return log_dir / f"{job_id}_exit_codes.json"


class Controller(local.Controller):  # type: ignore[misc]
    def wait(self, freq: int = 24) -> Sequence[int | None]:
        codes = super().wait(freq)
        # Negative: killed by that signal; None: still running at the time limit. A requeue overwrites it.
        write_text(exit_codes_path(self.folder, self.pid), json.dumps(list(codes)) + "\n")
        return codes


class LocalExecutor(submitit.LocalExecutor):  # type: ignore[misc]
    def _submit_command(self, command: str) -> local.LocalJob[Any]:
        # submitit's start_controller, running this module's controller instead of submitit.local._local.
        params = self.parameters
        if params.get("setup"):  # submitit runs its controller through a shell then: keep its own
            return super()._submit_command(command)  # type: ignore[no-any-return]
        ntasks = params.get("tasks_per_node", 1)
        visible_gpus = params.get("visible_gpus", ())
        gpus = range(params.get("gpus_per_node", 0)) if visible_gpus == () else visible_gpus[: params["gpus_per_node"]]
        env = dict(os.environ)
        env.update(
            SUBMITIT_LOCAL_NTASKS=str(ntasks),
            SUBMITIT_LOCAL_COMMAND=command,
            SUBMITIT_LOCAL_TIMEOUT_S=str(int(60 * params.get("timeout_min", 2.0))),
            SUBMITIT_LOCAL_SIGNAL_DELAY_S=str(int(params.get("signal_delay_s", 30))),
            SUBMITIT_LOCAL_NODEID="0",
            SUBMITIT_LOCAL_JOB_NUM_NODES="1",
            SUBMITIT_STDERR_TO_STDOUT="1" if params.get("stderr_to_stdout", False) else "",
            SUBMITIT_EXECUTOR="local",
            CUDA_VISIBLE_DEVICES=",".join(str(k) for k in gpus),
            SUBMITIT_LOCAL_WITH_SHELL="",
        )
        process = subprocess.Popen([sys.executable, "-m", "jobs.local_controller", str(self.folder)], env=env)
        return local.LocalJob(folder=self.folder, job_id=str(process.pid), process=process, tasks=list(range(ntasks)))


if __name__ == "__main__":
    Controller(Path(sys.argv[1])).run()

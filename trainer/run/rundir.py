"""The files of a run directory, named in one place (as submitit's JobPaths names those of its folder).

Torch-free: the submitter and the status commands read run directories too.
"""

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def config(self) -> Path:
        """The run's settings; rank 0 replaces it on a --resume once the checkpoint is loaded."""
        return self.path / "config.yaml"

    @property
    def command(self) -> Path:
        """A script run's command and working folder (instead of config.yaml)."""
        return self.path / "command.json"

    @property
    def job(self) -> Path:
        """The job that runs it (id, executor, rank 0's log), with earlier jobs in `history`."""
        return self.path / "job.json"

    @property
    def progress(self) -> Path:
        """The last logged step and when it was reached."""
        return self.path / "progress.json"

    @property
    def attempts(self) -> Path:
        """Each attempt's start, where it resumed, why it stopped."""
        return self.path / "attempts.json"

    @property
    def summary(self) -> Path:
        """The run's summary: as it goes (`"finished": false`, the goodput ledger so far), then once it reached
        its steps (`"finished": true`, its results). `finished()` tells the two apart."""
        return self.path / "summary.json"

    def finished(self) -> bool:
        """The run reached its steps (a script: its command ended with 0): summary.json is there and does not
        say `"finished": false`. One that cannot be read counts as there: its reader says how to mend it."""
        try:
            summary = json.loads(self.summary.read_text())
        except FileNotFoundError:
            return False
        except (OSError, ValueError):
            return self.summary.exists()
        return not (isinstance(summary, dict) and summary.get("finished") is False)

    @property
    def error(self) -> Path:
        """One line: the first failure (trainer.run.failures writes it)."""
        return self.path / "error.txt"

    @property
    def errors(self) -> Path:
        """One record per failing rank, `rank_N.json`, and its traceback in torch's error-file format."""
        return self.path / "errors"

    def traceback(self, rank: int) -> Path:
        """A rank's traceback as torch's @record writes it (torch.distributed.elastic's error file)."""
        return self.errors / f"traceback_rank_{rank}.json"

    @property
    def resume_lock(self) -> Path:
        """Held (flock) by a --resume from its checks until job.json names its job (jobs.submit)."""
        return self.path / "resume.lock"

    @property
    def rendezvous(self) -> Path:
        """The master port rank 0 chose for each Slurm attempt (trainer.env.rendezvous): port_<job>_<restart>."""
        return self.path / "rendezvous"

    @property
    def exits(self) -> Path:
        """A script run's ranks that asked for a requeue in this attempt (rank 0 waits for all of them)."""
        return self.path / "exits"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tensorboard"

    @property
    def bad_images(self) -> Path:
        """Images skipped in training under data.bad_images=skip, one file per process (summary.json counts them)."""
        return self.path / "bad_images"

    @property
    def file_lists(self) -> Path:
        """The resolved file lists of the run's data (trainer.data.filelist), one per data root; a sweep's are shared."""
        return self.path / "file_lists"

    @property
    def code(self) -> Path:
        """The code snapshot taken at submit (jobs.snapshot); every attempt runs in it."""
        return self.path / "code"

    @property
    def provenance(self) -> Path:
        """Where the run came from: submit.json, git.diff, environment.json, ranks/, the Slurm records."""
        return self.path / "provenance"

    @property
    def top_request(self) -> Path:
        """Touched by jobs.top while it watches: rank 0 then writes live.json (trainer.supervise.live)."""
        return self.path / "top.request"

    @property
    def stacks(self) -> Path:
        """jobs.top's stack dumps: stacks/<time>/rank_N.txt (trainer.supervise.stacks)."""
        return self.path / "stacks"

    @property
    def live(self) -> Path:
        return self.path / "live.json"

    @property
    def heartbeats(self) -> Path:
        """Each rank's heartbeat (trainer.supervise.watchdog): where its training thread is, every few seconds."""
        return self.path / "heartbeats"

    @property
    def nccl_trace(self) -> Path:
        """torch's NCCL flight recorder dumps, one per rank, written on a collective timeout."""
        return self.path / "nccl_trace"

    def heartbeat(self, rank: int) -> Path:
        return self.heartbeats / f"rank_{rank}.json"

    @property
    def logs(self) -> Path:
        """submitit's folder: each task's output, the pickled function and its result."""
        return self.path / "logs"

"""The files of a run directory, named in one place (as submitit's JobPaths names those of its folder).

Torch-free: the submitter and the status commands read run directories too.
"""

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.errors import UserError
from trainer.run.atomic import json_problem


@dataclass(frozen=True)
class Summary:
    """summary.json's verdict, the one every reader takes (jobs.status, .list, .wait, .top, --resume, the ledger):
    `finished` with its record, not finished (none yet, or the live one, `"finished": false`), or `damage`, one
    line naming the file and how to mend it."""

    finished: bool
    record: dict[str, Any] = field(default_factory=dict)  # the finished run's summary, or an ended run's
    damage: str = ""

    def checked(self) -> "Summary":
        """Itself, unless damaged: then a UserError with its line."""
        if self.damage:
            raise UserError(self.damage)
        return self


def finished_shape(record: Any) -> bool:
    """A finished summary says where the run got to (the trainer's final_step), or is a script's (its command)."""
    return type(record.get("final_step")) is int or (
        isinstance(record.get("command"), list) and "final_step" not in record
    )


def summary_verdict(path: Path) -> Summary:
    """The verdict on a summary.json: missing, or `"finished": false`, is not finished; `"finished": true`, or no
    such key (an older version's finished run), is finished when its shape is; anything else is damaged (a value
    of "finished" neither true nor false, a truncated, empty or non-object file, a FIFO in its place)."""
    try:
        record, problem = json_problem(path, lambda r: isinstance(r, dict))
    except FileNotFoundError:
        return Summary(False)
    said = None if problem else record.get("finished", True)
    if said is False:  # a run going on, or one no job goes on with (the supervisor's final word, "ended")
        return Summary(False, record if isinstance(record.get("ended"), str) else {})
    if not problem and said is not True:
        problem = f'not a valid {path.name} ("finished" is {json.dumps(said)}, neither true nor false)'
    elif not problem and not finished_shape(record):
        problem = f"not a valid {path.name} (a finished run's, without its final_step)"
    if problem:
        fix = (
            f"move it aside (mv {path} {path}.broken): progress.json and the checkpoints then say where the run got to"
        )
        return Summary(False, damage=f"{path} is {problem}; {fix}")
    return Summary(True, record)


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
    def step_samples(self) -> Path:
        """One line per trained step: its number, a digest of its samples, the processes that trained it."""
        return self.path / "step_samples.jsonl"

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
        """The run reached its steps (a script: its command ended with 0): summary.json's verdict (Summary). A
        damaged one is a UserError naming it: every reader says the same line."""
        return summary_verdict(self.summary).checked().finished

    def ended_summary(self) -> dict[str, Any] | None:
        """The final summary.json of a run that no job goes on with: finished, or ended (`"ended"`: failure,
        cancelled, timeout, trainer.supervise.attempts.close); None while it may go on; a UserError when damaged."""
        return summary_verdict(self.summary).checked().record or None

    def finished_summary(self) -> dict[str, Any] | None:
        """The finished run's summary.json; None before it finished; a UserError when it is damaged."""
        verdict = summary_verdict(self.summary).checked()
        return verdict.record if verdict.finished else None

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
        """The master port rank 0 chose for each Slurm attempt (trainer.supervise.rendezvous): port_<job>_<restart>."""
        return self.path / "rendezvous"

    @property
    def exits(self) -> Path:
        """A script run's ranks that asked for a requeue in this attempt (rank 0 waits for all of them)."""
        return self.path / "exits"

    @property
    def checkpoints(self) -> Path:
        """step_NNNNNNNN.pt, each with its .sha256, the newest checkpoint.keep kept; best.pt (+ .sha256)."""
        return self.path / "checkpoints"

    @property
    def tensorboard(self) -> Path:
        """Rank 0's TensorBoard events: scalars, image grids and hparams."""
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
        """Where the run came from: submit.json, git.diff, environment.json, collect_env.txt, ranks/, Slurm's records."""
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
        """Every rank's latest heartbeat, written by rank 0 once a second while jobs.top watches."""
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
        """submitit's folder: each task's output (<job>_<rank>_log.out/.err), the pickled function and its result;
        the sbatch script, the signal files, <job>_exit_codes.json and slot_<k>.lock (local)."""
        return self.path / "logs"

    def event_files(self) -> list[Path]:
        """Every TensorBoard event file under the run, wherever it was written (the trainer's tensorboard/, a
        script's RUN_DIR/tb or code/runs/...), oldest first by the time in its name. Regular files only, and
        never through a link: the run folder is data, and a link in it may lead anywhere."""
        found = []
        for folder, _, names in os.walk(self.path):  # os.walk does not descend into a linked folder
            found += [Path(folder, name) for name in names if name.startswith(EVENTS) and _regular(Path(folder, name))]
        return sorted(found, key=lambda path: (_written_at(path.name), str(path)))


EVENTS = "events.out.tfevents."  # SummaryWriter's file names: EVENTS + "<seconds>.<host>.<pid>.<n>"


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:  # gone since it was listed
        return False


def _written_at(name: str) -> int:
    seconds = name[len(EVENTS) :].partition(".")[0]
    return int(seconds) if seconds.isdigit() else 0

"""Cluster profiles: YAML files in cluster_profiles/, validated into a frozen dataclass."""

import dataclasses
import functools
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from jobs.remote.ssh import check_login, check_remote_root, check_ssh_options
from trainer.config import from_dict
from trainer.env.launcher import IFNAME_VAR
from trainer.errors import UserError
from trainer.supervise import signals
from trainer.supervise.signals import JobSettings

EXECUTORS = ("local", "debug", "slurm")
DEFAULT_PROFILE = "local"  # a command without --profile: its runs, and where a run's name is looked up
ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)  # what a shell takes after `export`
SBATCH_KEY = re.compile(r"[a-z][a-z0-9-]*", re.ASCII)  # a long option's name, e.g. mail-type
PROFILE_DIRS = (Path.cwd() / "cluster_profiles", Path(__file__).resolve().parents[1] / "cluster_profiles")


# Variables each task's environment gets from Slurm and this tool, per task (ranks, the rendezvous, the run),
# and what the tasks need to start at all: set by a profile's env or --env, they would break every job.
TORCHRUN_VARS = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE"}
OWNED_VARS = {
    **dict.fromkeys(TORCHRUN_VARS, "set per task from Slurm's variables (torchrun's)"),
    **dict.fromkeys(("MASTER_ADDR", "MASTER_PORT"), "the rendezvous, set per job (rank 0's node, a free port)"),
    "RUN_DIR": "the run's folder, set by the tool",
    "REQUEUE_SIGNAL": "the profile's signal, set by the tool (set signal: in the profile instead)",
    "PATH": "where the tasks find python and Slurm's commands (set python: in the profile instead)",
    "PYTHONHOME": "where the tasks' python finds its standard library",
    "PYTHONSAFEPATH": "how the tool keeps its modules and yours apart",
}


def run_root_of(profile: "Profile") -> Path:
    """The profile's run_root as every command resolves it: `$VARS` and `~` expanded, absolute. A profile for
    another machine (login: its --dry-run) keeps remote_root as written: only the login node can expand it."""
    if profile.login:
        return Path(profile.remote_root)
    return Path(os.path.expandvars(profile.run_root)).expanduser().resolve()


IFNAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # Linux: IFNAMSIZ - 1 bytes


def tool_owned(key: str) -> str | None:
    """Why `key` is not a variable a profile may set, or None."""
    if key in OWNED_VARS:
        return OWNED_VARS[key]
    if key.startswith(("SLURM_DDP_", "SLURM_", "SUBMITIT_")):
        return "set per job by Slurm, submitit or this tool"
    return None


INTERFACE_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", IFNAME_VAR)  # network_interface sets each of them
MAX_ARG_STRLEN = 128 * 1024  # Linux: the most one KEY=VALUE of a process's environment may take, with its NUL


@functools.cache
def setup_commands(lines: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
    """The setup lines as whole shell commands, (the first line's number, the text), read by `bash -n` (nothing
    runs) when the profile is loaded: an item that opens a construct (`if ...; then`, a here-document, a
    trailing backslash) takes the items after it until bash reads them whole; blank and comment-only items are
    left out. What never closes is refused: in the batch script it would take the tool's own lines."""
    commands: list[tuple[int, str]] = []
    pending: list[str] = []
    first = 0
    for number, line in enumerate(lines, 1):
        if not pending and (not line.strip() or line.strip().startswith("#")):
            continue
        first = first if pending else number
        pending.append(line)
        if _whole("\n".join(pending)):
            commands.append((first, "\n".join(pending)))
            pending = []
    if pending:
        if said := _bash_says("\n" * (first - 1) + "\n".join(pending)):  # its line numbers: the setup's
            raise UserError(
                f"setup line {first} ({lines[first - 1].strip()!r}) is not a whole shell command by the last line "
                f"(bash -n: {said}): close what it opens (fi, done, a quote, a here-document's end word) or correct it"
            )
        raise UserError(
            f"setup line {len(lines)} ({lines[-1].strip()!r}) ends in a backslash, which would join the tool's next "
            "line of the batch script to it; remove the backslash"
        )
    return tuple(commands)


def _whole(text: str) -> bool:
    """bash reads `text` as whole commands, none left open: no here-document or line still going on (where there
    is no bash here, an item is whole unless it ends in a backslash)."""
    if _bash_says(text):
        return False
    # a trailing backslash (not an escaped one, not in a comment) would join the next line: `then` as its word
    return not text.endswith("\\") or _bash_says(text + "\nthen") != ""


def _bash_says(text: str) -> str:
    """What `bash -n` says of `text` (its first line, without `bash: `): empty when it reads it whole without a
    word, or there is no bash here."""
    try:
        done = subprocess.run(["bash", "-n"], input=text + "\n", capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    said = done.stderr.strip().splitlines()
    if said:
        return said[0].removeprefix("bash: ")
    return "" if done.returncode == 0 else f"exit status {done.returncode}"


@dataclass(frozen=True, eq=False)
class Profile:
    """A cluster profile, validated: where and how the job runs, and the trainer defaults it brings."""

    name: str
    executor: str  # local: this machine, N processes; debug: in-process; slurm: sbatch
    nodes: int = 1
    gpus_per_node: int = 1  # one task per GPU; without GPUs, the number of processes per node
    gpus_per_task: int = 1  # GPUs each task drives (a model split over them inside each DDP rank)
    timeout_min: int = 60
    run_root: str = "runs"  # run directories go here; on a cluster, a folder every node can see
    trainer: dict = field(default_factory=dict)  # trainer defaults for this profile, as key: value
    # Slurm and local (the debug executor has no time limit)
    signal: str = signals.DEFAULT  # sent signal_delay_s before the time limit, and on preemption
    signal_delay_s: int = signals.DEFAULT_DELAY_S
    max_num_timeout: int = signals.DEFAULT_MAX_NUM_TIMEOUT  # requeues after a time limit before the job ends
    # Slurm only (ignored by local and debug)
    partition: str = ""
    account: str = ""
    qos: str = ""
    constraint: str = ""
    exclude: str = ""
    cpus_per_task: int = 1
    mem_gb: float = 0  # per node; 0: the site's default
    mem_per_gpu_gb: float = 0  # instead of mem_gb
    request_gpus: bool = True  # false on CPU-only partitions: gpus_per_node is then just tasks per node
    requeue_on_failure: int = 0  # requeues after a failed task (killed, node lost) before the job fails
    restarts_in_job: int = 0  # before those: srun again in the same allocation after a failed step (no queue)
    spare_nodes: int = 0  # allocated beyond `nodes`: one takes the place of a node that failed twice
    script_hang_s: float = 1800  # a -- COMMAND rank using no CPU, printing nothing for this long: a hang; 0: never
    # A command that takes the requeue signal and keeps running is stopped this long after it, and requeued
    # (-1: what signal_delay_s leaves once the stop and the requeue are done, see requeue_grace)
    requeue_grace_s: float = -1
    array_parallelism: int = 0  # sweeps: array tasks running at once; 0: no limit
    setup: list = field(default_factory=list)  # shell lines before srun: module load, source activate
    srun_args: list = field(default_factory=list)
    sbatch_args: dict = field(default_factory=dict)  # extra #SBATCH options, e.g. {mail-type: END}
    env: dict = field(default_factory=dict)  # exported for every task, e.g. NCCL_DEBUG: WARN
    python: str = ""  # the interpreter on the nodes; empty: the one running the submitter
    # The nodes' fast network (e.g. ib0, hsn0): NCCL and gloo use it, and MASTER_ADDR is node 0's address on it
    network_interface: str = ""
    # Submitting from another machine (jobs.remote): the login node, over the user's own OpenSSH
    login: str = ""  # user@host or a Host alias of ~/.ssh/config; empty: submit here
    remote_root: str = ""  # with login: where runs live on the cluster ($VARS and ~ expand there)
    ssh_options: list = field(default_factory=list)  # extra ssh arguments, e.g. [-p, "2222", -i, ~/.ssh/key]
    job_name: str = "ddp"
    mail_user: str = ""  # where --mail sends Slurm's mails
    # A container for the tasks (jobs.containers): pyxis/enroot through srun, or Apptainer around the command
    container_image: str = ""  # pyxis: an image name or .sqsh; apptainer: a .sif; empty: no container
    container_runtime: str = "pyxis"  # pyxis | apptainer
    container_mounts: list = field(default_factory=list)  # more src:dst (or path) mounts; the run root always
    apptainer_command: str = "apptainer"  # or singularity, on sites that still call it that
    # The code snapshot (jobs.snapshot): the folder submitted from, copied into the run directory
    snapshot: bool = True  # false: tasks run the code on disk when they start (each requeue: what is there then)
    snapshot_limit_mb: float = 100  # refuse a larger snapshot (data or a virtual environment in the folder)
    snapshot_exclude: list = field(default_factory=list)  # glob patterns relative to the folder, e.g. data/*
    snapshot_include: list = field(
        default_factory=list
    )  # git-ignored files to copy all the same, e.g. local_settings.py

    def __post_init__(self) -> None:
        if self.login or self.remote_root or self.ssh_options:  # first: its own words for a newline in login
            self._check_login()
        self._check_text()
        self._check_mappings()
        if self.executor not in EXECUTORS:
            raise UserError(f"executor {self.executor!r} is unknown; use one of {', '.join(EXECUTORS)}")
        if self.setup:
            self._check_setup()
        if self.nodes < 1:
            raise UserError(f"nodes must be at least 1, got {self.nodes}; pass --nodes 1 or more")
        if self.gpus_per_node < 1:
            raise UserError(
                f"gpus_per_node must be at least 1, got {self.gpus_per_node}; pass --gpus-per-node 1 or more"
            )
        if not 1 <= self.gpus_per_task <= 16 or self.gpus_per_node % self.gpus_per_task:
            raise UserError(
                f"gpus_per_task {self.gpus_per_task} must be between 1 and 16 and divide gpus_per_node "
                f"{self.gpus_per_node}; e.g. gpus_per_node: 8 with gpus_per_task: 2 (4 tasks per node)"
            )
        if self.executor in ("local", "debug") and self.nodes != 1:
            raise UserError(
                f"the {self.executor} executor runs on one node, got {self.nodes}; use --nodes 1 or a Slurm profile"
            )
        if self.executor == "debug" and self.gpus_per_node != 1:
            raise UserError("the debug executor runs one task in-process; use --gpus-per-node 1 or the local profile")
        if self.timeout_min < 1:
            raise UserError(f"timeout_min must be at least 1, got {self.timeout_min}")
        if self.cpus_per_task < 1:
            raise UserError(f"cpus_per_task must be at least 1, got {self.cpus_per_task}")
        if self.mem_gb < 0 or self.mem_per_gpu_gb < 0 or (self.mem_gb and self.mem_per_gpu_gb):
            raise UserError("memory: set mem_gb (per node) or mem_per_gpu_gb, not both, and not below 0")
        if min(self.signal_delay_s, self.max_num_timeout, self.array_parallelism, self.requeue_on_failure) < 0:
            raise UserError("signal_delay_s, max_num_timeout, requeue_on_failure and array_parallelism must be >= 0")
        if not 0 <= self.restarts_in_job <= 100:
            raise UserError(f"restarts_in_job must be between 0 and 100, got {self.restarts_in_job}")
        if self.network_interface and not IFNAME.fullmatch(self.network_interface):
            raise UserError(
                f"network_interface {self.network_interface!r} is not an interface name (at most 15 letters, digits, "
                "_ . -); write e.g. ib0"
            )
        if self.container_runtime not in ("pyxis", "apptainer"):
            raise UserError(f"container_runtime {self.container_runtime!r} is unknown; use pyxis or apptainer")
        if self.container_image and self.executor != "slurm":
            raise UserError(
                f"container_image runs the tasks in a container on Slurm; the {self.executor} executor "
                "runs them on this machine: drop container_image or use a Slurm profile"
            )
        if not all(isinstance(m, str) and m and "," not in m for m in self.container_mounts):
            raise UserError(
                f"container_mounts: {self.container_mounts!r} must be a list of src:dst paths, e.g. [/data:/data]"
            )
        if not 0 <= self.spare_nodes <= 64:
            raise UserError(f"spare_nodes must be between 0 and 64, got {self.spare_nodes}")
        if self.spare_nodes and (self.executor != "slurm" or not self.restarts_in_job):
            raise UserError(
                f"spare_nodes: {self.spare_nodes} takes a failed node's place in an in-job restart on Slurm; "
                "set restarts_in_job: 1 or more with executor: slurm, or spare_nodes: 0"
            )
        if not (self.script_hang_s == 0 or 10 <= self.script_hang_s <= 7 * 24 * 3600):
            raise UserError(f"script_hang_s must be 0 (never) or between 10 s and a week, got {self.script_hang_s}")
        if self.signal_delay_s >= 60 * self.timeout_min:  # the signal would never come: no checkpoint
            raise UserError(
                f"a time limit of {self.timeout_min} min leaves no time before the requeue signal, sent "
                f"signal_delay_s={self.signal_delay_s} s before it; use --time {self.signal_delay_s // 60 + 1} "
                "or more, or a smaller signal_delay_s in the profile"
            )
        if self.requeue_grace_s != -1 and not 0 <= self.requeue_grace_s < self.signal_delay_s:
            raise UserError(
                f"requeue_grace_s must be -1 (what signal_delay_s leaves) or from 0 to below signal_delay_s="
                f"{self.signal_delay_s}, got {self.requeue_grace_s}; e.g. requeue_grace_s: {self.signal_delay_s - min(30, self.signal_delay_s / 2):g}"
            )
        if self.snapshot_limit_mb <= 0:
            raise UserError(f"snapshot_limit_mb must be above 0, got {self.snapshot_limit_mb}; or set snapshot: false")
        for name in ("snapshot_exclude", "snapshot_include"):
            if not all(isinstance(p, str) and p for p in getattr(self, name)):
                raise UserError(f"{name}: {getattr(self, name)!r} must be a list of glob patterns, e.g. [data/*]")
        try:  # normalised here, once: every other form of the signal is made from this name
            object.__setattr__(self, "signal", signals.normalise(self.signal))
        except ValueError as exc:
            raise UserError(str(exc)) from None

    def _check_login(self) -> None:
        if not self.login or not self.remote_root:
            raise UserError(
                "login and remote_root go together: login: user@host, remote_root: /scratch/$USER/runs "
                "(the folder for runs on the cluster)"
            )
        check_login(self.login)
        check_remote_root(self.remote_root)
        check_ssh_options(self.ssh_options)
        if self.executor != "slurm":
            raise UserError(
                f"login: a profile that submits over SSH runs on Slurm; set executor: slurm, not {self.executor}"
            )

    def _check_text(self) -> None:
        """Refuse text that would change the meaning of the generated sbatch script."""
        for name, value in self._text_values():
            if not isinstance(value, str):
                raise UserError(f"{name}: expected text, got {type(value).__name__} {value!r}")
            if "\0" in value:
                raise UserError(f"{name}: a NUL character cannot go into a shell script or an environment; remove it")
            if "\n" in value or "\r" in value or "#SBATCH" in value.upper():
                raise UserError(
                    f"{name}: a newline or #SBATCH inside a value would rewrite the sbatch script; remove it"
                )

    def _check_setup(self) -> None:
        """setup: lines of Slurm's batch script, read by bash here (jobs.plan.guarded_setup writes them)."""
        if self.executor != "slurm":
            raise UserError(
                f"setup: lines run in Slurm's batch script; the {self.executor} executor starts the processes from "
                "your shell, with its environment: run them there before submitting (or set env:), and drop setup"
            )
        object.__setattr__(self, "_setup_commands", setup_commands(tuple(self.setup)))

    # Kept as a value: the plan (jobs.plan) builds the batch script from it and runs no program itself.
    _setup_commands: ClassVar[tuple[tuple[int, str], ...]] = ()

    @property
    def setup_commands(self) -> tuple[tuple[int, str], ...]:
        """The setup lines as whole shell commands (jobs.profiles.setup_commands), read by bash once, at load."""
        return self._setup_commands

    def _check_mappings(self) -> None:
        """env and sbatch_args keys become shell names and option names: they must be nothing more."""
        for key, value in self.env.items():
            if not isinstance(key, str) or not ENV_KEY.fullmatch(key):
                raise UserError(f"env key {key!r} is not a variable name; use letters, digits and _ (e.g. NCCL_DEBUG)")
            if value is None or isinstance(value, list | dict):
                raise UserError(f"env.{key}: {value!r} is not a single value; give text or a number, e.g. {key}: '1'")
            if (why := tool_owned(key)) is not None:
                raise UserError(f"env: {key} is {why}; a value of yours would break the job: drop it")
            if len(f"{key}={value}".encode()) >= MAX_ARG_STRLEN:
                raise UserError(
                    f"env.{key}: {len(str(value).encode())} bytes is more than a process takes in one variable "
                    "(the kernel's 128 KiB, MAX_ARG_STRLEN); write the value to a file and pass its path"
                )
            if self.network_interface and key in INTERFACE_VARS:
                raise UserError(
                    f"env: {key}={value} beside network_interface: {self.network_interface}, which sets it too: "
                    "keep one (network_interface sets NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME and MASTER_ADDR's)"
                )
        for key, value in self.sbatch_args.items():
            if not isinstance(key, str) or not SBATCH_KEY.fullmatch(key):
                raise UserError(
                    f"sbatch_args key {key!r} is not an sbatch option name; use e.g. mail-type (no dashes before, no spaces)"
                )
            if value is None or isinstance(value, list | dict):
                raise UserError(f"sbatch_args.{key}: {value!r} is not a single value; give text or a number")

    def _text_values(self) -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str):
                out.append((f.name, value))
            elif f.name in ("setup", "srun_args", "ssh_options", "container_mounts"):
                out.extend((f"{f.name}[{i}]", v) for i, v in enumerate(value))
            elif f.name in ("sbatch_args", "env"):
                for key, v in value.items():
                    out.append((f"{f.name} key", key))
                    out.append((f"{f.name}.{key}", v if isinstance(v, str) else str(v)))
        return out

    @property
    def tasks_per_node(self) -> int:
        return self.gpus_per_node // self.gpus_per_task

    @property
    def requeue(self) -> JobSettings:
        """What every task is told about requeueing."""
        return JobSettings(
            self.signal, self.signal_delay_s, self.max_num_timeout, self.restarts_in_job, float(self.script_hang_s),
            self.requeue_grace,
        )  # fmt: skip

    @property
    def requeue_grace(self) -> float:
        """How long a command that handled the requeue signal may keep running: requeue_grace_s, or what
        signal_delay_s leaves after the stop and the requeue (half of it, at most 30 s)."""
        if self.requeue_grace_s != -1:
            return float(self.requeue_grace_s)
        return float(self.signal_delay_s - min(30, self.signal_delay_s / 2))

    def with_overrides(self, **values: Any) -> "Profile":
        """The profile with command-line flags applied (None means not given)."""
        return dataclasses.replace(self, **{k: v for k, v in values.items() if v is not None})


def find_profile(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if path.is_file():
            return path
        if path.is_dir():
            raise UserError(f"profile {path} is a folder, not a YAML file; pass the file inside it or a profile name")
        raise UserError(
            f"profile file {path} does not exist; pass an existing YAML file or a name from cluster_profiles/"
        )
    for folder in PROFILE_DIRS:
        candidate = folder / f"{name_or_path}.yaml"
        if candidate.is_file():
            return candidate
    names = sorted({p.stem for d in PROFILE_DIRS if d.is_dir() for p in d.glob("*.yaml")})
    raise UserError(f"no profile named {name_or_path!r}; choose one of {', '.join(names)} or pass a YAML path")


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader (the C parser: 10x faster), refusing a key given twice instead of keeping the last."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:  # type: ignore[override]
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise UserError(f"key {key!r} is given twice (line {key_node.start_mark.line + 1}); keep one")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


MAX_DEPTH = 32  # a profile nests three levels deep (trainer: checkpoint: every)


def check_shape(text: str) -> None:
    """Refuse what would blow up before any key is checked: aliases (a "billion laughs" expands nine of them
    into gigabytes) and deep nesting (recursion: a traceback, or a crash). Read as a stream of events, which
    the parser yields one by one, with no recursion and nothing expanded."""
    try:
        _check_events(text)
    except yaml.MarkedYAMLError as exc:
        # PyYAML 6.0.4's parser stops at 1000 levels itself, before our count reaches 32: the same refusal.
        if "nesting depth" not in (exc.problem or "") or exc.problem_mark is None:
            raise
        raise UserError(
            f"nesting deeper than {MAX_DEPTH} levels (line {exc.problem_mark.line + 1}); flatten it"
        ) from None


def _check_events(text: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=_UniqueKeyLoader):
        if isinstance(event, yaml.AliasEvent):
            raise UserError(
                f"a YAML alias (*{event.anchor}, line {event.start_mark.line + 1}) is not allowed; write the value out"
            )
        if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise UserError(
                    f"nesting deeper than {MAX_DEPTH} levels (line {event.start_mark.line + 1}); flatten it"
                )
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            depth -= 1


def read_yaml(path: Path, what: str) -> object:
    """A YAML file as data; an unreadable, non-UTF-8, invalid or duplicate-key file is one UserError."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{what} {path} is not UTF-8 text; save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"{what} {path} cannot be read ({exc.strerror}); check the path and its permissions") from None
    try:
        check_shape(text)
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise UserError(f"{what} {path} is not valid YAML ({str(exc).splitlines()[0]}); fix its syntax") from None
    except UserError as exc:
        raise UserError(f"{what} {path}: {exc}") from None


def load_profile(name_or_path: str) -> Profile:
    path = find_profile(name_or_path)
    data = read_yaml(path, "profile")
    if not data or (isinstance(data, dict) and "executor" not in data):
        raise UserError(f"profile {path} sets no executor; add a line `executor: local` (or debug, slurm)")
    if not isinstance(data, dict):
        raise UserError(f"profile {path} must be a mapping of key: value lines")
    if "name" in data:
        raise UserError(f"profile {path}: 'name' is taken from the file name; remove the key")
    try:
        return from_dict(Profile, {"name": path.stem, **data})
    except UserError as exc:
        raise UserError(f"profile {path}: {exc}") from None

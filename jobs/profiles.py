"""Cluster profiles: YAML files in cluster_profiles/, validated into a frozen dataclass."""

import dataclasses
import functools
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from jobs.remote.ssh import check_login, check_remote_root, check_ssh_options
from trainer.config import from_dict
from trainer.config.schema import HangConfig, setting
from trainer.errors import UserError
from trainer.supervise import signals
from trainer.supervise.launcher import IFNAME_VAR
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
    if profile.remote.login:
        return Path(profile.remote.remote_root)
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


NEGATIVE = "signal_delay_s, max_num_timeout, requeue_on_failure and array_parallelism must be >= 0"


def need(ok: object, message: str) -> None:
    """A profile's check: `message` (what is wrong, how to fix it) unless `ok`."""
    if not ok:
        raise UserError(message)


def need_entry(key: object, value: object, name: re.Pattern[str], bad_key: str, bad_value: str) -> None:
    """One entry of a mapping the batch script spells out (sbatch_args, env): a key of the `name` pattern, and a
    single value; each message a template of {key} and {value}."""
    need(isinstance(key, str) and name.fullmatch(key), bad_key.format(key=key, value=value))
    need(value is not None and not isinstance(value, list | dict), bad_value.format(key=key, value=value))


def check_text(section: object) -> None:
    """Refuse text that would change the meaning of the generated sbatch script."""
    for name, value in _text_values(section):
        if not isinstance(value, str):
            raise UserError(f"{name}: expected text, got {type(value).__name__} {value!r}")
        need("\0" not in value, f"{name}: a NUL character cannot go into a shell script or an environment; remove it")
        need(
            "\n" not in value and "\r" not in value and "#SBATCH" not in value.upper(),
            f"{name}: a newline or #SBATCH inside a value would rewrite the sbatch script; remove it",
        )


def _text_values(section: object) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for f in dataclasses.fields(section):  # type: ignore[arg-type]
        value = getattr(section, f.name)
        if isinstance(value, str):
            out.append((f.name, value))
        elif isinstance(value, list):
            out.extend((f"{f.name}[{i}]", v) for i, v in enumerate(value))
        elif isinstance(value, dict) and f.name != "trainer":
            for key, v in value.items():
                out += [(f"{f.name} key", key), (f"{f.name}.{key}", v if isinstance(v, str) else str(v))]
    return out


@dataclass(frozen=True, eq=False)
class Resources:
    """What each job asks for: nodes, tasks, GPUs, CPUs, memory, time."""

    nodes: int = setting(1, "nodes per job (local, debug: 1); --nodes overrides")
    gpus_per_node: int = setting(1, "one task per GPU; without GPUs, the number of processes per node")
    gpus_per_task: int = setting(1, "GPUs each task drives (a model split over them inside each DDP rank)")
    timeout_min: int = setting(60, "the time limit in minutes; --time overrides")
    cpus_per_task: int = setting(1, "Slurm: CPUs per task; data-loader workers are derived from it")
    mem_gb: float = setting(0, "Slurm: memory per node in GB; 0: the site's default")
    mem_per_gpu_gb: float = setting(0, "Slurm: memory per GPU in GB, instead of mem_gb")
    request_gpus: bool = setting(True, "Slurm: false on CPU-only partitions: gpus_per_node is then tasks per node")

    def __post_init__(self) -> None:
        need(self.nodes >= 1, f"nodes must be at least 1, got {self.nodes}; pass --nodes 1 or more")
        gpus, each = self.gpus_per_node, self.gpus_per_task
        need(gpus >= 1, f"gpus_per_node must be at least 1, got {gpus}; pass --gpus-per-node 1 or more")
        need(
            1 <= each <= 16 and gpus % each == 0,
            f"gpus_per_task {each} must be between 1 and 16 and divide gpus_per_node {gpus}; e.g. gpus_per_node: 8 "
            "with gpus_per_task: 2 (4 tasks per node)",
        )
        need(self.timeout_min >= 1, f"timeout_min must be at least 1, got {self.timeout_min}")
        need(self.cpus_per_task >= 1, f"cpus_per_task must be at least 1, got {self.cpus_per_task}")
        need(
            min(self.mem_gb, self.mem_per_gpu_gb) >= 0 and not (self.mem_gb and self.mem_per_gpu_gb),
            "memory: set mem_gb (per node) or mem_per_gpu_gb, not both, and not below 0",
        )

    @property
    def tasks_per_node(self) -> int:
        return self.gpus_per_node // self.gpus_per_task


@dataclass(frozen=True, eq=False)
class Recovery:
    """Time limits, preemption and failures: the requeue signal, requeues and in-job restarts."""

    signal: str = setting(signals.DEFAULT, "sent signal_delay_s before the time limit, and on preemption")
    signal_delay_s: int = setting(signals.DEFAULT_DELAY_S, "seconds before the time limit the signal comes")
    max_num_timeout: int = setting(signals.DEFAULT_MAX_NUM_TIMEOUT, "requeues after a time limit before the job ends")
    requeue_on_failure: int = setting(
        0, "Slurm: requeues after a failed task (killed, node lost), after restarts_in_job"
    )
    restarts_in_job: int = setting(0, "Slurm: after a failed step (crash, hang, killed task), srun again, no queue")
    spare_nodes: int = setting(0, "Slurm, with restarts_in_job: nodes beyond `nodes`, in place of one failed twice")
    script_hang_s: float = setting(
        1800,
        "a -- COMMAND rank using no CPU and printing nothing (or, once it calls requeue.progress(), calling it no more) "
        "this long is stopped as hung, its Python stacks in the log; 0: never",
    )
    requeue_grace_s: float = setting(
        -1,
        "a command that takes the requeue signal and keeps running is stopped this long after it, and requeued; "
        "-1: what signal_delay_s leaves once the stop and the requeue are done (half of it, at most 30 s)",
    )

    def __post_init__(self) -> None:
        need(min(self.signal_delay_s, self.max_num_timeout, self.requeue_on_failure) >= 0, NEGATIVE)
        in_job, spare, hang = self.restarts_in_job, self.spare_nodes, self.script_hang_s
        need(0 <= in_job <= 100, f"restarts_in_job must be between 0 and 100, got {in_job}")
        need(0 <= spare <= 64, f"spare_nodes must be between 0 and 64, got {spare}")
        need(
            hang == 0 or 10 <= hang <= 7 * 24 * 3600,
            f"script_hang_s must be 0 (never) or between 10 s and a week, got {hang}",
        )
        delay, grace = self.signal_delay_s, self.requeue_grace_s
        need(
            grace == -1 or 0 <= grace < delay,
            f"requeue_grace_s must be -1 (what signal_delay_s leaves) or from 0 to below signal_delay_s={delay}, got "
            f"{grace}; e.g. requeue_grace_s: {delay - min(30, delay / 2):g}",
        )
        check_text(self)
        try:  # normalised here, once: every other form of the signal is made from this name
            object.__setattr__(self, "signal", signals.normalise(self.signal))
        except ValueError as exc:
            raise UserError(str(exc)) from None

    @property
    def requeue(self) -> JobSettings:
        """What every task is told about requeueing."""
        return JobSettings(
            self.signal, self.signal_delay_s, self.max_num_timeout, self.restarts_in_job, self.requeue_grace,
            dataclasses.asdict(HangConfig.for_command(float(self.script_hang_s))),
        )  # fmt: skip

    @property
    def requeue_grace(self) -> float:
        """How long a command that handled the requeue signal may keep running: requeue_grace_s, or what
        signal_delay_s leaves after the stop and the requeue (half of it, at most 30 s)."""
        if self.requeue_grace_s != -1:
            return float(self.requeue_grace_s)
        return float(self.signal_delay_s - min(30, self.signal_delay_s / 2))


@dataclass(frozen=True, eq=False)
class Slurm:
    """Slurm only (local and debug ignore it): where the job queues and what its batch script adds."""

    partition: str = setting("", "sbatch --partition")
    account: str = setting("", "sbatch --account; empty: your default account")
    qos: str = setting("", "sbatch --qos")
    constraint: str = setting("", "sbatch --constraint: node features")
    exclude: str = setting("", "sbatch --exclude: nodes to avoid")
    array_parallelism: int = setting(0, "sweeps: array tasks running at once; 0: no limit")
    setup: list = setting(
        default_factory=list,
        help="shell lines of the batch script, run as written before srun (module load, environment activation); a "
        "command may span lines (`if ... fi`, a here-document); one that fails or exits ends the job there, naming the "
        "line; what bash cannot read as whole commands by the last line is refused at submit",
    )
    srun_args: list = setting(default_factory=list, help="extra srun arguments, e.g. [--cpu-bind=cores]")
    sbatch_args: dict = setting(default_factory=dict, help="extra #SBATCH options, e.g. {mail-type: END}")
    job_name: str = setting("ddp", "sbatch --job-name")
    mail_user: str = setting("", "where --mail sends Slurm's mails")

    def __post_init__(self) -> None:
        need(self.array_parallelism >= 0, NEGATIVE)
        check_text(self)
        for key, value in self.sbatch_args.items():
            need_entry(
                key,
                value,
                SBATCH_KEY,
                "sbatch_args key {key!r} is not an sbatch option name; use e.g. mail-type (no dashes before, no spaces)",
                "sbatch_args.{key}: {value!r} is not a single value; give text or a number",
            )

    # The setup lines as whole shell commands (jobs.profiles.setup_commands), read by bash once, at load: kept
    # as a value (Profile's check fills it), the plan (jobs.plan) builds the batch script from it and runs no
    # program itself.
    setup_commands: ClassVar[tuple[tuple[int, str], ...]] = ()


@dataclass(frozen=True, eq=False)
class Environment:
    """What the tasks run with: the interpreter, variables, the network."""

    python: str = setting("", "the interpreter on the nodes, also for `-- python ...`; empty: the submitter's own")
    env: dict = setting(
        default_factory=dict,
        help="exported for every task, e.g. {NCCL_DEBUG: WARN}: names of letters, digits and _; true/false as 1/0",
    )
    network_interface: str = setting(
        "",
        "the nodes' fast network (e.g. ib0, hsn0), exported as NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME, and "
        "MASTER_ADDR is node 0's address on it; a node without it fails in one line naming node and interface; the "
        "local profile refuses one this machine lacks; empty: the libraries choose",
    )

    def __post_init__(self) -> None:
        check_text(self)
        for key, value in self.env.items():
            self._check_variable(key, value)
        need(
            not self.network_interface or IFNAME.fullmatch(self.network_interface),
            f"network_interface {self.network_interface!r} is not an interface name (at most 15 letters, digits, "
            "_ . -); write e.g. ib0",
        )

    def _check_variable(self, key: object, value: object) -> None:
        """env keys become shell names: they must be nothing more, and none the tool sets itself."""
        need_entry(
            key,
            value,
            ENV_KEY,
            "env key {key!r} is not a variable name; use letters, digits and _ (e.g. NCCL_DEBUG)",
            "env.{key}: {value!r} is not a single value; give text or a number, e.g. {key}: '1'",
        )
        if (why := tool_owned(str(key))) is not None:
            raise UserError(f"env: {key} is {why}; a value of yours would break the job: drop it")
        need(
            len(f"{key}={value}".encode()) < MAX_ARG_STRLEN,
            f"env.{key}: {len(str(value).encode())} bytes is more than a process takes in one variable (the kernel's "
            "128 KiB, MAX_ARG_STRLEN); write the value to a file and pass its path",
        )
        need(
            not (self.network_interface and key in INTERFACE_VARS),
            f"env: {key}={value} beside network_interface: {self.network_interface}, which sets it too: keep one "
            "(network_interface sets NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME and MASTER_ADDR's)",
        )


@dataclass(frozen=True, eq=False)
class Remote:
    """Submitting from another machine (jobs.remote): the login node, over your own OpenSSH."""

    login: str = setting("", "user@host or a Host alias of ~/.ssh/config; empty: submit here")
    remote_root: str = setting("", "with login: where runs live on the cluster ($VARS and ~ expand there)")
    ssh_options: list = setting(default_factory=list, help='extra ssh arguments, e.g. [-p, "2222", -i, ~/.ssh/key]')

    def __post_init__(self) -> None:
        if self.login or self.remote_root or self.ssh_options:  # first: its own words for a newline in login
            need(
                self.login and self.remote_root,
                "login and remote_root go together: login: user@host, remote_root: /scratch/$USER/runs (the folder "
                "for runs on the cluster)",
            )
            check_login(self.login)
            check_remote_root(self.remote_root)
            check_ssh_options(self.ssh_options)
        check_text(self)


@dataclass(frozen=True, eq=False)
class Containers:
    """A container for the tasks (jobs.containers): pyxis/enroot through srun, or Apptainer around the command."""

    container_image: str = setting("", "pyxis: an image name or .sqsh; apptainer: a .sif; empty: no container")
    container_runtime: str = setting("pyxis", "pyxis or apptainer")
    container_mounts: list = setting(default_factory=list, help="more src:dst (or path) mounts; the run root always")
    apptainer_command: str = setting("apptainer", "or singularity, on sites that still call it that")

    def __post_init__(self) -> None:
        check_text(self)
        runtime, mounts = self.container_runtime, self.container_mounts
        need(runtime in ("pyxis", "apptainer"), f"container_runtime {runtime!r} is unknown; use pyxis or apptainer")
        need(
            all(isinstance(m, str) and m and "," not in m for m in mounts),
            f"container_mounts: {mounts!r} must be a list of src:dst paths, e.g. [/data:/data]",
        )


@dataclass(frozen=True, eq=False)
class Code:
    """The code snapshot (jobs.snapshot): the folder submitted from, copied into the run directory."""

    snapshot: bool = setting(True, "false: tasks run the code on disk when they start (each requeue: what is there)")
    snapshot_limit_mb: float = setting(100, "refuse a larger snapshot (data or a virtual environment in the folder)")
    snapshot_exclude: list = setting(default_factory=list, help="glob patterns relative to the folder, e.g. [data/*]")
    snapshot_include: list = setting(default_factory=list, help="git-ignored files to copy all the same, e.g. [a.py]")

    def __post_init__(self) -> None:
        limit = self.snapshot_limit_mb
        need(limit > 0, f"snapshot_limit_mb must be above 0, got {limit}; or set snapshot: false")
        for name in ("snapshot_exclude", "snapshot_include"):
            patterns = getattr(self, name)
            need(
                all(isinstance(p, str) and p for p in patterns),
                f"{name}: {patterns!r} must be a list of glob patterns, e.g. [data/*]",
            )


@dataclass(frozen=True, eq=False)
class Profile:
    """A cluster profile, validated: where and how the job runs, and the trainer defaults it brings. Its YAML is
    flat (`nodes: 2`); each key belongs to one section (KEYS), and job.json records it flat (Profile.flat)."""

    name: str = setting(help="the file's name, without .yaml")
    executor: str = setting(help="local: this machine, N processes; debug: in-process; slurm: sbatch")
    run_root: str = setting("runs", "run directories go here; on a cluster, a folder every node can see")
    trainer: dict = setting(default_factory=dict, help="trainer settings for this profile, nested as key: value")
    resources: Resources = setting(default_factory=Resources)
    recovery: Recovery = setting(default_factory=Recovery)
    slurm: Slurm = setting(default_factory=Slurm)
    environment: Environment = setting(default_factory=Environment)
    remote: Remote = setting(default_factory=Remote)
    containers: Containers = setting(default_factory=Containers)
    code: Code = setting(default_factory=Code)

    def __post_init__(self) -> None:
        executor, nodes = self.executor, self.resources.nodes
        need(
            not self.remote.login or executor == "slurm",
            f"login: a profile that submits over SSH runs on Slurm; set executor: slurm, not {executor}",
        )
        check_text(self)
        need(executor in EXECUTORS, f"executor {executor!r} is unknown; use one of {', '.join(EXECUTORS)}")
        need(
            not self.slurm.setup or executor == "slurm",
            f"setup: lines run in Slurm's batch script; the {executor} executor starts the processes from your shell, "
            "with its environment: run them there before submitting (or set env:), and drop setup",
        )
        object.__setattr__(self.slurm, "setup_commands", setup_commands(tuple(self.slurm.setup)))
        need(
            executor == "slurm" or nodes == 1,
            f"the {executor} executor runs on one node, got {nodes}; use --nodes 1 or a Slurm profile",
        )
        need(
            executor != "debug" or self.resources.gpus_per_node == 1,
            "the debug executor runs one task in-process; use --gpus-per-node 1 or the local profile",
        )
        self._check_slurm_only()

    def _check_slurm_only(self) -> None:
        executor, delay, minutes = self.executor, self.recovery.signal_delay_s, self.resources.timeout_min
        need(
            not self.containers.container_image or executor == "slurm",
            f"container_image runs the tasks in a container on Slurm; the {executor} executor runs them on this "
            "machine: drop container_image or use a Slurm profile",
        )
        spare = self.recovery.spare_nodes
        need(
            not spare or (executor == "slurm" and self.recovery.restarts_in_job),
            f"spare_nodes: {spare} takes a failed node's place in an in-job restart on Slurm; set restarts_in_job: 1 "
            "or more with executor: slurm, or spare_nodes: 0",
        )
        need(  # else the signal would never come: no checkpoint
            delay < 60 * minutes,
            f"a time limit of {minutes} min leaves no time before the requeue signal, sent signal_delay_s={delay} s "
            f"before it; use --time {delay // 60 + 1} or more, or a smaller signal_delay_s in the profile",
        )

    def flat(self) -> dict[str, Any]:
        """The profile as its flat YAML keys: what job.json records and profile_of reads back."""
        out = {name: getattr(self, name) for name, section in KEYS.items() if not section}
        for name in SECTIONS:
            out |= dataclasses.asdict(getattr(self, name))
        return out

    def with_overrides(self, **values: Any) -> "Profile":
        """The profile with flat keys replaced, e.g. command-line flags (None means not given)."""
        return profile_of(self.flat() | {k: v for k, v in values.items() if v is not None})


SECTIONS: dict[str, type] = {
    f.name: f.default_factory for f in dataclasses.fields(Profile) if dataclasses.is_dataclass(f.default_factory)
}
# A flat key -> the section holding it ("": Profile's own), made from the fields, in the order of the reference.
KEYS: dict[str, str] = {
    **{f.name: "" for f in dataclasses.fields(Profile) if f.name not in SECTIONS},
    **{f.name: name for name, cls in SECTIONS.items() for f in dataclasses.fields(cls)},
}


def profile_of(data: Mapping[str, Any]) -> Profile:
    """A Profile from its flat keys (a YAML file, a job.json record): each to its section, unknown ones refused."""
    if unknown := [key for key in data if key not in KEYS]:
        raise UserError(f"unknown config key {unknown[0]!s}; valid keys: {', '.join(KEYS)}")
    parts: dict[str, dict[str, Any]] = {name: {} for name in ("", *SECTIONS)}
    for key, value in data.items():
        parts[KEYS[key]][key] = value
    sections = {name: from_dict(cls, parts[name]) for name, cls in SECTIONS.items()}
    return from_dict(Profile, parts[""] | sections)  # type: ignore[no-any-return]


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
        raise too_deep(exc.problem_mark) from None


def too_deep(mark: yaml.Mark) -> UserError:
    return UserError(f"nesting deeper than {MAX_DEPTH} levels (line {mark.line + 1}); flatten it")


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
                raise too_deep(event.start_mark)
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
        return profile_of({"name": path.stem, **data})
    except UserError as exc:
        raise UserError(f"profile {path}: {exc}") from None

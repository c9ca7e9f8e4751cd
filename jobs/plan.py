"""The submission plan: plain values built by pure functions, acted on by jobs.ops.launch."""

import itertools
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs import containers, restarts
from jobs.profiles import INTERFACE_VARS, Profile
from jobs.snapshot import tool_dir, tool_environment
from trainer.config import TrainConfig
from trainer.errors import UserError
from trainer.supervise import signals
from trainer.supervise.launcher import GPUS_PER_TASK
from trainer.supervise.signals import JobSettings


@dataclass(frozen=True, eq=False)
class Script:
    """Your command instead of the trainer: one per job (a sweep's points substitute their values)."""

    commands: list[list[str]]
    cwd: str  # where it runs: the folder it was submitted from
    run_dirs: list[str]
    restart_args: list[str] = field(default_factory=list)  # added on a start once their last word's file exists


@dataclass(frozen=True, eq=False)
class Plan:
    """Everything needed to submit: executor parameters, one config per job, what each task is told."""

    executor: str
    log_dir: Path  # submitit's folder: pickles and per-task logs
    parameters: dict[str, Any]  # for submitit's update_parameters
    configs: list[TrainConfig]  # one resolved trainer config per job (several: an array job)
    python: str = ""  # the interpreter on the nodes (Slurm)
    settings: JobSettings = field(default_factory=JobSettings)  # for every task: the requeue signal, its delay
    script: Script | None = None  # set: every task runs this command, not the trainer
    code_dir: Path | None = None  # the code snapshot every task runs in (jobs.snapshot); None: none
    array_parallelism: int = 0  # local sweeps: points at once (0: as many as the machine allows)
    spare_nodes: int = 0  # Slurm: nodes allocated beyond the step's, to take a failed node's place
    launcher: list[str] = field(default_factory=list)  # Slurm: words before python (apptainer exec ... IMAGE)
    env: dict[str, str] = field(default_factory=dict)  # local: exported for the tasks (Slurm: in the setup lines)
    # Slurm: the batch step's supervisor, its python and what it is told (jobs.restarts.spec)
    supervisor: tuple[str, dict[str, Any]] | None = None

    @property
    def run_dirs(self) -> list[Path]:
        return [Path(d) for d in self.script.run_dirs] if self.script else [Path(c.run_dir) for c in self.configs]

    @property
    def tasks(self) -> int:
        per_node = self.parameters.get("ntasks_per_node", self.parameters.get("tasks_per_node", 1))
        return (self.parameters.get("nodes", 1) - self.spare_nodes) * per_node


def submit_command(python: str, log_dir: Path, launcher: list[str]) -> str:
    """What srun starts in each task: submitit's entry, with the interpreter quoted (a path with a space),
    behind `launcher` (a container runtime's words) when there is one. It follows srun's `--`: the supervisor
    puts each start's own srun options before it (spare nodes, a node left out: trainer.supervise.policy.step_args)."""
    return "-- " + shlex.join([*launcher, python, "-u", "-m", "submitit.core._submit", str(log_dir)])


def tool_lines(env: dict[str, str]) -> list[str]:
    """Batch-script lines: every process of the tool on the nodes imports it from the run's tool/ (or the
    installed tool), never from the working folder, your code (`env`: jobs.snapshot.tool_environment's)."""
    lines = [f"export PYTHONSAFEPATH={env['PYTHONSAFEPATH']}"]
    if "PYTHONPATH" in env:
        lines.append(f'export PYTHONPATH={shlex.quote(env["PYTHONPATH"])}"${{PYTHONPATH:+:$PYTHONPATH}}"')
    return lines


def sweep_points(sweeps: list[str]) -> list[list[str]]:
    """`--sweep a=1,2 --sweep b=x,y` -> the product, as lists of key=value overrides."""
    axes, keys = [], set()
    for sweep in sweeps:
        key, eq, values = sweep.partition("=")
        if not eq or not key or not values:
            raise UserError(f"--sweep {sweep!r} is not key=v1,v2,...; write e.g. --sweep optim.lr=1e-3,1e-2")
        if key in keys:
            raise UserError(f"--sweep {key} is given twice; give all its values once: --sweep {key}=v1,v2,v3")
        keys.add(key)
        axes.append([f"{key}={v}" for v in values.split(",")])
    return [list(point) for point in itertools.product(*axes)]


PLACEHOLDER = re.compile(r"\{([A-Za-z_][\w.]*)\}")
RUN_DIR_WORD = "RUN_DIR"  # {RUN_DIR} in a command: the run directory, filled in by each task (trainer.supervise.script)


def script_commands(command: list[str], points: list[list[str]]) -> list[list[str]]:
    """The command of each sweep point: `{key}` in its words replaced by the point's value of key. A `{name}`
    that no --sweep defines would reach the script as it is: refused."""
    keys = {item.split("=", 1)[0] for point in points for item in point}
    undefined = [name for word in command for name in PLACEHOLDER.findall(word) if name not in keys | {RUN_DIR_WORD}]
    if undefined:
        raise UserError(
            f"{{{undefined[0]}}} in the command is not a --sweep key; add --sweep {undefined[0]}=V1,V2 to sweep it, "
            "or write the value itself"
        )
    if not points or points == [[]]:
        return [command]
    out = []
    for point in points:
        values = dict(item.split("=", 1) for item in point)
        missing = [key for key in values if not any("{" + key + "}" in word for word in command)]
        if missing:
            raise UserError(
                f"--sweep {missing[0]} is not used by the command; write {{{missing[0]}}} where its value goes, "
                f"e.g. -- python train.py --{missing[0].split('.')[-1]} {{{missing[0]}}}"
            )
        substituted = []
        for word in command:
            for key, value in values.items():
                word = word.replace("{" + key + "}", value)
            substituted.append(word)
        out.append(substituted)
    return out


def restart_words(text: str | None) -> list[str]:
    """--restart-args as the words the tasks add (trainer.supervise.script.with_restart_args); a quote left open or a
    {LATEST...} that is not {LATEST:pattern} refused, as the tasks would pass it to the script as it is."""
    try:
        words = shlex.split(text or "")
    except ValueError as exc:  # shlex's "No closing quotation"
        raise UserError(f"--restart-args {text}: {str(exc).lower()}; close the quote or drop it") from None
    from trainer.supervise.script import LATEST  # here, not at the top: the trainer's plan needs none of it

    for word in words:
        if "{latest" in LATEST.sub("", word.replace("{RUN_DIR}", RUN_DIR_WORD)).lower():
            raise UserError(
                f"--restart-args {word} is not {{LATEST:PATTERN}} (the newest of the files or folders PATTERN "
                "matches); write e.g. '--resume_from_checkpoint {LATEST:out/checkpoint-*}'"
            )
    return words


def with_interpreter(command: list[str], python: str) -> list[str]:
    """`python`/`python3` as the command's first word is the interpreter the tasks run in (the profile's
    `python:`, else the submitter's own), not whatever comes first on the task's PATH."""
    return [python, *command[1:]] if command[:1] in (["python"], ["python3"]) else command


# Python's own command line (Python/getopt.c): one-letter options combine (-uB); -W and -X take an argument,
# joined (-Ximporttime, -Werror::DeprecationWarning) or the next word, and end their cluster; -c and -m end the
# options with no file; "--" ends them, so the next word is the file, whatever it looks like.
PYTHON_FLAGS = set("bBdEiIOPqRsStuvx")  # -h, -?, -V print and exit: no file is run


def python_option(word: str) -> str:
    """What an option word of python's does: "flags", "argument" (the next word is its argument) or "end" (no
    file runs: -c, -m, --help, --version, or an option python itself refuses)."""
    if word == "--check-hash-based-pycs":
        return "argument"
    if word.startswith("--"):
        return "end"
    for at, letter in enumerate(word[1:], start=2):
        if letter in "WX":
            return "flags" if word[at:] else "argument"
        if letter not in PYTHON_FLAGS:
            return "end"
    return "flags"


def script_file(command: list[str]) -> str | None:
    """The file a `python [options] FILE.py ...` command runs; None for `-m`, `-c`, standard input, another
    program, or a file name that is not plainly one (a placeholder, no .py): those are not checked."""
    if not command or not Path(command[0]).name.startswith("python"):
        return None
    words = iter(command[1:])
    for word in words:
        if word == "--" or word == "-" or not word.startswith("-"):
            file = next(words, "-") if word == "--" else word
            return file if file.endswith(".py") and "{" not in file else None
        if (kind := python_option(word)) == "end":
            return None
        if kind == "argument":
            next(words, None)
    return None


def script_name(command: list[str]) -> str:
    """A run directory's middle part for a command: its script's or module's name."""
    words = command[1:] if Path(command[0]).name.startswith("python") else command
    if words[:1] == ["-c"]:  # inline code: no file to name it after
        return "python"
    if words[:1] == ["-m"] and len(words) > 1:
        return words[1].rsplit(".", 1)[-1]
    return Path(words[0]).stem if words else "script"


def shell_value(value: object) -> str:
    """A profile value as a shell user writes it: true/false as 1/0 (NCCL reads "True" as 0), numbers as is."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def task_variables(profile: Profile, signal: dict[str, str]) -> dict[str, str]:
    """What every task is given in its environment, in this order: the profile's env, `signal` (Slurm:
    submitit's requeue signal), gpus_per_task, and network_interface for NCCL, gloo and the tasks' MASTER_ADDR
    (trainer.supervise.rendezvous.agree_port). No name comes twice: the profile refuses env keys the tool
    sets (tool_owned) and those network_interface sets."""
    env = {k: shell_value(v) for k, v in profile.environment.env.items()} | signal
    if profile.resources.gpus_per_task > 1:
        env[GPUS_PER_TASK] = str(profile.resources.gpus_per_task)
    name = profile.environment.network_interface
    return env | (dict.fromkeys(INTERFACE_VARS, name) if name else {})


SETUP_FAILED = "error: the profile's setup line %d failed (exit %d): %s; fix that line of the profile's setup:\\n"


# Defined before the setup lines: called when one fails (its status), or from the EXIT trap when one ends the
# batch shell (`exit 3`, `${X:?}`); an `exit 0` ends the job on purpose. slurm_ddp_setup: (number, text).
SETUP_FAILED_FUNCTION = """slurm_ddp_setup_failed() {
  trap - EXIT
  [ "$1" = 0 ] && exit 0
  local said=${slurm_ddp_setup[1]%%$'\\n'*}
  [ "$said" = "${slurm_ddp_setup[1]}" ] || said="$said ..."
  printf FORMAT "${slurm_ddp_setup[0]}" "$1" "$said" >&2
  exit 1
}""".replace("FORMAT", shlex.quote(SETUP_FAILED))


def guarded_setup(commands: tuple[tuple[int, str], ...]) -> list[str]:
    """The profile's setup lines as whole commands (Profile.setup_commands), each run as written and ending
    the job when it fails or exits, naming it: a `module load` or `source .../activate` that failed would
    otherwise leave the job running with another interpreter, or none. Each runs in the batch shell itself
    (eval, not a subshell: its exports and activations stay; an expansion error such as $((1+)) is its
    status, where at the top level bash would skip it and go on)."""
    if not commands:
        return []
    run = 'eval "${slurm_ddp_setup[1]}" || slurm_ddp_setup_failed $?'
    lines = [f"slurm_ddp_setup=({number} {shlex.quote(text)}); {run}" for number, text in commands]
    said = "# the profile's setup lines, each run as written; one that fails or exits ends the job, naming it"
    return [said, SETUP_FAILED_FUNCTION, "trap 'slurm_ddp_setup_failed $?' EXIT", *lines, "trap - EXIT"]


def slurm_parameters(profile: Profile) -> dict[str, Any]:
    """submitit SlurmExecutor parameters for one job of this profile."""
    res, batch = profile.resources, profile.slurm
    # submitit installs its requeue handler for this signal in every task (the trainer replaces it).
    variables = task_variables(profile, {signals.SUBMITIT_ENV: profile.recovery.signal})
    exports = [f"export {k}={shlex.quote(v)}" for k, v in variables.items()]
    params: dict[str, Any] = {
        "job_name": batch.job_name,
        "time": res.timeout_min,
        "nodes": res.nodes + profile.recovery.spare_nodes,  # the step asks for its own (jobs.restarts)
        "ntasks_per_node": res.tasks_per_node,  # one task per GPU, or per gpus_per_task
        "cpus_per_task": res.cpus_per_task,
        "signal_delay_s": profile.recovery.signal_delay_s,
        "stderr_to_stdout": True,
        "setup": [*guarded_setup(batch.setup_commands), *exports],
        # srun stops every task when one fails, and since Slurm 22.05 does not inherit --cpus-per-task.
        "srun_args": ["--kill-on-bad-exit=1", f"--cpus-per-task={res.cpus_per_task}", *batch.srun_args],
        # the container (pyxis), its working folder the code snapshot the batch script runs in (chdir)
        "additional_parameters": {
            # B: the batch shell alone; signalled, every process of every task would get it (trainer.supervise.relay).
            "signal": profile.recovery.requeue.sbatch(),
            **{k: shell_value(v) for k, v in batch.sbatch_args.items()},
        },
    }
    if res.request_gpus and res.gpus_per_task > 1:  # Slurm binds each task's own GPUs
        params["gpus_per_task"] = res.gpus_per_task
    elif res.request_gpus:
        params["gpus_per_node"] = res.gpus_per_node
    for name in ("partition", "account", "qos", "constraint", "exclude"):
        if getattr(batch, name):
            params[name] = getattr(batch, name)
    if res.mem_gb:
        params["mem"] = f"{int(res.mem_gb * 1024)}M"
    if res.mem_per_gpu_gb:
        params["mem_per_gpu"] = f"{int(res.mem_per_gpu_gb * 1024)}M"
    if batch.array_parallelism:
        params["array_parallelism"] = batch.array_parallelism
    return params


def visible_gpus(cuda_visible_devices: str | None) -> tuple[int, ...]:
    """The caller's CUDA_VISIBLE_DEVICES as GPU indices for the local executor (empty: all of them)."""
    if not cuda_visible_devices:
        return ()
    items = [item.strip() for item in cuda_visible_devices.split(",")]
    if not all(item.isascii() and item.isdigit() for item in items):
        raise UserError(
            f"CUDA_VISIBLE_DEVICES={cuda_visible_devices!r}: the local profile takes GPU indices; write e.g. 2,3"
        )
    return tuple(int(item) for item in items)


def make_plan(
    profile: Profile,
    configs: list[TrainConfig],
    log_dir: Path,
    has_gpus: bool,
    python: str,
    gpus: tuple[int, ...] = (),
    code_dir: Path | None = None,
    run_dirs: list[Path] | None = None,
) -> Plan:
    """`log_dir` is the run's (or sweep's) logs/ folder; `code_dir` the code snapshot the tasks run in;
    `run_dirs` the runs' folders (default: the configs')."""
    settings = profile.recovery.requeue
    tool = tool_environment(tool_dir(code_dir) if code_dir is not None else None)
    if profile.executor == "slurm":
        folders = run_dirs if run_dirs is not None else [Path(c.run_dir) for c in configs]
        params = slurm_parameters(profile)
        params["setup"] += tool_lines(tool)
        # The batch step runs on the node itself, outside any container: its python runs the supervisor
        host_python = "python3" if profile.containers.container_image else (profile.environment.python or python)
        if code_dir is not None:  # the batch script, and so every task and requeue, runs in the snapshot
            params["additional_parameters"]["chdir"] = str(code_dir)
        params["srun_args"] += containers.srun_args(profile, str(code_dir) if code_dir else None)
        python = containers.python(profile, python)
        launcher = containers.command_prefix(profile)
        return Plan(
            "slurm", log_dir, params, configs, python, settings, code_dir=code_dir, spare_nodes=profile.recovery.spare_nodes,
            launcher=launcher, supervisor=(host_python, restarts.spec(profile, log_dir, folders)),
        )  # fmt: skip
    # The requeue signal and its delay travel in plan.settings (the local controller reads them there).
    parameters: dict[str, Any] = {"timeout_min": profile.resources.timeout_min}
    if profile.executor == "local":
        # One process per GPU; on a machine without GPUs, gpus_per_node is the process count.
        parameters |= {"nodes": 1, "tasks_per_node": profile.resources.tasks_per_node}
        if has_gpus:
            parameters["gpus_per_node"] = profile.resources.gpus_per_node
            if gpus:  # the caller's CUDA_VISIBLE_DEVICES: without it submitit would use GPUs 0..n-1
                parameters["visible_gpus"] = gpus
    code_dir = code_dir if profile.executor == "local" else None  # debug runs in this process, as it is
    return Plan(
        profile.executor,
        log_dir,
        parameters,
        configs,
        settings=settings,
        code_dir=code_dir,
        array_parallelism=profile.slurm.array_parallelism,
        env=task_variables(profile, {}) | (tool if profile.executor == "local" else {}),
    )


def sbatch_script(plan: Plan) -> str:
    """The exact sbatch script submitit writes for this plan."""
    from submitit.slurm.slurm import _make_sbatch_string  # the pure function submitit itself uses

    params = dict(plan.parameters)
    if len(plan.run_dirs) > 1:
        params["map_count"] = len(plan.run_dirs)
    # The command each task runs: the same string submitit's SlurmExecutor builds, after srun's `--`.
    command = submit_command(plan.python, plan.log_dir, plan.launcher)
    script = _make_sbatch_string(command=command, folder=plan.log_dir, **params)
    return restarts.supervised(script, *plan.supervisor) if plan.supervisor else script

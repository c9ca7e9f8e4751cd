"""`python -m jobs.submit`: queue a DDP training job from a cluster profile.

Thin on purpose: parse, build the plan, act, report. No torch import on this path.
"""

import argparse
import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

from jobs import oneoff
from jobs.plan import (
    Plan,
    Script,
    make_plan,
    restart_words,
    sbatch_script,
    script_commands,
    script_file,
    script_name,
    sweep_points,
    visible_gpus,
    with_interpreter,
)
from jobs.profiles import DEFAULT_PROFILE, Profile, load_profile, profile_of, run_root_of
from jobs.remote import runs as remote_runs
from jobs.snapshot import (
    Snapshot,
    copied_names,
    git_diff,
    git_state,
    ignored_entries,
    ignored_note,
    importable,
    included_files,
    manifest,
    plan_snapshot,
    tool_dir,
)
from jobs.snapshot import copy as copy_snapshot
from trainer.config import TrainConfig, build_config, config_dict, flat, from_dict, section, tasks, write_config
from trainer.data.resolve import resolve_data, validation_config
from trainer.errors import UserError, one_line_errors
from trainer.run.atomic import read_json, try_lock, write_text
from trainer.run.checkpoint_names import list_checkpoints
from trainer.run.prepare import (
    check_name,
    check_run_root,
    claim,
    load_config_file,
    make_run_root,
    new_run_dir,
    not_a_run,
    point_name,
)
from trainer.run.provenance import write_submit
from trainer.run.rundir import RunDir


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage block
        print(f"error: {message}; see python -m jobs.submit --help", file=sys.stderr)
        sys.exit(2)


def split_command(argv: list[str] | None) -> tuple[list[str], list[str]]:
    """Our arguments, and the command after `--` that every task runs instead of the trainer."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    if cut == len(argv) - 1:
        raise UserError("nothing after --; give the command every task runs, e.g. -- python train.py --lr 3e-4")
    return argv[:cut], argv[cut + 1 :]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="python -m jobs.submit", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--profile", help="profile name in cluster_profiles/ or a YAML path (default: local; a resume: the run's own)"
    )
    parser.add_argument("--nodes", type=int, help="number of nodes (overrides the profile)")
    parser.add_argument("--gpus-per-node", type=int, help="tasks per node, one per GPU (overrides the profile)")
    parser.add_argument("--time", type=int, metavar="MINUTES", help="time limit (overrides the profile)")
    parser.add_argument("--partition", help="Slurm partition (overrides the profile)")
    parser.add_argument("--name", help="run directory name under run_root (default: date-time-task-id)")
    parser.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="repeatable; one array job over the product of the values",
    )
    parser.add_argument("--array-parallelism", type=int, help="sweep points running at once (overrides the profile)")
    parser.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a run (its folder, or its name) from its newest checkpoint"
    )
    parser.add_argument(
        "--current-code",
        action="store_true",
        help="with --resume: run this folder's code as it is now, not the run's snapshot (kept in superseded/)",
    )
    parser.add_argument("--dependency", metavar="SPEC", help="sbatch's --dependency, e.g. afterok:12345")
    parser.add_argument(
        "--after", action="append", default=[], metavar="RUN_DIR", help="start once that run's job finished well"
    )
    parser.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="repeatable; exported for every task"
    )
    parser.add_argument(
        "--mail", metavar="TYPES", help="mail on these events (e.g. END,FAIL) to the profile's mail_user"
    )
    parser.add_argument(
        "--restart-args",
        metavar="WORDS",
        help="with -- COMMAND: words added to it on a start once their last word's file exists, e.g. "
        "'--resume {RUN_DIR}/checkpoint.pth'",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the sbatch script and submit nothing")
    parser.add_argument("--wait", action="store_true", help="follow rank 0's output and exit with the job's outcome")
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="trainer settings, e.g. steps=100 data.root=DIR"
    )
    args = parser.parse_intermixed_args(argv)  # key=value may come before or after flags
    if args.resume or args.after:  # jobs.tracking's imports only then: the dry run stays quick
        from jobs.tracking import by_name

        # A run's name, wherever the default profile or --profile puts runs (a path or a job id stays as it is).
        args.resume = by_name(args.resume, args.profile) if args.resume else args.resume
        args.after = [by_name(run, args.profile) for run in args.after]
    return args


def profile_for(args: argparse.Namespace) -> Profile:
    """The profile named by --profile; on a --resume without one, the profile the run last ran with (job.json),
    so it goes on where and in the shape it ran (flags still override field by field)."""
    if args.profile is not None or not args.resume:
        return load_profile(args.profile or DEFAULT_PROFILE)
    path = RunDir(Path(args.resume)).job
    if not path.is_file():
        return load_profile(DEFAULT_PROFILE)  # never queued: nothing to go on but the default
    record = read_json(path, f"move it aside and pass --profile to resume {args.resume}", valid_record)
    if isinstance(record.get("profile"), dict):
        return profile_of(record["profile"])
    if record.get("executor", DEFAULT_PROFILE) != load_profile(DEFAULT_PROFILE).executor:
        raise UserError(
            f"{args.resume} ran with the {record.get('executor')} executor, and job.json does not say which profile; "
            "pass --profile NAME to resume it there"
        )
    return load_profile(DEFAULT_PROFILE)


def after_jobs(run_dirs: list[str]) -> dict[str, str]:
    """The Slurm jobs of --after's runs (a sweep: its array job, once), each with the run it came from."""
    if not run_dirs:
        return {}
    from jobs.tracking import find_all

    jobs: dict[str, str] = {}
    for run_dir in run_dirs:
        for _, target in find_all(run_dir):
            if target.executor != "slurm":
                raise UserError(f"--after {run_dir}: it ran with the {target.executor} executor, not on Slurm")
            jobs.setdefault(target.job_id.split("_")[0], run_dir)
    return jobs


def check_dependency(spec: str | None, after: dict[str, str]) -> None:
    """Ask Slurm, once, about every job the dependency names: one it does not know, or that ended so the
    dependency can never hold, is refused here rather than left pending for ever (or started at once)."""
    pairs = [*oneoff.dependency_jobs(spec or ""), *(("afterok", job) for job in after)]
    if not pairs:
        return
    from jobs.tracking import slurm_infos

    states = {job: found.state for job, found in slurm_infos([job for _, job in pairs], with_tasks=True).items()}
    oneoff.refuse_unsatisfiable(pairs, states, after)


def check_partition(profile: Profile) -> None:
    """More nodes than the partition has, or more time than it allows, pend for ever where Slurm does not
    refuse them itself (EnforcePartLimits=NO, its default): refused here, against `scontrol show partition`."""
    from jobs.tracking import parse_scontrol, scontrol_text

    if "," in (partition := profile.slurm.partition or ""):  # several: Slurm picks one that fits
        return
    records = parse_scontrol(scontrol_text("-a", "show", "partition", "-o"))  # -a: hidden ones too
    named = [r for r in records if r.get("PartitionName") == partition] if partition else []
    found = named or [r for r in records if r.get("Default") == "YES" and not partition]
    if not found:
        if partition and records:
            names = ", ".join(r.get("PartitionName", "?") for r in records)
            raise UserError(f"partition {partition} does not exist here; pick one of {names} (--partition)")
        return
    res = profile.resources
    oneoff.refuse_beyond_partition(found[0], res.nodes, profile.recovery.spare_nodes, res.timeout_min)


def check_local_processes(profile: Profile) -> None:
    """The local profile starts one process per GPU (per gpus_per_task GPUs; per CPU without GPUs): bounded by
    the GPUs this machine shows (CUDA_VISIBLE_DEVICES's, when set), else by its CPUs."""
    gpus = 0
    if has_local_gpus():
        shown = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"))
        gpus = len(shown) if shown else len(list(Path("/dev").glob("nvidia[0-9]*")))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    refuse_local_shape(profile.resources.gpus_per_node, profile.resources.tasks_per_node, gpus, cpus)


def check_local_interface(name: str) -> None:
    """The local profile's network_interface must be one this machine has (the tasks take their address on it)."""
    names = [n for _, n in socket.if_nameindex()]
    if name and name not in names:
        raise UserError(
            f"network_interface {name}: this machine has no such interface; name one of {', '.join(names)}, or drop "
            "the key"
        )


def refuse_local_shape(gpus_per_node: int, tasks: int, gpus: int, cpus: int) -> None:
    """With GPUs, the GPUs asked for (tasks x gpus_per_task) must exist: a rank is never put on another's GPU
    (trainer.distributed.device_indices); without, one process per CPU at most (pure)."""
    if gpus and gpus_per_node > gpus:
        raise UserError(
            f"--gpus-per-node {gpus_per_node} asks for {gpus_per_node} GPUs on a machine that shows {gpus}; "
            f"pass --gpus-per-node {gpus} or fewer, or use a Slurm profile"
        )
    if not gpus and tasks > cpus:
        raise UserError(
            f"--gpus-per-node {gpus_per_node} would start {tasks} local processes on a machine with {cpus} CPUs; "
            f"pass --gpus-per-node {cpus} or fewer, or use a Slurm profile"
        )


def has_local_gpus() -> bool:
    # Checked without torch: importing it would make every submit seconds slower.
    return Path("/dev/nvidiactl").exists() and os.environ.get("CUDA_VISIBLE_DEVICES") != ""


@dataclasses.dataclass(frozen=True)
class Request:
    plan: Plan
    folder: Path  # the run directory, or the sweep's folder holding one run directory per point
    wait: bool
    dry_run: bool
    resuming: bool
    finished: str = ""  # --resume of a run that already reached its steps: this line, and no job
    snapshot: Snapshot | None = None  # the code to copy into the run directory (a new run, not --dry-run)
    profile: Profile | None = None  # as resolved, for provenance
    argv: tuple[str, ...] = ()  # the command line, for provenance
    lists: dict[tuple[str, str], list[str]] = dataclasses.field(default_factory=dict)  # (root, csv): file list
    code_note: str = ""  # a --resume: which code it runs, in one line


def prepare(argv: list[str] | None) -> Request:
    """Validate everything and build the plan; nothing is written to disk here but the sample data."""
    argv = list(sys.argv[1:] if argv is None else argv)
    given = tuple(argv)
    argv, command = split_command(argv)
    args = parse_args(argv)
    check_code_flags(args, command)
    profile = request_profile(args)
    run_root = run_root_of(profile)
    points = sweep_points(args.sweep) if args.sweep else [[]]
    if args.name is not None:
        check_name(args.name)
    if profile.executor == "local":
        check_local_processes(profile)
        check_local_interface(profile.environment.network_interface)
    if args.resume and args.sweep:
        raise UserError("--resume continues one run; drop --sweep")
    if args.resume and (why := not_a_run(Path(args.resume).resolve())):
        raise UserError(why)  # before the claim below: nothing is written into a folder that is no run
    if not args.dry_run:
        check_run_root(run_root)  # made with the run (create_and_submit): a refusal leaves nothing
        if args.resume and RunDir(Path(args.resume)).job.is_file():  # a run: claimed. Any other folder is
            claim_resume(Path(args.resume))  # refused below, and nothing is written into it
    if command or (args.resume and RunDir(Path(args.resume)).command.is_file()):
        request = prepare_script(args, command, profile, run_root, points)
        return dataclasses.replace(request, profile=profile, argv=given)
    if args.resume:
        folder = Path(args.resume).resolve()
        snapshot, code_dir = code_for(args, profile, folder, run_root)  # once: it reads job.json
        if code_dir is not None and snapshot is None:
            tasks.code_folder = code_dir  # your task module as the job imports it: from the run's snapshot
        base = load_config_file(folder)
        refuse_task_change(base, args.overrides)
    else:
        base = profile.trainer
    configs = [build_config([*args.overrides, *point], base=base) for point in points]
    tasks.check_devices(tasks.get(configs[0].task), profile.resources.gpus_per_task)
    finished = check_resume(folder, build_config(base=base), configs[0], profile) if args.resume else ""
    if not args.resume:
        folder = run_root / args.name if args.name else new_run_dir(run_root, section(configs[0].task))
        snapshot, code_dir = code_for(args, profile, folder, run_root)
    configs = with_run_dirs(configs, folder, points)
    lists: dict[tuple[str, str], list[str]] = {}
    if not args.dry_run:
        world_size = profile.resources.nodes * profile.resources.tasks_per_node  # a process per GPU (gpus_per_task)
        configs = resolve_all(configs, run_root / "sample_data", world_size)
        lists, configs = file_lists(configs, RunDir(folder).file_lists)
    if snapshot is not None and not args.resume:  # a --current-code resume's task is in the run's code/
        snapshot = with_task_files(snapshot, configs)
    gpus = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES")) if profile.executor == "local" else ()
    plan = make_plan(profile, configs, RunDir(folder).logs, has_local_gpus(), sys.executable, gpus, code_dir)
    wait = args.wait or profile.executor == "debug"
    if args.dry_run and plan.executor != "slurm":
        raise UserError(
            f"--dry-run prints an sbatch script; profile {profile.name} runs with the {plan.executor} executor"
        )
    request = Request(plan, folder, wait, args.dry_run, bool(args.resume), finished, snapshot, profile, given)
    note = code_note(args, folder, code_dir, snapshot) if args.resume else ""
    return dataclasses.replace(request, lists=lists if not args.dry_run and not args.resume else {}, code_note=note)


def check_code_flags(args: argparse.Namespace, command: list[str]) -> None:
    """--current-code and --restart-args where they mean something, else refused."""
    if args.current_code and not args.resume:
        raise UserError(
            "--current-code goes with --resume RUN_DIR (a new run always takes this folder's code); drop it"
        )
    if args.restart_args is not None and (not command or args.resume):
        raise UserError("--restart-args goes with a new -- COMMAND (a --resume keeps the run's own); drop it")


def request_profile(args: argparse.Namespace) -> Profile:
    """The profile with the command line's overrides and one-off settings, checked against Slurm when it submits."""
    profile = profile_for(args).with_overrides(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        timeout_min=args.time,
        partition=args.partition,
        array_parallelism=args.array_parallelism,
    )
    after = after_jobs(args.after)
    profile = oneoff.apply(profile, args.dependency, list(after), args.env, args.mail)
    if profile.executor == "slurm" and not args.dry_run:  # a --dry-run prints the script, asking Slurm nothing
        if shutil.which("sbatch") is None:
            raise UserError("sbatch not found: run on a Slurm login node, or use --profile local")
        check_dependency(args.dependency, after)
        check_partition(profile)
    if profile.remote.login:  # a --dry-run of a profile for another machine: the script as the cluster would run it
        profile = profile.with_overrides(run_root=profile.remote.remote_root)
    return profile


def with_run_dirs(configs: list[TrainConfig], folder: Path, points: list[list[str]]) -> list[TrainConfig]:
    """Each config's run directory: the run's folder, or for a sweep a folder per point inside it."""
    if len(configs) == 1:
        run_dirs = [folder]
    else:
        run_dirs = [folder / point_name(i, point) for i, point in enumerate(points)]
    return [dataclasses.replace(c, run_dir=str(d)) for c, d in zip(configs, run_dirs, strict=True)]


def resolve_all(configs: list[TrainConfig], sample_root: Path, world_size: int) -> list[TrainConfig]:
    """resolve_data for each config, the data checked once per distinct data: a sweep of 1,000 learning rates
    checks its data once, not 1,000 times."""
    resolved: dict[tuple[str, ...], Any] = {}
    out = []
    for config in configs:
        key = (config.task, repr(config.data), repr(config.task_settings), str(config.batch_size))
        if key not in resolved:
            resolved[key] = resolve_data(config, sample_root, world_size).data
        out.append(dataclasses.replace(config, data=resolved[key]))
    return out


def file_lists(configs: list[TrainConfig], folder: Path) -> tuple[dict[tuple[str, str], list[str]], list[TrainConfig]]:
    """The resolved file list of each data root (training and validation; a sweep's points share them), and
    the configs pointed at where they will be stored. Tasks without `file_list` read their data themselves."""
    lists: dict[tuple[str, str], list[str]] = {}
    out = []
    for config in configs:
        task = tasks.get(config.task)
        if not hasattr(task, "file_list"):
            out.append(config)
            continue
        for data in (config, validation_config(config)) if config.data.val_root else (config,):
            key = (data.data.root, data.data.csv)
            if key not in lists:
                lists[key] = task.file_list(data)
        out.append(dataclasses.replace(config, data=dataclasses.replace(config.data, file_lists=str(folder))))
    return lists, out


def code_for(
    args: argparse.Namespace, profile: Profile, folder: Path, run_root: Path
) -> tuple[Snapshot | None, Path | None]:
    """The snapshot to take (a new run) and the folder the tasks run in; (None, None) without one.

    --dry-run copies nothing (its snapshot lists only what is left out); --resume runs in the run's snapshot.
    """
    code = RunDir(folder).code
    if args.resume:  # job.json names it: a sweep point's snapshot is the sweep's
        job = RunDir(folder).job
        record = read_json(job, f"remove it to resume with {code}", valid_record) if job.is_file() else {}
        code = Path(record.get("code", code))
        if args.current_code:
            check_own_code(folder, code)
        if not args.current_code or args.dry_run or not code.is_dir():
            return None, code if code.is_dir() else None
    elif not profile.code.snapshot or profile.executor == "debug":  # debug: your breakpoints in your files
        return None, None
    # The run root is left out of the snapshot when it lies inside the folder; not when the folder lies inside
    # it (a submit over SSH runs in a copy kept under remote_root/.snapshots).
    excluded = [] if run_root in Path.cwd().resolve().parents else [run_root]
    excluded.append(Path(remote_runs.LOCAL_ROOT).resolve())  # a laptop's records of its cluster runs
    own = profile.code
    if args.dry_run:
        ignored = ignored_entries(Path.cwd(), excluded, included_files(Path.cwd(), excluded, own.snapshot_include))
        return Snapshot(Path.cwd(), [], 0, ignored=ignored), code
    return plan_snapshot(Path.cwd(), excluded, own.snapshot_exclude, own.snapshot_limit_mb, own.snapshot_include), code


def code_note(args: argparse.Namespace, folder: Path, code_dir: Path | None, snapshot: Snapshot | None) -> str:
    """Which code a --resume runs, in one line."""
    if code_dir is None:
        return "code: the code on disk as the tasks start (the run has no snapshot)"
    if snapshot is not None:
        git = snapshot.git
        what = (
            f"commit {str(git['commit'])[:12]}{' with uncommitted changes' if git.get('dirty') else ''}"
            if git
            else "not a git tree"
        )
        return f"code: this folder's as it is now ({what}); the run's earlier snapshot is kept in superseded/"
    from jobs.status import code_line

    return (
        f"code: the run's own snapshot in {code_dir} ({code_line(folder)}); --current-code runs this folder's instead"
    )


def check_own_code(folder: Path, code_dir: Path) -> None:
    """--current-code moves the run's code/ (and what the run wrote there) within the run folder, which is data:
    refused where job.json names a code folder that is not the run's (or its sweep's), or where one of the
    paths it moves through is a link (it would move, or write, whatever lies at the other end)."""
    fix = "or resume without --current-code (the run's own snapshot)"
    if code_dir.name != "code" or code_dir.parent.resolve() not in (folder, folder.parent):
        raise UserError(
            f"--current-code: {RunDir(folder).job} names {code_dir} as the run's code, not its code/ folder; "
            f'put "code": "{RunDir(folder).code}" back in it, {fix}'
        )
    for path in (code_dir, tool_dir(code_dir), code_dir.parent / "superseded", manifest(code_dir).parent):
        if path.is_symlink():
            raise UserError(
                f"--current-code moves files only within the run folder, and {path} is a link (to "
                f"{os.readlink(path)}); put the folder itself there, {fix}"
            )


def replace_code(snapshot: Snapshot, code_dir: Path) -> None:
    """--current-code, once check_own_code let it: the run's snapshot set aside, `snapshot` copied in its place,
    and what the run wrote into the old code/ moved into the new one; where the old snapshot's list of files is
    missing or damaged, which files the run wrote is not known: none is moved, and a line says where they are."""
    copied, problem = copied_names(code_dir)  # read before the new snapshot's list replaces it
    old = supersede(code_dir)
    copy_snapshot(snapshot, code_dir)
    if copied is None:
        print(f"warning: {problem}: what the run wrote into code/ stays in {old}", file=sys.stderr)
    else:
        carry_outputs(old, code_dir, copied)


def supersede(code_dir: Path) -> Path:
    """Set a run's snapshot (code/ and tool/) aside under superseded/DATE-TIME/, for a --current-code resume;
    returns where its code/ went."""
    aside = code_dir.parent / "superseded" / time.strftime("%Y%m%d-%H%M%S")
    aside.mkdir(parents=True)
    for folder in (code_dir, tool_dir(code_dir)):
        if folder.exists():
            folder.rename(aside / folder.name)
    return aside / code_dir.name


def carry_outputs(old: Path, new: Path, copied: set[str]) -> None:
    """What the run wrote into its old code/ (a script's relative checkpoints, logs, TensorBoard's runs/: every
    file the old snapshot was not made of, `copied`) moves into the new one, where the resumed command looks
    for it. Never a module or package, whatever the list says: the code that runs is the new snapshot's alone
    (a list that left one out would bring back a module the project deleted). A name the new code already
    uses stays in superseded/."""
    for root, dirs, files in os.walk(old):  # a link to a folder is moved as the link, never walked into
        here = Path(root)
        for entry in [*files, *(d for d in dirs if (here / d).is_symlink())]:
            name = (here / entry).relative_to(old).as_posix()
            if name in copied or importable(here / entry) or os.path.lexists(new / name):
                continue
            with contextlib.suppress(OSError):  # a file where the new code has a folder, or the reverse
                (new / name).parent.mkdir(parents=True, exist_ok=True)
                (here / entry).rename(new / name)


def valid_record(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("code", ""), str)


def task_file(task: str, snapshot: Snapshot) -> str | None:
    """Where a task given by file path lies in the snapshot (a file outside the folder joins it as _tasks/)."""
    if ".py:" not in task:
        return None  # built-in, or by module: imported from the snapshot, the tasks' working folder
    source = Path(task.rpartition(":")[0])
    name = str(source.relative_to(snapshot.workspace)) if snapshot.workspace in source.parents else None
    return name or f"_tasks/{source.name}"


def with_task_files(snapshot: Snapshot, configs: list[TrainConfig]) -> Snapshot:
    listed = {name for _, name in snapshot.files}
    extra = [(Path(c.task.rpartition(":")[0]), n) for c in configs if (n := task_file(c.task, snapshot)) is not None]
    return dataclasses.replace(snapshot, files=[*snapshot.files, *{(s, n) for s, n in extra if n not in listed}])


def in_snapshot(config: TrainConfig, snapshot: Snapshot, code_dir: Path) -> TrainConfig:
    """The config pointed at the snapshot's copy of its task file: made once the copy exists (the config
    checks that its task imports)."""
    name = task_file(config.task, snapshot)
    if name is None:
        return config
    task = f"{code_dir / name}:{config.task.rpartition(':')[2]}"
    return from_dict(TrainConfig, config_dict(config) | {"task": task})  # type: ignore[no-any-return]


def prepare_script(
    args: argparse.Namespace, command: list[str], profile: Any, run_root: Path, points: list[list[str]]
) -> Request:
    """The plan for your own command (`-- python train.py ...`), new or resumed."""
    if args.overrides:
        raise UserError(
            f"{args.overrides[0]} configures the built-in trainer; with a command, pass your script's own "
            "arguments after --"
        )
    restart_args = restart_words(args.restart_args)
    cwd, code_dir, snapshot = os.getcwd(), None, None
    if args.resume:
        if command or args.sweep:
            raise UserError("--resume reruns the run's own command; drop the command after -- and --sweep")
        folder = Path(args.resume).resolve()
        record = json.loads(RunDir(folder).command.read_text())
        command, cwd, commands, run_dirs = record["command"], record["cwd"], [record["command"]], [folder]
        restart_args = record.get("restart_args") or []
        refuse_if_running(folder)
        snapshot, code_dir = code_for(args, profile, folder, run_root)
    else:
        python = (profile.environment.python or sys.executable) if profile.executor == "slurm" else sys.executable
        commands = [with_interpreter(c, python) for c in script_commands(command, points)]
        folder = run_root / args.name if args.name else new_run_dir(run_root, script_name(command))
        run_dirs = [folder] if len(commands) == 1 else [folder / point_name(i, p) for i, p in enumerate(points)]
        snapshot, code_dir = code_for(args, profile, folder, run_root)
        check_script(command, Path(cwd), code_dir is not None, snapshot if not args.dry_run else None)
        cwd = str(code_dir) if code_dir is not None else cwd  # the snapshot mirrors the folder submitted from
    gpus = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES")) if profile.executor == "local" else ()
    plan = make_plan(profile, [], RunDir(folder).logs, has_local_gpus(), sys.executable, gpus, code_dir, run_dirs)
    plan = dataclasses.replace(plan, script=Script(commands, cwd, [str(d) for d in run_dirs], restart_args))
    if args.dry_run and plan.executor != "slurm":
        raise UserError(
            f"--dry-run prints an sbatch script; profile {profile.name} runs with the {plan.executor} executor"
        )
    wait = args.wait or profile.executor == "debug"
    note = code_note(args, folder, code_dir, snapshot) if args.resume else ""
    return Request(plan, folder, wait, args.dry_run, bool(args.resume), snapshot=snapshot, code_note=note)


def check_script(command: list[str], folder: Path, copied: bool, snapshot: Snapshot | None) -> None:
    """A `python FILE.py` command whose file is not there (or not in the snapshot the tasks run in) would fail
    on every task once the job starts, after its wait in the queue: refused now. `copied`: the tasks run in a
    copy of `folder`; `snapshot`: its listed files (None: not listed, as in a --dry-run)."""
    script = script_file(command)
    if script is None:
        return
    if not (folder / script).is_file():  # an absolute path stays as it is
        raise UserError(f"{script} not found in {folder}; check its name, or submit from the folder that holds it")
    relative = os.path.normpath(script)
    if os.path.isabs(script) or not copied:
        return
    if relative.split(os.sep, 1)[0] == os.pardir:  # no pattern brings a file from outside into the copy
        raise UserError(
            f"{script} lies outside {folder}, of which the tasks run a copy (the code snapshot); move it into this "
            f"folder, or submit from {(folder / script).resolve().parent}, the folder that holds it"
        )
    if snapshot is not None and relative not in {name for _, name in snapshot.files}:
        raise UserError(
            f"{script} is left out of the code snapshot the tasks run in; if git ignores it, add snapshot_include: "
            f"['{relative}'] to the profile, else drop the snapshot_exclude pattern that matches it, or move it "
            "into this folder"
        )


_claims: list[Any] = []  # the open lock files of this process's --resume (see claim_resume)


def claim_resume(run_dir: Path) -> None:
    """A --resume claims the run for the time from its checks to job.json naming its job, as a new run claims
    its folder: of two at the same moment, the second is refused and changes nothing (flock: the claim ends
    with the process, however it ends)."""
    handle = try_lock(RunDir(run_dir).resume_lock)  # held open until the job is recorded
    if handle is None:
        raise UserError(
            f"another --resume of {run_dir} is being submitted right now; check python -m jobs.status {run_dir}"
        )
    _claims.append(handle)


def release_claims() -> None:
    while _claims:
        _claims.pop().close()


def refuse_if_running(run_dir: Path) -> None:
    if not RunDir(run_dir).job.exists():
        return
    from jobs.tracking import TERMINAL, find, info, run_processes

    target = find(str(run_dir))
    try:
        state = info(target).state
    except UserError:  # Slurm knows the job no more: it is not running
        state = "COMPLETED"
    if state not in TERMINAL:
        raise UserError(
            f"{run_dir} is still running as job {target.job_id} ({state}); wait for it to end, or stop it "
            f"with python -m jobs.cancel {run_dir}"
        )
    if target.executor != "slurm" and (alive := run_processes(run_dir, target.log_dir)):
        # Its controller is gone (killed), but a rank of it still runs here: two writers in one run directory.
        raise UserError(
            f"{run_dir} still has a process of its last job running here (pid {alive[0]}); let it end or stop it "
            f"(kill {' '.join(map(str, alive))}), then resume"
        )


def refuse_task_change(base: dict[str, Any], overrides: list[str]) -> None:
    """A resume keeps its task: said first, before the old task's settings make another task's message."""
    old = str(base.get("task", ""))
    for item in overrides:
        key, _, value = item.partition("=")
        if key == "task" and tasks.canonical(value) != tasks.canonical(old):
            raise UserError(
                f"--resume cannot change task ({old} -> {value}): the checkpoints hold the old model; drop "
                "task=..., or start a new run without --resume"
            )


def locked_on_resume(key: str, task: str) -> bool:
    """Settings the checkpoints' shapes depend on (the task's own among them): a resume cannot change them."""
    return key in ("task", "data.image_size") or key.startswith(f"{task}.")


def check_resume(run_dir: Path, old: TrainConfig, new: TrainConfig, profile: Profile) -> str:
    """Refuse a resume that cannot work; a line saying so when the run has nothing left to do, else ""."""
    before, after = flat(config_dict(old)), flat(config_dict(new))
    for key in before:
        if locked_on_resume(key, section(old.task)) and before[key] != after.get(key):
            raise UserError(
                f"--resume cannot change {key} ({before[key]} -> {after[key]}): the checkpoints hold the old "
                f"model; drop {key}=..., or start a new run without --resume"
            )
    refuse_if_running(run_dir)
    final_step = (RunDir(run_dir).finished_summary() or {}).get("final_step", 0)
    if final_step >= new.steps:
        return f"{run_dir} already finished at step {final_step} (steps={new.steps}); to train on, pass steps=N above {final_step}"
    files = RunDir(run_dir)
    if files.job.is_file() and list_checkpoints(files.checkpoints):  # none: it starts afresh, in any shape
        record = read_json(files.job, f"move it aside and pass --profile to resume {run_dir}", valid_record)
        if why := layout_change(record, profile):
            raise UserError(why)
    return ""


def layout_change(record: dict[str, Any], profile: Profile) -> str | None:
    """Why `profile` cannot go on with the run whose job.json is `record`: the trainer's order of samples
    (DistributedSampler's) depends on the number of processes, so on another number the checkpoint would go on
    with other samples than the run's own. None: the same number, or job.json does not say (an old run)."""
    res = profile.resources
    ran, now = record.get("tasks"), res.nodes * res.tasks_per_node
    if not isinstance(ran, int) or ran == now:
        return None
    shape = record.get("profile") if isinstance(record.get("profile"), dict) else {}
    nodes, gpus = shape.get("nodes"), shape.get("gpus_per_node")
    if isinstance(nodes, int) and isinstance(gpus, int):
        before, fix = f"{ran}: {layout(nodes, gpus)}", f"--nodes {nodes} --gpus-per-node {gpus}"
    else:
        before, fix = str(ran), f"{ran} processes (--nodes x --gpus-per-node)"
    return (
        f"--resume cannot change the number of processes ({before} -> {now}: "
        f"{layout(res.nodes, res.gpus_per_node)}): the order of the samples depends on it, so the run "
        f"would not go on as it ran; resume with {fix} to go on exactly"
    )


def layout(nodes: int, gpus_per_node: int) -> str:
    return f"{nodes} node{'s' * (nodes != 1)} x {gpus_per_node} GPU{'s' * (gpus_per_node != 1)}"


def create_and_submit(request: Request) -> list:  # type: ignore[type-arg]
    """Write the run directories, then submit; on a refusal remove what was written."""
    from jobs import launch  # here, not at the top, to keep --dry-run quick
    from trainer.data import filelist  # (hashlib: OpenSSL)

    plan = request.plan
    if request.resuming:
        # config.yaml stays as it is: the job's rank 0 replaces it once it has loaded the checkpoint.
        if request.snapshot is not None and plan.code_dir is not None:  # --current-code
            replace_code(request.snapshot, plan.code_dir)
        jobs = launch.submit(plan)
        write_job_record(plan.run_dirs[0], jobs[0], plan, request.profile)
        return jobs
    make_run_root(request.folder.parent)
    claim(request.folder)  # from here on the folder is this process's: only it cleans it up
    try:
        if request.snapshot is not None and plan.code_dir is not None:
            copy_snapshot(request.snapshot, plan.code_dir)
            configs = [in_snapshot(c, request.snapshot, plan.code_dir) for c in plan.configs]
            plan = dataclasses.replace(plan, configs=configs)
        write_provenance(request)
        for (root, csv), lines in request.lists.items():
            filelist.write(RunDir(request.folder).file_lists, root, csv, lines)
        for index, run_dir in enumerate(plan.run_dirs):
            run_dir.mkdir(parents=True, exist_ok=run_dir == request.folder)
            if plan.script is None:
                write_config(run_dir, plan.configs[index])
            else:
                record = {"command": plan.script.commands[index], "cwd": plan.script.cwd, "submitted_from": os.getcwd()}
                record["restart_args"] = plan.script.restart_args
                write_text(RunDir(run_dir).command, json.dumps(record, indent=2) + "\n")
        jobs = launch.submit(plan)
    except BaseException:
        shutil.rmtree(request.folder, ignore_errors=True)  # leave nothing that looks like a run
        raise
    for job, run_dir in zip(jobs, plan.run_dirs, strict=True):
        write_job_record(run_dir, job, plan, request.profile)
    return jobs


def write_provenance(request: Request) -> None:
    """provenance/submit.json and git.diff of a new run (or sweep): where it came from."""
    snapshot, cwd = request.snapshot, Path.cwd()
    record = {
        "argv": ["python", "-m", "jobs.submit", *request.argv],
        "cwd": str(cwd),
        "time": time.time(),
        "user": os.environ.get("USER", ""),
        "host": socket.gethostname(),
        "python": sys.executable,
        "git": snapshot.git if snapshot is not None else git_state(cwd),
        "project_git": snapshot.project_git if snapshot is not None else {},
        "snapshot": {"files": len(snapshot.files), "bytes": snapshot.size} if snapshot is not None else None,
        "profile": request.profile.flat() if request.profile is not None else None,
    }
    diff = git_diff(cwd) if record["git"] else ""
    from jobs.remote import sync as remote_sync

    if (sent := remote_sync.origin(cwd)) is not None:  # a copy sent over SSH: the laptop's tree is the source
        record["submitted_from"], diff = sent
        record["git"], record["project_git"] = sent[0].get("git") or {}, sent[0].get("project_git") or {}
    write_submit(request.folder, record, diff)


def write_job_record(run_dir: Path, job: Any, plan: Plan, profile: Profile | None) -> None:
    """job.json names the run's current job and the profile it runs with, as resolved (a --resume without
    --profile takes it up again); the jobs of earlier --resume's are kept in its `history`."""
    from jobs import launch

    record = {"job_id": job.job_id, "executor": plan.executor, "log": str(launch.rank0_log(job)), "tasks": plan.tasks}
    if profile is not None:
        record["profile"] = profile.flat()
    if plan.code_dir is not None:
        record["code"] = str(plan.code_dir)
    path = RunDir(run_dir).job
    if path.exists():
        previous = json.loads(path.read_text())
        record["history"] = [*previous.pop("history", []), previous]
    write_text(path, json.dumps(record, indent=2) + "\n")


def over_ssh(argv: list[str]) -> int | None:
    """A submit whose profile names a login node (or a --resume of a run that lives on one) runs there
    (jobs.remote.submit); None: it runs here. A --dry-run prints the script here, without connecting."""
    args = parse_args(split_command(argv)[0])
    resume = remote_runs.load(args.resume) if args.resume and not args.dry_run else None
    if resume is not None:
        from jobs.remote import submit as remote_submit  # (SSH, tar, threads): imported only to go there

        folder = remote_runs.record_folder(args.resume)
        return remote_submit.submit(argv, load_profile(DEFAULT_PROFILE), args.wait, resume, resume_folder=folder)
    if args.dry_run or (args.resume and not args.profile):
        return None
    profile = profile_for(args)
    if not profile.remote.login:
        return None
    if args.name is not None:
        check_name(args.name)  # a folder name here as there: never `..`, never a path
    name = args.name or new_run_dir(Path("."), run_label(split_command(argv)[1], args.overrides, profile)).name
    from jobs.remote import submit as remote_submit

    return remote_submit.submit(argv, profile, args.wait, None, name=name)


def run_label(command: list[str], overrides: list[str], profile: Profile) -> str:
    """What a new run's folder is named after: the script, or the task (from its text: nothing is imported)."""
    if command:
        return script_name(command)
    task = next((o.partition("=")[2] for o in reversed(overrides) if o.startswith("task=")), "")
    task = task or str(profile.trainer.get("task") or TrainConfig.task)
    return task.rpartition(":")[2] or Path(task).stem


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if (code := over_ssh(argv)) is not None:
        return code
    request = prepare(argv)
    # Said once the job is queued (or the script printed): a refusal stays the one line it is.
    note = ignored_note(request.snapshot.workspace, request.snapshot.ignored) if request.snapshot else ""
    if request.code_note and not request.finished:
        print(request.code_note, flush=True)
    if request.finished:
        print(request.finished)
        return 0
    if request.dry_run:
        script = sbatch_script(request.plan)
        if note:
            print(note, file=sys.stderr)
        remote = request.profile.remote if request.profile is not None else None
        if remote is not None and remote.login and not remote.remote_root.startswith("/"):
            # Made absolute here, under this folder; the login node expands it in its own environment.
            remote_root = remote.remote_root
            script = script.replace(str(Path.cwd() / remote_root), remote_root)
            script += f"\n# remote_root {remote_root}: $VARS and ~ as the login node expands them\n"
        print(script, end="")
        if request.plan.script is not None:
            print(f"# every task runs: {shlex.join(request.plan.script.commands[0])}")
        return 0
    from jobs import launch  # here, not at the top: the dry run above needs none of it

    try:
        jobs = create_and_submit(request)
    finally:
        release_claims()  # job.json names the job now: a later --resume sees it running
    if note:
        print(note, file=sys.stderr)
    plan = request.plan
    kind = "array job" if len(jobs) > 1 else "job"
    job_id = jobs[0].job_id.split("_")[0] if len(jobs) > 1 else jobs[0].job_id
    print(f"submitted {kind} {job_id} ({len(jobs)} x {plan.tasks} task(s), {plan.executor})")
    print(f"run directory: {request.folder}")
    print(f"rank 0 log:    {launch.rank0_log(jobs[0])}")
    if plan.script is None:  # a script writes TensorBoard only if it does so itself: said at the end, if it did
        print(f"TensorBoard:   tensorboard --logdir {request.folder}")
    if not request.wait:
        return 0
    try:
        return wait_for(jobs, plan, request.folder)
    except KeyboardInterrupt:
        if plan.executor == "debug":  # the job ran in this process: it stopped with it
            print(f"interrupted; continue with python -m jobs.submit --resume {plan.run_dirs[0]}", file=sys.stderr)
        else:
            folder = request.folder
            print(
                f"interrupted: the job keeps running (python -m jobs.status {folder}); "
                f"stop it with python -m jobs.cancel {folder}",
                file=sys.stderr,
            )
        return 130


def wait_for(jobs: list, plan: Plan, folder: Path) -> int:  # type: ignore[type-arg]
    """--wait: follow rank 0's output, then report each job's outcome."""
    from jobs import launch

    for job in jobs:
        launch.follow(job)
        if plan.executor == "slurm":
            launch.settle(job)
    failures = [f for job, d in zip(jobs, plan.run_dirs, strict=True) if (f := launch.outcome(job, d, plan.executor))]
    if failures:
        first = failures[0]
        print(first if first.startswith(launch.CANCELLED) else f"error: {first}", file=sys.stderr)
        return 1
    wrote_events = plan.script is None or bool(RunDir(folder).event_files())  # what jobs.picture draws
    print(f"finished; TensorBoard: tensorboard --logdir {folder}" if wrote_events else "finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())

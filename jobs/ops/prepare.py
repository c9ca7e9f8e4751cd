"""Preparing a run for `python -m jobs.submit`: the profile with the flags, every check that can refuse it
(Slurm's partition and dependencies, the machine, a resume), the code snapshot and the plan; then the run
directory written and the plan submitted (jobs.ops.launch), or the submit sent over SSH (jobs.ops.remote_submit).
No torch import on this path: --dry-run stays quick."""

import argparse
import dataclasses
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

from jobs import oneoff
from jobs.ops.resume import (
    check_own_code,
    check_resume,
    claim_resume,
    code_note,
    keep_tool_current,
    refuse_if_running,
    refuse_task_change,
    replace_code,
    valid_record,
)
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
    git_diff,
    git_state,
    ignored_entries,
    included_files,
    plan_snapshot,
)
from jobs.snapshot import copy as copy_snapshot
from trainer.config import TrainConfig, build_config, config_dict, from_dict, section, tasks, write_config
from trainer.data.resolve import resolve_data, validation_config
from trainer.errors import UserError
from trainer.run.atomic import read_json, write_text
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


def check_local(profile: Profile) -> None:
    """The local profile starts one process per GPU (per gpus_per_task GPUs; per CPU without GPUs): bounded by
    the GPUs this machine shows (CUDA_VISIBLE_DEVICES's, when set), else by its CPUs. Its network_interface
    must be one this machine has (the tasks take their address on it)."""
    gpus = 0
    if has_local_gpus():
        shown = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"))
        gpus = len(shown) if shown else len(list(Path("/dev").glob("nvidia[0-9]*")))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    refuse_local_shape(profile.resources.gpus_per_node, profile.resources.tasks_per_node, gpus, cpus)
    name = profile.environment.network_interface
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


def prepare(given: tuple[str, ...], args: argparse.Namespace, command: list[str]) -> Request:
    """Validate everything and build the plan; nothing is written to disk here but the sample data. `given`:
    the command line as typed; `args` and `command`: it parsed (jobs.submit)."""
    check_code_flags(args, command)
    profile = request_profile(args)
    run_root = run_root_of(profile)
    points = sweep_points(args.sweep) if args.sweep else [[]]
    if args.name is not None:
        check_name(args.name)
    if profile.executor == "local":
        check_local(profile)
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
    configs = [
        dataclasses.replace(c, run_dir=str(d)) for c, d in zip(configs, run_dirs_of(folder, points), strict=True)
    ]
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
    note = code_note(folder, code_dir, snapshot) if args.resume else ""
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


def run_dirs_of(folder: Path, points: list[list[str]]) -> list[Path]:
    """Each point's run directory: the run's folder, or for a sweep a folder per point inside it."""
    return [folder] if len(points) == 1 else [folder / point_name(i, point) for i, point in enumerate(points)]


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
        run_dirs = run_dirs_of(folder, points)
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
    note = code_note(folder, code_dir, snapshot) if args.resume else ""
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


def create_and_submit(request: Request) -> list:  # type: ignore[type-arg]
    """Write the run directories, then submit; on a refusal remove what was written."""
    from jobs.ops import launch  # here, not at the top, to keep --dry-run quick
    from trainer.data import filelist  # (hashlib: OpenSSL)

    plan = request.plan
    if request.resuming:
        # config.yaml stays as it is: the job's rank 0 replaces it once it has loaded the checkpoint.
        if request.snapshot is not None and plan.code_dir is not None:  # --current-code
            replace_code(request.snapshot, plan.code_dir)
        elif plan.code_dir is not None:
            keep_tool_current(plan.code_dir)
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
    from jobs.ops import launch

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


def over_ssh(argv: list[str], args: argparse.Namespace, command: list[str]) -> int | None:
    """A submit whose profile names a login node (or a --resume of a run that lives on one) runs there
    (jobs.ops.remote_submit); None: it runs here. A --dry-run prints the script here, without connecting."""
    resume = remote_runs.load(args.resume) if args.resume and not args.dry_run else None
    if resume is not None:
        from jobs.ops import remote_submit  # (SSH, tar, threads): imported only to go there

        folder = remote_runs.record_folder(args.resume)
        return remote_submit.submit(argv, load_profile(DEFAULT_PROFILE), args.wait, resume, resume_folder=folder)
    if args.dry_run or (args.resume and not args.profile):
        return None
    profile = profile_for(args)
    if not profile.remote.login:
        return None
    if args.name is not None:
        check_name(args.name)  # a folder name here as there: never `..`, never a path
    name = args.name or new_run_dir(Path("."), run_label(command, args.overrides, profile)).name
    from jobs.ops import remote_submit

    return remote_submit.submit(argv, profile, args.wait, None, name=name)


def run_label(command: list[str], overrides: list[str], profile: Profile) -> str:
    """What a new run's folder is named after: the script, or the task (from its text: nothing is imported)."""
    if command:
        return script_name(command)
    task = next((o.partition("=")[2] for o in reversed(overrides) if o.startswith("task=")), "")
    task = task or str(profile.trainer.get("task") or TrainConfig.task)
    return task.rpartition(":")[2] or Path(task).stem


def dry_run_script(request: Request) -> str:
    """--dry-run's sbatch script; a remote_root that is not absolute as the login node will expand it."""
    script = sbatch_script(request.plan)
    remote = request.profile.remote if request.profile is not None else None
    if remote is not None and remote.login and not remote.remote_root.startswith("/"):
        # Made absolute here, under this folder; the login node expands it in its own environment.
        remote_root = remote.remote_root
        script = script.replace(str(Path.cwd() / remote_root), remote_root)
        script += f"\n# remote_root {remote_root}: $VARS and ~ as the login node expands them\n"
    return script

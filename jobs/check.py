"""`python -m jobs.check --profile mysite [--nodes N] [--gpus-per-node G]`: a site's first-day failures found in
one minute, before a real job meets them.

It submits a tiny job with the profile's own settings (partition, account, setup lines, srun options, container,
interpreter, code snapshot) whose tasks each run trainer/entry/preflight.py, waits for it, and prints one table: per
node, that the run root can be written and the code snapshot is seen there, that the interpreter imports torch,
submitit and this project at the versions here, the GPUs each task sees against the profile's, their model, the
driver and the CUDA and NCCL versions, where rank 0 listens, and one all-reduce across every task with the job's
backend (NCCL on GPUs), with its bandwidth. A failed row says how to fix it. Exit 0 when every row passes, 1 when
one fails, 2 for bad input.
"""

import argparse
import contextlib
import io
import json
import re
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit

from jobs import launch
from jobs.plan import make_plan
from jobs.profiles import Profile, load_profile, run_root_of
from jobs.snapshot import copy, plan_snapshot
from jobs.submit import check_partition, has_local_gpus
from jobs.tracking import TERMINAL, Target, info, start_failure
from trainer.entry import preflight  # the tasks' side (torch only inside its functions)
from trainer.errors import UserError, one_line_errors
from trainer.run.prepare import make_run_root
from trainer.run.rundir import RunDir

PACKAGES = ("torch", "submitit", "slurm-ddp")


@dataclass(frozen=True)
class Row:
    node: str
    check: str
    ok: bool
    detail: str


def missing_module(log: str) -> str:
    found = re.findall(r"No module named '([\w.]+)'", log)
    return found[-1] if found else ""


def rows(facts: list[dict[str, Any]], tasks: int, gpus_each: int, expected: dict[str, str], logs: str) -> list[Row]:
    """The table's rows from what each task reported (pure)."""
    out: list[Row] = []
    seen = {f["rank"] for f in facts}
    if len(seen) < tasks:
        missing = sorted(set(range(tasks)) - seen)
        module = missing_module(logs)
        why = (
            f"the interpreter cannot import {module}: install the project's dependencies there, or set python: "
            "in the profile to one that has them"
            if module
            else start_failure(logs) or "see the task logs in the check's logs/ folder"
        )
        out.append(Row("-", "tasks reported", False, f"{len(seen)} of {tasks} (ranks {missing} did not); {why}"))
    for node in sorted({f["node"] for f in facts}):
        mine = [f for f in facts if f["node"] == node]
        errors = sorted({f["run_root_error"] for f in mine if f["run_root_error"]})
        out.append(
            Row(node, "run root writable", not errors, errors[0] + "; make run_root a folder every node can write"
                if errors else "yes")
        )  # fmt: skip
        unseen = [f["rank"] for f in mine if not f["code_seen"]]
        out.append(Row(node, "code snapshot seen", not unseen, f"not by ranks {unseen}: put run_root on a "
                       "filesystem every node mounts" if unseen else "yes"))  # fmt: skip
        versions = mine[0]["versions"]
        wrong = [f"{k} {versions.get(k) or 'missing'} (here {v})" for k, v in expected.items() if versions.get(k) != v]
        out.append(Row(node, f"{mine[0]['python']} imports", not wrong, "; ".join(wrong) + ": install the same "
                       "versions there" if wrong else ", ".join(f"{k} {v}" for k, v in versions.items())))  # fmt: skip
        counts = sorted({f.get("gpus", 0) for f in mine})
        visible = sorted({f["cuda_visible_devices"] or "-" for f in mine})
        short = gpus_each and min(counts) < gpus_each
        gpu_text = f"each task sees {'/'.join(map(str, counts))} (CUDA_VISIBLE_DEVICES {', '.join(visible)})"
        fix = f"; the profile wants {gpus_each} per task: check gpus_per_node and the partition's GPUs"
        out.append(Row(node, "GPUs", not short, gpu_text + (fix if short else "")))
        out.append(Row(node, "GPU stack", True, stack_text([f.get("gpu_stack") or {} for f in mine])))
        reduce = [f["all_reduce"] for f in mine]
        bad = [r.get("error") or "wrong sum" for r in reduce if r.get("error") or not r.get("correct")]
        if bad:
            detail = f"{bad[0]}; check that the nodes reach rank 0 at {mine[0]['master']} (firewall, interface)"
        else:
            slowest = min(r["busbw_gb_s"] for r in reduce)
            detail = f"{reduce[0]['backend']}, {slowest:.2f} GB/s bus bandwidth (32 MB, slowest rank)"
            if len(facts) == 1:
                detail = f"{reduce[0]['backend']}, one task: the group formed and summed (no peer to measure)"
        out.append(Row(node, "all-reduce", not bad, detail))
        out.append(Row(node, "rank 0 listens", True, f"{mine[0]['master']} ({mine[0]['master_ip']})"))
    return out


def stack_text(stacks: list[dict[str, Any]]) -> str:
    """A node's GPU models, driver, CUDA and NCCL, each as its tasks report them ("-" for none; values that
    differ between the node's tasks are all shown, joined by /)."""

    def field(name: str) -> str:
        values = sorted({", ".join(s[name]) if isinstance(s.get(name), list) else s.get(name) or "" for s in stacks})
        return "/".join(v or "-" for v in values) or "-"

    errors = sorted({s["error"] for s in stacks if s.get("error")})
    if errors or not all(stacks):
        return f"not reported ({errors[0]})" if errors else "not reported"
    models = field("gpu_models")
    versions = f"driver {field('driver')}; CUDA {field('cuda')} (torch's); NCCL {field('nccl')}"
    return f"{'no GPU' if models == '-' else models}; {versions}"


def reported(folder: Path, logs: str) -> list[dict[str, Any]]:
    """Each task's facts: its file, or the same line in its log when it could not write the file (a run root
    that node cannot write)."""
    facts = {}
    for line in re.findall(r"^preflight: (\{.*\})$", logs, re.M):
        record = json.loads(line)
        facts[record["rank"]] = record
    for path in (folder / "preflight").glob("rank_*.json"):
        record = json.loads(path.read_text())
        facts[record["rank"]] = record
    return [facts[rank] for rank in sorted(facts)]


def table(out: list[Row]) -> str:
    cells = [
        ("node", "check", "result", "detail"),
        *[(r.node, r.check, "ok" if r.ok else "FAIL", r.detail) for r in out],
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(3)]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(3)) + "  " + c[3] for c in cells)


def check_profile(argv: list[str] | None) -> Profile:
    """The profile named on the command line, with the check's own limits: one short attempt, no restarts."""
    parser = argparse.ArgumentParser(prog="python -m jobs.check", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True, help="profile name in cluster_profiles/ or a YAML path")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--gpus-per-node", type=int)
    parser.add_argument("--partition")
    args = parser.parse_args(argv)
    profile = load_profile(args.profile).with_overrides(
        nodes=args.nodes, gpus_per_node=args.gpus_per_node, partition=args.partition
    )
    if profile.executor == "debug" or profile.remote.login:
        raise UserError(f"jobs.check submits a job with profile {profile.name}: run it where that profile submits")
    # The profile's settings, but no restarts: a failing check must end, not try again.
    profile = profile.with_overrides(restarts_in_job=0, requeue_on_failure=0, spare_nodes=0, timeout_min=10)
    if profile.executor == "slurm":
        check_partition(profile)  # more nodes or time than the partition has: the check's job would pend for ever
    return profile


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    profile = check_profile(argv)
    run_root = run_root_of(profile)
    make_run_root(run_root)
    folder = run_root / f"check-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    folder.mkdir()
    code_dir = None
    if (code := profile.code).snapshot:
        code_dir = RunDir(folder).code
        copy(plan_snapshot(Path.cwd(), [run_root], code.snapshot_exclude, code.snapshot_limit_mb), code_dir)
    plan = make_plan(profile, [], RunDir(folder).logs, has_local_gpus(), sys.executable, (), code_dir, [folder])
    expected = {name: preflight.version(name) for name in PACKAGES}
    captured = io.StringIO()  # submitit prints sbatch's refusal itself: it becomes the table's row instead
    try:
        with contextlib.redirect_stderr(captured):
            job = launch.make_executor(plan).submit(preflight.run, str(folder), str(code_dir or ""), expected)
    except (submitit.core.utils.FailedJobError, subprocess.CalledProcessError) as exc:
        shutil.rmtree(folder, ignore_errors=True)  # nothing ran
        reason = launch.refusal(str(exc) or captured.getvalue())
        print(table([Row("-", "submit", False, f"Slurm refused the job: {reason}; {launch.refusal_fix(reason)}")]))
        return 1
    target = Target(job.job_id, plan.executor, folder, RunDir(folder).logs)
    deadline = time.monotonic() + 60 * profile.resources.timeout_min + 120
    try:  # from the line that names the job on: a Ctrl-C right after it still cancels the job
        print(f"check job {job.job_id} ({plan.tasks} task(s), {plan.executor}) in {folder}", flush=True)
        while (state := info(target).state) not in TERMINAL and time.monotonic() < deadline:
            time.sleep(1.0)
    except KeyboardInterrupt:  # the check's job is not the user's: it goes with the check
        job.cancel(check=False)
        print(f"interrupted: cancelled check job {job.job_id}; its logs: {RunDir(folder).logs}", file=sys.stderr)
        return 130
    if state not in TERMINAL:
        job.cancel(check=False)
        why = "still pending (the queue is busy)" if state == "PENDING" else f"still {state}"
        row = Row(
            "-",
            "tasks reported",
            False,
            f"job {job.job_id} was {why} after {profile.resources.timeout_min + 2} min; cancelled it",
        )
        print(table([row]))
        return 1
    logs = "".join(p.read_text(errors="replace") for p in RunDir(folder).logs.glob("*_log.*"))
    facts = reported(folder, logs)
    asked = profile.resources
    gpus_each = asked.gpus_per_task if asked.request_gpus else 0  # CPU partitions: request_gpus: false
    out = rows(facts, plan.tasks, gpus_each, expected, logs)
    print(table(out))
    if all(r.ok for r in out):
        shutil.rmtree(folder, ignore_errors=True)
        return 0
    print(f"the check's tasks' logs: {RunDir(folder).logs}")
    return 1


if __name__ == "__main__":
    sys.exit(main())

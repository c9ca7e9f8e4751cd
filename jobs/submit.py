"""`python -m jobs.submit`: queue a DDP training job from a cluster profile.

Thin on purpose: parse, build the plan, act, report. No torch import on this path.
"""

import argparse
import dataclasses
import os
import shutil
import sys
from pathlib import Path

from jobs import launch
from jobs.plan import Plan, make_plan
from jobs.profiles import load_profile
from trainer.config import build_config
from trainer.errors import UserError
from trainer.runs import load_config_file, new_run_dir, resolve_data, write_config


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not argparse's usage block
        print(f"error: {message}; see python -m jobs.submit --help", file=sys.stderr)
        sys.exit(2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="python -m jobs.submit", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="local", help="profile name in cluster_profiles/ or a YAML path")
    parser.add_argument("--nodes", type=int, help="number of nodes (overrides the profile)")
    parser.add_argument("--gpus-per-node", type=int, help="tasks per node, one per GPU (overrides the profile)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its newest checkpoint")
    parser.add_argument("--wait", action="store_true", help="follow rank 0's output and exit with the job's outcome")
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="trainer settings, e.g. steps=100 data.root=DIR"
    )
    return parser.parse_args(argv)


def has_local_gpus() -> bool:
    # Checked without torch: importing it would make every submit seconds slower.
    return Path("/dev/nvidiactl").exists() and os.environ.get("CUDA_VISIBLE_DEVICES") != ""


def prepare(argv: list[str] | None) -> tuple[Plan, bool, bool]:
    """Validate everything, then create the run directory; nothing is written before all checks pass."""
    args = parse_args(argv)
    profile = load_profile(args.profile).with_overrides(nodes=args.nodes, gpus_per_node=args.gpus_per_node)
    run_root = Path(profile.run_root).expanduser()
    if args.resume:
        run_dir = Path(args.resume).resolve()
        config = build_config(args.overrides, base=load_config_file(run_dir))
    else:
        config = build_config(args.overrides, base=profile.trainer)
        run_dir = new_run_dir(run_root, config.task)
    config = dataclasses.replace(config, run_dir=str(run_dir))
    config = resolve_data(config, run_root.resolve() / "sample_data")
    plan = make_plan(profile, config, has_gpus=has_local_gpus())
    return plan, args.wait or profile.executor == "debug", bool(args.resume)


def main(argv: list[str] | None = None) -> int:
    try:
        plan, wait, resuming = prepare(argv)
        if resuming:
            write_config(plan.run_dir, build_config(base=plan.config))
            job = launch.submit(plan)
        else:
            plan.run_dir.mkdir(parents=True)
            try:
                write_config(plan.run_dir, build_config(base=plan.config))
                job = launch.submit(plan)
            except BaseException:
                shutil.rmtree(plan.run_dir, ignore_errors=True)  # leave nothing that looks like a run
                raise
        print(f"submitted job {job.job_id} ({plan.tasks} task(s), {plan.executor})")
        print(f"run directory: {plan.run_dir}")
        print(f"rank 0 log:    {launch.rank0_log(job)}")
        print(f"TensorBoard:   {plan.tensorboard_command()}")
        if not wait:
            return 0
        launch.follow(job)
        failure = launch.outcome(job, plan)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if failure:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    print(f"finished; TensorBoard: {plan.tensorboard_command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

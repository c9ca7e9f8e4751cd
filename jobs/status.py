"""`python -m jobs.status RUN_DIR|SWEEP_DIR|JOB_ID`: state, restarts, nodes, last step and checkpoint."""

import argparse
import sys

from jobs.tracking import Target, failed_tasks, failure_line, find_all, info, progress
from trainer.errors import one_line_errors


def report(target: Target) -> str:
    job = info(target)
    lines = [f"job {target.job_id}: {job.state}", f"restarts: {job.restarts}", f"nodes: {job.nodes or '-'}"]
    if target.run_dir is not None:
        step, ckpt = progress(target.run_dir)
        lines += [
            f"run directory: {target.run_dir}",
            f"last step: {step if step is not None else '-'}",
            f"last checkpoint: {ckpt or '-'}",
        ]
    if error := failure_line(target):
        lines.append(f"error: {error}")
    if job.state not in ("RUNNING", "COMPLETED", "PENDING"):
        lines += [f"failed task: {line}" for line in failed_tasks(target)]
    return "\n".join(lines)


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.status", description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a run or sweep directory printed by jobs.submit, or a Slurm job id")
    args = parser.parse_args(argv)
    reports = [(name, report(target)) for name, target in find_all(args.target)]
    print("\n\n".join(f"== {name} ==\n{text}" if name else text for name, text in reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())

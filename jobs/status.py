"""`python -m jobs.status RUN_DIR|JOB_ID`: state, restarts, nodes, last step and checkpoint."""

import argparse
import sys

from jobs.tracking import failed_tasks, failure_line, find, info, progress
from trainer.errors import one_line_errors


def report(target_text: str) -> str:
    target = find(target_text)
    job = info(target)
    lines = [f"job {target.job_id}: {job.state}", f"restarts: {job.restarts}", f"nodes: {job.nodes or '-'}"]
    if target.run_dir is not None:
        step, ckpt = progress(target.run_dir)
        lines += [
            f"run directory: {target.run_dir}",
            f"last step: {step if step is not None else '-'}",
            f"last checkpoint: {ckpt or '-'}",
        ]
    if error := failure_line(target.run_dir, target.log0):
        lines.append(f"error: {error}")
    if job.state not in ("RUNNING", "COMPLETED", "PENDING"):
        lines += [f"failed task: {line}" for line in failed_tasks(target.log0)]
    return "\n".join(lines)


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.status", description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a run directory printed by jobs.submit, or a Slurm job id")
    args = parser.parse_args(argv)
    print(report(args.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())

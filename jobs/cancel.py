"""`python -m jobs.cancel RUN_DIR|SWEEP_DIR|JOB_ID`: stop a job (every point of a sweep)."""

import sys

from jobs.ops import follow
from jobs.ops.act import cancel
from jobs.tracking import Target, by_name, find_all, run_parser
from trainer.errors import UserError, one_line_errors


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = run_parser("jobs.cancel", __doc__)
    args = parser.parse_args(argv)
    run = by_name(args.target, args.profile)
    if (code := follow.elsewhere(run, "jobs.cancel")) is not None:  # a run on a cluster: cancelled there
        return code
    targets = find_all(run)
    if len(targets) == 1:
        print(cancel(targets[0][1]))
        return 0
    arrays = {t.job_id.split("_")[0] for _, t in targets if t.executor == "slurm"}
    if len(arrays) == 1 and all(t.executor == "slurm" and "_" in t.job_id for _, t in targets):
        # A sweep is one array job: one scancel stops every point, pending or running.
        array = arrays.pop()
        print(cancel(Target(array, "slurm", None, None), whole_array=True) + f" (the sweep's {len(targets)} points)")
        return 0
    refused = []
    for name, target in targets:  # every point: one that already ended does not keep the others running
        try:
            print(f"{name}: {cancel(target)}", flush=True)
        except UserError as exc:
            refused.append(f"{name}: {exc}")
    if refused:
        raise UserError("; ".join(refused))
    return 0


if __name__ == "__main__":
    sys.exit(main())

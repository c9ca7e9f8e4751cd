"""`python -m jobs.cancel RUN_DIR|JOB_ID`: stop a job."""

import argparse
import os
import signal
import subprocess
import sys

from jobs.tracking import find
from trainer.errors import UserError, one_line_errors


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs.cancel", description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a run directory printed by jobs.submit, or a Slurm job id")
    args = parser.parse_args(argv)
    target = find(args.target)
    if target.executor == "slurm":
        result = subprocess.run(["scancel", target.job_id], capture_output=True, text=True)
        if result.returncode:
            raise UserError(f"scancel refused: {result.stderr.strip().splitlines()[-1]}")
    else:
        try:
            os.kill(int(target.job_id), signal.SIGTERM)  # the local controller forwards it to the tasks
        except ProcessLookupError:
            raise UserError(f"job {target.job_id} is not running") from None
    print(f"cancelled job {target.job_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

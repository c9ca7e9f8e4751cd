"""`python -m jobs.fetch RUN`: bring a cluster run's records (summary.json, attempts.json, error.txt, ...) and
its TensorBoard events into the run's folder on this machine, so `tensorboard --logdir runs/RUN` works here."""

import sys

from jobs.ops import follow
from jobs.remote import runs
from jobs.tracking import by_name, run_parser
from trainer.errors import UserError, one_line_errors


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = run_parser("jobs.fetch", __doc__, "a run submitted over SSH: its folder under ./runs, or its name")
    args = parser.parse_args(argv)
    run = by_name(args.target, args.profile)
    remote = runs.load(run)
    if remote is None:
        raise UserError(f"{run} is not a run submitted over SSH (no runs/NAME/remote.json); a local run is here")
    folder = runs.record_folder(run)  # beside the record: never a folder the login node's words name
    assert folder is not None
    names = follow.fetch(remote, folder)
    events = sum(1 for n in names if n.startswith("tensorboard/"))
    print(
        f"fetched {len(names)} file(s) from {remote.login.login}:{remote.run_dir} into {folder} ({events} event file(s))"
    )
    print(f"TensorBoard:   tensorboard --logdir {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m trainer key=value ...`, also under `torchrun --nproc-per-node N -m trainer ...`."""

import dataclasses
import os
import sys
from pathlib import Path

from trainer.config import build_config, config_dict
from trainer.env.launcher import resolve
from trainer.errors import one_line_errors
from trainer.run.prepare import make_dirs, resolve_data, write_config


@one_line_errors
def main(argv: list[str]) -> int:
    env = resolve(os.environ)
    config = build_config(argv)
    # A fixed default folder: running the same command again resumes the run.
    run_dir = Path(config.run_dir or f"runs/{config.task}").resolve()
    config = dataclasses.replace(config, run_dir=str(run_dir))
    config = resolve_data(config, Path("runs/sample_data"), env.world_size)
    if env.is_main:
        make_dirs(run_dir)
        write_config(run_dir, config)
    from trainer.entry import run

    run(config_dict(config))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

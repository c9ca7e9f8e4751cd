"""`python -m trainer key=value ...`, also under `torchrun --nproc-per-node N -m trainer ...` (trainer.entry.command)."""

import sys

from trainer.entry.command import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""`python -m jobs.picture RUN_DIR [-o FILE.png]`: one PNG of a run, drawn from its own TensorBoard event files.

The curves of `train/loss`, `val/*` (with a validation set) and `train/lr` (a script's: its losses and learning
rate, from event files anywhere under the run), each a small line chart, the
newest `images/input_target_output` grid, and the goodput ledger (where the wall time went) as one stacked bar. Pillow draws it (no plotting library); torch is not imported.
"""

import sys
from pathlib import Path

from jobs.ops.drawing import draw, load
from jobs.tracking import by_name, run_parser
from trainer.errors import UserError, one_line_errors


@one_line_errors
def main(argv: list[str] | None = None) -> int:
    parser = run_parser("jobs.picture", __doc__, "a run directory printed by jobs.submit, or a run's name")
    parser.add_argument("-o", "--output", type=Path, help="the PNG to write (default: RUN/picture.png)")
    args = parser.parse_args(argv)
    run_dir = Path(by_name(args.target, args.profile))
    output = args.output or run_dir / "picture.png"
    image = draw(load(run_dir))
    try:
        image.save(output, format="PNG", optimize=True)
    except OSError as exc:
        raise UserError(f"cannot write {output} ({exc.strerror or exc}); pass -o with a writable path") from None
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m trainer.evaluate CHECKPOINT|RUN_DIR [key=value ...]`: a checkpoint's validation metrics.

A run directory means its newest checkpoint (the final weights of a finished run: the numbers of
summary.json's val_metrics). The checkpoint carries its task and settings; key=value changes them, e.g.
data.val_root=DIR to evaluate on other data. One process, or under torchrun like the trainer.
"""

import json
import os
import sys
from pathlib import Path

from trainer.config import build_config
from trainer.errors import UserError, one_line_errors
from trainer.run.rundir import RunDir
from trainer.supervise.launcher import resolve


def checkpoint_of(target: Path) -> Path:
    from trainer.run.checkpoint_names import has_checksum, list_checkpoints

    if target.is_file():
        return target
    if not target.is_dir():
        raise UserError(f"{target} does not exist; pass a checkpoint (.pt) or a run directory")
    found = [path for _, path in list_checkpoints(RunDir(target).checkpoints) if has_checksum(path)]
    if not found:
        raise UserError(f"{target} holds no checkpoint with a checksum; pass a checkpoint file")
    return found[0]


@one_line_errors
def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        raise UserError("usage: python -m trainer.evaluate CHECKPOINT|RUN_DIR [key=value ...]")
    path = checkpoint_of(Path(argv[0]))
    env = resolve(os.environ)
    import torch

    from trainer import checkpoint, validation
    from trainer.config import tasks
    from trainer.distributed import make_model, pick_devices, process_group
    from trainer.train import AMP_DTYPES

    device = pick_devices(env)[0]
    state = checkpoint.load_weights(path, torch.device("cpu"))
    meta = state["meta"]
    config = build_config(argv[1:], base=meta["config"])
    task = tasks.get(config.task)
    with process_group(env, config.dist.timeout_s, device):
        data = validation.datasets(task, config)
        if data.val is None:
            raise UserError("no validation set: pass data.val_root=DIR or data.val_fraction=F")
        if meta.get("classes") and list(getattr(data.full, "classes", [])) != list(meta["classes"]):
            raise UserError(
                f"the data's classes differ from the checkpoint's {meta['classes']}; point data.root at its data"
            )
        model = make_model(task, config, data.full, [device])
        model.load_state_dict(state["model"])
        loader = validation.shard_loader(data.val, config, env, device, task)
        amp = AMP_DTYPES.get(config.amp)
        autocast = torch.autocast(device.type, dtype=amp, enabled=amp is not None)
        metrics = validation.evaluate(model, loader, task, env, device, autocast)
    if env.is_main:
        print(json.dumps({"checkpoint": str(path), "step": meta.get("step"), "val_metrics": metrics}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

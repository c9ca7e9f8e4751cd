"""The trainer's order of samples (trainer.sampler's, with each sample's augmentation seed), and the fingerprint a
checkpoint keeps of it: a resume goes on with the same samples at every step, on any number of processes that can
share the global batch, or ends in one line naming what changed."""

import hashlib
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset, Subset

from trainer.errors import UserError
from trainer.rng import sample_seed
from trainer.sampler import StepSampler


class TrainOrder(StepSampler):
    """Micro-batches of (index, seed) pairs: each sample's augmentations keyed by (seed, epoch, index), so they do
    not depend on which rank or loader worker makes it (trainer.rng.SeededSamples reads the pairs)."""

    streams = True  # each micro-batch's forward draws from generators seeded by its place in the step

    def batch(self, indices: list[int], epoch: int) -> list[Any]:
        return [(i, sample_seed(self.seed, epoch, i)) for i in indices]

    def fingerprint(self, files: str | None, world_size: int) -> dict[str, Any]:
        """What a checkpoint keeps: the order's state (its place is the state's progress), the data's files."""
        order = {k: v for k, v in self.state_dict().items() if k not in ("epoch", "step")}
        return order | {"streams": self.streams, "files": files, "world_size": world_size}


def files_digest(dataset: Dataset[Any]) -> str | None:
    """A digest of the training set's file list (torchvision's `samples`, pix2pix's `sources` and `targets`, a
    Subset's indices); None for a dataset that names no files (then only its length is compared)."""
    parts: list[str] = []
    while isinstance(dataset, Subset):
        parts.append(",".join(map(str, dataset.indices)))
        dataset = dataset.dataset
    if hasattr(dataset, "samples"):
        parts.append("\n".join(str(path) for path, *_ in dataset.samples))
    elif hasattr(dataset, "sources") and hasattr(dataset, "targets"):
        parts += [b"\n".join(dataset.sources).decode(), b"\n".join(dataset.targets).decode()]
    else:
        return None
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=16).hexdigest()


def saved_fingerprint(state: dict[str, Any], order: TrainOrder) -> dict[str, Any]:
    """The checkpoint's fingerprint; one saved before there was any reads as DistributedSampler's run on as many
    processes as it holds random streams, with this run's batch per process, and no per-micro-batch seeding."""
    if "data" in state:
        return dict(state["data"])
    saved_by = len(state["rng"])
    samples = state["progress"].get("samples", order.samples)
    return {
        "samples": samples, "global_batch": order.micro_batch * saved_by, "seed": order.seed, "shuffle": True,
        "padding": saved_by, "streams": False, "files": None, "world_size": saved_by,
    }  # fmt: skip


def go_on_with(order: TrainOrder, saved: dict[str, Any], files: str | None, source: Path, allow: bool) -> str:
    """Take the saved run's order (global batch, padding, seed) onto this world size; a warning, when the data
    changed and `allow` (data.allow_change) says go on; else a change ends the run in one line."""
    changed = []
    if int(saved["samples"]) != order.samples:
        changed.append(f"it trained on {saved['samples']} samples, the training data now holds {order.samples}")
    elif saved.get("files") and files and saved["files"] != files:
        changed.append("the training data's file list changed (same length, other files or order)")
    if int(saved["seed"]) != order.seed:
        changed.append(f"it was seeded {saved['seed']}, this run {order.seed}")
    if changed and not allow:
        raise UserError(
            f"{source}: {'; '.join(changed)}, so the run would not go on with the samples it ran on; resume with "
            "its data and seed to go on exactly, or pass data.allow_change=true with the --resume to go on anyway"
        )
    try:
        order.load_state_dict({**saved, "samples": order.samples, "seed": order.seed, "epoch": 0, "step": 0})
    except ValueError as exc:
        raise UserError(f"{source}: {exc}") from None
    order.streams = bool(saved.get("streams", False))
    return f"{'; '.join(changed)}: going on, as data.allow_change=true says" if changed else ""

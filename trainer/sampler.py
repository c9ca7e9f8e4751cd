"""The order of a run's samples by global step, the same on any number of processes. Torch only: copy it beside
trainer.requeue into a script of your own.

Each epoch has one order of all samples, DistributedSampler's: `randperm` seeded with seed + epoch, padded to a
multiple of the run's first world size. Global step k takes the k-th `global_batch` samples of it, dealt into
`world_size x accumulation` micro-batches (one sample every so many), and rank r takes its run of
`accumulation` of them. On the run's own world size that is exactly DistributedSampler's batches; on fewer
processes each micro-batch is still one of the first ranks' batches, summed by gradient accumulation. So a run
resumed on another number of processes trains on the same samples at every step.

    sampler = StepSampler(len(dataset), global_batch=256, world_size=world, rank=rank, seed=0)
    loader = DataLoader(dataset, batch_sampler=sampler)
    sampler.load_state_dict(checkpoint["sampler"])  # on resume: where the run stood, its batch and its order
    for epoch in range(sampler.epoch, epochs):
        sampler.set_epoch(epoch)
        for i, batch in enumerate(loader):  # `sampler.accumulation` micro-batches make one step
            ...
        checkpoint["sampler"] = sampler.state_dict()  # saved with the weights; step advances with `advance()`
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import torch


def world_sizes(global_batch: int) -> list[int]:
    """The numbers of processes that can share `global_batch`: its divisors."""
    return [n for n in range(1, global_batch + 1) if global_batch % n == 0]


class StepSampler(torch.utils.data.Sampler[list[Any]]):
    """A batch sampler (DataLoader's `batch_sampler`): this rank's micro-batches of each global step, in order.

    `padding`: the world size whose padding the order keeps (the run's first; by default this one).
    `micro_batch`: the largest micro-batch a process takes (by default the first ranks' batch), which sets
    `accumulation`, the micro-batches of one step on this rank.
    """

    def __init__(
        self,
        samples: int,
        global_batch: int,
        world_size: int,
        rank: int,
        seed: int = 0,
        shuffle: bool = True,
        padding: int | None = None,
        micro_batch: int | None = None,
    ) -> None:
        self.samples, self.global_batch, self.seed, self.shuffle = samples, global_batch, seed, shuffle
        self.world_size, self.rank = world_size, rank
        self.padding = padding or world_size
        self.given_micro_batch = micro_batch
        self.epoch = self.step = 0  # the epoch, and the steps of it already trained
        self._order: tuple[int, list[int]] | None = None
        self._fit()

    def _fit(self) -> None:
        """Accumulation for this world size: the fewest micro-batches of at most `micro_batch` samples (by default
        the first ranks' batch)."""
        self.micro_batch = self.given_micro_batch or self.global_batch // self.padding
        for processes in (self.world_size, self.padding):
            if self.global_batch % processes:
                works = ", ".join(map(str, world_sizes(self.global_batch)))
                raise ValueError(
                    f"{processes} processes cannot share a global batch of {self.global_batch} samples; "
                    f"use one of {works} processes"
                )
        per_rank, most = self.global_batch // self.world_size, max(1, self.micro_batch)
        self.accumulation = next(a for a in range(1, per_rank + 1) if per_rank % a == 0 and per_rank // a <= most)
        self.steps_per_epoch = -(-self.samples // self.padding) * self.padding // self.global_batch

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.step = epoch, 0

    def start(self, epoch: int, step: int) -> None:
        """Go on at `step` of `epoch` (the steps before it are trained)."""
        self.epoch, self.step = epoch, step

    def advance(self) -> None:
        """One global step trained: where `state_dict` says the run stands."""
        self.step += 1
        if self.step == self.steps_per_epoch:
            self.epoch, self.step = self.epoch + 1, 0

    def order(self, epoch: int) -> list[int]:
        """The epoch's sample indices, padded as DistributedSampler pads them for `padding` processes."""
        if self._order is None or self._order[0] != epoch:
            if self.shuffle:
                generator = torch.Generator()
                generator.manual_seed(self.seed + epoch)
                indices = torch.randperm(self.samples, generator=generator).tolist()
            else:
                indices = list(range(self.samples))
            extra = -(-self.samples // self.padding) * self.padding - self.samples
            indices += (indices * (1 + extra // max(1, len(indices))))[:extra]
            self._order = (epoch, indices)
        return self._order[1]

    def step_indices(self, epoch: int, step: int) -> list[int]:
        """Every sample of global step `step` of `epoch`, whoever trains it."""
        return self.order(epoch)[step * self.global_batch : (step + 1) * self.global_batch]

    def digest(self, epoch: int, step: int) -> str:
        """A step's samples as a short hash: equal digests, equal samples (a record to compare runs by)."""
        text = ",".join(map(str, self.step_indices(epoch, step)))
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def micro_batches(self, epoch: int, step: int) -> list[list[int]]:
        """This rank's micro-batches of a step."""
        chunk, parts = self.step_indices(epoch, step), self.world_size * self.accumulation
        first = self.rank * self.accumulation
        return [chunk[m::parts] for m in range(first, first + self.accumulation)]

    def batch(self, indices: list[int], epoch: int) -> list[Any]:
        """What the loader is given for a micro-batch of `epoch` (a subclass may pair each sample with more)."""
        return indices

    def __iter__(self) -> Iterator[list[Any]]:
        return self._from(self.epoch, self.step)  # read now: a loader's prefetching runs the rest later

    def _from(self, epoch: int, first: int) -> Iterator[list[Any]]:
        for step in range(first, self.steps_per_epoch):
            for part in self.micro_batches(epoch, step):
                yield self.batch(part, epoch)

    def __len__(self) -> int:
        return (self.steps_per_epoch - self.step) * self.accumulation

    def state_dict(self) -> dict[str, Any]:
        """Where the run stands and what its order depends on: plain values, for any world size."""
        keys = ("epoch", "step", "samples", "global_batch", "seed", "shuffle", "padding")
        return {k: getattr(self, k) for k in keys}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on as the saved run: its place, global batch and order, on this world size."""
        if int(state["samples"]) != self.samples:
            raise ValueError(
                f"the run was saved with {state['samples']} samples, the dataset now has {self.samples}; "
                "resume with the data it trained on"
            )
        self.global_batch, self.seed, self.shuffle = (
            int(state["global_batch"]),
            int(state["seed"]),
            bool(state["shuffle"]),
        )
        self.padding = int(state["padding"])
        self._order = None
        self._fit()
        self.start(int(state["epoch"]), int(state["step"]))

"""trainer.sampler.StepSampler: DistributedSampler's batches on the run's own world size, the same samples at
every global step on any other, and its state carried across."""

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from trainer.sampler import StepSampler, world_sizes


def distributed_batches(samples: int, world: int, batch: int, seed: int, epoch: int) -> list[list[list[int]]]:
    """Per step, each rank's batch as DistributedSampler and DataLoader(drop_last=True) give it."""
    ranks = []
    for rank in range(world):
        sampler = DistributedSampler(range(samples), num_replicas=world, rank=rank, shuffle=True, seed=seed)
        sampler.set_epoch(epoch)
        ranks.append(
            [b.tolist() for b in DataLoader(range(samples), batch_size=batch, sampler=sampler, drop_last=True)]
        )
    return [list(step) for step in zip(*ranks, strict=True)]


def steps_of(samples: int, world: int, global_batch: int, seed: int, epoch: int, padding: int) -> list[list[int]]:
    """Per global step, every sample each rank takes (its micro-batches in order), ranks in order."""
    ranks = []
    for rank in range(world):
        sampler = StepSampler(samples, global_batch, world, rank, seed, padding=padding)
        sampler.set_epoch(epoch)
        micro = list(sampler)
        a = sampler.accumulation
        ranks.append([micro[i : i + a] for i in range(0, len(micro), a)])
    return [[b for rank in step for b in rank] for step in zip(*ranks, strict=True)]


@pytest.mark.parametrize(("samples", "world", "batch"), [(256, 2, 8), (30, 4, 2), (37, 3, 5)])
def test_on_the_runs_own_world_size_the_batches_are_distributed_samplers(samples: int, world: int, batch: int) -> None:
    for epoch in (0, 3):
        expected = distributed_batches(samples, world, batch, seed=7, epoch=epoch)
        assert steps_of(samples, world, world * batch, 7, epoch, padding=world) == expected


def test_on_fewer_processes_each_micro_batch_is_one_of_the_first_ranks_batches() -> None:
    expected = distributed_batches(100, 4, 3, seed=1, epoch=2)
    for world in (2, 1):
        assert steps_of(100, world, 12, 1, 2, padding=4) == expected, world
    assert StepSampler(100, 12, 1, 0, padding=4).accumulation == 4


def test_on_more_processes_every_step_holds_the_same_samples() -> None:
    first = steps_of(100, 2, 12, 1, 0, padding=2)
    more = steps_of(100, 6, 12, 1, 0, padding=2)
    assert [sorted(sum(s, [])) for s in more] == [sorted(sum(s, [])) for s in first]


def test_its_state_goes_on_mid_epoch_on_another_world_size() -> None:
    saved = StepSampler(64, 8, 4, 0, seed=3)
    saved.start(1, 2)
    for _ in range(3):
        saved.advance()
    state = saved.state_dict()
    resumed = StepSampler(64, 4, 2, 1, seed=0)  # the script's own numbers: the saved run's win
    resumed.load_state_dict(state)
    assert (resumed.epoch, resumed.step, resumed.global_batch, resumed.accumulation) == (1, 5, 8, 2)
    assert resumed.digest(1, 5) == saved.digest(1, 5)
    assert list(resumed)[:2] == [saved.step_indices(1, 5)[m::4] for m in (2, 3)]  # the first ranks 2 and 3


def test_a_world_size_that_cannot_share_the_batch_is_refused_with_the_sizes_that_can() -> None:
    assert world_sizes(12) == [1, 2, 3, 4, 6, 12]
    with pytest.raises(
        ValueError,
        match=r"^5 processes cannot share a global batch of 12 samples; use one of 1, 2, 3, 4, 6, 12 processes$",
    ):
        StepSampler(100, 12, 5, 0)
    with pytest.raises(ValueError, match="saved with 64 samples, the dataset now has 65"):
        StepSampler(65, 8, 2, 0).load_state_dict(StepSampler(64, 8, 2, 0).state_dict())


def test_the_loader_takes_it_as_its_batch_sampler() -> None:
    sampler = StepSampler(20, 4, 2, 1, seed=5)
    got = [b.tolist() for b in DataLoader(torch.arange(20), batch_sampler=sampler)]
    assert got == [sampler.step_indices(0, k)[1::2] for k in range(5)]

"""The training batches: where an epoch starts and ends, and what torch's DataLoader is given."""

from typing import Any

import torch
from torch.utils.data import TensorDataset

from trainer.config import build_config
from trainer.data.loader import batches, loader_options
from trainer.data.order import TrainOrder
from trainer.rng import SeededSamples


def test_batches_start_mid_epoch_and_roll_over_as_an_uninterrupted_run() -> None:
    """A run resumed at (epoch 1, batch 3) gets exactly the batches an uninterrupted run got from there on,
    across the next epoch boundary; resuming at an epoch's end starts the next epoch."""
    data = TensorDataset(torch.arange(32))

    def run(position: list[int], steps: int) -> list[list[int]]:
        order = TrainOrder(len(data), 4, 1, 0, seed=7)
        loader = torch.utils.data.DataLoader(
            SeededSamples(data), batch_sampler=order, collate_fn=lambda b: [int(x) for (x,) in b]
        )
        seen = []
        stream = batches(loader, order, lambda: (position[0], position[1]))
        for _ in range(steps):
            seen.append(next(stream))
            position[1] += 1
            if position[1] == 8:  # what TrainState.advance does at the end of an epoch
                position[:] = [position[0] + 1, 0]
        stream.close()
        return seen

    whole = run([0, 0], 24)
    assert run([1, 3], 13) == whole[11:24]
    assert run([1, 0], 8) == whole[8:16]
    assert whole[:8] != whole[8:16]  # each epoch its own order


def test_the_dataloader_gets_the_tasks_collate_and_worker_init_and_the_knobs_only_with_workers() -> None:
    class Task:
        def collate(self, samples: list[Any]) -> Any:
            return samples

        def worker_init(self, worker_id: int) -> None:
            pass

    task = Task()
    config = build_config(["data.prefetch_factor=3", "data.persistent_workers=false"])
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    options = loader_options(config, 2, cpu, task)
    assert options["collate_fn"] == task.collate and options["worker_init_fn"] == task.worker_init
    assert options["prefetch_factor"] == 3 and options["persistent_workers"] is False
    assert options["pin_memory"] is False and loader_options(config, 2, cuda, task)["pin_memory"] is True
    assert loader_options(build_config(["data.pin_memory=false"]), 2, cuda, None)["pin_memory"] is False
    in_process = loader_options(config, 0, cpu, object())
    assert "prefetch_factor" not in in_process and "persistent_workers" not in in_process
    assert in_process["collate_fn"] is None and in_process["worker_init_fn"] is None

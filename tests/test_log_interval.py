"""What the log interval renews beyond TensorBoard, and how often (trainer.train.log_interval)."""

import json
from pathlib import Path

import pytest

from trainer import train as train_module
from trainer.config import build_config
from trainer.supervise.launcher import resolve

ONE_PROCESS = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "CUDA_VISIBLE_DEVICES": ""}


@pytest.mark.parametrize(("every_s", "renewed"), [(1e9, 2), (0.0, 12)])
def test_memory_figures_are_renewed_at_most_once_a_share_interval_and_progress_at_every_interval(
    tmp_path: Path, sample_root: Path, monkeypatch: pytest.MonkeyPatch, every_s: float, renewed: int
) -> None:
    """A short step's log interval can be milliseconds: the memory figures jobs.top shows (torch.cuda's
    allocator statistics on a GPU) are renewed at most once a SHARE_EVERY_S, always at the first interval and
    the last step. progress.json, which says where an attempt got to (the ledger's recomputed work), is written
    at every interval."""
    figures: list[int] = []
    progress: list[int] = []
    real_figures, real_write = train_module.resource_figures, train_module.write_text

    def counted_figures(device):  # type: ignore[no-untyped-def]
        figures.append(1)
        return real_figures(device)

    def counted_write(path: Path, text: str, durable: bool = True) -> None:
        if path.name == "progress.json":
            progress.append(json.loads(text)["step"])
        real_write(path, text, durable)

    monkeypatch.setattr(train_module, "resource_figures", counted_figures)
    monkeypatch.setattr(train_module, "write_text", counted_write)
    monkeypatch.setattr(train_module, "SHARE_EVERY_S", every_s)
    settings = [f"run_dir={tmp_path / 'run'}", f"data.root={sample_root / 'pix2pix'}", "steps=12", "log.every=1"]
    settings += ["batch_size=2", "log.image_every=0", "eval.every=0", "checkpoint.every=12", "data.num_workers=0"]
    settings += ["pix2pix.width=4", "data.image_size=32", "hang.enabled=false"]
    summary = train_module.train(build_config(settings), resolve(ONE_PROCESS))
    assert summary is not None and summary["final_step"] == 12
    assert len(figures) == renewed and progress == list(range(1, 13)), (figures, progress)

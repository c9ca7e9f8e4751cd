"""What the log interval writes beyond TensorBoard, and how often (trainer.train.log_interval)."""

import json
from pathlib import Path

import pytest

from trainer import train as train_module
from trainer.config import build_config
from trainer.env.launcher import resolve

ONE_PROCESS = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "CUDA_VISIBLE_DEVICES": ""}


@pytest.mark.parametrize(("every_s", "writes"), [(1e9, 2), (0.0, 12)])
def test_progress_json_is_renewed_at_most_once_a_share_interval_and_at_the_last_step(
    tmp_path: Path, sample_root: Path, monkeypatch: pytest.MonkeyPatch, every_s: float, writes: int
) -> None:
    """A short step's log interval can be milliseconds: progress.json (a rename on a shared filesystem) is
    renewed at most once a SHARE_EVERY_S, always at the first interval and the last step."""
    written: list[dict] = []
    real = train_module.write_text

    def counting(path: Path, text: str, durable: bool = True) -> None:
        if path.name == "progress.json":
            written.append(json.loads(text))
        real(path, text, durable)

    monkeypatch.setattr(train_module, "write_text", counting)
    monkeypatch.setattr(train_module, "SHARE_EVERY_S", every_s)
    settings = [f"run_dir={tmp_path / 'run'}", f"data.root={sample_root / 'pix2pix'}", "steps=12", "log.every=1"]
    settings += ["batch_size=2", "log.image_every=0", "eval.every=0", "checkpoint.every=12", "data.num_workers=0"]
    settings += ["pix2pix.width=4", "data.image_size=32", "hang.enabled=false"]
    summary = train_module.train(build_config(settings), resolve(ONE_PROCESS))
    assert summary is not None and summary["final_step"] == 12
    assert len(written) == writes and written[-1]["step"] == 12, written
    assert json.loads((tmp_path / "run" / "progress.json").read_text())["step"] == 12

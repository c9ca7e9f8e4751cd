"""torch's environment report (provenance/collect_env.txt), by a child of rank 0: after the attempt's first step
(started with the ranks, it slowed every rank's start: benchmarks/RESULTS.md, start-up), or as the attempt fails
before one, so that a run that never trained has it too."""

from pathlib import Path

from tests import ranks
from tests.support import poll

BROKEN = """
class Broken:
    def dataset(self, config):
        raise RuntimeError("CUDA driver initialization failed")  # as a node with a broken driver says

    def model(self, config, dataset):
        raise AssertionError("not reached")

    def forward(self, model, batch):
        raise AssertionError("not reached")
"""


def report(run_dir: Path) -> Path:
    return run_dir / "provenance" / "collect_env.txt"


def test_the_report_is_written_once_the_first_step_is_done(sample_root: Path, tmp_path: Path) -> None:
    args = [f"data.root={sample_root / 'pix2pix'}", "steps=2", "log.every=1", "log.image_every=0"]
    run = ranks.train(tmp_path / "run", *args, world=1).run_dir
    poll("torch's environment report", report(run).exists, timeout=120)
    assert report(run).read_text().startswith("PyTorch version: 2.")


def test_an_attempt_that_fails_before_its_first_step_still_writes_it(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(BROKEN)
    started = ranks.start(tmp_path / "run", f"task={tmp_path / 'broken.py'}:Broken", "steps=2", world=1)
    assert started.wait() == [1]
    poll("torch's environment report", report(started.run_dir).exists, timeout=120)
    assert "CUDA driver initialization failed" in started.log()

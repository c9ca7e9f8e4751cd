from pathlib import Path

import pytest

from tests.slurm import cluster


@pytest.fixture(autouse=True)
def _on_the_cluster(slurm_cluster: None) -> None:
    """Every test here talks to the cluster: it is up, and SLURM_CONF names it, whichever test runs first."""


@pytest.fixture
def mini(tmp_path: Path, slurm_cluster: None) -> Path:
    """The mini profile with its runs in this test's folder."""
    return cluster.mini_profile(tmp_path / "mini.yaml", tmp_path / "runs")

from pathlib import Path

import pytest

from tests.slurm import cluster


@pytest.fixture
def mini(tmp_path: Path, slurm_cluster: None) -> Path:
    """The mini profile with its runs in this test's folder."""
    return cluster.mini_profile(tmp_path / "mini.yaml", tmp_path / "runs")

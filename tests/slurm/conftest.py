import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm import cluster


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[None]:
    """The real two-node test cluster, started once per session (a no-op when it already runs)."""
    try:
        cluster.up()
    except cluster.Unavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the Slurm tests, but: {exc}")
        pytest.skip(str(exc))
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.CONF)
    yield
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous


@pytest.fixture
def mini(tmp_path: Path, slurm_cluster: None) -> Path:
    """The mini profile with its runs in this test's folder."""
    return cluster.mini_profile(tmp_path / "mini.yaml", tmp_path / "runs")

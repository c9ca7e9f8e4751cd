import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import ranks
from tests.slurm import cluster
from tests.support import ARGS, ROOT, cluster_side
from trainer.config import flat


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture of the test (a module's too): the helpers and SLURM_CONF point at its cluster."""
    cluster.use(cluster_side(item))
    os.environ["SLURM_CONF"] = str(cluster.CONF)


@pytest.fixture(autouse=True)
def _on_the_cluster(slurm_cluster: None) -> Iterator[None]:
    """Every test here talks to the cluster: it is up, and SLURM_CONF names it, whichever test runs first. After
    each, what it left is cancelled and waited out, so one test's failure stays its own."""
    yield
    cluster.clear()


@pytest.fixture
def mini(tmp_path: Path, slurm_cluster: None) -> Path:
    """The mini profile with its runs in this test's folder."""
    return cluster.mini_profile(tmp_path / "mini.yaml", tmp_path / "runs")


@pytest.fixture(scope="session")  # its users (requeue, SSH) are all on cluster a's worker: made once
def reference_hash(tmp_path_factory: pytest.TempPathFactory, sample_root: Path) -> str:
    """The final weights of the same run, uninterrupted: 2 ranks of one thread each, as the 2 one-CPU tasks on
    the cluster train, forked here (tests/ranks.py) rather than queued: the cluster's time goes to the runs
    that are preempted. Equal hashes also show a Slurm job trains what a local one does, bit for bit."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    profile = yaml.safe_load((ROOT / "cluster_profiles" / "mini.yaml").read_text())["trainer"]  # under ARGS
    ranks.train(
        run_dir, *[f"{k}={v}" for k, v in flat(profile).items()], f"data.root={sample_root / 'pix2pix'}", *ARGS[4:]
    )
    data = json.loads((run_dir / "summary.json").read_text())
    assert (data["restarts"], data["world_size"], data["torch_threads"]) == (0, 2, 1), data
    return data["weights_sha256"]


@pytest.fixture(scope="session")
def reference_hash_of_4(tmp_path_factory: pytest.TempPathFactory, sample_root: Path) -> str:
    """reference_hash over 4 ranks (2 nodes x 2 tasks), with checkpoints every 20 steps: over more than 2 ranks
    a gradient's sum depends on its place in DDP's buckets, which a resume must lay out as the run did."""
    run_dir = tmp_path_factory.mktemp("reference4") / "run"
    profile = yaml.safe_load((ROOT / "cluster_profiles" / "mini.yaml").read_text())["trainer"]
    args = [a if a != "checkpoint.every=100" else "checkpoint.every=20" for a in ARGS[4:]]
    ranks.train(
        run_dir, *[f"{k}={v}" for k, v in flat(profile).items()], f"data.root={sample_root / 'pix2pix'}", *args, world=4
    )
    data = json.loads((run_dir / "summary.json").read_text())
    assert (data["restarts"], data["world_size"], data["torch_threads"]) == (0, 4, 1), data
    return data["weights_sha256"]

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.messages import golden  # noqa: F401 (the fixture, for every test)
from tests.slurm import cluster
from tests.support import CORE, REFERENCE, ROOT, cluster_side, submit, write_profile
from trainer.data.sample import ensure_sample_data


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


def shared(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """A folder made once per test session, whichever of xdist's workers asks first (the others wait on its
    lock): the tests read it or copy it, never change it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each worker's own
    folder = base / f"shared-{name}"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".made").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            (folder / ".made").touch()
    return folder


@pytest.fixture(scope="session")
def sample_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared(tmp_path_factory, "data", lambda folder: ensure_sample_data(folder / "sample")) / "sample"


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory, sample_root: Path) -> Path:
    """The reference run's folder (read only); `submit.out` beside it holds what `--wait` printed."""

    def make(folder: Path) -> None:
        profile = write_profile(folder, f"executor: local\ngpus_per_node: 2\nrun_root: {folder / 'runs'}\n")
        data = f"data.root={sample_root / 'pix2pix'}"
        result = submit("--profile", str(profile), "--wait", "--name", "run", data, *REFERENCE)
        assert result.returncode == 0, result.stdout + result.stderr
        (folder / "submit.out").write_text(result.stdout)

    return shared(tmp_path_factory, "reference", make) / "runs" / "run"


@pytest.fixture
def reference_copy(reference_run: Path, tmp_path: Path) -> Path:
    """A copy of the reference run for a test to resume or break (--resume reads its folder, not its old path)."""
    return Path(shutil.copytree(reference_run, tmp_path / "run"))


@pytest.fixture
def local_profile(tmp_path: Path) -> Path:
    """A local profile whose runs land in this test's own folder."""
    return write_profile(tmp_path, f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'runs'}\n")


# The marker each folder gives its tests (tests/README.md says what each is for).
FOLDER_MARKERS = {"slurm": "slurm", "jobs": "job", "benchmarks": "bench", "gpu": "gpu"}
# Each Slurm test cluster's xdist group (tests/support.py: cluster_side), one worker each.
SLURM_GROUPS = {"a": "slurm", "b": "slurm-b"}


def plain_run(config: pytest.Config) -> bool:
    """`python -m pytest` as README runs it: no -m, no -k, no --lf, no path but the configured one. A run that
    names any of these asks for what it names, long tests included."""
    asked = config.option.markexpr or config.option.keyword or getattr(config.option, "lf", False)
    return not asked and [str(arg) for arg in config.args] == list(config.getini("testpaths"))


def is_long(item: pytest.Item) -> bool:
    whole = item.get_closest_marker("job") or item.get_closest_marker("slurm")
    return bool(whole) and not item.nodeid.startswith(CORE)


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark a test by its folder; keep the tests that share the cluster, and the timing-calibrated ones, each
    on one xdist worker. (Here, as each test is collected: xdist reads the groups in its own
    pytest_collection_modifyitems.)"""
    folder = Path(item.path).relative_to(ROOT / "tests").parts[0]
    if folder in FOLDER_MARKERS:
        item.add_marker(FOLDER_MARKERS[folder])
    if is_long(item):
        item.add_marker("long")
    if item.get_closest_marker("slurm"):
        # A preemption test must not meet another test's jobs in its partition: one worker per cluster.
        item.add_marker(pytest.mark.xdist_group(SLURM_GROUPS[cluster_side(item)]))
    elif item.get_closest_marker("slow"):
        item.add_marker(pytest.mark.xdist_group("slow"))


TESTS = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the benchmarks out unless `-m` names them; hand the groups out first (the Slurm group is the
    longest chain)."""
    wants_bench = "bench" in (config.option.markexpr or "")
    kept = [item for item in items if wants_bench or not item.get_closest_marker("bench")]
    if plain_run(config):  # README's test command
        kept = [item for item in kept if not item.get_closest_marker("long")]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    # Then the quick modules of pure functions: the Slurm group's worker also takes the module after it from
    # xdist's queue, and runs it after the Slurm tests, at the end of the critical path: it had better be short.
    order = {"slurm": 0, "slurm-b": 0, "slow": 1}
    # The framework matrix runs four two-node jobs at once: last in its group, once the timing-calibrated tests
    # (which cannot start torch in time on a machine that busy) are done.
    last = ("test_frameworks.py",)
    items[:] = sorted(
        kept,
        key=lambda item: (
            order.get(group_of(item), 2 if item.path.parent == TESTS else 3),
            item.path.name in last and bool(group_of(item)),
        ),
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under xdist's loadgroup a grouped test's id ends with its group; if it does not, xdist would spread the
    Slurm tests over the workers, where they preempt each other's jobs: stop rather than run them so."""
    if not getattr(session.config.option, "loadgroup", False):  # set on xdist's workers only
        return
    for item in session.items:
        if group_of(item) and not item.nodeid.endswith("@" + group_of(item)):
            raise pytest.UsageError(
                "pytest-xdist did not apply the xdist_group markers with this pytest; "
                "install the versions pyproject.toml's dev extra names (pip install -e '.[dev]')"
            )


def group_of(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0]) if mark else ""

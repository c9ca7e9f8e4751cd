import contextlib
import fcntl
import io
import os
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from tests.messages import golden  # noqa: F401 (the fixture, for every test)
from tests.slurm import cluster
from trainer.data.sample import ensure_sample_data

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def poll(what: str, condition: Callable[[], T], timeout: float = 120, every: float = 0.1) -> T:
    """condition()'s first true value, checked every `every` seconds; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)
    return value


def process_start(pid: int) -> int | None:
    """When a live process started (/proc/PID/stat field 22); None once it has ended (a zombie has)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


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


# The local reference run: 2 processes, validation and checkpoints every 8 steps, a cosine schedule. Submitted
# as a user does, once per session; the tests of what a run writes read it, every resume and exactness test
# copies it or compares with it.
REFERENCE = ["steps=48", "batch_size=4", "log.every=4", "log.image_every=24", "checkpoint.every=8"]
REFERENCE += [
    "data.val_fraction=0.1",
    "eval.every=8",
    "optim.schedule=cosine",
    "optim.min_lr=0.0001",
    "optim.warmup_steps=4",
]


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


def write_profile(folder: Path, text: str, name: str = "test.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


@pytest.fixture
def local_profile(tmp_path: Path) -> Path:
    """A local profile whose runs land in this test's own folder."""
    return write_profile(tmp_path, f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'runs'}\n")


def submit(
    *args: str, cwd: Path | None = None, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m jobs.submit` the way a user does (with `env` added to this environment)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "jobs.submit", *args],
        cwd=cwd or ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def submit_here(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m jobs.submit args` in this process, its output captured as `submit` returns it: for the tests of
    refusals, which stop before any job (no interpreter to start and no imports: about 0.4 s less each, a
    third of the inner loop). An exception that would be a traceback on a terminal fails the test here."""
    from jobs import submit as command

    out, err = io.StringIO(), io.StringIO()
    before, saved = Path.cwd(), {key: os.environ.get(key) for key in env or {}}
    try:
        os.environ.update(env or {})
        os.chdir(cwd or ROOT)
        # A warning goes to the terminal as a user runs it (pytest would keep it to itself).
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            warnings.catch_warnings(record=True) as said,
        ):
            warnings.simplefilter("default")
            try:
                code = command.main(list(args))
            except SystemExit as exc:  # argparse's own refusals
                code = exc.code if isinstance(exc.code, int) else 1
        err.write("".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in said))
    finally:
        command.release_claims()  # a --resume's claim on a run, which the process's end would release
        os.chdir(before)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(["jobs.submit", *args], code, out.getvalue(), err.getvalue())


def run_dirs(run_root: Path) -> list[Path]:
    """Folders under run_root that look like runs (they hold a config.yaml)."""
    return sorted(p.parent for p in run_root.glob("*/config.yaml")) if run_root.exists() else []


# The marker each folder gives its tests (tests/README.md says what each is for).
FOLDER_MARKERS = {"slurm": "slurm", "jobs": "job", "benchmarks": "bench", "gpu": "gpu"}
# Two Slurm test clusters (tests/slurm/cluster.py), each with its own worker: these modules run on the second,
# the rest on the first, about half of the Slurm tests' time each.
ON_CLUSTER_B = ("test_script.py", "test_hangs.py", "test_check.py", "test_torchrun.py", "test_no_accounting.py")
SLURM_GROUPS = {"a": "slurm", "b": "slurm-b"}


# README's test command is the ten-minute suite: the inner loop (pure functions, refusals that start no job)
# and one whole job for each flow a user meets (these, by node id or its start). Every other `job` and `slurm`
# test is `long`: CI runs those next (`python -m pytest -m long`, what .ci/run does), and a run with -m, -k,
# --lf or a path of its own takes them as it asks.
CORE = (
    "tests/jobs/test_local_ddp.py::test_killed_run_resumes_to_the_same_weights",  # the trainer, resumed exactly
    "tests/jobs/test_script.py::test_a_script_that_saves_on_the_signal_is_requeued_and_resumes",  # -- python x.py
    "tests/jobs/test_user_task.py::test_readmes_example_task_trains_from_a_folder_outside_the_project[my_tasks.py",
    "tests/jobs/test_user_project.py::test_python_dash_m_works_beside_a_trainer_py",  # a project's own trainer.py
    "tests/jobs/test_frameworks.py::test_a_frameworks_script_is_preempted_requeued_and_resumes_from_its_own_save[plain",
    "tests/jobs/test_local_jobs.py::test_a_stopped_rank_is_named_by_its_peers_watchdog_within_the_budget[0",  # a hang
    "tests/jobs/test_local_jobs.py::test_cancel_stops_every_rank_and_status_says_cancelled",
    "tests/slurm/test_requeue.py::test_preempted_run_resumes_the_submitted_code_to_the_same_weights",  # on Slurm
    "tests/slurm/test_remote.py::test_a_hostile_script_argument_reaches_the_script_as_text",  # from a laptop
    "tests/slurm/test_script.py::test_a_preempted_script_saves_is_requeued_and_resumes",  # a script, on cluster b
    "tests/slurm/test_slurm.py::test_slurm_refusals_are_one_line",
    "tests/slurm/test_slurm.py::test_dry_run_of_the_example_profile_matches_golden_file",
)


def plain_run(config: pytest.Config) -> bool:
    """`python -m pytest` as README runs it: no -m, no -k, no --lf, no path but the configured one. A run that
    names any of these asks for what it names, long tests included."""
    asked = config.option.markexpr or config.option.keyword or getattr(config.option, "lf", False)
    return not asked and [str(arg) for arg in config.args] == list(config.getini("testpaths"))


def is_long(item: pytest.Item) -> bool:
    whole = item.get_closest_marker("job") or item.get_closest_marker("slurm")
    return bool(whole) and not item.nodeid.startswith(CORE)


def cluster_side(item: pytest.Item) -> str:
    return "b" if Path(item.path).name in ON_CLUSTER_B else "a"


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

"""A run is found by its name wherever the profile puts runs: every command that takes RUN, and --resume,
look a name up under ./runs, the default profile's run_root and --profile's; a name that matches none or
several is one line, and a folder that is no run is refused naming what a run of its kind holds."""

import contextlib
import importlib
import io
import json
import subprocess
from pathlib import Path

import pytest

from tests.messages import Golden, refused
from tests.support import JOB, script_run, submit_here, write_profile


def command(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m jobs.NAME args` in this process, as a user runs it from the working folder."""
    if name == "submit":
        return submit_here(*args, cwd=Path.cwd())
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = importlib.import_module(f"jobs.{name}").main(list(args))
        except SystemExit as exc:  # argparse's own refusals
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess([name, *args], code, out.getvalue(), err.getvalue())


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cluster profile whose run_root is not ./runs (README's /shared/runs), and a script run under it; the
    commands run from a project folder of the user's."""
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    script_run(tmp_path / "shared" / "runs" / "cifar-a")
    return write_profile(tmp_path, f"executor: slurm\nrun_root: {tmp_path / 'shared' / 'runs'}\n", "site.yaml")


# Each command, and what it does once it has found the run (a finished local script run).
FOUND = {
    "status": lambda r: r.returncode == 0 and f"job {JOB}: COMPLETED" in r.stdout,
    "logs": lambda r: r.returncode == 0 and "hello from cifar-a" in r.stdout,
    "wait": lambda r: r.returncode == 0 and "hello from cifar-a" in r.stdout and "finished" in r.stdout,
    "top": lambda r: r.returncode == 0 and JOB in r.stdout,
    "cancel": lambda r: r.returncode == 2 and f"job {JOB} is not running" in r.stderr,
    "picture": lambda r: r.returncode == 2 and "shared/runs/cifar-a holds no TensorBoard event files" in r.stderr,
    "fetch": lambda r: r.returncode == 2 and "shared/runs/cifar-a is not a run submitted over SSH" in r.stderr,
    "submit": lambda r: r.returncode == 0 and "#SBATCH" in r.stdout and "shared/runs/cifar-a" in r.stdout,
}
ARGS = {"top": ["--once"], "submit": ["--dry-run"]}


@pytest.mark.parametrize("name", FOUND)
def test_every_command_finds_a_run_by_its_name_under_the_profiles_run_root(
    golden: Golden, name: str, site: Path
) -> None:
    """With the profile that ran it, the name is found; without, one line says where it was looked for."""
    run = ["--resume", "cifar-a"] if name == "submit" else ["cifar-a"]
    found = command(name, *run, "--profile", str(site), *ARGS.get(name, []))
    assert FOUND[name](found), found.stdout + found.stderr
    unknown = command(name, *run, *ARGS.get(name, []))
    refused(unknown, golden, "'cifar-a'", "--profile")


def test_a_name_found_nowhere_says_where_it_was_looked_for(golden: Golden, site: Path) -> None:
    refused(command("status", "cifar-b", "--profile", str(site)), golden, "cifar-b", "--profile")


def test_a_name_in_two_run_roots_is_refused(golden: Golden, site: Path) -> None:
    """The default profile's ./runs and the profile's run root both hold one: neither is guessed."""
    script_run(Path("runs") / "cifar-a", job_id="999999002")
    refused(command("status", "cifar-a", "--profile", str(site)), golden, "cifar-a")
    by_path = command("status", str(site.parent / "shared" / "runs" / "cifar-a"))  # a path: that run's job
    assert by_path.stdout.splitlines()[0] == f"job {JOB}: COMPLETED", by_path.stdout + by_path.stderr


@pytest.mark.parametrize("name", ["README.md", "jobs"])
def test_a_file_or_folder_here_does_not_hide_the_run_of_its_name(name: str, site: Path) -> None:
    """A run named `jobs` or `README.md`, asked for in a project that has a jobs/ package and a README.md."""
    Path("README.md").write_text("# my project\n")
    Path("jobs").mkdir()
    Path("jobs", "__init__.py").write_text("")
    script_run(Path("runs") / name, job_id="999999003")
    result = command("status", name)
    assert result.returncode == 0 and result.stdout.splitlines()[0] == "job 999999003: COMPLETED", result.stderr


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ({"argv": ["python", "-m", "jobs.submit", "--", "python", "train.py"]}, "command.json"),
        ({"argv": ["python", "-m", "jobs.submit", "steps=100"]}, "config.yaml"),
        (None, "command.json"),
    ],
    ids=["a script run", "a trainer run", "no run"],
)
def test_a_folder_that_is_no_run_is_refused_naming_what_its_kind_lacks(
    golden: Golden, argv: dict | None, named: str, site: Path
) -> None:
    """--resume of a run folder that lost the record its kind resumes from (or of no run at all): one line,
    and nothing written into the folder."""
    folder = site.parent / "shared" / "runs" / "broken"
    (folder / "provenance").mkdir(parents=True)
    if argv is not None:
        (folder / "provenance" / "submit.json").write_text(json.dumps(argv))
    (folder / "job.json").write_text(json.dumps({"job_id": "999999004", "executor": "local", "log": "x"}))
    before = sorted(folder.rglob("*"))
    refused(command("submit", "--resume", "broken", "--profile", str(site)), golden, named, "broken")
    assert sorted(folder.rglob("*")) == before  # no resume.lock either


def test_a_name_that_reads_as_a_job_id_is_refused(golden: Golden, site: Path) -> None:
    """Every command reads 12345 as a job id: a run of that name could never be found by it."""
    for name in ("12345", "12_3"):
        refused(command("submit", "--profile", str(site), "--name", name, "--dry-run"), golden, "--name", name)


def test_a_profile_for_another_machine_finds_its_runs_record_here(tmp_path: Path, site: Path) -> None:
    """A login profile's run_root is on the login node: its runs are found by their records here (./runs),
    which every command then follows over SSH."""
    from jobs.remote import runs
    from jobs.remote.ssh import Login
    from jobs.tracking import by_name

    laptop = write_profile(tmp_path, "executor: slurm\nlogin: a@h\nremote_root: /scratch/runs\n", "laptop.yaml")
    login = Login("a@h", "/scratch/runs")
    runs.save(Path("runs", "r1"), runs.RemoteRun(login, "/scratch/runs/r1", "5", "laptop", "/scratch/runs/r1/code"))
    assert by_name("r1", str(laptop)) == str(Path("runs", "r1").resolve())
    assert runs.load(by_name("r1", str(laptop))) is not None

"""The other ways in: plain torchrun, and the in-process debug profile."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ranks
from tests.support import ROOT, failure, submit, write_profile
from trainer.errors import UserError


@pytest.mark.job
def test_trainer_runs_under_torchrun(tmp_path: Path, sample_root: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        "29531",
        "-m",
        "trainer",
        f"run_dir={run_dir}",
        f"data.root={sample_root / 'pix2pix'}",
        "steps=6",
        "log.every=3",
    ]
    result = subprocess.run(
        cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((run_dir / "summary.json").read_text())["world_size"] == 2


def test_trainer_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "steps=-1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert (result.returncode, result.stderr) == (2, "error: steps: must be >= 1\n")
    assert not (tmp_path / "runs" / "pix2pix").exists()


@pytest.mark.job
def test_debug_profile_runs_in_process(tmp_path: Path, sample_root: Path) -> None:
    profile = write_profile(tmp_path, f"executor: debug\nrun_root: {tmp_path / 'runs'}\n")
    result = submit(
        "--profile",
        str(profile),
        f"data.root={sample_root / 'classify'}",
        "task=classify",
        "classify.model=resnet18",
        "steps=3",
        "log.every=1",
        "data.image_size=32",
    )
    assert result.returncode == 0, result.stderr
    [summary] = (tmp_path / "runs").glob("*/summary.json")
    data = json.loads(summary.read_text())
    assert data["world_size"] == 1 and data["task"] == "classify" and 0 <= data["final_metrics"]["accuracy"] <= 1


@pytest.mark.job
def test_mixed_precision_modes_train(tmp_path: Path, sample_root: Path) -> None:
    for amp in ("bf16", "fp16"):
        ranks.train(
            tmp_path / amp, f"amp={amp}", "steps=2", "log.every=1", f"data.root={sample_root / 'pix2pix'}", world=1
        )
        loss = json.loads((tmp_path / amp / "summary.json").read_text())["final_loss"]
        assert 0 < loss < 2


def test_submitting_does_not_import_torch() -> None:
    code = (
        "import sys, jobs.submit, jobs.status, jobs.logs, jobs.cancel\n"
        "try:\n    jobs.submit.main(['--profile', 'example', '--dry-run', '--name', 'x'])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --nodes=2" in result.stdout


def test_a_dry_run_imports_only_what_it_prints() -> None:
    """The dry run stays within issue 52's 2x `import submitit`: what only a submit, a wait or SSH needs
    (launch, tracking, the local controller, the script runner, OpenSSL's hashlib) is imported where used."""
    unused = (
        "jobs.ops.launch jobs.tracking jobs.local_controller jobs.ops.remote_submit trainer.supervise.script hashlib"
    ).split()
    code = (
        "import sys, jobs.submit\n"
        "jobs.submit.main(['--profile', 'example', '--dry-run', '--name', 'x'])\n"
        f"print('imported:', [m for m in {unused!r} if m in sys.modules])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "imported: []" in result.stdout, result.stdout.splitlines()[-1]


TORCH_FREE = ["trainer.config", "trainer.entry", "trainer.requeue", "trainer.run", "trainer.supervise"]


@pytest.mark.parametrize("package", TORCH_FREE)
def test_a_torch_free_package_says_so_and_imports_no_torch(package: str) -> None:
    """Every module of a package that declares itself torch-free, imported in a fresh interpreter: no torch."""
    folder = ROOT / package.replace(".", "/")
    assert "Torch-free" in (folder / "__init__.py").read_text(), f"{package}/__init__.py does not say it is torch-free"
    modules = [package] + [f"{package}.{p.stem}" for p in sorted(folder.glob("*.py")) if p.stem != "__init__"]
    code = f"import importlib, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\n"
    code += "assert 'torch' not in sys.modules, 'torch was imported'\n"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_torch_free_modules_of_other_packages_import_no_torch() -> None:
    """What the submitter and the watchdog use of the data package and the trainer's top level."""
    modules = ["trainer.data.checks", "trainer.data.filelist", "trainer.data.resolve", "trainer.data.sample"]
    code = f"import importlib, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\n"
    code += "assert 'torch' not in sys.modules, 'torch was imported'\n"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_entry_builds_the_config_from_plain_values_and_records_a_bad_one(tmp_path: Path) -> None:
    """A task is sent plain values; a config the entry cannot build is this rank's recorded failure."""
    from trainer.entry.task import run

    with pytest.raises(UserError, match="eval.metric: task pix2pix reports") as raised:
        run({"run_dir": str(tmp_path), "eval": {"metric": "nope"}}, {"signal": "USR1"})
    failed = failure(tmp_path)  # errors/rank_0.json, named by error.txt
    assert (failed["rank"], failed["kind"], failed["message"]) == (0, "", str(raised.value)), failed


def test_a_job_is_sent_plain_values_only(tmp_path: Path) -> None:
    """What submitit pickles for each task names no class of this project's config: unpickling it imports
    nothing of yours (your task's file is imported by the entry, after its signal handler is in place)."""
    import pickle

    from jobs.ops.launch import calls_of
    from jobs.plan import make_plan
    from jobs.profiles import profile_of
    from trainer.config import build_config

    profile = profile_of({"name": "p", "executor": "local"})
    plan = make_plan(profile, [build_config([f"run_dir={tmp_path}"])], tmp_path, False, "")
    [(function, config, job)] = calls_of(plan)
    assert function.__module__ == "trainer.entry.task" and type(config) is dict and type(job) is dict
    assert b"trainer.config" not in pickle.dumps((config, job)) and job["signal"] == "USR2"


def test_the_submit_reference_names_every_flag_of_its_help() -> None:
    """jobs/reference/commands.md's `jobs.submit` section and `--help` name the same flags (a hand-written
    synopsis once lacked four)."""
    import re
    import subprocess
    import sys

    text = (ROOT / "jobs" / "reference" / "commands.md").read_text()
    block = re.search(r"^## jobs\.submit$.*?(?=^## jobs\.status$)", text, re.M | re.S)
    assert block is not None
    help_text = subprocess.run(
        [sys.executable, "-m", "jobs.submit", "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", help_text)) - {"--help"}
    assert set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", block.group(0))) == flags


def test_a_failure_keeps_its_traceback_in_torchs_error_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The traceback is written by torch's own @record handler: errors/traceback_rank_N.json, and under torchrun
    the agent's TORCHELASTIC_ERROR_FILE, which torch's ProcessFailure (torchrun's summary) reads."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    from trainer.entry.task import record_error
    from trainer.run import failures
    from trainer.supervise.launcher import resolve

    agents = tmp_path / "agent_error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(agents))
    try:
        raise RuntimeError("shapes do not match at step 3")
    except RuntimeError as exc:
        record_error(tmp_path / "run", resolve({}), exc)
    kept = tmp_path / "run" / "errors" / "traceback_rank_0.json"
    data = json.loads(kept.read_text())["message"]
    assert data["message"] == "RuntimeError: shapes do not match at step 3"
    assert 'raise RuntimeError("shapes do not match at step 3")' in data["extraInfo"]["py_callstack"]
    assert ProcessFailure(0, 1, 1, str(agents)).message["message"] == data["message"]
    assert failures.torch_error(kept) == ("RuntimeError", "shapes do not match at step 3")
    # The next attempt's rank 0 forgets it with the record it belongs to.
    failures.clear(tmp_path / "run", before=float("inf"))
    assert not kept.exists() and not (tmp_path / "run" / "error.txt").exists()


def test_a_bad_setting_writes_no_traceback(tmp_path: Path) -> None:
    from trainer.entry.task import run

    with pytest.raises(UserError):
        run({"run_dir": str(tmp_path), "eval": {"metric": "nope"}}, {"signal": "USR1"})
    assert [p.name for p in (tmp_path / "errors").iterdir()] == ["rank_0.json"]


def test_deterministic_turns_on_torchs_deterministic_kernels() -> None:
    """`deterministic=true` is torch's own switch, with cuBLAS's workspace set before any handle exists (in a
    fresh process: the switch is global)."""
    code = (
        "import os, torch; from trainer.rng import deterministic_kernels; deterministic_kernels(); "
        "print(torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic, "
        "torch.backends.cudnn.benchmark, os.environ['CUBLAS_WORKSPACE_CONFIG'])"
    )
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert out.stdout.split() == ["True", "True", "False", ":4096:8"]


@pytest.mark.job
def test_deterministic_trains_to_the_same_weights_on_cpu(tmp_path: Path, sample_root: Path) -> None:
    """On CPU torch's kernels are deterministic already: the switch changes no weight (and no op refuses)."""
    shas = []
    for value in ("true", "false"):
        run = tmp_path / value
        ranks.train(
            run, f"deterministic={value}", "steps=3", "log.every=1", f"data.root={sample_root / 'pix2pix'}", world=1
        )
        shas.append(json.loads((run / "summary.json").read_text())["weights_sha256"])
    assert shas[0] == shas[1]


def test_every_module_of_the_project_imports() -> None:
    """Each module of trainer/ and jobs/ in one fresh interpreter (a module moved, and an import of its old place
    left behind, fails here rather than in the one job that reaches it)."""
    code = (
        "import importlib, pkgutil\n"
        "for package in ('trainer', 'jobs'):\n"
        "    root = importlib.import_module(package)\n"
        "    for info in pkgutil.walk_packages(root.__path__, package + '.'):\n"
        "        if not info.name.endswith('__main__'):\n"
        "            importlib.import_module(info.name)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_command_of_jobs_is_one_of_slurm_ddps_and_settings_works_beside_your_trainer_py(tmp_path: Path) -> None:
    """The installed command is how a project with its own jobs.py or trainer.py reaches ours: it must have
    them all (it once lacked top), and the settings table (python -m trainer beside a trainer.py runs yours)."""
    from jobs import cli

    commands = {p.stem for p in (ROOT / "jobs").glob("*.py") if "\ndef main(" in p.read_text()} - {"cli"}
    assert commands <= set(cli.COMMANDS), commands - set(cli.COMMANDS)
    (tmp_path / "trainer.py").write_text("raise SystemExit('the user trainer.py ran')\n")
    slurm_ddp = Path(sys.executable).parent / "slurm-ddp"
    done = subprocess.run([str(slurm_ddp), "settings", "task=classify"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("| key | default | description |"), done.stderr
    assert "| `classify.model` |" in done.stdout, done.stdout  # the task's own table


def test_no_command_prints_a_traceback_into_a_pipe_its_reader_closed(tmp_path: Path) -> None:
    """`slurm-ddp status RUN | head -3`: the reader may go before the command has written. Every command ends
    quietly then (exit 1, as Python's own on EPIPE), never with a BrokenPipeError traceback or 'Exception
    ignored' at exit. The reader here closes at once, before the command writes anything. Every command's
    main() is wrapped by trainer.errors.one_line_errors, which does it: those not run here too."""
    import importlib

    from jobs import cli

    for name in [*(n for n in cli.COMMANDS if n != "settings"), "cli"]:
        assert hasattr(importlib.import_module(f"jobs.{name}").main, "__wrapped__"), name
    run = tmp_path / "runs" / "run"
    (run / "logs").mkdir(parents=True)
    record = {"job_id": "4194000", "executor": "local", "log": str(run / "logs" / "4194000_0_log.out")}
    (run / "job.json").write_text(json.dumps(record))
    (run / "logs" / "4194000_0_log.out").write_text("step 1\n" * 1000)
    (run / "summary.json").write_text(json.dumps({"finished": True, "final_step": 48}))
    slurm_ddp = Path(sys.executable).parent / "slurm-ddp"
    for args in (["--help"], ["status", run], ["list", "--root", run.parent], ["logs", run], ["top", "--once", run],
                 ["wait", run], ["settings"]):  # fmt: skip
        reader = subprocess.Popen([slurm_ddp, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert reader.stdout is not None and reader.stderr is not None
        reader.stdout.close()
        said = reader.stderr.read().decode()
        assert reader.wait(timeout=120) in (0, 1) and not said, (args, said)


def test_a_broken_pipe_that_is_not_the_output_is_not_taken_for_a_closed_reader() -> None:
    """A child's or a connection's pipe breaking is a failure of its own: raised, not a quiet exit 1."""
    from trainer.errors import one_line_errors

    @one_line_errors
    def main() -> int:
        raise BrokenPipeError("the child's stdin")

    with pytest.raises(BrokenPipeError):
        main()

"""A user's project with its own trainer.py, jobs.py, utils.py, ... (tests/userproject.py), submitted with the
installed `slurm-ddp` from its own folder: neither side's imports ever resolve to the other's modules, in the
submitter, in every task, in in-job restarts, requeues and a --resume; outputs stay out of the snapshot."""

import json
import subprocess
from pathlib import Path

from tests import userproject
from tests.messages import Golden, refused
from tests.support import job_id_of, run_dir_of, slurm_ddp


def test_a_project_with_its_own_trainer_and_jobs_modules_runs_restarts_requeues_and_resumes(tmp_path: Path) -> None:
    project = userproject.make(tmp_path / "project", outputs_mb=2)
    (project / "local.yaml").write_text("executor: local\ngpus_per_node: 2\nrestarts_in_job: 1\nsnapshot_limit_mb: 1\n")
    # start 1 fails (an in-job restart), start 2 asks for a requeue, start 3 finishes
    result = slurm_ddp(
        project, "submit", "--profile", "local.yaml", "--wait", "--", "python", "train.py", "fail,requeue"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    assert run_dir.parent == project / "runs"
    for rank in (0, 1):
        records = userproject.starts(run_dir, rank)
        assert len(records) == 3 and all(userproject.all_from(run_dir, r) for r in records), records
    code = sorted(str(p.relative_to(run_dir / "code")) for p in (run_dir / "code").rglob("*") if p.is_file())
    assert {"trainer.py", "jobs.py", "tests/test_model.py"} <= set(code), code
    assert not any(n.startswith(("runs/", "lightning_logs/", "trainer/", "jobs/")) for n in code), code
    assert (run_dir / "tool" / "trainer" / "entry" / "task.py").is_file()  # the tool's own, beside your code
    assert "note:" not in result.stderr  # nothing to advise: runs/ and lightning_logs/ are outputs
    status = slurm_ddp(project, "status", str(run_dir))
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.splitlines()[0] == f"job {job_id_of(run_dir)}: COMPLETED", status.stdout
    fix = "def seed():\n    return 1  # fixed after the submit\n"
    (project / "utils.py").write_text(fix)
    again = slurm_ddp(project, "submit", "--resume", str(run_dir), "--wait")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.startswith(f"code: the run's own snapshot in {run_dir / 'code'} ")  # said, in one line
    assert (run_dir / "code" / "utils.py").read_text() == userproject.FILES["utils.py"]  # the code submitted
    last = userproject.starts(run_dir, 0)
    assert len(last) == 4 and userproject.all_from(run_dir, last[-1])
    fixed = slurm_ddp(project, "submit", "--resume", str(run_dir), "--current-code", "--wait")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert fixed.stdout.startswith("code: this folder's as it is now")
    assert (run_dir / "code" / "utils.py").read_text() == fix and len(userproject.starts(run_dir, 0)) == 5
    [aside] = (run_dir / "superseded").iterdir()
    assert (aside / "code" / "utils.py").read_text() == userproject.FILES["utils.py"]
    assert (aside / "tool" / "trainer").is_dir()


def test_current_code_without_resume_is_refused_in_one_line(golden: Golden, tmp_path: Path) -> None:
    project = userproject.make(tmp_path / "project")
    result = slurm_ddp(project, "submit", "--current-code", "--", "python", "train.py")
    refused(result, golden, "--current-code")
    assert not (project / "runs").exists() or not any((project / "runs").glob("*/job.json"))


def test_a_task_class_imports_the_projects_own_trainer_module(tmp_path: Path) -> None:
    project = userproject.make(tmp_path / "project")
    (project / "local.yaml").write_text("executor: local\ngpus_per_node: 2\n")
    args = ["--profile", "local.yaml", "--wait", "task=my_task.py:Fit", "steps=4", "log.every=2", "log.image_every=0"]
    result = slurm_ddp(project, "submit", *args, "eval.every=0")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((run_dir_of(result) / "summary.json").read_text())
    assert summary["final_step"] == 4


def test_python_dash_m_works_beside_a_trainer_py_and_the_command_needs_no_folder(tmp_path: Path) -> None:
    """`python -m jobs.submit` beside your trainer.py (Python itself stops it beside a jobs.py: hence slurm-ddp)."""
    project = userproject.make(tmp_path / "project")
    (project / "jobs.py").unlink()
    (project / "train.py").write_text(userproject.TRAIN.replace("import trainer, jobs,", "import trainer, "))
    (project / "train.py").write_text(
        (project / "train.py").read_text().replace("(trainer, jobs, utils", "(trainer, utils")
    )
    (project / "train.py").write_text(
        (project / "train.py").read_text().replace(' and jobs.SCHEDULE == ["nightly"]', "")
    )
    (project / "local.yaml").write_text("executor: local\ngpus_per_node: 2\n")
    import sys

    cmd = [sys.executable, "-m", "jobs.submit", "--profile", "local.yaml", "--wait", "--", "python", "train.py"]
    result = subprocess.run(
        cmd, cwd=project, env=userproject.user_environment(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    usage = subprocess.run([userproject.slurm_ddp(), "nosuch"], capture_output=True, text=True)
    assert usage.returncode == 2 and usage.stderr.startswith("error: ") and len(usage.stderr.splitlines()) == 1

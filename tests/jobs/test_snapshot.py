"""The code you submitted is the code that runs: the snapshot in the run directory, and where the run came from."""

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from jobs.snapshot import plan_snapshot
from tests.messages import Golden
from tests.support import EXAMPLE, assert_refused, cli, poll, submit, write_profile
from trainer.errors import UserError

BROKEN = EXAMPLE + "raise RuntimeError('edited after submit')\n"
RUN = ["task=my_tasks:Denoise", "data.root=photos", "Denoise.width=8", "log.every=2", "log.image_every=0"]


def git(folder: Path, *args: str) -> str:
    cmd = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def workspace(tmp_path: Path, sample_root: Path) -> Path:
    """A user's folder: README's example task, their images, a local profile whose runs land inside it."""
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "my_tasks.py").write_text(EXAMPLE)
    (folder / "photos").mkdir()
    for image in sorted((sample_root / "classify" / "circle").iterdir())[:16]:
        (folder / "photos" / image.name).write_bytes(image.read_bytes())
    write_profile(folder, f"executor: local\ngpus_per_node: 2\nrun_root: {folder / 'runs'}\n", "local.yaml")
    return folder


def ranks(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "provenance" / "ranks").glob("rank_*.json"))]


def test_git_tree_snapshot_is_what_git_would_commit(tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "model.py").write_text("A = 1\n")
    (folder / ".gitignore").write_text("data/\n*.log\n")
    git(folder, "init", "-q")
    git(folder, "add", ".")
    git(folder, "commit", "-qm", "first")
    (folder / "pkg" / "model.py").write_text("A = 2\n")  # uncommitted change: copied as it is now
    (folder / "new.py").write_text("")  # untracked, not ignored: copied
    (folder / "data").mkdir()
    (folder / "data" / "big.bin").write_bytes(b"x" * 10)  # ignored: left out
    (folder / "run.log").write_text("")
    (folder / "runs").mkdir()
    (folder / "runs" / "old.txt").write_text("")  # the run root: left out though git would take it
    snapshot = plan_snapshot(folder, [folder / "runs"], [], 1)
    names = {name for _, name in snapshot.files}
    assert {".gitignore", "pkg/model.py", "new.py"} <= names
    assert not any(n.startswith(("data/", "runs/")) or n.endswith(".log") for n in names)
    assert not any(n.startswith(("trainer/", "jobs/")) for n in names)  # the tool's code: never in yours
    assert {"trainer/entry/task.py", "jobs/submit.py"} <= {name for _, name in snapshot.tool_files}  # but beside it
    assert snapshot.git["dirty"] is True and len(str(snapshot.git["commit"])) == 40


def test_plain_folder_snapshot_skips_hidden_caches_venvs_and_patterns(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    for name in ["a.py", ".env", "__pycache__/a.pyc", "venv/pyvenv.cfg", "venv/lib/x.py", "data/x.bin", "src/b.py"]:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("")
    (folder / "data" / "x.bin").write_bytes(b"\0" * (2 << 20))  # over the limit, but excluded: never walked
    snapshot = plan_snapshot(folder, [], ["data/"], 1)
    names = {name for _, name in snapshot.files if not name.startswith(("trainer/", "jobs/"))}
    assert names == {"a.py", "src/b.py"} and snapshot.git == {}


def test_a_snapshot_over_the_limit_is_refused_naming_what_to_exclude(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    (folder / "weights").mkdir(parents=True)
    (folder / "weights" / "model.bin").write_bytes(b"\0" * (3 << 20))
    with pytest.raises(UserError, match=r"holds 3 MiB .* \(limit 2 MiB\), 3 MiB of it in weights/; move weights/"):
        plan_snapshot(folder, [], [], 2)


def test_submit_refuses_a_large_folder_before_writing_anything(golden: Golden, workspace: Path) -> None:
    (workspace / "checkpoints.bin").write_bytes(b"\0" * (2 << 20))
    profile = workspace / "local.yaml"
    profile.write_text(profile.read_text() + "snapshot_limit_mb: 1\n")
    result = submit("--profile", str(profile), *RUN, cwd=workspace)
    assert_refused(result, golden, "snapshot_limit_mb", workspace / "runs")  # its golden line names checkpoints.bin


@pytest.mark.parametrize(("line", "named"), [("snapshot_limit_mb: 0", "snapshot_limit_mb")])
def test_bad_snapshot_settings_are_one_line(golden: Golden, workspace: Path, line: str, named: str) -> None:
    profile = workspace / "local.yaml"
    profile.write_text(profile.read_text() + line + "\n")
    assert_refused(submit("--profile", str(profile), *RUN, cwd=workspace), golden, named, workspace / "runs")


def test_a_resume_runs_the_submitted_code_not_the_edited_tree(workspace: Path) -> None:
    """Break the task once the run is submitted: a --resume still runs the code in the snapshot."""
    git(workspace, "init", "-q")
    git(workspace, "add", "my_tasks.py", "local.yaml")
    git(workspace, "commit", "-qm", "task")
    first = submit("--profile", "local.yaml", "--name", "r", "--wait", "steps=2", *RUN, cwd=workspace)
    assert first.returncode == 0, first.stdout + first.stderr
    (workspace / "my_tasks.py").write_text(BROKEN)
    run_dir = workspace / "runs" / "r"
    resumed = submit("--profile", "local.yaml", "--resume", str(run_dir), "--wait", "steps=4", cwd=workspace)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert json.loads((run_dir / "summary.json").read_text())["final_step"] == 4
    assert (run_dir / "code" / "my_tasks.py").read_text() == EXAMPLE
    code = run_dir / "code"
    assert [(Path(r["cwd"]), Path(r["trainer"])) for r in ranks(run_dir)] == [(code, run_dir / "tool" / "trainer")] * 2
    assert not (code / "runs").exists() and len(list((code / "photos").iterdir())) == 16  # untracked: copied
    submitted = json.loads((run_dir / "provenance" / "submit.json").read_text())
    assert submitted["argv"][3:] == ["--profile", "local.yaml", "--name", "r", "--wait", "steps=2", *RUN]
    assert submitted["profile"]["gpus_per_node"] == 2 and submitted["git"]["dirty"] is True  # photos/ untracked
    assert "# untracked: photos/" in (run_dir / "provenance" / "git.diff").read_text()
    environment = json.loads((run_dir / "provenance" / "environment.json").read_text())
    assert environment["torch"].startswith("2.") and any(p.startswith("submitit==") for p in environment["packages"])
    report = run_dir / "provenance" / "collect_env.txt"  # torch's own, written by a child of rank 0's
    poll("torch's environment report", report.exists, timeout=120)
    assert report.read_text().startswith("PyTorch version: 2.")
    assert submitted["git"]["commit"] == git(workspace, "rev-parse", "HEAD").strip()  # dirty: above
    # jobs.status's code line gives submit.json's record: `code: COMMIT on BRANCH (dirty: ...`
    status = cli("jobs.status", str(run_dir)).stdout
    said = re.search(r"^code: (\w+) on (\S+) \((\w+)", status, re.MULTILINE)
    assert said and said.groups() == (submitted["git"]["commit"][:12], submitted["git"]["branch"], "dirty"), status


def test_a_script_runs_from_the_snapshot(workspace: Path) -> None:
    """A script started from the submitted folder's copy: an edit after submit does not reach it."""
    script = "import os, sys\nprint('cwd', os.getcwd(), 'file', os.path.abspath(__file__))\n"
    (workspace / "train.py").write_text(script)
    first = submit("--profile", "local.yaml", "--name", "s", "--wait", "--", "python", "train.py", cwd=workspace)
    assert first.returncode == 0, first.stdout + first.stderr
    (workspace / "train.py").write_text("raise SystemExit(3)\n")
    run_dir = workspace / "runs" / "s"
    again = submit("--profile", "local.yaml", "--resume", str(run_dir), "--wait", cwd=workspace)
    assert again.returncode == 0, again.stdout + again.stderr
    code = run_dir / "code"
    assert f"cwd {code} file {code / 'train.py'}" in again.stdout
    assert json.loads((run_dir / "command.json").read_text())["submitted_from"] == str(workspace)


def test_a_task_file_outside_the_folder_joins_the_snapshot(workspace: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "far_tasks.py").write_text(EXAMPLE)
    args = [f"task={elsewhere / 'far_tasks.py'}:Denoise", *RUN[1:], "steps=2"]
    result = submit("--profile", "local.yaml", "--name", "far", "--wait", *args, cwd=workspace)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = workspace / "runs" / "far"
    task = yaml.safe_load((run_dir / "config.yaml").read_text())["task"]
    assert task == f"{run_dir / 'code' / '_tasks' / 'far_tasks.py'}:Denoise"


def test_dry_run_copies_nothing_and_no_snapshot_runs_in_place(workspace: Path) -> None:
    (workspace / "huge.bin").write_bytes(b"\0" * (2 << 20))  # over the limit below: --dry-run does not list
    profile = write_profile(
        workspace,
        "executor: slurm\nsnapshot_limit_mb: 1\nrun_root: " + str(workspace / "runs") + "\n",
        "slurm.yaml",
    )
    dry = submit("--profile", str(profile), "--dry-run", "--name", "d", *RUN, cwd=workspace)
    assert dry.returncode == 0, dry.stderr
    assert f"#SBATCH --chdir={workspace / 'runs' / 'd' / 'code'}\n" in dry.stdout
    assert not (workspace / "runs" / "d").exists()
    (workspace / "huge.bin").unlink()
    profile = workspace / "local.yaml"
    profile.write_text(profile.read_text() + "snapshot: false\n")
    result = submit("--profile", "local.yaml", "--name", "n", "--wait", "steps=2", *RUN, cwd=workspace)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = workspace / "runs" / "n"
    assert not (run_dir / "code").exists() and {Path(r["cwd"]) for r in ranks(run_dir)} == {workspace}
    assert "(no snapshot: the code on disk)" in cli("jobs.status", str(run_dir)).stdout


def test_outputs_stay_out_of_the_snapshot_and_out_of_the_ignored_note(tmp_path: Path) -> None:
    """A run root this tool made (tagged CACHEDIR.TAG), untracked or git-ignored, and the folders frameworks
    write: never copied, never named in the note (which must never advise including a run folder)."""
    from jobs.snapshot import ignored_entries
    from trainer.run.prepare import make_run_root

    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / ".gitignore").write_text("old_runs/\ndata/\noutputs/\n")
    (folder / "train.py").write_text("")
    outputs = ["runs/r1/checkpoints/step_1.pt", "old_runs/r0/summary.json", "lightning_logs/version_0/x.ckpt"]
    outputs += ["outputs/2026-11-27/10-00-00/last.ckpt", "src/runs/Nov27_10-00-00_host/events.out"]  # Hydra's, TB's
    for name in outputs:
        (folder / name).parent.mkdir(parents=True)
        (folder / name).write_bytes(b"\0" * 4096)
    (folder / "data").mkdir()
    (folder / "data" / "train.csv").write_text("a,b\n")
    make_run_root(folder / "runs")  # untracked, not ignored: git would list it
    make_run_root(folder / "old_runs")
    git(folder, "init", "-q")
    (folder / "pkg" / "runs").mkdir(parents=True)
    (folder / "pkg" / "runs" / "launch.py").write_text("")  # code in a folder named as TensorBoard's: git tracks it
    git(folder, "add", "pkg/runs/launch.py")
    snapshot = plan_snapshot(folder, [], [], 1)
    names = {name for _, name in snapshot.files}
    assert names == {".gitignore", "train.py", "pkg/runs/launch.py"}, names
    assert snapshot.outputs == ["lightning_logs/", "runs/", "src/runs/"]  # outputs/ is git-ignored: never listed
    assert ignored_entries(folder, [], []) == ["data/"]  # the only thing worth a note


def test_the_ignored_note_advises_modules_in_and_data_read_where_it_lies(tmp_path: Path) -> None:
    """What git ignores is listed by folder (a data folder is one entry, never walked); an editable install's
    build leftovers and hidden entries say nothing; a module the command may import is advised in with
    snapshot_include; data is advised read by an absolute path, never copied into every run."""
    from jobs.snapshot import ignored_entries, ignored_note, included_files

    folder = tmp_path / "repo"
    ignore = ["data/", "build/", "*.egg-info/", ".pdm-build/", ".idea/", "local_settings.py", "myext/", "*.npy"]
    names = [f"data/d{i % 10}/{i}.png" for i in range(500)] + ["features.npy", "local_settings.py"]
    names += ["build/lib/pkg/model.py", "pkg.egg-info/PKG-INFO", ".pdm-build/pkg.pth", ".idea/workspace.xml"]
    names += ["myext/__init__.py", "myext/_fast.so", "pkg/model.py", ".gitignore"]
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("\n".join(ignore) if name == ".gitignore" else "x")
    git(folder, "init", "-q")
    entries = ignored_entries(folder, [], [])
    assert entries == ["data/", "features.npy", "local_settings.py", "myext/"]
    assert plan_snapshot(folder, [], [], 1).ignored == entries
    assert ignored_note(folder, entries).splitlines() == [
        "note: git-ignored local_settings.py, myext/ are not in the code snapshot the tasks run in; if the command "
        "imports them, add snapshot_include: ['local_settings.py', 'myext/*'] to the profile",
        "note: git-ignored data/, features.npy are not in the code snapshot the tasks run in (a copy of "
        f"{folder}); a script reading them by a relative path will not find them: read them by an absolute path, "
        f"e.g. {folder}/data",
    ]
    include = ["local_settings.py", "data/d1/*"]
    assert ignored_entries(folder, [], included_files(folder, [], include)) == ["features.npy", "myext/"]
    copied = {name for _, name in plan_snapshot(folder, [], [], 1, include).files}
    assert copied == {
        ".gitignore",
        "pkg/model.py",
        "local_settings.py",
        *(n for n in names if n.startswith("data/d1/")),
    }

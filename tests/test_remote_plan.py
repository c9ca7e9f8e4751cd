"""Submitting over SSH, its pure parts: the remote command line, the profile the login node reads, what the
snapshot sends. The flows themselves run against a real sshd and the test cluster: tests/slurm/test_remote.py."""

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from jobs.profiles import Profile
from jobs.remote.agent import MANIFEST
from jobs.remote.ssh import Login, ssh_argv
from jobs.remote.submit import cluster_profile, with_profile
from jobs.remote.sync import changed_tar, digest
from jobs.snapshot import Snapshot
from tests.conftest import ROOT
from trainer.errors import UserError


@pytest.mark.parametrize(
    "word", ["--name=x;touch /tmp/p", "steps=1$(touch /tmp/p)", "`id`", "a'b\"c", "line\nbreak", "*", "~root", "$USER"]
)
def test_the_remote_command_line_gives_every_word_back_as_it_was(
    word: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The login shell parses the line ssh sends it: run by sh here, each argument comes back as one word,
    unexpanded (an agent that prints its arguments stands in for the real one)."""
    echo = tmp_path / "agent.py"
    echo.write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    monkeypatch.setattr("jobs.remote.ssh.AGENT", echo)
    login = Login("alice@cluster.example.org", "/scratch/$USER/runs", ["-p", "2222"], sys.executable)
    argv = ssh_argv(login, "run", "/scratch/$USER/runs/x/code", "jobs.submit", word)
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"] and argv[-2] == "alice@cluster.example.org"
    assert argv[argv.index("--") - 2 : argv.index("--")] == ["-p", "2222"]  # the profile's ssh_options, last
    shell = subprocess.run(["sh", "-c", argv[-1]], capture_output=True, text=True, cwd=tmp_path)
    assert json.loads(shell.stdout) == ["run", "/scratch/$USER/runs/x/code", "jobs.submit", word]
    assert not Path("/tmp/p").exists()


@pytest.mark.parametrize("login", ["alice@host\nrm -rf ~", "host;id", "-oProxyCommand=id", "a b", "$(id)@host", ""])
def test_a_login_that_is_not_a_user_at_a_host_is_refused(login: str) -> None:
    with pytest.raises(UserError, match="is not user@host or a Host alias"):
        Login(login, "/runs")


def test_the_login_nodes_profile_has_every_field_but_the_connection_and_runs_in_remote_root() -> None:
    profile = Profile("site", "slurm", nodes=2, login="a@h", remote_root="/scratch/runs", ssh_options=["-p", "2"])
    seen = cluster_profile(profile)
    assert seen["run_root"] == "/scratch/runs" and seen["nodes"] == 2
    assert not {"name", "login", "remote_root", "ssh_options"} & seen.keys()
    Profile("site", **seen)  # a valid profile there: no login, so it submits with sbatch


def test_the_submits_arguments_there_name_the_sent_profile_and_leave_the_following_to_the_laptop() -> None:
    argv = ["--profile", "site.yaml", "--wait", "steps=4", "--", "python", "t.py", "--profile", "x"]
    assert with_profile(argv, "P") == ["steps=4", "--profile", "P", "--", "python", "t.py", "--profile", "x"]
    assert with_profile(["--profile=site", "a=1"], "P") == ["a=1", "--profile", "P"]


def test_only_new_or_changed_files_travel(tmp_path: Path) -> None:
    for name, text in (("a.py", "a"), ("b.py", "b"), ("pkg/c.py", "c")):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    files = [(tmp_path / n, n) for n in ("a.py", "b.py", "pkg/c.py")]
    snapshot = Snapshot(tmp_path, files, 3, tool_files=[(tmp_path / "a.py", "jobs/x.py")])
    there = {"code/a.py": digest(tmp_path / "a.py"), "code/b.py": "0" * 64, "tool/jobs/x.py": digest(tmp_path / "a.py")}
    data, sent = changed_tar(snapshot, there, {".slurm-ddp/profile.yaml": b"executor: slurm\n"})
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile(MANIFEST).read())  # type: ignore[union-attr]
    # b changed since, c new; your files under code/, the tool's beside them under tool/, never mixed
    assert sent == 2 and sorted(names) == sorted(["code/b.py", "code/pkg/c.py", MANIFEST, "code/.slurm-ddp/profile.yaml"])
    assert manifest == ["code/a.py", "code/b.py", "code/pkg/c.py", "tool/jobs/x.py", "code/.slurm-ddp/profile.yaml"]


def test_the_agent_refuses_a_path_outside_its_folder(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("../escaped.py")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    agent = (ROOT / "jobs" / "remote" / "agent.py").read_text()
    done = subprocess.run(
        [sys.executable, "-c", agent, "receive", str(tmp_path / "copy")], input=buffer.getvalue(), capture_output=True
    )
    assert done.returncode == 2 and b"refusing '../escaped.py'" in done.stderr
    assert not (tmp_path / "escaped.py").exists()


def test_a_dry_run_of_a_profile_for_another_machine_prints_the_clusters_script_without_connecting(
    tmp_path: Path,
) -> None:
    (tmp_path / "site.yaml").write_text(
        "executor: slurm\nlogin: nobody@unreachable.invalid\nremote_root: /scratch/runs\npython: /opt/py/bin/python\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "jobs.submit", "--profile", str(tmp_path / "site.yaml"), "--dry-run", "--name", "d"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "#SBATCH" in done.stdout and "/scratch/runs/d/logs/%j_%t_log.out" in done.stdout
    assert "/opt/py/bin/python -u -m submitit.core._submit" in done.stdout
    assert not (tmp_path / "runs").exists()

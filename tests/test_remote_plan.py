"""Submitting over SSH, its pure parts: the remote command line, the profile the login node reads, what the
snapshot sends. The flows themselves run against a real sshd and the test cluster: tests/slurm/test_remote.py."""

import dataclasses
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from jobs.ops.remote_submit import cluster_profile, with_after, with_profile, with_resume
from jobs.profiles import profile_of
from jobs.remote.agent import MANIFEST
from jobs.remote.ssh import Login, ssh_argv
from jobs.remote.sync import changed_tar, digest
from jobs.snapshot import Snapshot
from tests.messages import Golden, raises
from tests.support import ROOT
from trainer.errors import UserError, one_line_errors


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
    flat = {"name": "site", "executor": "slurm", "nodes": 2, "login": "a@h", "remote_root": "$SCRATCH/runs"}
    profile = profile_of(flat | {"ssh_options": ["-p", "2"]})
    seen = cluster_profile(profile, "/scratch/alice/runs")  # as the login node expanded it
    assert seen["run_root"] == "/scratch/alice/runs" and seen["nodes"] == 2
    assert not {"name", "login", "remote_root", "ssh_options"} & seen.keys()
    profile_of({"name": "site", **seen})  # a valid profile there: no login, so it submits with sbatch


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
    assert sent == 2 and sorted(names) == sorted(
        ["code/b.py", "code/pkg/c.py", MANIFEST, "code/.slurm-ddp/profile.yaml"]
    )
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


def test_a_dry_run_of_a_profile_for_another_machine_leaves_its_variables_to_that_machine(tmp_path: Path) -> None:
    """remote_root: $SCRATCH/runs is the login node's $SCRATCH: the laptop's --dry-run shows it as written,
    never as this machine's $SCRATCH or home."""
    (tmp_path / "site.yaml").write_text(
        "executor: slurm\nlogin: nobody@unreachable.invalid\nremote_root: $SCRATCH/runs\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "SCRATCH": "/laptop/scratch", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "jobs.submit", "--profile", str(tmp_path / "site.yaml"), "--dry-run", "--name", "d"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "$SCRATCH/runs/d/logs/%j_%t_log.out" in done.stdout and "/laptop/scratch" not in done.stdout
    assert str(tmp_path) not in done.stdout


def agent(
    *args: str, data: bytes = b"", env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The login node's agent as ssh runs it: `python -c TEXT ACTION ARGS...`."""
    text = (ROOT / "jobs" / "remote" / "agent.py").read_text()
    return subprocess.run([sys.executable, "-c", text, *args], input=data, capture_output=True, env=env, cwd=cwd)


@pytest.mark.parametrize(
    ("root", "named"),
    [
        ("$NOT_SET_THERE/runs", "NOT_SET_THERE"),
        ("${NOT_SET_THERE}/runs", "NOT_SET_THERE"),
        ("$RELATIVE/runs", "RELATIVE"),
    ],
)
def test_the_login_node_refuses_a_remote_root_that_is_not_absolute_once_expanded_there(
    golden: Golden, tmp_path: Path, root: str, named: str
) -> None:
    """A `$VAR` the login node's shell-less ssh command does not set, or one that expands to a relative path,
    would have put runs inside the snapshot cache (the folder the submit runs in): refused, nothing made."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RELATIVE": "rel"}
    (tmp_path / "ssh-cwd").mkdir()
    done = agent("hello", root, env=env, cwd=tmp_path / "ssh-cwd")
    assert done.returncode == 2 and done.stdout == b"", done.stderr
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: remote_root ") and named in lines[0], lines
    golden(lines[0])
    assert not (tmp_path / "rel").exists() and not list((tmp_path / "ssh-cwd").iterdir())
    expanded = json.loads(agent("hello", "~/$RELATIVE/runs", env=env).stdout)
    assert expanded["root"] == str(tmp_path / "rel" / "runs")


def snapshot_tar(files: dict[str, bytes]) -> bytes:
    """What the laptop sends: the files, and the manifest naming them."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, content in {**files, MANIFEST: json.dumps(list(files)).encode()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def test_the_snapshot_cache_clean_up_deletes_only_files_it_put_there(tmp_path: Path) -> None:
    """A file the laptop deleted goes from the login node's copy; a run that a relative run_root once put
    inside the copy (checkpoints of a running job) stays, and is neither read nor sent back as the copy's."""
    cache = tmp_path / "cache"
    first = agent("receive", str(cache), data=snapshot_tar({"code/a.py": b"a", "code/b.py": b"b"}))
    assert first.returncode == 0, first.stderr
    run = cache / "code" / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "ckpt.pt").write_bytes(b"weights")
    (cache / "code" / "notes.txt").write_text("mine")
    held = json.loads(agent("manifest", str(cache)).stdout)
    assert sorted(held) == ["code/a.py", "code/b.py"]
    second = agent("receive", str(cache), data=snapshot_tar({"code/a.py": b"a2"}))
    assert second.returncode == 0, second.stderr
    assert (cache / "code" / "a.py").read_bytes() == b"a2" and not (cache / "code" / "b.py").exists()
    assert (run / "ckpt.pt").read_bytes() == b"weights" and (cache / "code" / "notes.txt").read_text() == "mine"


def hostile_pack(tmp_path: Path, members: list[tarfile.TarInfo]) -> list[str]:
    """A login node's argv for `pack` that prints a tar of `members` (each with content b"x" if a file)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info in members:
            tar.addfile(info, io.BytesIO(b"x") if info.isfile() else None)
    (tmp_path / "pack.tar").write_bytes(buffer.getvalue())
    return [
        sys.executable,
        "-c",
        f"import sys; sys.stdout.buffer.write(open({str(tmp_path / 'pack.tar')!r}, 'rb').read())",
    ]


def member(name: str, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = 1 if kind == tarfile.REGTYPE else 0
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    return info


@pytest.mark.parametrize(
    "bad",
    [
        member("remote.json"),
        member("./remote.json"),
        member("tensorboard/../remote.json"),
        member("../outside.txt"),
        member("/tmp/outside.txt"),
        member("job.json"),
        member("tensorboard//x"),
        member("summary.json", tarfile.DIRTYPE),
        member("tensorboard/events", tarfile.SYMTYPE),
    ],
    ids=lambda m: f"{m.name}:{m.type.decode() or '0'}",
)
def test_fetch_writes_only_what_an_honest_pack_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: tarfile.TarInfo
) -> None:
    """The login node's pack is data: a record of the run or a file under tensorboard/, nothing else. Never
    the laptop's own remote.json (whose ProxyCommand the next jobs.status would run). One line; the files
    before the bad member stay whole, nothing after it is written, no .part is left."""
    from jobs.ops import follow
    from jobs.remote.runs import RemoteRun
    from jobs.remote.ssh import Connection

    argv = hostile_pack(tmp_path, [member("summary.json"), bad, member("error.txt")])
    monkeypatch.setattr(Connection, "argv", lambda self, *a: argv)
    monkeypatch.setattr("jobs.remote.ssh.control_options", lambda login: [])
    folder = tmp_path / "runs" / "r1"
    folder.mkdir(parents=True)
    (folder / "remote.json").write_text("{}")
    run = RemoteRun(Login("a@h", "/runs"), "/runs/r1", "1", "site", "/runs/r1/code")
    with pytest.raises(UserError, match=r"^the cluster sent .*, not a record or event file of the run; kept the 1"):
        follow.fetch(run, folder)
    assert (folder / "remote.json").read_text() == "{}" and (folder / "summary.json").read_bytes() == b"x"
    assert not (folder / "error.txt").exists() and not list(tmp_path.rglob("*.part"))
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "runs" / "outside.txt").exists()


def test_fetch_refuses_in_one_line_a_folder_where_a_record_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs.ops import follow
    from jobs.remote.runs import RemoteRun
    from jobs.remote.ssh import Connection

    argv = hostile_pack(tmp_path, [member("tensorboard/events.out.tfevents.1"), member("summary.json")])
    monkeypatch.setattr(Connection, "argv", lambda self, *a: argv)
    monkeypatch.setattr("jobs.remote.ssh.control_options", lambda login: [])
    folder = tmp_path / "runs" / "r1"
    (folder / "summary.json").mkdir(parents=True)
    run = RemoteRun(Login("a@h", "/runs"), "/runs/r1", "1", "site", "/runs/r1/code")
    with pytest.raises(UserError, match=r"summary.json: Is a directory .*; move it aside and fetch again$"):
        follow.fetch(run, folder)
    assert (folder / "tensorboard" / "events.out.tfevents.1").read_bytes() == b"x"
    assert not list(tmp_path.rglob("*.part"))


def test_a_resume_names_the_run_there_in_either_form() -> None:
    """`--resume runs/NAME` and `--resume=runs/NAME` (once a traceback) both reach the login node as the run
    directory there; --wait stays here; the command's own --resume is its own."""
    there = "/scratch/runs/r1"
    for given in (["--resume", "runs/r1"], ["--resume=runs/r1"]):
        argv = [*given, "--wait", "steps=9", "--", "python", "t.py", "--resume", "x"]
        assert with_resume(argv, there) == ["--resume", there, "steps=9", "--", "python", "t.py", "--resume", "x"]


def test_after_a_run_recorded_here_names_its_run_directory_on_the_login_node(
    golden: Golden, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--after runs/NAME` (or NAME) from the laptop: the login node's submit gets the run directory there."""
    from jobs.remote import runs
    from jobs.remote.runs import RemoteRun

    monkeypatch.chdir(tmp_path)
    login = Login("a@h", "/scratch/runs")
    runs.save(tmp_path / "runs" / "r1", RemoteRun(login, "/scratch/runs/r1", "5", "site", "/scratch/runs/r1/code"))
    argv = ["--after", "runs/r1", "--after=r1", "--after", "123", "--", "python", "t.py", "--after", "r1"]
    assert with_after(argv, login) == [
        "--after", "/scratch/runs/r1", "--after=/scratch/runs/r1", "--after", "123", "--", "python", "t.py", "--after", "r1"
    ]  # fmt: skip
    with raises(golden, "a@h", "b@h"):
        with_after(argv, Login("b@h", "/scratch/runs"))


def test_a_connection_that_drops_after_it_worked_is_named_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    """ssh's 255 after the login node answered (the snapshot's transfer cut): the connection dropped, run
    again; not advice to check the profile's login and ssh_options."""
    from jobs.remote.ssh import Connection

    monkeypatch.setattr("jobs.remote.ssh.control_options", lambda login: [])
    answers = iter([[sys.executable, "-c", "print('{}')"], [sys.executable, "-c", DROP]])
    monkeypatch.setattr(Connection, "argv", lambda self, *a: next(answers))
    connection = Connection(Login("a@h", "/runs"))
    assert connection.call("manifest", "/runs/x") == b"{}\n"
    with pytest.raises(UserError, match=r"^the connection to a@h dropped during receive \(.*Broken pipe\); nothing is"):
        connection.call("receive", "/runs/x", data=b"tar")


DROP = "import sys; sys.stderr.write('client_loop: send disconnect: Broken pipe\\n'); sys.exit(255)"


def test_what_a_login_node_says_reaches_the_terminal_as_one_printable_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A login node's reply is data: an error line there with a terminal escape (a window title) and a
    C1 control shows as one plain line here, exit code 2."""
    from jobs.remote.ssh import Connection

    hostile = "import sys; sys.stderr.write('error: no \\x1b]0;owned\\x07run\\x9bthere\\n'); sys.exit(1)"
    monkeypatch.setattr("jobs.remote.ssh.control_options", lambda login: [])
    monkeypatch.setattr(Connection, "argv", lambda self, *a: [sys.executable, "-c", hostile])
    command = one_line_errors(lambda: len(Connection(Login("a@h", "/runs")).call("manifest", "/runs/x")))
    assert command() == 2
    assert capsys.readouterr().err == "error: no ?]0;owned?run?there\n"


def test_advice_from_the_login_node_names_the_run_as_the_laptop_knows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command on a cluster run goes through one place (`follow.elsewhere`): the module runs there, and a
    line of advice it prints (`--resume /scratch/...`) names the run's folder here, which the laptop's commands
    take; other lines, paths inside the run's folder and other runs' folders stay the cluster's words."""
    from jobs.ops import follow
    from jobs.remote import runs
    from jobs.remote.runs import RemoteRun
    from jobs.remote.ssh import Connection

    monkeypatch.chdir(tmp_path)
    login = Login("a@h", "/scratch/runs")
    runs.save(tmp_path / "runs" / "r1", RemoteRun(login, "/scratch/runs/r1", "5", "site", "/scratch/runs/r1/code"))
    assert follow.elsewhere(str(tmp_path), "jobs.status") is None  # not a record: the run is here
    said = (
        "run directory: /scratch/runs/r1\nlast checkpoint: /scratch/runs/r1/checkpoints/step_40.pt\n"
        "error: rank 1 stopped; resubmit with --resume /scratch/runs/r1; or python -m jobs.logs /scratch/runs/r1\n"
        "hint: --resume /scratch/runs/r10 is another run, --resume /backup/scratch/runs/r1 too\n"
        "python -m jobs.wait /scratch/runs/r1/ (a trailing slash); jobs.submit --resume=/scratch/runs/r1\n"
    )
    program = f"import sys; sys.stdout.write({said!r}); sys.stderr.write({said!r}); sys.exit(1)"
    asked = []
    monkeypatch.setattr("jobs.remote.ssh.control_options", lambda login: [])
    monkeypatch.setattr(Connection, "argv", lambda self, *a: asked.append(a) or [sys.executable, "-c", program])
    assert follow.elsewhere("r1", "jobs.status") == 1
    assert asked == [("run", "/scratch/runs/r1/code", "jobs.status", "/scratch/runs/r1")]
    out, err = capsys.readouterr()
    here = (
        "run directory: /scratch/runs/r1\nlast checkpoint: /scratch/runs/r1/checkpoints/step_40.pt\n"
        "error: rank 1 stopped; resubmit with --resume runs/r1; or python -m jobs.logs runs/r1\n"
        "hint: --resume /scratch/runs/r10 is another run, --resume /backup/scratch/runs/r1 too\n"
        "python -m jobs.wait runs/r1 (a trailing slash); jobs.submit --resume=runs/r1\n"
    )
    assert out == err == here
    odd = dataclasses.replace(runs.load("runs/r1"), folder="runs\\q\\1")  # type: ignore[type-var]
    assert follow.as_here("--resume /scratch/runs/r1\n", odd) == "--resume runs\\q\\1\n"  # the name, as text
    assert follow.elsewhere(str(tmp_path / "runs" / "r1"), "jobs.wait", follow_it=True) == 1  # streamed
    out, err = capsys.readouterr()
    assert out == said and "--resume runs/r1;" in err and "--offset" in asked[-1]


@pytest.mark.parametrize(
    ("code", "stderr", "answered", "drop"),
    [
        (-9, "", False, True),  # ssh itself killed mid-transfer
        (255, "", True, True),  # it answered a moment ago
        (255, "Connection to 127.0.0.1 closed by remote host.", False, True),
        (255, "client_loop: send disconnect: Broken pipe", False, True),
        (255, "ssh: connect to host x port 22: Connection refused", False, False),  # never reached
        (255, "root@x: Permission denied (publickey).", False, False),
        (1, "error: bad input", True, False),  # the agent's own refusal
    ],
)
def test_a_dropped_connection_is_told_from_one_never_made(code: int, stderr: str, answered: bool, drop: bool) -> None:
    from jobs.remote.ssh import dropped

    assert dropped(code, stderr, answered) is drop


def test_the_agent_packs_no_link_from_the_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's records and events go as plain files only: a link among them (to a file or a folder elsewhere
    on the login node) is left out, never followed."""
    from jobs.remote import agent

    outside = tmp_path / "outside"
    (outside / "tb").mkdir(parents=True)
    (outside / "secret").write_text("not the run's")
    (outside / "tb" / "events.out.tfevents.1").write_text("x")
    run = tmp_path / "run"
    (run / "tensorboard").mkdir(parents=True)
    (run / "tensorboard" / "events.out.tfevents.2").write_text("y")
    (run / "tensorboard" / "linked").symlink_to(outside / "tb")
    (run / "tensorboard" / "events.out.tfevents.3").symlink_to(outside / "secret")
    (run / "summary.json").symlink_to(outside / "secret")
    (run / "attempts.json").write_text("[]")
    out = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out))
    agent.pack(str(run))
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        assert sorted(tar.getnames()) == ["attempts.json", "tensorboard/events.out.tfevents.2"]
    (run / "tensorboard").rename(run / "tb")
    (run / "tensorboard").symlink_to(outside / "tb")  # the events folder itself a link
    out.seek(0), out.truncate()
    agent.pack(str(run))
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        assert tar.getnames() == ["attempts.json"]


class _LoginNode:
    """A Connection's `call` for jobs.ops.remote_submit.unqueued: the login node's answer to `job`."""

    def __init__(self, seen: dict) -> None:  # type: ignore[type-arg]
        self.seen = seen

    def call(self, action: str, *args: str, timeout: float = 0) -> bytes:
        assert action == "job"
        return json.dumps(self.seen).encode()


@pytest.mark.parametrize(
    ("seen", "goes"),
    [
        ({"exists": False, "job_id": None, "submitting": False, "host": "login1"}, True),
        ({"exists": True, "job_id": None, "submitting": False, "host": "login1"}, False),
        ({"exists": False, "job_id": None, "submitting": True, "host": "login1"}, False),
        ({"exists": False, "job_id": None, "submitting": False, "host": "login2"}, False),
    ],
)
def test_a_retry_after_a_drop_that_queued_nothing_simply_works(tmp_path: Path, seen: dict, goes: bool) -> None:  # type: ignore[type-arg]
    from jobs.ops.remote_submit import unqueued
    from jobs.remote import runs

    login = Login("me@login", "/scratch/runs", [], "python3")
    folder = tmp_path / "runs" / "r1"
    runs.save(folder, runs.RemoteRun(login, "/scratch/runs/r1", "", "site", "/scratch/runs/r1/code"))
    assert unqueued(_LoginNode(seen), folder, "/scratch/runs/r1", host="login1") is goes  # type: ignore[arg-type]
    assert folder.exists() is not goes
    runs.save(folder, runs.RemoteRun(login, "/scratch/runs/r1", "", "site", "/scratch/runs/r1/code"))
    queued = seen | {"job_id": "42"}
    with pytest.raises(UserError, match="r1 was queued as job 42 as the connection dropped"):
        unqueued(_LoginNode(queued), folder, "/scratch/runs/r1", host="login1")  # type: ignore[arg-type]
    runs.save(folder, runs.RemoteRun(login, "/scratch/runs/r1", "7", "site", "/scratch/runs/r1/code"))
    assert unqueued(_LoginNode(seen), folder, "/scratch/runs/r1", host="login1") is False  # a settled run stays

"""From a laptop: submit, follow, list and fetch runs on the test cluster's login node over a real OpenSSH server.

The laptop side runs with no Slurm command on its PATH and no SLURM_CONF (tests/slurm/sshd.py: laptop_env), so
nothing here can pass by calling sbatch locally; the login node is sshd on 127.0.0.1:22022 in front of the
two-node cluster, its runs under the test's `cluster-runs/`."""

import itertools
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.messages import Golden, refused
from tests.slurm import sshd
from tests.slurm.cluster import preempt_normal_jobs, release_when_requeued
from tests.support import ARGS, ROOT, poll_cluster, run_dir_of


@pytest.fixture(scope="module")
def login_node(slurm_cluster: None) -> None:
    """The test cluster's sshd (`python -m tests.slurm.cluster up` starts it too)."""
    sshd.up()


def laptop(tmp_path: Path, extra: dict | None = None) -> Path:
    """A folder on the laptop with a profile for the cluster behind sshd; runs recorded under its runs/."""
    folder = tmp_path / "laptop"
    folder.mkdir(exist_ok=True)
    mini = yaml.safe_load((ROOT / "cluster_profiles" / "mini.yaml").read_text())
    profile = mini | {
        "login": "root@127.0.0.1",
        "remote_root": str(tmp_path / "cluster-runs"),
        "ssh_options": sshd.ssh_options(),
        "python": sys.executable,
        **(extra or {}),
    }
    (folder / "site.yaml").write_text(yaml.safe_dump(profile))
    return folder


def run(folder: Path, module: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = sshd.laptop_env(folder.parent) | {"PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
    )


def job_of(output: str) -> str:
    return re.search(r"^submitted job (\d+)", output, re.M).group(1)  # type: ignore[union-attr]


def name_of(result: subprocess.CompletedProcess[str]) -> str:
    return run_dir_of(result).name


def test_submit_over_ssh_waits_through_a_cut_connection_then_status_fetch_and_list(
    login_node: None, tmp_path: Path, sample_root: Path, reference_run: Path
) -> None:
    """2 nodes x 2 tasks submitted over SSH with --wait; the ssh connection is killed while it follows, and it
    reconnects and still reports the outcome. Then status and fetch by the run's name (TensorBoard's own
    reader opens the fetched events), jobs.list with a local run beside it, and a second submit of unchanged
    code that sends no file again (refused there, one line: its override is bad)."""
    folder = laptop(tmp_path)
    data = f"data.root={sample_root / 'pix2pix'}"
    args = ["--profile", "site.yaml", "--nodes", "2", "--gpus-per-node", "2", data, "steps=60", "log.every=5"]
    env = sshd.laptop_env(tmp_path) | {"PYTHONPATH": str(ROOT)}
    out = tmp_path / "wait.out"
    with out.open("w") as sink, (tmp_path / "wait.err").open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobs.submit", *args, "--wait", "log.image_every=0"],
            cwd=folder, env=env, stdout=sink, stderr=err,
        )  # fmt: skip
        poll_cluster("training over SSH", lambda: "step 5/60" in out.read_text(), timeout=120)
        masters = subprocess.run(["pkill", "-f", r"ssh: .*slurm-ddp-ssh.*\[mux\]"], check=False)
        assert masters.returncode == 0, "no ssh master connection to cut"
        assert proc.wait(timeout=240) == 0, out.read_text() + (tmp_path / "wait.err").read_text()
    text, errors = out.read_text(), (tmp_path / "wait.err").read_text()
    assert "sent " in text and "submitted job " in text and "x 4 task(s), slurm)" in text
    assert "connection lost while following job" in errors and "finished" in text.splitlines()[-1]
    assert len(re.findall(r"^step 10/60 ", text, re.M)) == 1  # nothing shown twice after the reconnect
    name = run_dir_of(text).name
    assert (folder / "runs" / name / "remote.json").is_file()

    status = run(folder, "jobs.status", name)
    assert status.returncode == 0 and ": COMPLETED" in status.stdout, status.stdout + status.stderr
    fetched = run(folder, "jobs.fetch", name)
    assert fetched.returncode == 0, fetched.stderr
    events = next((folder / "runs" / name / "tensorboard").glob("events.out.tfevents*"))
    scalars = EventAccumulator(str(events.parent)).Reload().Scalars("train/loss")
    assert scalars[-1].step == 60
    assert json.loads((folder / "runs" / name / "summary.json").read_text())["world_size"] == 4

    local = folder / "runs" / "a-local-run"
    subprocess.run(["cp", "-r", str(reference_run), str(local)], check=True)
    listing = run(folder, "jobs.list")
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[0].split()[:7] == ["name", "profile", "job", "state", "step", "goodput", "validation"]
    rows = {line.split()[0]: line.split()[1:5] for line in lines[1:]}
    assert rows[name] == ["site", job_of(text), "COMPLETED", "60"] and rows["a-local-run"][2:] == ["COMPLETED", "48"]

    pwned = tmp_path / "pwned"
    again = run(folder, "jobs.submit", *args, f"steps=1;touch {pwned}")
    assert again.returncode == 2 and "sent 0 new or changed file(s)" in again.stdout, again.stdout + again.stderr
    assert len(again.stderr.strip().splitlines()) == 1 and "steps" in again.stderr
    assert not pwned.exists()
    entries = [p.name for p in (tmp_path / "cluster-runs").iterdir() if p.name != "CACHEDIR.TAG"]
    assert len(entries) == 2, entries  # the run and the snapshot copy: nothing more


def test_a_preempted_run_submitted_over_ssh_resumes_exactly_and_logs_follow_and_cancel_work(
    login_node: None,
    tmp_path: Path,
    sample_root: Path,
    reference_hash: str,
) -> None:
    """Submitted over SSH (2 nodes x 1 task), preempted, requeued and resumed on the cluster: it ends on the
    weights of the uninterrupted run. jobs.logs --follow by name follows it to its end over SSH; --resume of
    its folder here resumes it there; a second run is cancelled by name over SSH, and jobs.wait's advice to
    resume it names its folder here, not the cluster's."""
    folder = laptop(tmp_path)
    data = f"data.root={sample_root / 'pix2pix'}"
    result = run(folder, "jobs.submit", "--profile", "site.yaml", data, *ARGS)
    assert result.returncode == 0, result.stdout + result.stderr
    name = name_of(result)
    remote = run_dir_of(result)
    job = json.loads((folder / "runs" / name / "remote.json").read_text())["job_id"]
    poll_cluster("training", lambda: (remote / "progress.json").exists(), timeout=120)
    # Asked on the login node over SSH: a row per rank (each as of its last heartbeat, hang.beat_s apart).
    rows = lambda: [r.split()[:3] for r in run(folder, "jobs.top", name, "--once").stdout.splitlines()[2:]]  # noqa: E731
    poll_cluster("both ranks training", lambda: rows() == [["0", "node1", "training"], ["1", "node2", "training"]], 60)
    env = sshd.laptop_env(folder.parent) | {"PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "jobs.top", name]
    live = subprocess.Popen(argv, cwd=folder, env=env, stdout=subprocess.PIPE, text=True)
    try:  # live, not a terminal: a table each second, streamed from the login node as data over one connection
        assert live.stdout is not None
        frames = [line for line in itertools.islice(live.stdout, 12) if line.startswith(f"job {job}: RUNNING")]
        assert len(frames) >= 2, frames
    finally:
        live.kill()
    preempt_normal_jobs()
    release_when_requeued(job)
    followed = run(folder, "jobs.logs", name, "--follow", timeout=300)
    assert followed.returncode == 0 and "done: step 240" in followed.stdout, followed.stdout + followed.stderr
    assert run(folder, "jobs.fetch", name).returncode == 0
    summary = json.loads((folder / "runs" / name / "summary.json").read_text())
    assert summary["weights_sha256"] == reference_hash and summary["preemptions"] == 1
    resumed = run(folder, "jobs.submit", "--resume", f"runs/{name}", "steps=250", "--wait")  # where it lives
    assert resumed.returncode == 0 and "resumed from " in resumed.stdout, resumed.stdout + resumed.stderr
    assert json.loads((folder / "runs" / name / "remote.json").read_text())["profile"] == "site"

    second = run(folder, "jobs.submit", "--profile", "site.yaml", data, *ARGS)
    assert second.returncode == 0, second.stderr
    cancelled = run(folder, "jobs.cancel", name_of(second))
    assert cancelled.returncode == 0, cancelled.stderr
    poll_cluster("CANCELLED", lambda: ": CANCELLED" in run(folder, "jobs.status", name_of(second)).stdout, timeout=60)
    waited = run(folder, "jobs.wait", name_of(second))  # its advice names the run as this machine knows it
    assert waited.returncode == 1 and f"--resume runs/{name_of(second)}\n" in waited.stderr, waited.stderr


BAD = [
    ({"ssh_options": ["-p", "1", "-i", str(sshd.KEY)]}, "root@127.0.0.1"),
    ({"ssh_options": ["-p", str(sshd.PORT), "-i", "/dev/null", "-o", "StrictHostKeyChecking=no"]}, "key"),
    ({"python": "/nonexistent/python3"}, "/nonexistent/python3"),
    ({"python": "/usr/bin/python3"}, "torch"),
    ({"remote_root": "/proc/runs"}, "/proc/runs"),
    ({"remote_root": "$NOT_SET_ON_THE_LOGIN_NODE/runs"}, "NOT_SET_ON_THE_LOGIN_NODE"),
    ({"login": "root@127.0.0.1\nrm -rf /"}, "login"),
    ({"login": "root@127.0.0.1;touch /tmp/x"}, "login"),
]
# OpenSSH's and bash's own words, quoted in ours (they change with those programs' versions).
OPENSSH_OR_BASH = {
    "root@127.0.0.1": r"cannot reach \S+: (.*); check",
    "key": r"refused the key: (.*); add",
    "/nonexistent/python3": r"has no \S+: (.*); set",
}
BAD_IDS = [
    "unreachable",
    "key-refused",
    "no-python",
    "no-torch",
    "unwritable",
    "unset-variable",
    "newline",
    "semicolon",
]


@pytest.mark.parametrize(("change", "named"), BAD, ids=BAD_IDS)
def test_bad_remote_input_is_one_line_within_15_s_and_leaves_nothing(
    golden: Golden, login_node: None, tmp_path: Path, change: dict, named: str
) -> None:
    folder = laptop(tmp_path, change)
    started = time.monotonic()
    result = run(folder, "jobs.submit", "--profile", "site.yaml", "steps=4", timeout=60)
    assert result.stdout == "" and time.monotonic() - started < 15
    refused(result, golden, named, outside=OPENSSH_OR_BASH.get(named, ""))
    assert not (folder / "runs").exists()
    remote = tmp_path / "cluster-runs"
    assert not remote.exists() or not [p for p in remote.iterdir() if not p.name.startswith(".")]


def test_a_hostile_script_argument_reaches_the_script_as_text(login_node: None, tmp_path: Path) -> None:
    """`-- python show.py '$(touch X)' '; touch Y'`: the words arrive in the script's argv on the cluster; no
    shell on the login node or a node ever runs them."""
    folder = laptop(tmp_path, {"nodes": 1, "gpus_per_node": 1})
    (folder / "show.py").write_text("import json, sys\nopen('argv.json', 'w').write(json.dumps(sys.argv[1:]))\n")
    words = [f"$(touch {tmp_path / 'a'})", f"; touch {tmp_path / 'b'}", "`id`"]
    result = run(folder, "jobs.submit", "--profile", "site.yaml", "--wait", "--", "python", "show.py", *words)
    assert result.returncode == 0, result.stdout + result.stderr
    remote = run_dir_of(result)
    assert json.loads((remote / "code" / "argv.json").read_text()) == words
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_project_with_its_own_trainer_and_jobs_modules_over_ssh(login_node: None, tmp_path: Path) -> None:
    """tests/userproject.py's project on the laptop, submitted with the installed command over SSH: the login
    node's submit and both nodes' tasks import the tool from tool/ and the project's modules from code/."""
    from tests import userproject

    folder = userproject.make(laptop(tmp_path), outputs_mb=2)
    env = {k: v for k, v in sshd.laptop_env(tmp_path).items() if k != "PYTHONPATH"}
    args = ["submit", "--profile", "site.yaml", "--nodes", "2", "--gpus-per-node", "1", "--wait"]
    result = subprocess.run(
        [userproject.slurm_ddp(), *args, "--", "python", "train.py"], cwd=folder, env=env,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = tmp_path / "cluster-runs" / name_of(result)
    for rank in (0, 1):
        records = userproject.starts(run_dir, rank)
        assert len(records) == 1 and userproject.all_from(run_dir, records[0]), records
    assert not (run_dir / "code" / "runs").exists() and (run_dir / "tool" / "jobs" / "submit.py").is_file()


# The login node's python, with the connection dropping during jobs.submit: {when} the submit there runs, the
# session's sshd (this command's parent) is killed, as a network that goes away would end it.
DROPPING = """#!/bin/sh
for word in "$@"; do
  if [ "$word" = jobs.submit ]; then
    {before}
    "{python}" "$@" > "{log}" 2>&1
    kill -9 $PPID
    exit 0
  fi
done
exec "{python}" "$@"
"""


@pytest.mark.parametrize("when", ["after", "before"])
def test_a_connection_dropped_during_the_submit_leaves_a_run_the_laptop_can_find(
    login_node: None, tmp_path: Path, when: str
) -> None:
    """The laptop records the run before the login node's submit starts, then settles it: a job queued as the
    connection dropped is adopted (jobs.status NAME and jobs.list find it); a submit cut off before it made
    the run leaves no record, and one line says to run again."""
    python = tmp_path / "python"
    before = "kill -9 $PPID; exit 0" if when == "before" else ""
    python.write_text(DROPPING.format(python=sys.executable, log=tmp_path / "submit.log", before=before))
    python.chmod(0o755)
    # An ssh connection of its own (another set of options, another ControlMaster): the one this test cuts is
    # not one another test rides.
    own = [*sshd.ssh_options(), "-o", f"ConnectionAttempts={2 if when == 'after' else 3}"]
    folder = laptop(tmp_path, {"nodes": 1, "gpus_per_node": 1, "python": str(python), "ssh_options": own})
    (folder / "hello.py").write_text("print('hello')\n")
    result = run(folder, "jobs.submit", "--profile", "site.yaml", "--", "python", "hello.py", timeout=180)
    names = [p.name for p in (folder / "runs").iterdir()] if (folder / "runs").exists() else []
    if when == "before":
        assert result.returncode == 2 and names == [], result.stdout + result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith("error: the connection to root@127.0.0.1 dropped")
        assert "before any job was queued" in result.stderr and "run the same command again" in result.stderr
        return
    assert result.returncode == 0 and len(names) == 1, result.stdout + result.stderr
    assert "the job was queued all the same: job " in result.stderr, result.stderr
    record = json.loads((folder / "runs" / names[0] / "remote.json").read_text())
    job = re.search(r"^submitted job (\d+)", (tmp_path / "submit.log").read_text(), re.M).group(1)  # type: ignore[union-attr]
    assert record["job_id"] == job
    waited = run(folder, "jobs.wait", names[0])
    assert waited.returncode == 0 and "hello" in waited.stdout, waited.stdout + waited.stderr
    listed = run(folder, "jobs.list")
    assert any(line.split()[:3] == [names[0], "site", job] for line in listed.stdout.splitlines()), listed.stdout


def test_a_rehearsal_from_the_laptop_runs_on_the_login_node(login_node: None, tmp_path: Path) -> None:
    """jobs.rehearse with a login profile: the code is sent, the rehearsal runs there, where its runs' records
    are, and its certificate comes back into the laptop's runs/."""
    folder = laptop(tmp_path, {"restarts_in_job": 1})
    args = ["--profile", "site.yaml", "--nodes", "2", "--gpus-per-node", "1", "--faults", "kill", "--steps", "40"]
    result = run(folder, "jobs.rehearse", *args, "checkpoint.every=10", "log.image_every=0", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    [certificate] = (folder / "runs").glob("rehearse-*/rehearsal.json")
    [verdict] = json.loads(certificate.read_text())["faults"]
    assert verdict["verdict"] == "certified" and verdict["recovered"] == "restarted in the allocation 1x", verdict
    assert Path(verdict["run_dir"]).parent == tmp_path / "cluster-runs"  # the runs are the cluster's
    assert f"certificate here: {certificate.with_name('rehearsal.md')}" in result.stdout

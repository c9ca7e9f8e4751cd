"""Every user-facing flow on the real two-node Slurm cluster."""

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.messages import Golden, case_id, refused
from tests.slurm import cluster
from tests.support import (
    CASES,
    PLAIN,
    REFUSED,
    ROOT,
    assert_refused,
    cli,
    poll,
    poll_cluster,
    run_dir_of,
    run_dirs,
    submit,
    write_profile,
)
from trainer.run.rundir import RunDir
from trainer.supervise.hostlist import expand_hostlist
from trainer.supervise.launcher import port_from_job_id


def test_two_nodes_four_tasks_complete(mini: Path, sample_root: Path) -> None:
    result = submit(
        "--profile", str(mini), "--nodes", "2", "--gpus-per-node", "2", "--wait", f"data.root={sample_root / 'pix2pix'}"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    job_id = json.loads((run_dir / "job.json").read_text())["job_id"]
    dist_lines = [
        line
        for rank in range(4)
        for line in (run_dir / "logs" / f"{job_id}_{rank}_log.out").read_text().splitlines()
        if line.startswith("dist: ")
    ]
    fields = [dict(item.split("=", 1) for item in line.split()[1:]) for line in dist_lines]
    assert [f["rank"] for f in fields] == ["0", "1", "2", "3"]
    assert [f["local_rank"] for f in fields] == ["0", "1", "0", "1"]
    assert [f["node"] for f in fields] == ["node1", "node1", "node2", "node2"]
    assert {f["world_size"] for f in fields} == {"4"} and {f["source"] for f in fields} == {"slurm"}
    assert {f["master"].split(":")[0] for f in fields} == {"node1"}
    assert json.loads((run_dir / "summary.json").read_text())["world_size"] == 4
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert "train/loss" in events.Tags()["scalars"]
    status = cli("jobs.status", str(run_dir))
    assert f"job {job_id}: COMPLETED" in status.stdout and "nodes: node[1-2]" in status.stdout
    assert "last step: 40" in status.stdout
    logs = cli("jobs.logs", str(run_dir), "--rank", "3")
    assert logs.returncode == 0 and "dist: source=slurm rank=3 local_rank=1 world_size=4 node=node2" in logs.stdout


@pytest.mark.parametrize(("hostlist", "_"), CASES)
def test_hostlist_matches_scontrol(hostlist: str, _: list[str], slurm_cluster: None) -> None:
    out = subprocess.run(["scontrol", "show", "hostnames", hostlist], capture_output=True, text=True, check=True)
    assert expand_hostlist(hostlist) == out.stdout.split()


@pytest.mark.parametrize(("hostlist", "_"), REFUSED)
def test_what_we_refuse_scontrol_calls_invalid(hostlist: str, _: str, slurm_cluster: None) -> None:
    out = subprocess.run(["scontrol", "show", "hostnames", hostlist], capture_output=True, text=True)
    assert "Invalid hostlist" in out.stderr + out.stdout  # scontrol exits 0 even then


def test_dry_run_of_the_example_profile_matches_golden_file() -> None:
    result = submit("--profile", "example", "--dry-run", "--name", "golden")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (ROOT / "tests" / "golden" / "example.sbatch").read_text()
    assert not Path("/shared/runs/golden").exists()


def test_dry_run_is_the_script_submitit_submits(mini: Path, tmp_path: Path, sample_root: Path) -> None:
    args = ["--profile", str(mini), "--name", "same", f"data.root={sample_root / 'pix2pix'}", "steps=1"]
    dry = submit(*args, "--dry-run")
    assert dry.returncode == 0 and run_dirs(tmp_path / "runs") == []
    real = submit(*args, "--wait")
    assert real.returncode == 0, real.stderr
    job_id = json.loads((tmp_path / "runs" / "same" / "job.json").read_text())["job_id"]
    assert (tmp_path / "runs" / "same" / "logs" / f"{job_id}_submission.sh").read_text() == dry.stdout


def test_sweep_is_one_array_job(mini: Path, tmp_path: Path, sample_root: Path) -> None:
    result = submit(
        "--profile",
        str(mini),
        "--wait",
        "--sweep",
        "seed=0,1,2",
        f"data.root={sample_root / 'pix2pix'}",
        "steps=4",
        "--array-parallelism",
        "3",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    array_id = re.search(r"submitted array job (\d+)", result.stdout).group(1)  # type: ignore[union-attr]
    sweep_dir = run_dir_of(result)
    points = sorted(p.name for p in sweep_dir.iterdir() if RunDir(p).finished())
    assert points == ["0-0", "1-1", "2-2"]
    seeds = {json.loads((sweep_dir / p / "summary.json").read_text())["weights_sha256"] for p in points}
    assert len(seeds) == 3
    acct = subprocess.run(
        ["sacct", "-j", array_id, "-X", "-n", "-P", "-o", "JobID,State"], capture_output=True, text=True
    )
    rows = poll_cluster(
        "accounting of 3 tasks",
        lambda: [
            r
            for r in subprocess.run(
                ["sacct", "-j", array_id, "-X", "-n", "-P", "-o", "JobID,State"], capture_output=True, text=True
            ).stdout.split()
            if r.endswith("COMPLETED")
        ],
        timeout=30,
    )
    assert sorted(r.split("|")[0] for r in rows) == [f"{array_id}_{i}" for i in range(3)], acct.stdout


def processes_of(run_dir: Path) -> list[int]:
    """Live processes started for a run: its tasks (their command line names the run's logs) and the
    commands they run (their environment holds RUN_DIR)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            text = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
            alive = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and alive and str(run_dir).encode() in text:
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("what", ["trainer", "script"])
def test_cancel_stops_every_task_at_once_and_reads_cancelled(
    what: str, mini: Path, sample_root: Path, tmp_path: Path
) -> None:
    """Every task stops within seconds of a cancel (not at Slurm's SIGKILL, KillWait=10 s later: submitit's task
    ignores SIGTERM), and the status says CANCELLED and names no failure."""
    args = ["--profile", str(mini), "--nodes", "2", "--gpus-per-node", "1"]
    if what == "trainer":
        result = submit(*args, f"data.root={sample_root / 'pix2pix'}", "steps=100000", "log.every=5")
    else:
        (tmp_path / "train.py").write_text(PLAIN)
        result = submit(*args, "--", "python", "train.py", "100000", "0.1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result)
    ready = run_dir / ("progress.json" if what == "trainer" else "ckpt.pt")
    poll_cluster("the job to run", lambda: ready.exists() and len(processes_of(run_dir)) >= 2)
    cancelled = cli("jobs.cancel", str(run_dir))
    assert cancelled.returncode == 0, cancelled.stderr
    stopped = time.monotonic()
    poll("every task to stop", lambda: not processes_of(run_dir), timeout=30)
    assert time.monotonic() - stopped < 5
    poll_cluster("the job to be cancelled", lambda: "CANCELLED" in cli("jobs.status", str(run_dir)).stdout, timeout=60)
    status = cli("jobs.status", str(run_dir)).stdout
    assert "error" not in status and "failed task" not in status, status


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--partition", "nosuch"], "--partition"),
        (["--nodes", "3"], "--nodes 3"),
        (["--gpus-per-node", "9"], "node configuration"),
        (["--time", "120"], "--time 120"),
        (["--sbatch-spare"], "spare_nodes 1"),
    ],
    ids=case_id,
)
def test_slurm_refusals_are_one_line(
    golden: Golden, args: list[str], named: str, mini: Path, tmp_path: Path, sample_root: Path
) -> None:
    """Refused before sbatch where the partition says so (Slurm's default EnforcePartLimits=NO would queue the
    job to pend for ever; this cluster's ALL would refuse it less clearly), else sbatch's own reason."""
    if args == ["--sbatch-spare"]:
        mini.write_text(mini.read_text() + "restarts_in_job: 1\nspare_nodes: 1\n")
        args = ["--nodes", "2"]
    result = submit("--profile", str(mini), *args, f"data.root={sample_root / 'pix2pix'}")
    refused(result, golden, named, outside=r"Slurm refused the job: (.*); ask" if "9" in args else "")
    assert run_dirs(tmp_path / "runs") == [] and not any(
        p.name not in ("sample_data", "CACHEDIR.TAG") for p in (tmp_path / "runs").glob("*")
    )


def test_smuggled_newline_is_refused_before_sbatch(tmp_path: Path, slurm_cluster: None) -> None:
    before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
    profile = write_profile(tmp_path, f'executor: slurm\nrun_root: {tmp_path}\npartition: "normal\\n#SBATCH --uid=0"\n')
    result = submit("--profile", str(profile))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "partition: a newline or #SBATCH inside a value would rewrite the sbatch script" in result.stderr
    assert subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout == before


def test_status_and_cancel_of_a_sweep_ask_slurm_once(mini: Path, tmp_path: Path) -> None:
    """A held sweep of 5 points: one table from one scontrol call (the pending points are one collapsed
    record), and one scancel for the whole array."""
    mini.write_text(mini.read_text() + "sbatch_args:\n  begin: now+1hour\n")
    result = submit("--profile", str(mini), "--sweep", "i=0,1,2,3,4", "--", "true", "{i}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    sweep = run_dir_of(result)
    array_id = re.search(r"submitted array job (\d+)", result.stdout).group(1)  # type: ignore[union-attr]
    status = cli("jobs.status", str(sweep))
    lines = status.stdout.splitlines()
    assert lines[0] == f"sweep {sweep}: 5 points; PENDING 5", status.stdout + status.stderr
    assert [line.split()[:3] for line in lines[2:]] == [[f"{i}-{i}", f"{array_id}_{i}", "PENDING"] for i in range(5)]
    cancelled = cli("jobs.cancel", str(sweep))
    assert cancelled.stdout.strip() == f"cancelled job {array_id} (the sweep's 5 points)", cancelled.stderr
    poll_cluster(
        "the points to be cancelled", lambda: "CANCELLED 5" in cli("jobs.status", str(sweep)).stdout, timeout=60
    )


def test_a_taken_master_port_does_not_fail_the_job(tmp_path: Path, sample_root: Path, slurm_cluster: None) -> None:
    """The port derived from the job id is held by another program on the first node: rank 0 listens on a free
    one and tells the others through the run directory; the job completes."""
    profile = cluster.mini_profile(tmp_path / "p.yaml", tmp_path / "runs", "sbatch_args:\n  begin: now+600\n")
    args = ["--profile", str(profile), "--nodes", "2", "--gpus-per-node", "1", "steps=4", "log.image_every=0"]
    result = submit(*args, f"data.root={sample_root / 'pix2pix'}")
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result)
    job = json.loads((run_dir / "job.json").read_text())["job_id"]
    with socket.socket() as holder:
        holder.bind(("", port_from_job_id(job)))
        holder.listen()
        subprocess.run(["scontrol", "update", f"jobid={job}", "StartTime=now"], check=True)
        poll_cluster("the job to end", lambda: cluster.squeue_state(job) == "", timeout=120)
    assert RunDir(run_dir).finished(), (run_dir / "logs" / f"{job}_0_log.out").read_text()
    log = (run_dir / "logs" / f"{job}_0_log.out").read_text()
    assert f"dist: port {port_from_job_id(job)} is taken on node1: rank 0 listens on " in log, log


def test_cancelling_a_finished_job_says_nothing_was_cancelled(mini: Path, tmp_path: Path) -> None:
    """scancel exits 0 for a job that already ended; jobs.cancel asks Slurm first, and says so, every time."""
    result = submit(
        "--profile", str(mini), "--gpus-per-node", "1", "--wait", "--", "python", "-c", "pass", cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    job = json.loads((run_dir / "job.json").read_text())["job_id"]
    for _ in range(2):
        cancelled = cli("jobs.cancel", str(run_dir))
        assert cancelled.returncode == 2, cancelled.stdout + cancelled.stderr
        assert cancelled.stderr == f"error: job {job} already ended (COMPLETED): nothing to cancel\n"


# Ends at its first start; started again (a --resume), it runs until it is cancelled.
ONCE_THEN_RUNS = """
import os, pathlib, time
mark = pathlib.Path(os.environ["RUN_DIR"]) / "started"
if mark.exists():
    print("started again", flush=True)
    time.sleep(600)
mark.write_text("1")
print("first start", flush=True)
"""


def test_a_run_is_found_by_its_name_under_a_cluster_run_root(tmp_path: Path, slurm_cluster: None) -> None:
    """README's cluster profile keeps runs in a shared folder (run_root: /shared/runs), not ./runs: wait, status,
    logs, --resume, top and cancel find a script run there by its name with --profile; without it, one line
    says where they looked."""
    profile = cluster.mini_profile(tmp_path / "site.yaml", tmp_path / "shared" / "runs")
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(ONCE_THEN_RUNS)
    args = ["--profile", str(profile), "--gpus-per-node", "1"]
    result = submit(*args, "--name", "cifar-a", "--", "python", "train.py", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = tmp_path / "shared" / "runs" / "cifar-a"
    assert run_dir_of(result) == run_dir and not (project / "runs").exists()
    run = ["cifar-a", "--profile", str(profile)]
    waited = cli("jobs.wait", *run)
    assert waited.returncode == 0 and "first start" in waited.stdout, waited.stdout + waited.stderr
    job = json.loads((run_dir / "job.json").read_text())["job_id"]
    assert f"job {job}: COMPLETED" in cli("jobs.status", *run).stdout
    assert "first start" in cli("jobs.logs", *run).stdout
    unknown = cli("jobs.status", "cifar-a")
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: no run named 'cifar-a' in "), unknown.stderr
    resumed = submit("--resume", "cifar-a", "--profile", str(profile), cwd=project)
    assert resumed.returncode == 0 and run_dir_of(resumed) == run_dir, resumed.stdout + resumed.stderr
    again = json.loads((run_dir / "job.json").read_text())["job_id"]
    poll_cluster("the resumed job to run", lambda: "started again" in cli("jobs.logs", *run).stdout)
    assert f"job {again}: RUNNING" in cli("jobs.status", *run).stdout
    assert cli("jobs.top", *run, "--once").returncode == 0
    cancelled = cli("jobs.cancel", *run)
    assert cancelled.returncode == 0 and f"cancelled job {again}" in cancelled.stdout, cancelled.stderr
    poll_cluster("the job to be cancelled", lambda: f"job {again}: CANCELLED" in cli("jobs.status", *run).stdout)


def test_a_run_submitted_after_another_waits_for_it_on_the_scheduler(mini: Path, sample_root: Path) -> None:
    """--after RUN_DIR: Slurm holds the second job (reason Dependency) until the first has finished well."""
    data = f"data.root={sample_root / 'pix2pix'}"
    first = submit("--profile", str(mini), data, "steps=30", "log.image_every=0")
    assert first.returncode == 0, first.stderr
    second = submit("--profile", str(mini), data, "steps=2", "--after", str(run_dir_of(first)), "--wait")
    assert second.returncode == 0, second.stdout + second.stderr
    job = re.search(r"^submitted job (\d+)", second.stdout, re.M).group(1)  # type: ignore[union-attr]
    first_job = json.loads((run_dir_of(first) / "job.json").read_text())["job_id"]
    record = cluster._run("sacct", "-j", f"{first_job},{job}", "-X", "-n", "-P", "-o", "JobID,Start,End").stdout
    (_, _, first_end), (_, second_start, _) = [line.split("|") for line in record.split()]
    assert second_start >= first_end  # ISO times: the second started once the first had ended
    assert (
        f"#SBATCH --dependency=afterok:{first_job}"
        in (run_dir_of(second) / "logs" / f"{job}_submission.sh").read_text()
    )


def test_a_dependency_that_can_never_hold_is_refused_and_a_pending_job_says_why(
    golden: Golden, mini: Path, tmp_path: Path
) -> None:
    """--after a run that failed, or --dependency on a job Slurm does not know, is refused at submit (it
    would pend for ever, or start at once); a job held by a dependency shows Slurm's reason in jobs.status."""

    failed = submit("--profile", str(mini), "--wait", "--", "python", "-c", "raise SystemExit(3)", cwd=tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    runs = run_dir_of(failed).parent
    before = run_dirs(runs)
    after_failed = submit("--profile", str(mini), "--after", str(run_dir_of(failed)), "--", "python", "-V")
    assert_refused(
        after_failed,
        golden,
        "FAILED",
        tmp_path / "none",
        job=json.loads((run_dir_of(failed) / "job.json").read_text())["job_id"],
        run=run_dir_of(failed).name,
    )
    unknown = submit("--profile", str(mini), "--dependency", "afterok:987654", "--", "python", "-V")
    assert_refused(unknown, golden, "987654", tmp_path / "none")
    assert run_dirs(runs) == before

    holder = submit("--profile", str(mini), "--", "python", "-c", "import time; time.sleep(60)", cwd=tmp_path)
    held = submit("--profile", str(mini), "--after", str(run_dir_of(holder)), "--", "python", "-V", cwd=tmp_path)
    assert held.returncode == 0, held.stderr
    status = poll_cluster(
        "the reason", lambda: (out := cli("jobs.status", str(run_dir_of(held))).stdout) * ("Dependency" in out)
    )
    assert "PENDING (Slurm's reason: Dependency)" in status, status
    for result in (held, holder):
        assert cli("jobs.cancel", str(run_dir_of(result))).returncode == 0


# Apptainer is not in Debian's archive (nor reachable from here): a stand-in with its command line. It records
# its arguments and runs the command after the image, as `apptainer exec` would without the container.
FAKE_APPTAINER = """#!/bin/sh
printf '%s\\n' "$*" >> "$(dirname "$0")/calls.log"
[ "$1" = exec ] || exit 64
shift
[ "$1" = --nv ] && shift
[ "$1" = --bind ] && shift 2
shift
exec "$@"
"""


def test_an_apptainer_profile_runs_every_task_through_apptainer_exec(tmp_path: Path, sample_root: Path) -> None:
    fake = tmp_path / "bin" / "apptainer"
    fake.parent.mkdir()
    fake.write_text(FAKE_APPTAINER)
    fake.chmod(0o755)
    extra = (
        f"container_runtime: apptainer\ncontainer_image: /images/torch.sif\napptainer_command: {fake}\n"
        f"container_mounts: ['{sample_root}']\npython: {sys.executable}\n"  # the container's python
    )
    profile = cluster.mini_profile(tmp_path / "p.yaml", tmp_path / "runs", extra)
    result = submit("--profile", str(profile), "--wait", f"data.root={sample_root / 'pix2pix'}", "steps=4")
    assert result.returncode == 0, result.stdout + result.stderr
    calls = (fake.parent / "calls.log").read_text().splitlines()
    runs = tmp_path / "runs"
    expected = f"exec --nv --bind {runs}:{runs},{sample_root}:{sample_root} /images/torch.sif {sys.executable} -u -m "
    assert len(calls) == 2 and all(c.startswith(expected + "submitit.core._submit ") for c in calls), calls


def test_gpus_per_task_gives_each_task_its_own_gpus(tmp_path: Path) -> None:
    """2 nodes, 2 fake GPUs each, gpus_per_task: 2: one task per node, each granted 2 GPUs by Slurm (the test
    cluster's fake GPUs set no CUDA_VISIBLE_DEVICES: Slurm's own SLURM_GPUS_PER_TASK says what it granted)."""
    (tmp_path / "show.py").write_text(
        "import os\nprint('seen', os.environ['RANK'], os.environ['SLURM_GPUS_PER_TASK'], "
        "os.environ['SLURM_DDP_GPUS_PER_TASK'])\n"
    )
    profile = cluster.mini_profile(tmp_path / "p.yaml", tmp_path / "runs", "gpus_per_task: 2\n")
    args = ["--profile", str(profile), "--nodes", "2", "--gpus-per-node", "2", "--wait", "--", "python", "show.py"]
    result = submit(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    logs = "".join(p.read_text() for p in (run_dir_of(result) / "logs").glob("*_log.out"))
    assert sorted(re.findall(r"^seen (\d) (\S+) 2$", logs, re.M)) == [("0", "2"), ("1", "2")], logs


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "container_image: nvcr.io/x\ncontainer_runtime: pyxis\n",
            "srun does not know --container-image: this cluster has no pyxis",
        ),
        (
            "container_image: x.sif\ncontainer_runtime: apptainer\n",
            "apptainer: No such file or directory on the nodes: no Apptainer",
        ),
        (
            "python: /opt/none/bin/python3\n",
            "/opt/none/bin/python3: No such file or directory on the nodes; set python:",
        ),
    ],
    ids=["no-pyxis", "no-apptainer", "no-python"],
)
def test_tasks_that_cannot_start_say_why_in_the_outcome(
    tmp_path: Path, slurm_cluster: None, extra: str, message: str
) -> None:
    """A cluster without pyxis or Apptainer, or nodes without the profile's python: the job fails before any
    task starts, and --wait's line says why with the fix (srun's words in the batch log), not "see the log";
    so does jobs.status, not srun's "Exited with exit code 2"."""
    profile = cluster.mini_profile(tmp_path / "p.yaml", tmp_path / "runs", extra)
    result = submit("--profile", str(profile), "--wait", "--", "python", "-V", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: job ") and message in result.stderr, result.stderr
    run_dir = run_dir_of(result)
    status = cli("jobs.status", str(run_dir)).stdout
    job = json.loads((run_dir / "job.json").read_text())["job_id"]
    assert f"error: job {job} failed: " in status and message in status, status


def test_a_node_without_the_profiles_network_interface_is_named_in_one_line(
    tmp_path: Path, slurm_cluster: None, sample_root: Path
) -> None:
    """network_interface: a name no node has: the first task to look names its node and the interface in
    error.txt (and the job fails), instead of NCCL or gloo failing later, less clearly."""
    profile = cluster.mini_profile(tmp_path / "p.yaml", tmp_path / "runs", "network_interface: nosuch0\n")
    args = ["--nodes", "2", "--gpus-per-node", "1", f"data.root={sample_root / 'pix2pix'}", "steps=4", "--wait"]
    result = submit("--profile", str(profile), *args)
    assert result.returncode == 1, result.stdout + result.stderr
    line = (run_dir_of(result) / "error.txt").read_text()
    assert re.match(r"rank \d on node\d: node node\d has no network interface nosuch0 with an IPv4 address", line), line


def test_a_foreign_slurmstepd_leaves_the_harness_alone(slurm_cluster: None) -> None:
    """Another Slurm's job step on this machine (its slurmstepd, a job id this cluster also uses, another
    slurm.conf): the harness neither counts it nor waits for it."""
    env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": "/etc/another-slurm/slurm.conf"}
    foreign = subprocess.Popen(["bash", "-c", "exec -a 'slurmstepd: [1.0]' sleep 120"], env=env)
    try:
        poll_cluster(
            "the foreign step", lambda: "slurmstepd: [1.0]" in cluster._run("pgrep", "-af", "slurmstepd").stdout
        )
        assert not any("[1.0]" in line for line in cluster.own_steps()) and not cluster.steps_left("1")
        poll_cluster("the cluster to be quiet with the foreign step running", cluster.quiet, timeout=60)
    finally:
        foreign.kill()
        foreign.wait()


def test_a_stale_pid_file_naming_another_process_is_not_a_running_daemon(tmp_path: Path) -> None:
    """/tmp outlives the daemons on a machine restored from a snapshot: a pid file whose pid now belongs to
    another process (seen in CI: slurmctld never started, every Slurm test errored) is not a running daemon."""
    pidfile = tmp_path / "slurmctld.pid"
    pidfile.write_text(f"{os.getpid()}\n")  # this pytest: alive, and not slurmctld
    assert not cluster._alive(pidfile, "slurmctld")
    assert cluster._alive(pidfile, Path(f"/proc/{os.getpid()}/comm").read_text().strip())
    assert not cluster._alive(tmp_path / "missing.pid", "slurmctld")

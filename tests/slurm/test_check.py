"""jobs.check on the test cluster: a healthy profile passes; an interpreter without the project's dependencies,
a node that cannot write the run root, more GPUs than a node has: each fails with the row that says so."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm import cluster
from tests.support import ROOT


def check(tmp_path: Path, extra: str, *args: str) -> subprocess.CompletedProcess[str]:
    # The test cluster's GPUs are files: granted by Slurm, never seen by CUDA. A healthy profile here is a CPU one.
    profile = cluster.mini_profile(tmp_path / "p.yaml", tmp_path / "runs", "request_gpus: false\n" + extra)
    return subprocess.run(
        [sys.executable, "-m", "jobs.check", "--profile", str(profile), "--nodes", "2", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def rows(output: str) -> dict[tuple[str, str], str]:
    """(node, check) -> "ok"/"FAIL" from the table."""
    out = {}
    for line in output.splitlines()[2:]:
        parts = line.split("  ")
        cells = [c.strip() for c in parts if c.strip()]
        if len(cells) >= 3:
            out[(cells[0], cells[1])] = cells[2]
    return out


def test_a_healthy_profile_passes_every_row_and_leaves_nothing(tmp_path: Path) -> None:
    result = check(tmp_path, "")
    assert result.returncode == 0, result.stdout + result.stderr
    table = rows(result.stdout)
    assert {node for node, _ in table} == {"node1", "node2"} and set(table.values()) == {"ok"}, result.stdout
    assert "gloo, " in result.stdout and "GB/s bus bandwidth" in result.stdout
    import torch

    stack = f"no GPU; driver -; CUDA {torch.version.cuda or '-'} (torch's); NCCL "  # the test cluster's nodes: CPUs
    assert sum(stack in line and "GPU stack" in line for line in result.stdout.splitlines()) == 2, result.stdout
    assert not list((tmp_path / "runs").glob("check-*"))


def test_a_job_of_one_task_forms_its_group_and_passes_the_all_reduce(tmp_path: Path) -> None:
    """One node, one task (a one-GPU job): the check still forms the job's process group (training would not)."""
    result = check(tmp_path, "", "--nodes", "1", "--gpus-per-node", "1")  # the last --nodes counts
    assert result.returncode == 0, result.stdout + result.stderr
    table = rows(result.stdout)
    assert len({node for node, _ in table}) == 1 and set(table.values()) == {"ok"}, result.stdout
    assert "gloo, one task: the group formed and summed" in result.stdout


def test_an_interpreter_without_the_dependencies_fails_the_row_that_says_so(tmp_path: Path) -> None:
    result = check(tmp_path, "python: /usr/bin/python3\n")  # Debian's own: no submitit, no torch
    assert result.returncode == 1, result.stdout + result.stderr
    assert "tasks reported  FAIL    0 of 4" in result.stdout
    assert "the interpreter cannot import submitit: install the project's dependencies there" in result.stdout


# node2's tasks see the run root read-only (a bind mount in their own mount namespace): a node that cannot write it.
READ_ONLY_ON_NODE2 = """#!/bin/sh
if [ "$SLURMD_NODENAME" = node2 ]; then
    exec unshare -m sh -c 'mount --bind -o ro "$1" "$1" && shift && exec "$@"' sh {root} {python} "$@"
fi
exec {python} "$@"
"""


def test_a_node_that_cannot_write_the_run_root_fails_its_row(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text(READ_ONLY_ON_NODE2.format(root=tmp_path / "runs", python=sys.executable))
    python.chmod(0o755)
    result = check(tmp_path, f"python: {python}\n")
    assert result.returncode == 1, result.stdout + result.stderr
    table = rows(result.stdout)
    assert table[("node1", "run root writable")] == "ok" and table[("node2", "run root writable")] == "FAIL"
    assert "Read-only file system; make run_root a folder every node can write" in result.stdout


@pytest.mark.parametrize("gpus", ["16"])
def test_more_gpus_than_a_node_has_fails_the_submit_row(tmp_path: Path, gpus: str) -> None:
    profile = cluster.mini_profile(tmp_path / "p.yaml", tmp_path / "runs", "gpus_per_task: 2\n")
    result = subprocess.run(
        [sys.executable, "-m", "jobs.check", "--profile", str(profile), "--gpus-per-node", gpus],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        "submit  FAIL    Slurm refused the job: " in result.stdout and "Requested node configuration" in result.stdout
    )
    assert result.stderr == "" and not list((tmp_path / "runs").glob("check-*"))


def test_a_partition_that_does_not_exist_is_named_with_the_fix_for_it(tmp_path: Path) -> None:
    """Advice that fits: name a partition that exists (it once said: ask for fewer GPUs), before any job."""
    result = check(tmp_path, "", "--partition", "nosuch")
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr == "error: partition nosuch does not exist here; pick one of normal, urgent (--partition)\n"
    assert not list((tmp_path / "runs").glob("check-*"))


def test_beyond_the_partition_is_refused_where_slurm_itself_would_queue_it(tmp_path: Path) -> None:
    """This cluster keeps Slurm's default EnforcePartLimits=NO, under which sbatch accepts 3 nodes of a 2-node
    partition and the job pends for ever: jobs.submit and jobs.check refuse it first, and queue nothing."""
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    assert re.search(r"^EnforcePartLimits\s*=\s*NO$", config, re.M), "cluster b must keep Slurm's default"
    queued = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
    profile = cluster.mini_profile(tmp_path / "p.yaml", tmp_path / "runs")
    for module in ("jobs.submit", "jobs.check"):
        result = subprocess.run(
            [sys.executable, "-m", module, "--profile", str(profile), "--nodes", "3", *(["--", "true"] if module == "jobs.submit" else [])],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 2 and result.stderr.count("\n") == 1, (module, result.stdout + result.stderr)
        assert result.stderr.startswith("error: --nodes 3 asks for 3 nodes, but partition normal has or allows 2")
    assert subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout == queued
    assert not list((tmp_path / "runs").glob("*/config.yaml")) and not list((tmp_path / "runs").glob("check-*"))


def test_an_interpreter_the_nodes_lack_is_named_and_the_batch_script_records_sacct(tmp_path: Path) -> None:
    """`python:` that does not exist on the nodes: the row names it (srun's execve error), not "see the logs";
    the batch script still writes its sacct record (it makes provenance/ itself: no task made it)."""
    result = check(tmp_path, "python: /opt/none/bin/python3\n")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "/opt/none/bin/python3: No such file or directory on the nodes; set python: in the profile" in result.stdout
    logs = next((tmp_path / "runs").glob("check-*/logs"))
    batch = "".join(p.read_text() for p in logs.glob("*_log.*"))
    assert "sacct_" not in batch and list(logs.parent.glob("provenance/sacct_*.txt"))


def test_a_run_root_with_a_variable_is_the_folder_it_names(tmp_path: Path) -> None:
    """run_root: $CHECK_ROOT/runs is checked (and made) where the variable says, as jobs.submit would use it;
    from a user's folder (the snapshot holds only their files, the tool's beside them in tool/)."""
    profile = cluster.mini_profile(tmp_path / "p.yaml", Path("$CHECK_ROOT/runs"), "request_gpus: false\n")
    result = subprocess.run(
        [sys.executable, "-m", "jobs.check", "--profile", str(profile)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "CHECK_ROOT": str(tmp_path / "x")},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "x" / "runs").is_dir() and not (tmp_path / "$CHECK_ROOT").exists()


def test_ctrl_c_cancels_the_checks_job_in_one_line(tmp_path: Path) -> None:
    """A check whose job pends (it may start in an hour): Ctrl-C cancels it; one line, exit 130, no traceback."""
    profile = cluster.mini_profile(tmp_path / "p.yaml", tmp_path / "runs", "sbatch_args:\n  begin: now+3600\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.check", "--profile", str(profile)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()
    job = re.match(r"check job (\d+) ", first).group(1)  # type: ignore[union-attr]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, first + out + err
    assert (
        err == f"interrupted: cancelled check job {job}; its logs: {next((tmp_path / 'runs').glob('check-*/logs'))}\n"
    )
    state = cluster._run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip()
    assert state in ("", "CANCELLED"), state

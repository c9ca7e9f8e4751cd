"""One-off settings from the command line (--dependency, --after, --env, --mail): what reaches the batch
script, and the refusals that need a Slurm profile. The local profile's --env reaching its tasks:
tests/jobs/test_local_jobs.py; a dependency held by the real scheduler: tests/slurm/test_slurm.py."""

from pathlib import Path

import pytest

from jobs.oneoff import minutes, refuse_beyond_partition
from tests.messages import Golden, raises
from tests.support import assert_refused, submit, write_profile

SLURM = "executor: slurm\npartition: gpu\nmail_user: ada@example.org\nrun_root: {root}\n"


def dry_run(tmp_path: Path, *args: str, text: str = SLURM) -> str:
    profile = write_profile(tmp_path, text.format(root=tmp_path / "runs"))
    result = submit("--profile", str(profile), "--dry-run", "--name", "d", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_flags_reach_the_batch_script(tmp_path: Path) -> None:
    script = dry_run(
        tmp_path, "--dependency", "afterany:11:12", "--env", "NCCL_DEBUG=INFO", "--env", "A=x y", "--mail", "end,fail"
    )
    assert "#SBATCH --dependency=afterany:11:12\n" in script
    assert "#SBATCH --mail-type=END,FAIL\n" in script and "#SBATCH --mail-user=ada@example.org\n" in script
    assert "export NCCL_DEBUG=INFO\n" in script and "export A='x y'\n" in script


@pytest.mark.parametrize(
    ("args", "text", "named"),
    [
        (["--dependency", "afterok:12;rm -rf ~"], SLURM, "--dependency"),
        (["--dependency", "whenever"], SLURM, "--dependency"),
        (["--mail", "END"], "executor: slurm\nrun_root: {root}\n", "mail_user"),
        (["--mail", "LUNCH"], SLURM, "--mail"),
        (["--dependency", ""], SLURM, "--dependency"),
        (["--mail", ""], SLURM, "--mail"),
        (["--dependency", ""], "executor: local\nrun_root: {root}\n", "--dependency"),
    ],
    ids=[
        "dependency-not-sbatch",
        "dependency-whenever",
        "mail-no-address",
        "mail-lunch",
        "dependency-empty",
        "mail-empty",
        "dependency-local",
    ],
)
def test_bad_one_off_settings_are_one_line(
    golden: Golden, tmp_path: Path, args: list[str], text: str, named: str
) -> None:
    profile = write_profile(tmp_path, text.format(root=tmp_path / "runs"))
    assert_refused(submit("--profile", str(profile), "--dry-run", *args), golden, named, tmp_path / "runs")


def test_gpus_per_task_asks_slurm_for_each_tasks_own_gpus(tmp_path: Path) -> None:
    script = dry_run(tmp_path, "--", "python", "-m", "t", text=SLURM + "gpus_per_node: 8\ngpus_per_task: 2\n")
    assert "#SBATCH --ntasks-per-node=4\n" in script and "#SBATCH --gpus-per-task=2\n" in script
    assert "--gpus-per-node" not in script and "export SLURM_DDP_GPUS_PER_TASK=2\n" in script


def test_gpus_per_task_must_divide_the_nodes_gpus(golden: Golden, tmp_path: Path) -> None:
    profile = write_profile(tmp_path, SLURM.format(root=tmp_path / "runs") + "gpus_per_node: 8\ngpus_per_task: 3\n")
    assert_refused(submit("--profile", str(profile), "--dry-run"), golden, "gpus_per_task 3", tmp_path / "runs")


def test_gpus_per_task_with_a_model_that_takes_no_devices_is_refused_at_submit(golden: Golden, tmp_path: Path) -> None:
    """The built-in task's model() takes no devices=: refused before the queue wait, not after it."""
    profile = write_profile(tmp_path, SLURM.format(root=tmp_path / "runs") + "gpus_per_node: 8\ngpus_per_task: 2\n")
    assert_refused(submit("--profile", str(profile), "--dry-run"), golden, "gpus_per_task", tmp_path / "runs")


@pytest.mark.parametrize(
    ("limit", "expected"),
    [("60", 60), ("30:00", 30), ("01:00:00", 60), ("1-00:00:00", 1440), ("2-12", 3600), ("2-12:30", 3630)],
)
def test_slurms_time_limits_read_as_minutes(limit: str, expected: float) -> None:
    assert minutes(limit) == expected
    assert minutes("UNLIMITED") is None and minutes("INFINITE") is None


def test_what_a_partition_cannot_hold_is_refused_and_what_it_can_is_not(golden: Golden) -> None:
    """A partition of 4 nodes, MaxNodes 3, MaxTime 2 h: the tightest of its limits, spare nodes counted."""
    part = {"PartitionName": "gpu", "TotalNodes": "4", "MaxNodes": "3", "MaxTime": "02:00:00"}
    refuse_beyond_partition(part, 3, 0, 120)
    refuse_beyond_partition({**part, "MaxNodes": "UNLIMITED", "MaxTime": "UNLIMITED"}, 3, 1, 10**6)
    with raises(golden, "--nodes 2", "gpu"):
        refuse_beyond_partition(part, 3, 1, 60)
    with raises(golden, "--time 121", "--time 120"):
        refuse_beyond_partition(part, 1, 0, 121)

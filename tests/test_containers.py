"""The two container paths' batch scripts, held to golden files (pyxis through srun's options, Apptainer around
the task's command); the Apptainer path on the test cluster: tests/slurm/test_slurm.py."""

from pathlib import Path

import pytest

from tests.messages import Golden
from tests.support import ROOT, assert_refused, submit


@pytest.mark.parametrize("runtime", ["pyxis", "apptainer"])
def test_the_container_paths_batch_scripts_match_their_golden_files(runtime: str) -> None:
    golden = ROOT / "tests" / "golden"
    result = submit("--profile", str(golden / f"{runtime}.yaml"), "--dry-run", "--name", "golden")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (golden / f"{runtime}.sbatch").read_text()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            "executor: slurm\ncontainer_runtime: docker\n",
            "container_runtime",
        ),
        ("executor: local\ncontainer_image: x.sif\n", "container_image"),
        ("executor: slurm\ncontainer_image: x\ncontainer_mounts: ['/a,/b']\n", "container_mounts"),
    ],
)
def test_bad_container_settings_are_one_line(golden: Golden, tmp_path: Path, text: str, named: str) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(text + f"run_root: {tmp_path / 'runs'}\n")
    assert_refused(submit("--profile", str(profile), "--dry-run"), golden, named, tmp_path / "runs")


@pytest.mark.parametrize(("runtime", "folder"), [("pyxis", "runs,a"), ("apptainer", "runs:b")])
def test_a_run_root_the_mount_syntax_would_split_is_refused(
    golden: Golden, tmp_path: Path, runtime: str, folder: str
) -> None:
    """`--container-mounts`/`--bind` take `,` between mounts and `:` inside one: such a run root is refused."""
    profile = tmp_path / "p.yaml"
    text = f"executor: slurm\ncontainer_image: x.sif\ncontainer_runtime: {runtime}\nrun_root: '{tmp_path / folder}'\n"
    profile.write_text(text)
    assert_refused(submit("--profile", str(profile), "--dry-run"), golden, "run_root", tmp_path / folder)

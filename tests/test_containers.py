"""The two container paths' batch scripts, held to golden files (pyxis through srun's options, Apptainer around
the task's command); the Apptainer path on the test cluster: tests/slurm/test_slurm.py."""

from pathlib import Path

import pytest

from tests.conftest import ROOT, submit
from tests.test_bad_input import assert_refused


@pytest.mark.parametrize("runtime", ["pyxis", "apptainer"])
def test_the_container_paths_batch_scripts_match_their_golden_files(runtime: str) -> None:
    golden = ROOT / "tests" / "golden"
    result = submit("--profile", str(golden / f"{runtime}.yaml"), "--dry-run", "--name", "golden")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (golden / f"{runtime}.sbatch").read_text()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "executor: slurm\ncontainer_runtime: docker\n",
            "container_runtime 'docker' is unknown; use pyxis or apptainer",
        ),
        ("executor: local\ncontainer_image: x.sif\n", "container_image runs the tasks in a container on Slurm"),
        ("executor: slurm\ncontainer_image: x\ncontainer_mounts: ['/a,/b']\n", "must be a list of src:dst paths"),
    ],
)
def test_bad_container_settings_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text(text + f"run_root: {tmp_path / 'runs'}\n")
    assert_refused(submit("--profile", str(profile), "--dry-run"), message, tmp_path / "runs")


@pytest.mark.parametrize(("runtime", "folder"), [("pyxis", "runs,a"), ("apptainer", "runs:b")])
def test_a_run_root_the_mount_syntax_would_split_is_refused(tmp_path: Path, runtime: str, folder: str) -> None:
    """`--container-mounts`/`--bind` take `,` between mounts and `:` inside one: such a run root is refused."""
    profile = tmp_path / "p.yaml"
    text = f"executor: slurm\ncontainer_image: x.sif\ncontainer_runtime: {runtime}\nrun_root: '{tmp_path / folder}'\n"
    profile.write_text(text)
    message = f"run_root {tmp_path / folder} holds {folder[4]}, which {runtime} reads as a separator of its mounts"
    assert_refused(submit("--profile", str(profile), "--dry-run"), message, tmp_path / folder)

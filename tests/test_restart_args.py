"""--restart-args (trainer.supervise.script.with_restart_args): words added to a command on a start once what they name
exists; {LATEST:pattern} names the newest match (the Trainer's checkpoint-N/ folders). A malformed one is
refused at submit."""

import os
from pathlib import Path

import pytest

from tests.messages import Golden, case_id
from tests.support import assert_refused, write_profile
from tests.support import submit_here as submit
from trainer.supervise.script import with_restart_args

COMMAND = ["python", "train.py", "--output_dir", "{RUN_DIR}/out"]


def started(words: list[str], cwd: Path, run_dir: str = "/runs/r") -> list[str]:
    """What the command's next start runs."""
    return with_restart_args(COMMAND, words, run_dir, str(cwd))[len(COMMAND) :]


def test_a_fixed_file_is_added_once_it_exists(tmp_path: Path) -> None:
    words = ["--resume", "{RUN_DIR}/checkpoint.pth"]
    assert started(words, tmp_path, str(tmp_path)) == []
    (tmp_path / "checkpoint.pth").mkdir()  # a folder is not the file it names
    assert started(words, tmp_path, str(tmp_path)) == []
    (tmp_path / "checkpoint.pth").rmdir()
    (tmp_path / "checkpoint.pth").write_text("")
    assert started(words, tmp_path, str(tmp_path)) == ["--resume", f"{tmp_path}/checkpoint.pth"]


def test_latest_is_the_highest_number_not_the_last_written(tmp_path: Path) -> None:
    words = ["--resume_from_checkpoint", "{LATEST:out/checkpoint-*}"]
    assert started(words, tmp_path) == []  # the first start: nothing saved yet, nothing added
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "runs").mkdir()  # the Trainer's logs beside its checkpoints: no match
    assert started(words, tmp_path) == []
    for step in (10, 9, 100, 20):  # checkpoint-9 written after checkpoint-10: still older by its number
        (tmp_path / "out" / f"checkpoint-{step}").mkdir()
    os.utime(tmp_path / "out" / "checkpoint-20", (0, 0))
    assert started(words, tmp_path) == ["--resume_from_checkpoint", "out/checkpoint-100"]  # relative, as given


def test_latest_by_time_where_names_differ_otherwise(tmp_path: Path) -> None:
    files = {"best.ckpt": 300, "last.ckpt": 100, "epoch=3-step=40.ckpt": 200, "epoch=10-step=99.ckpt": 50}
    for name, when in files.items():
        (tmp_path / name).write_text("")
        os.utime(tmp_path / name, (when, when))
    assert started(["--ckpt={LATEST:{RUN_DIR}/*.ckpt}"], tmp_path, str(tmp_path)) == [f"--ckpt={tmp_path}/best.ckpt"]
    (tmp_path / "best.ckpt").unlink()
    (tmp_path / "last.ckpt").unlink()  # the rest differ only by their numbers: epoch 10 is the newest
    assert started(["--ckpt={LATEST:*.ckpt}"], tmp_path) == ["--ckpt=epoch=10-step=99.ckpt"]


def test_every_pattern_must_match_before_the_words_are_added(tmp_path: Path) -> None:
    words = ["--model", "{LATEST:model-*.pt}", "--optimizer", "{LATEST:optimizer-*.pt}"]
    (tmp_path / "model-3.pt").write_text("")
    assert started(words, tmp_path) == []
    (tmp_path / "optimizer-3.pt").write_text("")
    assert started(words, tmp_path) == ["--model", "model-3.pt", "--optimizer", "optimizer-3.pt"]


@pytest.mark.parametrize(
    ("words", "named"),
    [
        ("--resume_from_checkpoint {LATEST:out/checkpoint-*", "{LATEST:out/checkpoint-*"),
        ("--resume {LATEST:}", "{LATEST:}"),
        ("--resume {LATEST}", "{LATEST}"),
        ("--resume {latest:out/*}", "{latest:out/*}"),
        ("--resume {LATEST:out/{a,b}}", "{LATEST:out/{a,b}}"),
        ("--resume 'out/checkpoint", "'out/checkpoint"),
    ],
    ids=case_id,
)
def test_a_malformed_restart_args_is_refused(
    golden: Golden, local_profile: Path, tmp_path: Path, words: str, named: str
) -> None:
    (tmp_path / "train.py").write_text("")
    result = submit("--profile", str(local_profile), "--restart-args", words, "--", "python", "train.py", cwd=tmp_path)
    assert_refused(result, golden, named, tmp_path / "runs")


def test_a_well_formed_latest_is_taken(tmp_path: Path) -> None:
    profile = write_profile(tmp_path, f"executor: slurm\nrun_root: {tmp_path / 'runs'}\n")
    (tmp_path / "train.py").write_text("")
    words = "--resume_from_checkpoint {LATEST:{RUN_DIR}/out/checkpoint-*}"
    result = submit(
        "--profile", str(profile), "--dry-run", "--restart-args", words, "--", "python", "train.py", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr

"""Each bad input ends in one line naming the problem and the fix, exit 2, and no run left behind."""

import shutil
from pathlib import Path

import pytest
from PIL import Image

from tests.conftest import run_dirs, submit, write_profile


def assert_refused(result, message: str, run_root: Path) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and message in lines[0], lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert run_dirs(run_root) == []
    assert not any(p.name != "sample_data" for p in run_root.glob("*")) if run_root.exists() else True


@pytest.fixture
def pairs(tmp_path: Path, sample_root: Path) -> Path:
    """A private copy of the sample pairs, free to break."""
    root = tmp_path / "pairs"
    shutil.copytree(sample_root / "pix2pix", root)
    return root


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["stepz=5"], "unknown config key stepz; valid keys: task, run_dir"),
        (["steps=many"], "steps=many: expected int"),
        (["--nodes", "0"], "nodes must be at least 1"),
        (["--gpus-per-node", "0"], "gpus_per_node must be at least 1"),
        (["--nodes", "2"], "the local executor runs on one node"),
        (["--nodes", "two"], "argument --nodes: invalid int value"),
    ],
)
def test_bad_arguments(args: list[str], message: str, local_profile: Path, tmp_path: Path) -> None:
    assert_refused(submit("--profile", str(local_profile), *args), message, tmp_path / "runs")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("executor: local\ncolour: blue\n", "unknown config key colour; valid keys: name, executor, nodes"),
        ("executor: local\nnodes: two\n", "nodes: expected int, got str"),
        ("executor: mainframe\n", "executor 'mainframe' is unknown"),
        ("executor: local\ntrainer:\n  stepz: 3\n", "unknown config key stepz"),
        ("executor: [local\n", "is not valid YAML"),
    ],
)
def test_bad_profiles(text: str, message: str, tmp_path: Path) -> None:
    profile = write_profile(tmp_path, text + f"run_root: {tmp_path / 'runs'}\n" if "[" not in text else text)
    assert_refused(submit("--profile", str(profile)), message, tmp_path / "runs")


def test_missing_profile(tmp_path: Path) -> None:
    assert_refused(submit("--profile", "nonexistent"), "no profile named 'nonexistent'; choose one of", tmp_path)
    assert_refused(submit("--profile", str(tmp_path / "x.yaml")), "does not exist", tmp_path)


def corrupt(root: Path) -> None:
    (root / "targets" / "0003.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")


def unreadable(root: Path) -> None:
    (root / "targets" / "0003.png").unlink()
    (root / "targets" / "0003.png").mkdir()  # a folder where a file belongs cannot be read, even by root


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda r: (r / "pairs.csv").unlink(), "pairs.csv does not exist"),
        (
            lambda r: (r / "pairs.csv").write_text("input,target\na.png,b.png\n"),
            "lacks column(s) image_name, target_name",
        ),
        (lambda r: (r / "targets" / "0003.png").unlink(), "pairs.csv row 5: image"),
        (corrupt, "pairs.csv row 5: image"),
        (unreadable, "pairs.csv row 5: image"),
        (
            lambda r: (r / "pairs.csv").write_text("image_name,target_name\n../../etc/passwd,targets/0001.png\n"),
            "pairs.csv row 2: path '../../etc/passwd' escapes the data root",
        ),
    ],
)
def test_bad_data(breakage, message: str, pairs: Path, local_profile: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    breakage(pairs)
    assert_refused(submit("--profile", str(local_profile), f"data.root={pairs}"), message, tmp_path / "runs")


def test_corrupt_image_names_path_and_fix(pairs: Path, local_profile: Path, tmp_path: Path) -> None:
    corrupt(pairs)
    result = submit("--profile", str(local_profile), f"data.root={pairs}")
    assert str(pairs / "targets" / "0003.png") in result.stderr and "is corrupt" in result.stderr
    with Image.open(pairs / "targets" / "0001.png") as ok:
        assert ok.size == (64, 64)  # the sample data itself is untouched

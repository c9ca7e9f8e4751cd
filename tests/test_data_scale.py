"""Data at real size: paths checked on whole columns, images opened on a sample, the file list stored once per run
and read by every rank instead of the CSV or a folder scan."""

import json
import random
import shutil
from pathlib import Path

import pytest
import yaml

from tests.support import submit
from trainer.config import build_config
from trainer.data import filelist
from trainer.errors import UserError
from trainer.tasks.classify import TASK as CLASSIFY
from trainer.tasks.pix2pix import TASK as PIX2PIX
from trainer.tasks.pix2pix import read_pairs


@pytest.fixture
def pairs(tmp_path: Path, sample_root: Path) -> Path:
    root = tmp_path / "pairs"
    shutil.copytree(sample_root / "pix2pix", root)
    return root


def test_paths_are_normalised_and_checked_against_listings(pairs: Path) -> None:
    rows = ["./inputs/0001.png,targets//0001.png", "inputs/../inputs/0002.png,targets/0002.png"]
    (pairs / "odd.csv").write_text("image_name,target_name\n" + "\n".join(rows) + "\n")
    sources, targets = read_pairs(pairs, "odd.csv")
    assert sources == ["inputs/0001.png", "inputs/0002.png"]  # relative to the root, normalised
    assert targets == ["targets/0001.png", "targets/0002.png"]
    (pairs / "gone.csv").write_text("image_name,target_name\ninputs/0001.png,targets/0001.png\nnope/1.png,x.png\n")
    with pytest.raises(UserError, match=r"gone.csv row 3: image .*nope/1.png is missing or not a file"):
        read_pairs(pairs, "gone.csv")


def test_images_are_opened_on_a_seeded_sample_and_all_on_request(
    pairs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    opened = set(random.Random(0).sample(range(256), 10))
    row = next(i for i in range(256) if i not in opened)  # a pair the sample of 10 leaves alone
    (pairs / "targets" / f"{row:04d}.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    PIX2PIX.check(build_config([f"data.root={pairs}", "data.verify_sample=10"]), 2)
    assert "opened the images of 10 of 256 samples of pairs.csv, drawn at random (seed 0)" in capsys.readouterr().out
    with pytest.raises(UserError, match=rf"pairs.csv row {row + 2}: image .* is corrupt"):
        PIX2PIX.check(build_config([f"data.root={pairs}", "data.verify_sample=0"]), 2)


def test_a_rank_reads_the_stored_list_not_the_csv(pairs: Path, tmp_path: Path) -> None:
    config = build_config([f"data.root={pairs}", f"data.file_lists={tmp_path / 'lists'}"])
    path = filelist.write(tmp_path / "lists", str(pairs), "pairs.csv", PIX2PIX.file_list(config))
    (pairs / "pairs.csv").unlink()  # a rank that read the CSV would now fail
    dataset = PIX2PIX.dataset(config)
    assert len(dataset) == 256 and dataset[3].shape == (2, 64, 64, 3)  # pairs channels last, as decoded
    path.write_text(path.read_text().replace("0003.png", "0004.png"))
    with pytest.raises(UserError, match="does not match its checksum"):
        PIX2PIX.dataset(config)


def test_the_classify_list_is_imagefolders_own_scan(sample_root: Path, tmp_path: Path) -> None:
    from torchvision.datasets import ImageFolder

    root = sample_root / "classify"
    config = build_config(["task=classify", f"data.root={root}", f"data.file_lists={tmp_path}"])
    filelist.write(tmp_path, str(root), "pairs.csv", CLASSIFY.file_list(config))
    listed, scanned = CLASSIFY.dataset(config), ImageFolder(str(root))
    assert listed.samples == scanned.samples and listed.class_to_idx == scanned.class_to_idx
    assert type(listed).__name__ == "ListedImageFolder"


@pytest.mark.job
def test_submit_stores_the_lists_of_the_training_and_validation_data(
    pairs: Path, tmp_path: Path, sample_root: Path
) -> None:
    val = tmp_path / "val"
    shutil.copytree(sample_root / "pix2pix", val)
    profile = tmp_path / "p.yaml"
    profile.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'runs'}\n")
    args = ["--profile", str(profile), "--name", "r", "--wait", f"data.root={pairs}", f"data.val_root={val}"]
    result = submit(*args, "steps=2", "eval.every=2", "log.image_every=0")
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = tmp_path / "runs" / "r"
    lists = sorted((run_dir / "file_lists").glob("*.txt"))
    assert len(lists) == 2 and all(len(p.read_text().splitlines()) == 256 for p in lists)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["data"]["file_lists"] == str(run_dir / "file_lists")
    assert json.loads((run_dir / "summary.json").read_text())["val_metrics"]["l1"] > 0


@pytest.mark.job
def test_an_unreadable_image_in_training_fails_or_is_skipped_and_counted(pairs: Path, tmp_path: Path) -> None:
    (pairs / "targets" / "0003.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    (pairs / "small.csv").write_text(
        "image_name,target_name\n" + "".join(f"inputs/{i:04d}.png,targets/{i:04d}.png\n" for i in range(8))
    )
    failing = build_config([f"data.root={pairs}", "data.csv=small.csv", f"run_dir={tmp_path / 'a'}"])
    with pytest.raises(UserError, match=r"cannot read image .*0003.png .*set data.bad_images=skip"):
        PIX2PIX.dataset(failing)[3]
    skipping = build_config(
        [f"data.root={pairs}", "data.csv=small.csv", f"run_dir={tmp_path / 'b'}", "data.bad_images=skip"]
    )
    assert PIX2PIX.dataset(skipping)[3].equal(PIX2PIX.dataset(skipping)[4])  # the next pair took its place
    profile = tmp_path / "p.yaml"
    profile.write_text(f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'runs'}\n")
    args = [f"data.root={pairs}", "data.csv=small.csv", "data.verify_images=false", "data.bad_images=skip"]
    result = submit("--profile", str(profile), "--name", "r", "--wait", *args, "batch_size=2", "steps=4")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())["bad_images_skipped"] == 1


@pytest.mark.parametrize(
    "path", ["a/b.png", "/abs.png", "a//b", "", "./a", "../a", "a/./b", "a/../b", "a/.", "a/..", ".", "..", "..a/b"]
)
def test_the_column_scan_flags_exactly_the_paths_the_row_check_would(path: str) -> None:
    from trainer.tasks.pix2pix import ODD_PATH, any_odd_path

    assert any_odd_path(["x.png", path, "y/z.png"]) == bool(ODD_PATH.search(path))

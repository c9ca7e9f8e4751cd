"""Each task owns its settings, data check and sample data; bad data and models are refused before anything
is queued (torch-free), or, for a model only torch can judge, within seconds of the job's start."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.messages import Golden, case_id, raises
from tests.support import PILLOWS, ROOT, assert_refused, run_dirs, submit
from trainer.config import build_config, config_dict


@pytest.fixture
def folders(tmp_path: Path, sample_root: Path) -> Path:
    """A private copy of the classify sample data (an ImageFolder of three classes), free to break."""
    root = tmp_path / "classes"
    shutil.copytree(sample_root / "classify", root)
    return root


def classify(local_profile: Path, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return submit("--profile", str(local_profile), "task=classify", f"data.root={root}", *args)


def test_the_submit_path_imports_no_torch() -> None:
    code = (
        "import sys, trainer.tasks, trainer.config, trainer.data.resolve;"
        "[trainer.config.tasks.get(n) for n in trainer.config.tasks.available()];"
        "trainer.config.build_config(['task=classify', 'classify.model=vgg11']);"
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_task_settings_live_under_the_tasks_name() -> None:
    config = build_config(["task=classify", "classify.model=resnet34"])
    assert config.task_settings.model == "resnet34"
    assert config_dict(config)["classify"] == {"model": "resnet34"} and "pix2pix" not in config_dict(config)
    assert build_config(["pix2pix.width=8"]).task_settings.width == 8
    assert build_config(base=config_dict(config)).task_settings.model == "resnet34"  # config.yaml round trip


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["pix2pix.width=8", "task=classify"], "pix2pix.width"),
        (["classify.model=vgg11"], "classify.model"),
        (["pix2pix.widht=8"], "pix2pix.widht"),
        (["pix2pix.depth=9"], "pix2pix.depth"),
        (["model.name=resnet18"], "model.name"),
    ],
    ids=case_id,
)
def test_task_settings_are_validated_like_the_trainers(golden: Golden, overrides: list[str], named: str) -> None:
    with raises(golden, named):
        build_config(overrides)


def empty_class(root: Path) -> None:
    (root / "hexagon").mkdir()


def one_class(root: Path) -> None:
    shutil.rmtree(root / "circle")
    shutil.rmtree(root / "square")


def not_an_image(root: Path) -> None:
    (root / "circle" / "0003.jpg").write_text("not a jpeg")


@pytest.mark.parametrize(
    ("breakage", "named"),
    [
        (empty_class, "hexagon"),
        (one_class, "triangle"),
        (not_an_image, "0003.jpg"),
    ],
)
def test_bad_image_folders_are_refused_at_submit(
    golden: Golden,  # type: ignore[no-untyped-def]
    breakage,
    named: str,
    folders: Path,
    local_profile: Path,
    tmp_path: Path,
) -> None:
    breakage(folders)
    outside = PILLOWS if breakage is not_an_image else ""
    assert_refused(classify(local_profile, folders), golden, named, tmp_path / "runs", outside=outside)


def test_too_few_samples_for_one_batch_per_rank_is_refused_at_submit(
    golden: Golden, local_profile: Path, sample_root: Path, tmp_path: Path
) -> None:
    result = submit("--profile", str(local_profile), f"data.root={sample_root / 'pix2pix'}", "batch_size=1000")
    assert_refused(result, golden, "batch_size=1000", tmp_path / "runs")


def test_a_unet_deeper_than_the_image_is_refused_at_submit(golden: Golden, local_profile: Path, tmp_path: Path) -> None:
    result = submit("--profile", str(local_profile), "pix2pix.depth=6", "data.image_size=16")
    assert_refused(result, golden, "data.image_size=16", tmp_path / "runs")


@pytest.mark.job
@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["classify.model=resnet1800"], "resnet1800"),
        (["classify.model=vit_b_16", "data.image_size=32"], "vit_b_16"),
        (["classify.model=googlenet"], "googlenet"),
    ],
    ids=case_id,
)
def test_a_model_torch_cannot_use_ends_the_job_in_one_line(
    golden: Golden, args: list[str], named: str, local_profile: Path, folders: Path, tmp_path: Path
) -> None:
    result = classify(local_profile, folders, "--wait", "steps=2", *args)
    assert result.returncode == 1, result.stdout + result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert named in line and "Traceback" not in result.stderr, result.stderr
    # Both ranks meet the model's error at once: which records it first is a race, not the message's words.
    golden(re.sub(r"^error: rank \d+ on \S+: ", "error: rank <rank> on <host>: ", line))
    [run_dir] = run_dirs(tmp_path / "runs")
    assert line.removeprefix("error: ") in (run_dir / "error.txt").read_text()

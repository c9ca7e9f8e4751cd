"""--resume --current-code: the run folder is data. A link in it is never followed out of it, and its list of
code files (provenance/code_files.json) never decides what code runs: no module comes back from the old code/,
and a list that cannot be read moves nothing, said in one line."""

import json
import os
from pathlib import Path

import pytest

from jobs.ops.resume import replace_code
from jobs.snapshot import Snapshot
from tests.messages import Golden, refused
from tests.support import script_run, submit_here, write_profile

# What a script run leaves in its code/: the snapshot's files, and what the script wrote there by a relative
# path (its checkpoint, TensorBoard's runs/), which the resumed command looks for.
SNAPSHOT = ["train.py", "helper.py", "pkg/__init__.py", "settings.yaml"]
WRITTEN = ["checkpoints/last.txt", "runs/tb/events.out"]


def made_run(root: Path, manifest: str | None) -> Path:
    run_dir = script_run(root / "runs" / "run")
    for name in SNAPSHOT + WRITTEN:
        (run_dir / "code" / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / "code" / name).write_text(f"old {name}\n")
    (run_dir / "code" / "ext.cpython-311-x86_64-linux-gnu.so").write_text("")  # a module built in place
    (run_dir / "provenance").mkdir()
    if manifest is not None:
        (run_dir / "provenance" / "code_files.json").write_text(manifest)
    return run_dir


def the_project(root: Path) -> Snapshot:
    """The project now: helper.py, pkg/ and the extension deleted, train.py changed."""
    (root / "project").mkdir()
    (root / "project" / "train.py").write_text("new train.py\n")
    return Snapshot(root / "project", [(root / "project" / "train.py", "train.py")], 13)


def files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir())


@pytest.mark.parametrize("manifest", [json.dumps(SNAPSHOT), "[]"], ids=["complete", "empty"])
def test_what_the_run_wrote_comes_along_and_no_module_ever_does(tmp_path: Path, manifest: str) -> None:
    """A list that does not name every old file (`[]`) once brought back helper.py, pkg/ and the extension the
    project had deleted; the run's checkpoint and events still come along."""
    run_dir = made_run(tmp_path, manifest)
    replace_code(the_project(tmp_path), run_dir / "code")
    assert files(run_dir / "code") == sorted(["train.py", *WRITTEN] + (["settings.yaml"] if manifest == "[]" else []))
    assert (run_dir / "code" / "train.py").read_text() == "new train.py\n"
    [aside] = (run_dir / "superseded").iterdir()
    assert {"helper.py", "pkg/__init__.py", "ext.cpython-311-x86_64-linux-gnu.so"} <= set(files(aside / "code"))


@pytest.mark.parametrize(
    ("manifest", "said"),
    [("{broken", "is not valid JSON"), ('{"train.py": 1}', "is not a valid code_files.json"), (None, "is missing")],
    ids=["torn", "not-a-list", "missing"],
)
def test_a_list_that_cannot_be_read_moves_nothing_and_says_where_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], manifest: str | None, said: str
) -> None:
    run_dir = made_run(tmp_path, manifest)
    replace_code(the_project(tmp_path), run_dir / "code")
    assert files(run_dir / "code") == ["train.py"]
    [aside] = (run_dir / "superseded").iterdir()
    assert set(WRITTEN) <= set(files(aside / "code"))
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"warning: {run_dir / 'provenance' / 'code_files.json'} {said}"), line
    assert line.endswith(f": what the run wrote into code/ stays in {aside / 'code'}"), line


@pytest.mark.parametrize("linked", ["code", "superseded", "provenance", "job.json's code"])
def test_a_link_out_of_the_run_folder_is_refused_and_nothing_moves(
    tmp_path: Path, golden: Golden, monkeypatch: pytest.MonkeyPatch, linked: str
) -> None:
    """code/ a link to a folder outside (its files were moved into the run), superseded/ or provenance/ a link
    (the run's code, or its list, would go out of it), job.json naming another folder as the run's code (that
    folder would be moved in): refused in one line, before anything is moved or queued."""
    run_dir = made_run(tmp_path, json.dumps(SNAPSHOT))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "mine.txt").write_text("a file of the user's\n")
    if linked == "job.json's code":
        record = json.loads((run_dir / "job.json").read_text()) | {"code": str(outside)}
        (run_dir / "job.json").write_text(json.dumps(record))
    elif linked == "code":
        (run_dir / "code").rename(tmp_path / "moved-away")
        (run_dir / "code").symlink_to(outside)
    else:
        if (run_dir / linked).exists():
            (run_dir / linked).rename(outside / linked)
        (run_dir / linked).symlink_to(outside / linked if (outside / linked).exists() else outside)
    before = files(run_dir), files(outside)
    the_project(tmp_path)
    monkeypatch.chdir(tmp_path / "project")
    profile = write_profile(tmp_path, f"executor: local\nrun_root: {tmp_path / 'runs'}\n")
    result = submit_here("--profile", str(profile), "--resume", str(run_dir), "--current-code")
    refused(result, golden, "--current-code", str(run_dir))
    after = [f for f in files(run_dir) if f != "resume.lock"], files(outside)  # the resume's lock stays, as always
    assert after == before
    assert not os.path.lexists(run_dir / "superseded") or linked == "superseded"

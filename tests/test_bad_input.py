"""Each bad input ends in one line naming the problem and the fix, exit 2, and no run left behind."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.messages import Golden, case_id, refused
from tests.support import PILLOWS, ROOT, assert_refused, write_profile
from tests.support import submit_here as submit
from trainer.errors import UserError


@pytest.fixture
def pairs(tmp_path: Path, sample_root: Path) -> Path:
    """A private copy of the sample pairs, free to break."""
    root = tmp_path / "pairs"
    shutil.copytree(sample_root / "pix2pix", root)
    return root


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["stepz=5"], "stepz"),
        (["steps=many"], "steps"),
        (["--nodes", "0"], "nodes"),
        (["--gpus-per-node", "0"], "gpus_per_node"),
        (["--nodes", "2"], "local executor"),
        (["--nodes", "two"], "--nodes"),
        (["--dependency", "afterok:1"], "--dependency"),
        (["--env", "NCCL_DEBUG"], "--env"),
        (["--env", "1X=2"], "1X"),
        (["--env", "A=b\nc"], "env"),
        (["--env", "MASTER_ADDR=10.0.0.1"], "MASTER_ADDR"),
        (["--env", "WORLD_SIZE=4"], "WORLD_SIZE"),
        (["--env", "PATH=/opt/bin"], "PATH"),
        (["--env", "PYTHONHOME=/x"], "PYTHONHOME"),
        (["--env", "SLURM_DDP_PYTHON=/x"], "SLURM_DDP_PYTHON"),
        (["--env", "RUN_DIR=/x"], "RUN_DIR"),
        (["--after", "/nonexistent/run"], "/nonexistent/run"),
        (["dist.init_method=carrier-pigeon"], "dist.init_method"),
        (["--current-code"], "--current-code"),
        (["--restart-args", "--resume x.pth"], "--restart-args"),
    ],
    ids=case_id,
)
def test_bad_arguments(golden: Golden, args: list[str], named: str, local_profile: Path, tmp_path: Path) -> None:
    assert_refused(submit("--profile", str(local_profile), *args), golden, named, tmp_path / "runs")


def test_an_env_value_no_process_can_take_is_refused(golden: Golden, tmp_path: Path) -> None:
    """Linux takes at most 128 KiB in one KEY=VALUE (MAX_ARG_STRLEN): no task (nor the local controller) could start."""
    profile = write_profile(tmp_path, f"executor: slurm\nrun_root: {tmp_path / 'runs'}\n")
    big = "x" * (128 * 1024 - len("BIG="))  # with its NUL, one byte over
    result = submit("--profile", str(profile), "--dry-run", "--env", f"BIG={big}", "--", "python", "-c", "pass")
    assert_refused(result, golden, "BIG", tmp_path / "runs")
    fits = submit("--profile", str(profile), "--dry-run", "--env", f"BIG={big[:-1]}", "--", "python", "-c", "pass")
    assert fits.returncode == 0, fits.stderr


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--env", "NCCL_SOCKET_IFNAME=eth0"], ""), ([], "env:\n  GLOO_SOCKET_IFNAME: eth0\n")],
    ids=["--env", "the profile's env"],
)
def test_env_beside_network_interface_is_refused_not_overwritten(
    golden: Golden, args: list[str], env: str, tmp_path: Path
) -> None:
    """Two values for one variable: the one written last in the script would win, silently."""
    profile = write_profile(tmp_path, f"executor: slurm\nnetwork_interface: ib0\nrun_root: {tmp_path / 'runs'}\n{env}")
    result = submit("--profile", str(profile), "--dry-run", *args, "--", "python", "-c", "pass")
    assert_refused(result, golden, "network_interface", tmp_path / "runs")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("executor: local\ncolour: blue\n", "colour"),
        ("executor: local\nnodes: two\n", "nodes"),
        ("executor: mainframe\n", "executor"),
        ("executor: local\ntrainer:\n  stepz: 3\n", "stepz"),
        ("executor: [local\n", "YAML"),
        ("executor: local\nrestarts_in_job: 101\n", "restarts_in_job"),
        ("executor: local\nscript_hang_s: 5\n", "script_hang_s"),
        ("executor: local\nspare_nodes: -1\n", "spare_nodes"),
        (
            "executor: local\nrequeue_grace_s: 500\n",
            "requeue_grace_s",
        ),
        ("executor: local\nrequeue_grace_s: -5\n", "requeue_grace_s"),
        ("executor: local\nrestarts_in_job: 1\nspare_nodes: 1\n", "spare_nodes"),
        ("executor: slurm\nspare_nodes: 2\n", "spare_nodes"),
        ("executor: slurm\nlogin: a@b\nremote_root: runs\n", "remote_root"),
        (
            "executor: slurm\nlogin: a@b\nremote_root: ./scratch/runs\n",
            "remote_root",
        ),
        (
            "executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-o, ProxyCommand=nc %h %p]\n",
            "ProxyCommand",
        ),
        (
            "executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: ['-oLocalCommand=id']\n",
            "LocalCommand",
        ),
        ("executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-A]\n", "-A"),
        ("executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-p]\n", "-p"),
        (
            "executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-J, 'a$(id)@h']\n",
            "-J",
        ),
        (
            "executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-o, UserKnownHostsFile=~/.bashrc]\n",
            "UserKnownHostsFile",
        ),
        (
            "executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-o, UserKnownHostsFile=~/.ssh/authorized_keys]\n",
            "UserKnownHostsFile",
        ),
        (
            "executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-F, runs/x/cfg]\n",
            "-F",
        ),
    ],
    ids=case_id,
)
def test_bad_profiles(golden: Golden, text: str, named: str, tmp_path: Path) -> None:
    profile = write_profile(tmp_path, text + f"run_root: {tmp_path / 'runs'}\n" if "[" not in text else text)
    assert_refused(submit("--profile", str(profile)), golden, named, tmp_path / "runs")


def test_missing_profile(golden: Golden, tmp_path: Path) -> None:
    assert_refused(submit("--profile", "nonexistent"), golden, "nonexistent", tmp_path)
    assert_refused(submit("--profile", str(tmp_path / "x.yaml")), golden, "x.yaml", tmp_path)


def corrupt(root: Path) -> None:
    (root / "targets" / "0003.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")


def unreadable(root: Path) -> None:
    (root / "targets" / "0003.png").unlink()
    (root / "targets" / "0003.png").mkdir()  # a folder where a file belongs cannot be read, even by root


@pytest.mark.parametrize(
    ("breakage", "named"),
    [
        (lambda r: (r / "pairs.csv").unlink(), "pairs.csv"),
        (
            lambda r: (r / "pairs.csv").write_text("input,target\na.png,b.png\n"),
            "pairs.csv",
        ),
        (lambda r: (r / "targets" / "0003.png").unlink(), "pairs.csv row 5"),
        (corrupt, "pairs.csv row 5"),
        (unreadable, "pairs.csv row 5"),
        (
            lambda r: (r / "pairs.csv").write_text("image_name,target_name\n../../etc/passwd,targets/0001.png\n"),
            "pairs.csv row 2",
        ),
    ],
    ids=["no-pairs.csv", "other-columns", "missing-image", "corrupt-image", "unreadable-image", "escaping-path"],
)
def test_bad_data(golden: Golden, breakage, named: str, pairs: Path, local_profile: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    breakage(pairs)
    result = submit("--profile", str(local_profile), f"data.root={pairs}")
    assert_refused(result, golden, named, tmp_path / "runs", outside=PILLOWS if breakage is corrupt else "")


def test_corrupt_image_names_path_and_fix(pairs: Path, local_profile: Path, tmp_path: Path) -> None:
    corrupt(pairs)
    result = submit("--profile", str(local_profile), f"data.root={pairs}")
    assert str(pairs / "targets" / "0003.png") in result.stderr and "is corrupt" in result.stderr
    with Image.open(pairs / "targets" / "0001.png") as ok:
        assert ok.size == (64, 64)  # the sample data itself is untouched


LAUGHS = b"executor: local\nenv:\n  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + b"".join(
    f"  {n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n".encode() for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


# Profiles that used to end in a traceback, or were silently misread.
@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b"", "executor"),
        (b"nodes: 1\n", "executor"),
        (b"executor: local\n\xff\xfe\n", "p.yaml"),
        (b"executor: local\nnodes: 1\nnodes: 2\n", "nodes"),
        (
            b"executor: local\nenv:\n  'X=1; touch pwned; Y': v\n",
            "X=1; touch pwned; Y",
        ),
        (b"executor: local\nenv:\n  NCCL_DEBUG:\n", "env.NCCL_DEBUG"),
        (b"executor: local\nenv:\n  A: [1, 2]\n", "env.A"),
        (b"executor: local\nsbatch_args:\n  'mail-type END --wrap': x\n", "mail-type END --wrap"),
        # A "billion laughs": nine aliases of nine expand to 9**9 strings (memory, then a MemoryError traceback).
        (LAUGHS, "alias"),
        (b"executor: local\ntrainer: " + b"{a: " * 5000 + b"1" + b"}" * 5000 + b"\n", "p.yaml"),
        (b"executor: local\nenv:\n  x: " + b"[" * 200000 + b"]" * 200000 + b"\n", "p.yaml"),
    ],
    # Short ids: pytest exports the test's id to its subprocesses (PYTEST_CURRENT_TEST), and one variable
    # may hold at most 128 KiB.
    ids=case_id,
)
def test_bad_profile_files(golden: Golden, content: bytes, named: str, tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_bytes(content)
    assert_refused(submit("--profile", str(profile)), golden, named, tmp_path / "runs")


def test_a_folder_is_not_a_profile(golden: Golden, tmp_path: Path) -> None:
    (tmp_path / "p.yaml").mkdir()
    assert_refused(submit("--profile", str(tmp_path / "p.yaml")), golden, "p.yaml", tmp_path / "runs")


def test_a_sweep_key_given_twice_is_refused(golden: Golden, local_profile: Path, tmp_path: Path) -> None:
    result = submit("--profile", str(local_profile), "--sweep", "seed=1,2", "--sweep", "seed=3")
    assert_refused(result, golden, "--sweep seed", tmp_path / "runs")


@pytest.mark.parametrize(
    "name",
    ["x\n#SBATCH --wrap=touch pwned", "..", ".", "/abs", "../escape", "a/b", "n" * 300, ".hidden"],
    ids=lambda name: name if len(name) < 50 else f"{name[0]} x {len(name)}",
)
def test_names_that_are_not_plain_folder_names_are_refused(
    golden: Golden, name: str, local_profile: Path, tmp_path: Path
) -> None:
    assert_refused(submit("--profile", str(local_profile), "--name", name), golden, "--name", tmp_path / "runs")


@pytest.mark.parametrize("args", [["stepz=5"], ["--", "python", "trian.py"], ["--resume", "nowhere/run"]], ids=case_id)
def test_a_refused_submit_in_an_empty_folder_leaves_it_empty(args: list[str], tmp_path: Path) -> None:
    """Bad input leaves nothing behind: the run root (runs/ in the folder submitted from) and its CACHEDIR.TAG
    appear with the first run."""
    project = tmp_path / "project"
    project.mkdir()
    profile = write_profile(tmp_path, "executor: local\ngpus_per_node: 1\nrun_root: runs\n")
    result = submit("--profile", str(profile), *args, cwd=project)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert sorted(project.iterdir()) == []


def test_a_name_taken_by_a_dangling_symlink_is_refused(
    golden: Golden, local_profile: Path, sample_root: Path, tmp_path: Path
) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "taken").symlink_to(tmp_path / "nowhere")
    result = submit("--profile", str(local_profile), "--name", "taken", f"data.root={sample_root / 'pix2pix'}")
    refused(result, golden, "taken")
    assert (tmp_path / "runs" / "taken").is_symlink() and not (tmp_path / "nowhere").exists()


@pytest.mark.skipif(Path("/dev/nvidia0").exists(), reason="with GPUs the local shape is refused by its GPU count")
def test_more_local_processes_than_the_machine_has_are_refused(
    golden: Golden, local_profile: Path, tmp_path: Path
) -> None:
    result = submit("--profile", str(local_profile), "--gpus-per-node", "100000")
    assert_refused(result, golden, "--gpus-per-node", tmp_path / "runs", cpus=str(len(os.sched_getaffinity(0))))


@pytest.mark.parametrize("run_root", ["{tmp}/a-file/runs", "/proc/runs"])
def test_an_unwritable_run_root_is_one_line(golden: Golden, run_root: str, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    profile = write_profile(tmp_path, f"executor: local\nrun_root: {run_root.format(tmp=tmp_path)}\n")
    result = submit("--profile", str(profile))
    refused(result, golden, run_root.format(tmp=tmp_path))


def test_a_decompression_bomb_is_refused(golden: Golden, pairs: Path, local_profile: Path, tmp_path: Path) -> None:
    # 1-bit pixels compress to almost nothing: a few kB on disk, far more pixels than Pillow opens safely.
    Image.new("1", (20000, 20000)).save(pairs / "targets" / "0003.png")
    result = submit("--profile", str(local_profile), f"data.root={pairs}")
    assert_refused(result, golden, "0003.png", tmp_path / "runs")


def test_trainer_and_sample_data_commands_refuse_a_path_under_a_file(tmp_path: Path, sample_root: Path) -> None:
    (tmp_path / "a-file").write_text("")
    for args in (
        ["trainer", f"run_dir={tmp_path / 'a-file' / 'run'}", f"data.root={sample_root / 'pix2pix'}"],
        ["trainer.data.sample", str(tmp_path / "a-file" / "data")],
    ):
        result = subprocess.run(
            [sys.executable, "-m", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr


def test_a_hostile_profile_renders_a_script_that_runs_nothing(tmp_path: Path) -> None:
    """env values, setup-free: the exported preamble of the dry-run script is run by bash; nothing executes."""
    canary = tmp_path / "pwned"
    profile = write_profile(
        tmp_path,
        "executor: slurm\n"
        f"run_root: {tmp_path / 'runs'}\n"
        "env:\n"
        f"  A: '$(touch {canary})'\n"
        f"  B: '`touch {canary}`; touch {canary}'\n"
        "  NCCL_DEBUG_SUBSYS: true\n"
        "  C: 3\n"
        "sbatch_args:\n"
        "  mail-type: END\n",
    )
    result = submit("--profile", str(profile), "--dry-run")
    assert result.returncode == 0, result.stderr
    exports = [line for line in result.stdout.splitlines() if line.startswith("export ")]
    assert "export NCCL_DEBUG_SUBSYS=1" in exports and "export C=3" in exports
    out = subprocess.run(
        ["bash", "-c", "\n".join([*exports, 'printf "%s|%s" "$A" "$B"'])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and not canary.exists()
    assert out.stdout == f"$(touch {canary})|`touch {canary}`; touch {canary}"
    assert "#SBATCH --mail-type=END" in result.stdout


def test_of_two_racing_submits_the_loser_removes_nothing(
    local_profile: Path, sample_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second submit of one --name finds the folder claimed between its checks and its mkdir."""
    from jobs.ops.prepare import create_and_submit, prepare
    from jobs.ops.submit_line import parse_args

    argv = ["--profile", str(local_profile), "--name", "same", f"data.root={sample_root / 'pix2pix'}"]
    request = prepare(tuple(argv), parse_args(argv), [])
    winner = tmp_path / "runs" / "same"
    winner.mkdir(parents=True)
    (winner / "config.yaml").write_text("the winner's\n")
    # The race: when this submit looked, the folder was not there yet.
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self: False if self == winner else real_exists(self))
    with pytest.raises(UserError, match="already exists"):
        create_and_submit(request)
    assert (winner / "config.yaml").read_text() == "the winner's\n"


def test_a_truncated_jpeg_is_refused_at_submit(
    golden: Golden, sample_root: Path, local_profile: Path, tmp_path: Path
) -> None:
    """Pillow's verify() reads a JPEG's headers only: a cut-off file passed and failed at the first batch."""
    root = shutil.copytree(sample_root / "classify", tmp_path / "classes")
    bad = sorted((root / "circle").iterdir())[0]
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    result = submit("--profile", str(local_profile), "task=classify", f"data.root={root}", "data.verify_sample=0")
    assert_refused(result, golden, str(bad), tmp_path / "runs", outside=PILLOWS)


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda r: (r / "circle").rename(r / "cir\tcle"), "cir"),
        (lambda r: (r / "circle" / "0000.jpg").rename(os.fsdecode(bytes(r / "circle") + b"/\xff.jpg")), "circle"),
    ],
    ids=["tab-in-name", "not-utf8"],
)
def test_class_folder_names_the_file_list_cannot_hold(
    golden: Golden, make, named: str, sample_root: Path, local_profile: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    root = shutil.copytree(sample_root / "classify", tmp_path / "classes")
    make(root)
    assert_refused(
        submit("--profile", str(local_profile), "task=classify", f"data.root={root}"), golden, named, tmp_path / "runs"
    )


def test_a_path_component_over_255_bytes_is_one_line(golden: Golden, local_profile: Path, tmp_path: Path) -> None:
    result = submit("--profile", str(local_profile), f"data.root={tmp_path / ('x' * 300)}")
    assert_refused(result, golden, "data.root", tmp_path / "runs")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--resume", "."], "config.yaml"),
        (["--resume", "~"], "does not exist"),
        (["--sweep", "steps=1,2", "--resume", "."], "--sweep"),
    ],
    ids=case_id,
)
def test_a_refused_resume_writes_nothing_into_the_folder_it_names(
    golden: Golden, args: list[str], named: str, local_profile: Path, tmp_path: Path
) -> None:
    """`--resume` of a folder that is not a run (the working folder, home) claims nothing there: no
    resume.lock is left in a folder of the user's."""
    home = tmp_path / "home"
    home.mkdir()
    result = submit("--profile", str(local_profile), *args, cwd=home, env={"HOME": str(home)})
    assert_refused(result, golden, named, tmp_path / "runs")
    assert sorted(p.name for p in home.iterdir()) == []


def test_a_run_name_that_is_not_a_folder_name_is_refused_before_connecting(golden: Golden, tmp_path: Path) -> None:
    """`--name ..` with a login profile: refused here, before any connection, and nothing here is touched."""
    profile = write_profile(tmp_path, "executor: slurm\nlogin: nobody@unreachable.invalid\nremote_root: /r\n")
    (tmp_path / "keep.txt").write_text("mine")
    result = submit("--profile", str(profile), "--name", "..", cwd=tmp_path)
    assert_refused(result, golden, "--name", tmp_path / "runs")
    assert (tmp_path / "keep.txt").read_text() == "mine" and not (tmp_path / "remote.json").exists()


RAN_ON_TWO = {"tasks": 2, "profile": {"nodes": 1, "gpus_per_node": 2}}


@pytest.mark.parametrize(
    ("record", "nodes", "gpus", "refused"),
    [
        (RAN_ON_TWO, 1, 2, False),
        (RAN_ON_TWO, 1, 1, False),  # fewer: accumulates two micro-batches a step
        (RAN_ON_TWO, 2, 4, False),  # more: 8 processes share the global batch of 2 x 4
        (RAN_ON_TWO, 3, 1, True),  # 3 cannot share 8
        ({"tasks": 3, "history": [RAN_ON_TWO]}, 1, 3, True),  # the first job's number sets the global batch
        ({"profile": {"nodes": 1, "gpus_per_node": 2}}, 1, 3, False),  # no number recorded: the trainer checks
    ],
    ids=["same", "fewer", "more", "cannot-share", "first-job", "no-tasks"],
)
def test_a_resume_on_a_number_of_processes_that_cannot_share_the_global_batch_is_refused(
    golden: Golden, record: dict[str, object], nodes: int, gpus: int, refused: bool
) -> None:
    from jobs.ops.resume import layout_change
    from jobs.profiles import profile_of

    profile = profile_of({"name": "test", "executor": "slurm", "nodes": nodes, "gpus_per_node": gpus})
    why = layout_change(record, profile, batch_size=4)
    if refused:
        assert why is not None and "--resume" in why
        golden(why)
    else:
        assert why is None

"""Each bad input ends in one line naming the problem and the fix, exit 2, and no run left behind."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.conftest import ROOT, run_dirs, submit, write_profile
from trainer.errors import UserError


def assert_refused(result, message: str, run_root: Path) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and message in lines[0], lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert run_dirs(run_root) == []
    assert (
        not any(p.name not in ("sample_data", "CACHEDIR.TAG") for p in run_root.glob("*"))
        if run_root.exists()
        else True
    )


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
        (["--dependency", "afterok:1"], "--dependency is a Slurm option; profile test runs with the local executor"),
        (["--env", "NCCL_DEBUG"], "--env 'NCCL_DEBUG' is not KEY=VALUE; write e.g. --env NCCL_DEBUG=INFO"),
        (["--env", "1X=2"], "env key '1X' is not a variable name"),
        (["--env", "A=b\nc"], "a newline or #SBATCH inside a value"),
        (["--env", "MASTER_ADDR=10.0.0.1"], "env: MASTER_ADDR is the rendezvous, set per job"),
        (["--env", "WORLD_SIZE=4"], "env: WORLD_SIZE is set per task from Slurm's variables"),
        (["--env", "PATH=/opt/bin"], "env: PATH is where the tasks find python and Slurm's commands (set python:"),
        (["--env", "PYTHONHOME=/x"], "env: PYTHONHOME is where the tasks' python finds its standard library"),
        (["--env", "SLURM_DDP_PYTHON=/x"], "env: SLURM_DDP_PYTHON is set per job by Slurm, submitit or this tool"),
        (["--env", "RUN_DIR=/x"], "env: RUN_DIR is the run's folder, set by the tool; a value of yours would break"),
        (["--after", "/nonexistent/run"], "'/nonexistent/run' is neither a run directory nor a job id"),
        (["dist.init_method=carrier-pigeon"], "dist.init_method: must be tcp or file"),
        (["--current-code"], "--current-code goes with --resume RUN_DIR"),
        (["--restart-args", "--resume x.pth"], "--restart-args goes with a new -- COMMAND"),
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
        ("executor: local\nrestarts_in_job: 101\n", "restarts_in_job must be between 0 and 100, got 101"),
        ("executor: local\nscript_hang_s: 5\n", "script_hang_s must be 0 (never) or between 10 s and a week, got 5"),
        ("executor: local\nspare_nodes: -1\n", "spare_nodes must be between 0 and 64, got -1"),
        (
            "executor: local\nrequeue_grace_s: 500\n",
            "requeue_grace_s must be -1 (what signal_delay_s leaves) or from 0",
        ),
        ("executor: local\nrequeue_grace_s: -5\n", "e.g. requeue_grace_s: 90"),
        ("executor: local\nrestarts_in_job: 1\nspare_nodes: 1\n", "spare_nodes: 1 takes a failed node's place in an"),
        ("executor: slurm\nspare_nodes: 2\n", "set restarts_in_job: 1 or more with executor: slurm, or spare_nodes: 0"),
        ("executor: slurm\nlogin: a@b\nremote_root: runs\n", "remote_root runs is relative: the login node would put"),
        (
            "executor: slurm\nlogin: a@b\nremote_root: ./scratch/runs\n",
            "write an absolute folder, e.g. ~/runs or /scratch/$USER/runs",
        ),
        (
            "executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-o, ProxyCommand=nc %h %p]\n",
            "ssh_options: -o ProxyCommand is not passed on (it can run commands on this machine",
        ),
        (
            "executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: ['-oLocalCommand=id']\n",
            "-o LocalCommand is not",
        ),
        ("executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-A]\n", "'-A' is not passed on (only -p, -i, -J"),
        ("executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-p]\n", "-p needs a value after it"),
        (
            "executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-J, 'a$(id)@h']\n",
            "-J 'a$(id)@h' is not a user",
        ),
        (
            "executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-o, UserKnownHostsFile=~/.bashrc]\n",
            "would let ssh write host keys there; name /dev/null or a known_hosts file of ~/.ssh",
        ),
        (
            "executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-o, UserKnownHostsFile=~/.ssh/authorized_keys]\n",
            "would let ssh write host keys there",
        ),
        (
            "executor: slurm\nlogin: a@b\nremote_root: /r\nssh_options: [-F, runs/x/cfg]\n",
            "-F runs/x/cfg must be a file of ~/.ssh",
        ),
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


LAUGHS = b"executor: local\nenv:\n  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + b"".join(
    f"  {n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n".encode() for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


# Profiles that used to end in a traceback, or were silently misread.
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "sets no executor; add a line `executor: local`"),
        (b"nodes: 1\n", "sets no executor"),
        (b"executor: local\n\xff\xfe\n", "is not UTF-8 text"),
        (b"executor: local\nnodes: 1\nnodes: 2\n", "key 'nodes' is given twice (line 3); keep one"),
        (
            b"executor: local\nenv:\n  'X=1; touch pwned; Y': v\n",
            "env key 'X=1; touch pwned; Y' is not a variable name",
        ),
        (b"executor: local\nenv:\n  NCCL_DEBUG:\n", "env.NCCL_DEBUG: None is not a single value"),
        (b"executor: local\nenv:\n  A: [1, 2]\n", "env.A: [1, 2] is not a single value"),
        (b"executor: local\nsbatch_args:\n  'mail-type END --wrap': x\n", "is not an sbatch option name"),
        # A "billion laughs": nine aliases of nine expand to 9**9 strings (memory, then a MemoryError traceback).
        (LAUGHS, "a YAML alias (*a, line 4) is not allowed; write the value out"),
        (b"executor: local\ntrainer: " + b"{a: " * 5000 + b"1" + b"}" * 5000 + b"\n", "nesting deeper than 32"),
        (b"executor: local\nenv:\n  x: " + b"[" * 200000 + b"]" * 200000 + b"\n", "nesting deeper than 32"),
    ],
    # Short ids: pytest exports the test's id to its subprocesses (PYTEST_CURRENT_TEST), and one variable
    # may hold at most 128 KiB.
    ids=lambda value: repr(value)[:48] if isinstance(value, bytes) else None,
)
def test_bad_profile_files(content: bytes, message: str, tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_bytes(content)
    assert_refused(submit("--profile", str(profile)), message, tmp_path / "runs")


def test_a_folder_is_not_a_profile(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").mkdir()
    assert_refused(submit("--profile", str(tmp_path / "p.yaml")), "is a folder, not a YAML file", tmp_path / "runs")


def test_a_sweep_key_given_twice_is_refused(local_profile: Path, tmp_path: Path) -> None:
    result = submit("--profile", str(local_profile), "--sweep", "seed=1,2", "--sweep", "seed=3")
    assert_refused(result, "--sweep seed is given twice", tmp_path / "runs")


@pytest.mark.parametrize(
    "name", ["x\n#SBATCH --wrap=touch pwned", "..", ".", "/abs", "../escape", "a/b", "n" * 300, ".hidden"]
)
def test_names_that_are_not_plain_folder_names_are_refused(name: str, local_profile: Path, tmp_path: Path) -> None:
    assert_refused(
        submit("--profile", str(local_profile), "--name", name), "is not a plain folder name", tmp_path / "runs"
    )


def test_a_name_taken_by_a_dangling_symlink_is_refused(local_profile: Path, sample_root: Path, tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "taken").symlink_to(tmp_path / "nowhere")
    result = submit("--profile", str(local_profile), "--name", "taken", f"data.root={sample_root / 'pix2pix'}")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "already exists" in result.stderr
    assert (tmp_path / "runs" / "taken").is_symlink() and not (tmp_path / "nowhere").exists()


def test_more_local_processes_than_the_machine_has_are_refused(local_profile: Path, tmp_path: Path) -> None:
    result = submit("--profile", str(local_profile), "--gpus-per-node", "100000")
    assert_refused(result, "would start 100000 local processes on a machine with", tmp_path / "runs")


@pytest.mark.parametrize("run_root", ["{tmp}/a-file/runs", "/proc/runs"])
def test_an_unwritable_run_root_is_one_line(run_root: str, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    profile = write_profile(tmp_path, f"executor: local\nrun_root: {run_root.format(tmp=tmp_path)}\n")
    result = submit("--profile", str(profile))
    assert result.returncode == 2 and "cannot be written" in result.stderr and "Traceback" not in result.stderr


def test_a_decompression_bomb_is_refused(pairs: Path, local_profile: Path, tmp_path: Path) -> None:
    # 1-bit pixels compress to almost nothing: a few kB on disk, far more pixels than Pillow opens safely.
    Image.new("1", (20000, 20000)).save(pairs / "targets" / "0003.png")
    result = submit("--profile", str(local_profile), f"data.root={pairs}")
    assert_refused(result, "more pixels than Pillow opens safely", tmp_path / "runs")


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
    from jobs import submit as submit_module

    request = submit_module.prepare(
        ["--profile", str(local_profile), "--name", "same", f"data.root={sample_root / 'pix2pix'}"]
    )
    winner = tmp_path / "runs" / "same"
    winner.mkdir(parents=True)
    (winner / "config.yaml").write_text("the winner's\n")
    # The race: when this submit looked, the folder was not there yet.
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self: False if self == winner else real_exists(self))
    with pytest.raises(UserError, match="already exists"):
        submit_module.create_and_submit(request)
    assert (winner / "config.yaml").read_text() == "the winner's\n"


def test_a_truncated_jpeg_is_refused_at_submit(sample_root: Path, local_profile: Path, tmp_path: Path) -> None:
    """Pillow's verify() reads a JPEG's headers only: a cut-off file passed and failed at the first batch."""
    root = shutil.copytree(sample_root / "classify", tmp_path / "classes")
    bad = sorted((root / "circle").iterdir())[0]
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    result = submit("--profile", str(local_profile), "task=classify", f"data.root={root}", "data.verify_sample=0")
    assert_refused(result, f"image {bad} is corrupt", tmp_path / "runs")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda r: (r / "circle").rename(r / "cir\tcle"), "has a tab or line break in its name"),
        (lambda r: (r / "circle" / "0000.jpg").rename(os.fsdecode(bytes(r / "circle") + b"/\xff.jpg")), "is not UTF-8"),
    ],
)
def test_class_folder_names_the_file_list_cannot_hold(
    make, message: str, sample_root: Path, local_profile: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    root = shutil.copytree(sample_root / "classify", tmp_path / "classes")
    make(root)
    assert_refused(
        submit("--profile", str(local_profile), "task=classify", f"data.root={root}"), message, tmp_path / "runs"
    )


def test_a_path_component_over_255_bytes_is_one_line(local_profile: Path, tmp_path: Path) -> None:
    result = submit("--profile", str(local_profile), f"data.root={tmp_path / ('x' * 300)}")
    assert_refused(result, "File name too long", tmp_path / "runs")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--resume", "."], "is not a run directory (no config.yaml)"),
        (["--resume", "~"], "is not a run directory (no config.yaml)"),
        (["--sweep", "steps=1,2", "--resume", "."], "--resume continues one run; drop --sweep"),
    ],
)
def test_a_refused_resume_writes_nothing_into_the_folder_it_names(
    args: list[str], message: str, local_profile: Path, tmp_path: Path
) -> None:
    """`--resume` of a folder that is not a run (the working folder, home) claims nothing there: no
    resume.lock is left in a folder of the user's."""
    home = tmp_path / "home"
    home.mkdir()
    result = submit("--profile", str(local_profile), *args, cwd=home, env={"HOME": str(home)})
    assert_refused(result, message, tmp_path / "runs")
    assert sorted(p.name for p in home.iterdir()) == []


def test_a_run_name_that_is_not_a_folder_name_is_refused_before_connecting(tmp_path: Path) -> None:
    """`--name ..` with a login profile: refused here, before any connection, and nothing here is touched."""
    profile = write_profile(tmp_path, "executor: slurm\nlogin: nobody@unreachable.invalid\nremote_root: /r\n")
    (tmp_path / "keep.txt").write_text("mine")
    result = submit("--profile", str(profile), "--name", "..", cwd=tmp_path)
    assert_refused(result, "--name '..' is not a plain folder name", tmp_path / "runs")
    assert (tmp_path / "keep.txt").read_text() == "mine" and not (tmp_path / "remote.json").exists()

"""The profile's setup lines in the batch script (jobs.plan.guarded_setup, read by jobs.profiles.setup_commands at
load): each runs as written and one that fails or ends the shell ends the job naming it; whatever a profile could
hold before still runs as it did (comments, blank items, a construct or a here-document over items); what bash
cannot run as written is refused at submit, in one line."""

import subprocess
from pathlib import Path

import pytest

from jobs.plan import guarded_setup
from jobs.profiles import setup_commands
from tests.messages import Golden, case_id
from tests.support import assert_refused, write_profile
from tests.support import submit_here as submit

# What the tool writes after the setup lines in the batch script (jobs.plan.slurm_parameters): a line a trailing
# backslash or an open here-document would take as its own.
AFTER = 'export SUBMITIT_PREEMPT_SIGNAL=USR2\necho "reached A=$A B=$B C=$C"\n'


def run(lines: list[str]) -> subprocess.CompletedProcess[str]:
    script = "\n".join(guarded_setup(setup_commands(tuple(lines)))) + "\n" + AFTER
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)


def test_lines_that_work_keep_their_effect_whatever_their_shape() -> None:
    lines = ["export A=1  # a comment", "", "# a comment alone", "if true; then", "  export B=2", "fi"]
    lines += ["echo continued \\", "  here", "read -r C <<EOF", "$((1 + 2))", "EOF", "echo 'a\\'", "echo b\\\\"]
    done = run(lines)
    assert done.returncode == 0 and "reached A=1 B=2 C=3" in done.stdout, done.stdout + done.stderr
    assert "continued here\na\\\nb\\\n" in done.stdout  # an escaped or quoted backslash ends its line


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (["export A=1", "source /nonexistent/activate"], "setup line 2 failed (exit 1): source /nonexistent/activate"),
        (["if true; then", "  false", "fi"], "setup line 1 failed (exit 1): if true; then ..."),
        (["export A=1", "", "exit 3"], "setup line 3 failed (exit 3): exit 3"),
        (["echo $((1+))", "export A=1"], "setup line 1 failed (exit 1): echo $((1+))"),
        (["cd ${SCRATCH:?is not set}"], "setup line 1 failed (exit 127): cd ${SCRATCH:?is not set}"),
    ],
    ids=case_id,
)
def test_a_line_that_fails_or_exits_ends_the_script_in_one_line_naming_it(lines: list[str], said: str) -> None:
    done = run(lines)
    assert done.returncode == 1 and "reached" not in done.stdout, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == f"error: the profile's {said}; fix that line of the profile's setup:"


def test_an_exit_0_ends_the_job_on_purpose_and_quietly() -> None:
    done = run(["[ -n done ] && exit 0", "export A=1"])
    assert done.returncode == 0 and "reached" not in done.stdout and done.stderr == "", done.stdout + done.stderr


BASH_SAYS = r"\(bash -n: (.*)\): close"  # bash's own words (they change with its version) read <outside>


REFUSED = [
    ("  - if true; then", "setup line 1", BASH_SAYS),
    ('  - echo "abc', "setup line 1", BASH_SAYS),
    ("  - export A=1\n  - '}'", "setup line 2", BASH_SAYS),
    ("  - cat > notes <<EOF\n  - hello", "setup line 1", BASH_SAYS),
    ("  - export A=1\n  - echo a \\", "setup line 2", ""),
    ('  - "echo a\\0b"', "setup[0]", ""),
]


@pytest.mark.parametrize(("setup", "named", "outside"), REFUSED, ids=[case_id(case[0]) for case in REFUSED])
def test_what_bash_cannot_run_as_written_is_refused_at_submit(
    golden: Golden, setup: str, named: str, outside: str, tmp_path: Path
) -> None:
    profile = write_profile(tmp_path, f"executor: slurm\nrun_root: {tmp_path / 'runs'}\nsetup:\n{setup}\n")
    result = submit("--profile", str(profile), "--dry-run", "--", "python", "-c", "pass")
    assert_refused(result, golden, named, tmp_path / "runs", outside=outside)


def test_setup_in_a_local_profile_is_refused_not_ignored(golden: Golden, tmp_path: Path) -> None:
    profile = write_profile(tmp_path, f"executor: local\nrun_root: {tmp_path / 'runs'}\nsetup: [export A=1]\n")
    assert_refused(submit("--profile", str(profile), "--", "python", "-c", "pass"), golden, "setup", tmp_path / "runs")


def test_the_plan_runs_no_program_bash_read_the_setup_lines_at_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from jobs import profiles
    from jobs.plan import make_plan, sbatch_script

    path = write_profile(tmp_path, "executor: slurm\nsetup: ['if true; then', '  export A=1', fi]\n")
    profile = profiles.load_profile(str(path))
    profiles.setup_commands.cache_clear()  # what bash read at load is the profile's own, not a cache's

    def no_program(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the plan ran {args[0]}")

    monkeypatch.setattr(subprocess, "run", no_program)
    script = sbatch_script(make_plan(profile, [], tmp_path / "logs", False, "py"))
    assert "slurm_ddp_setup=(1 'if true; then\n  export A=1\nfi')" in script

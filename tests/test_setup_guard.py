"""The profile's setup lines in the batch script (jobs.plan.guarded_setup): a line that fails ends the job naming
it; whatever a profile could hold before still runs as it did (comments, blank items, a construct over items)."""

import subprocess

import pytest

from jobs.plan import guarded_setup


def run(lines: list[str]) -> subprocess.CompletedProcess[str]:
    script = "\n".join(guarded_setup(lines)) + '\necho "reached A=$A B=$B"\n'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)


def test_lines_that_work_keep_their_effect_whatever_their_shape() -> None:
    lines = ["export A=1  # a comment", "", "# a comment alone", "if true; then", "  export B=2", "fi"]
    lines += ["echo continued \\", "  here"]
    done = run(lines)
    assert done.returncode == 0 and "reached A=1 B=2" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (["export A=1", "source /nonexistent/activate"], "setup line 2 failed (exit 1): source /nonexistent/activate;"),
        (["if true; then", "  false", "fi"], "setup line 1 failed (exit 1): if true; then ...;"),
    ],
)
def test_a_line_that_fails_ends_the_script_in_one_line_naming_it(lines: list[str], said: str) -> None:
    done = run(lines)
    assert done.returncode == 1 and "reached" not in done.stdout, done.stdout
    assert done.stderr.splitlines()[-1] == f"error: the profile's {said[:-1]}; fix that line of the profile's setup:"

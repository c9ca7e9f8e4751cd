"""--wait and jobs.wait: the trainer's progress lines as one line on a terminal, unchanged elsewhere."""

import io
from pathlib import Path

from jobs.tracking import ProgressLine, tail
from trainer.meter import Progress

LOG = (
    "dist: rank 0 of 2\n"
    "step 10/40 elapsed 0:00:02 eta 0:00:06 5 steps/s loss=0.5\n"
    "step 20/40 elapsed 0:00:04 eta 0:00:04 5 steps/s loss=0.4\n"
    "warning: something to read\n"
    "step 30/40 elapsed 0:00:06 eta 0:00:02 5 steps/s loss=0.3\n"
    "done: step 40"
)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_progress_is_one_line_redrawn_below_the_others(tmp_path: Path) -> None:
    (tmp_path / "log").write_text(LOG)
    screen = Terminal()
    tail(tmp_path / "log", lambda: True, 0.0, screen)
    shown = screen.getvalue()
    assert shown.count("\n") == 4  # dist, the warning, done and the last progress line kept: no line per step
    assert shown.startswith("dist: rank 0 of 2\n\rstep 10/40 ") and "\rstep 20/40 " in shown
    assert "\rwarning: something to read\n\rstep 20/40" in shown  # the bar cleared, the line, the bar again
    assert shown.endswith("\rstep 30/40 elapsed 0:00:06 eta 0:00:02 5 steps/s loss=0.3\n")
    assert "done: step 40\n" in shown


def test_elsewhere_the_log_is_copied_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "log").write_text(LOG)
    pipe = io.StringIO()
    tail(tmp_path / "log", lambda: True, 0.0, pipe)
    assert pipe.getvalue() == LOG


def test_the_trainers_progress_line_has_the_step_of_total_eta_pace_and_loss(capsys) -> None:  # type: ignore[no-untyped-def]
    progress = Progress(40, 0, enabled=True)
    progress.started -= 4.0  # four seconds in
    progress.update(20, {"train/loss": 0.25})
    line = capsys.readouterr().out
    assert line.startswith("step 20/40 elapsed 0:00:04 eta 0:00:04 5 steps/s loss=0.25"), line


def test_a_line_without_its_end_yet_is_shown_as_it_comes(tmp_path: Path) -> None:
    """A command's own progress bar (carriage returns, no newline for a while) is not held back."""
    screen = Terminal()
    out = ProgressLine(screen)
    out.write("step 10/40 elapsed 0:00:02 eta 0:00:06 5 steps/s loss=0.5\n")
    out.write("epoch 1: 10%\repoch 1: 20%")
    assert screen.getvalue().endswith("epoch 1: 10%\repoch 1: 20%")  # the bar cleared, the text as it came
    out.write("\rrest\nafter\n")
    shown = screen.getvalue()
    assert "epoch 1: 20%\rrest\n\rstep 10/40" in shown  # the line's end, then the bar redrawn below it
    assert shown.endswith("\rafter\n\rstep 10/40 elapsed 0:00:02 eta 0:00:06 5 steps/s loss=0.5")
    out.write("ste")
    assert not screen.getvalue().endswith("ste")  # might be a progress line: held until its end

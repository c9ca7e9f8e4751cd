"""A script run's exit words (trainer.supervise.script): rank 0 clears earlier attempts' at its start, never this attempt's
or one a fast peer is still writing."""

from pathlib import Path

from trainer.supervise.script import _clear_other_attempts


def test_rank_0_clears_earlier_attempts_words_only(tmp_path: Path) -> None:
    for name in ("623_0_0_rank_1", "624_0_0_rank_0", ".624_0_0_rank_1.b5zxtcin.tmp"):
        (tmp_path / name).write_text("0")
    _clear_other_attempts(tmp_path, "624_0_0")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".624_0_0_rank_1.b5zxtcin.tmp", "624_0_0_rank_0"]

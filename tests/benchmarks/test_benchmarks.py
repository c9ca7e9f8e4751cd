"""Each benchmark runs once at a tiny size: proof that it still works, not a judgement of speed."""

import pytest

from tests.support import run_benchmark

TINY = [
    ["submit_speed.py", "--repeats", "1"],
    ["checkpoint_cost.py", "--repeats", "1", "--width", "4"],
    ["trainer_overhead.py", "--steps", "20", "--rounds", "1"],
    ["trainer_overhead.py", "--steps", "20", "--rounds", "1", "--nproc", "1", "--skip-lightning", "--width", "4"],
    ["comm_hook_cost.py", "--blocks", "2", "--block-steps", "3"],
    ["eval_share.py", "--steps", "4"],
    ["snapshot_cost.py", "--files", "200", "--repeats", "1"],
    ["ignored_cost.py", "--files", "2000", "--repeats", "1"],
    ["script_overhead.py", "--steps", "10", "--rounds", "1"],
    ["data_scale.py", "--rows", "1000", "--files", "200"],
    ["straggler_cost.py", "--rounds", "1", "--steps", "30"],
    ["top_cost.py", "--rounds", "1", "--steps", "80"],
    ["hang_naming.py", "--only", "one-rank"],
    ["resume_memory.py", "--width", "4", "--rounds", "1"],
    ["decode_speed.py", "--rounds", "1", "--epochs", "1", "--pairs", "32"],
    ["sampler_cost.py", "--rounds", "1", "--samples", "512", "--epochs", "1"],
    ["rehearsal_cost.py", "--steps", "12", "--faults", "preempt"],
]


@pytest.mark.parametrize("args", TINY, ids=[" ".join(a) for a in TINY])
def test_benchmark_runs_and_reports_a_ratio(args: list[str]) -> None:
    result = run_benchmark(*args)
    assert any(figure in result.stdout for figure in ("ratio", "% of training", "x the file")), result.stdout

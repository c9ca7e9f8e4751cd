"""The cluster benchmarks run once at a tiny size: proof that they still work, not a judgement of speed."""

import pytest

from tests.support import run_benchmark

pytestmark = pytest.mark.slurm  # on the one cluster, in its xdist group

TINY = [
    (["communication.py", "--layouts", "1x1,2x2", "--steps", "2", "--width", "4"], ["2x2      4", "static_graph"]),
    (["preemption_cost.py", "--preemptions", "1", "--steps", "80"], ["preemption 1 (preempted", "ratio", "meets"]),
    (["sweep_scale.py", "--points", "3", "--repeats", "1"], ["| 3 |", "| 3, the trainer |", "ratio"]),
    (["resume_scale.py", "--nodes", "2", "--tasks", "1", "--width", "4"], ["ranks reading: 1 of 2", "meets"]),
    (["startup.py", "--rounds", "1", "--tasks", "1"], ["| process group joined |", "ratio"]),
    (["restart_cost.py", "--rounds", "1", "--steps", "40"], ["round 1 in-job: kill to first resumed step", "ratio"]),
    (["remote_submit.py", "--rounds", "1"], ["| ssh, unchanged |", "sends no file again: meets"]),
    (["quiet_ranks.py", "--seconds", "5"], ["rank 1, 5 s of steady training: 0 calls on the run folder"]),
]


@pytest.mark.parametrize(("args", "expected"), TINY, ids=[a[0][0] for a in TINY])
def test_cluster_benchmark_runs_and_reports(args: list[str], expected: list[str], slurm_cluster: None) -> None:
    result = run_benchmark(*args)
    for text in expected:
        assert text in result.stdout, result.stdout

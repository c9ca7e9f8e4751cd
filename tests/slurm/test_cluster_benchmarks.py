"""The cluster benchmarks run once at a tiny size: proof that they still work, not a judgement of speed."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT

TINY = [
    (["communication.py", "--layouts", "1x1,2x2", "--steps", "2", "--width", "4"], ["2x2      4", "static_graph"]),
    (["preemption_cost.py", "--preemptions", "1", "--steps", "80"], ["preemption 1 (preempted", "ratio", "meets"]),
]


@pytest.mark.parametrize(("args", "expected"), TINY, ids=[a[0][0] for a in TINY])
def test_cluster_benchmark_runs_and_reports(args: list[str], expected: list[str], slurm_cluster: None) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / args[0]), *args[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    for text in expected:
        assert text in result.stdout, result.stdout

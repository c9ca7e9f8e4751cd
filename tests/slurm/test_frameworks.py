"""README's framework matrix on the two-node cluster: each of tests/frameworks.py's scripts as its own job, 2
nodes x 1 task, all running at once, preempted together once each has saved, requeued, resumed from its
own save, and finished with both ranks seeing a world of 2."""

import json
import sys
from pathlib import Path

import pytest

from tests import frameworks
from tests.slurm.cluster import preempt_normal_jobs, release_when_requeued
from tests.support import job_id_of, mini_profile, poll_cluster, run_dir_of, submit
from trainer.run.rundir import RunDir

pytestmark = pytest.mark.slurm


# Preempted together in groups: all six at once on this machine's 2 cores took so long to save once each that
# the quickest had finished before the preemption (seen in CI).
GROUPS = [
    [n for n in frameworks.FRAMEWORKS if n not in ("timm", "hf-trainer")],
    [n for n in frameworks.FRAMEWORKS if n in ("timm", "hf-trainer")],
]


@pytest.mark.parametrize("group", GROUPS, ids=["-".join(g) for g in GROUPS])
def test_each_frameworks_script_is_preempted_on_two_nodes_and_resumes(
    slurm_cluster: None, tmp_path: Path, group: list[str]
) -> None:
    profile = mini_profile(tmp_path)
    runs = {}
    for name in group:
        folder = tmp_path / name
        folder.mkdir()
        command, flags = frameworks.write(folder, name)
        # Under the suite's load the quickest script ended before Lightning's had saved once, and so was never
        # preempted (seen in CI): here each step takes 0.25 s (50 s of steps), not 0.05.
        script = folder / command[1]
        script.write_text(script.read_text().replace("time.sleep(0.05)", "time.sleep(0.25)"))
        command = [sys.executable, *command[1:]]
        args = ["--profile", str(profile), "--nodes", "2", "--gpus-per-node", "1", *flags]
        result = submit(*args, "--", *command, cwd=folder)
        assert result.returncode == 0, result.stdout + result.stderr
        runs[name] = run_dir_of(result)
    for name, run_dir in runs.items():
        poll_cluster(f"{name}'s first save", lambda r=run_dir, n=name: frameworks.saved(r, n), timeout=240)
    preempt_normal_jobs()
    release_when_requeued(*(job_id_of(run_dir) for run_dir in runs.values()))
    for name, run_dir in runs.items():
        poll_cluster(f"{name}'s summary", lambda r=run_dir: RunDir(r).finished(), timeout=300)
        starts = frameworks.starts(run_dir)
        assert len(starts) == 2 and starts[0] == 0 and starts[1] > 0, (name, starts)
        if name == "hf-trainer":  # {LATEST:out/checkpoint-*}: checkpoint-100 is newer than checkpoint-90
            assert starts[1] >= 100, starts
        assert frameworks.worlds(run_dir, 2) == [{2}, {2}], name
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["attempts"] == 2 and summary["preemptions"] == 1, (name, summary)

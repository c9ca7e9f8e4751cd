"""README's framework matrix, locally: a plain torchrun-style script, Lightning, accelerate, a torchvision
references-style script, a timm-style one and one shaped like the Hugging Face Trainer (tests/frameworks.py),
each on 2 processes, preempted once after it saved (the requeue signal sent to the local controller, as
Slurm's preemption sends it), requeued, resumed from its own save, and finished with every rank seeing the whole
world. The same on the 2-node cluster: tests/slurm/test_frameworks.py."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import frameworks
from tests.support import ROOT, poll, run_dir_of


@pytest.mark.parametrize("name", list(frameworks.FRAMEWORKS))
def test_a_frameworks_script_is_preempted_requeued_and_resumes_from_its_own_save(tmp_path: Path, name: str) -> None:
    command, flags = frameworks.write(tmp_path, name)
    (tmp_path / "local.yaml").write_text("executor: local\ngpus_per_node: 2\ntimeout_min: 30\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "jobs.submit", "--profile", "local.yaml", *flags, "--", *command]
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = run_dir_of(result)
    job_id = json.loads((run_dir / "job.json").read_text())["job_id"]
    poll("its first save", lambda: frameworks.saved(run_dir, name), timeout=180)
    os.kill(int(job_id), signal.SIGUSR2)  # preempted: the local controller passes the signal on, as Slurm
    waited = subprocess.run(
        [sys.executable, "-m", "jobs.wait", str(run_dir)], env=env, capture_output=True, text=True, timeout=300
    )
    assert waited.returncode == 0, waited.stdout + waited.stderr
    starts = frameworks.starts(run_dir)
    assert len(starts) == 2 and starts[0] == 0 and starts[1] > 0, starts  # requeued once, resumed from its save
    assert frameworks.worlds(run_dir, 2) == [{2}, {2}]  # every rank, every start: a world of 2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["attempts"] == 2 and len(summary["attempt_s"]) == 2
    # It reports no step (trainer.requeue.progress(step)): the work its restart did again is unknown, not 0.
    assert summary["steps_recomputed"] is None and summary["ledger"]["recomputed_known"] is False, summary
    if name == "lightning":
        assert (run_dir / "final").read_text() == "12 96"  # its epoch and global step went on to the end
    if name == "hf-trainer":
        assert starts[1] >= 100, starts  # {LATEST:out/checkpoint-*}: checkpoint-100 is newer than checkpoint-90

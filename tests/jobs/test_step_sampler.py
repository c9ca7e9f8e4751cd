"""A plain DDP script with trainer.sampler.StepSampler (tests/scripts/step_sampler.py, the documented example),
run through `-- python train.py` on 2 processes, resumed with `--resume --gpus-per-node 1`, then on 2 again:
each step's samples, as the loaders gave them, and the weights are the uninterrupted run's."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from tests.support import ROOT, run_dir_of, submit

EXAMPLE = ROOT / "tests" / "scripts" / "step_sampler.py"


def submit_in(folder: Path, *args: str, profile: str) -> subprocess.CompletedProcess[str]:
    (folder / "p.yaml").write_text(profile)
    return submit("--profile", str(folder / "p.yaml"), *args, cwd=folder)


def steps(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]


def test_a_script_resumed_on_fewer_then_more_processes_trains_on_the_same_samples(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / "train.py")
    two = f"executor: local\ngpus_per_node: 2\nrun_root: {tmp_path / 'runs'}\n"
    whole = submit_in(tmp_path, "--wait", "--name", "whole", "--", sys.executable, "train.py", "14", profile=two)
    assert whole.returncode == 0, whole.stdout + whole.stderr
    first = submit_in(tmp_path, "--wait", "--name", "resized", "--", sys.executable, "train.py", "14", "5", profile=two)
    assert first.returncode == 0, first.stdout + first.stderr
    reference, run_dir = run_dir_of(whole.stdout), run_dir_of(first.stdout)
    fewer = submit_in(tmp_path, "--wait", "--resume", str(run_dir), "--gpus-per-node", "1", profile=two)
    assert fewer.returncode == 0, fewer.stdout + fewer.stderr
    more = submit_in(tmp_path, "--wait", "--resume", str(run_dir), profile=two)
    assert more.returncode == 0, more.stdout + more.stderr
    got, want = steps(run_dir), steps(reference)
    assert [s["processes"] for s in got] == [2] * 5 + [1] * 5 + [2] * 4  # 14 steps: 6 an epoch, so two ends
    assert [(s["step"], s["samples"]) for s in got] == [(s["step"], s["samples"]) for s in want]
    ours, theirs = (torch.load(r / "ckpt.pt")["model"] for r in (run_dir, reference))
    assert all(torch.allclose(ours[k], theirs[k], atol=1e-6) for k in theirs)

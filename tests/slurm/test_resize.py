"""A run preempted and resumed on the real cluster on fewer, then more processes: every step's samples are the
uninterrupted run's (step_samples.jsonl), and so are the weights, up to the order of a sum."""

import json
from pathlib import Path

import torch
import yaml

from tests import ranks
from tests.slurm.cluster import squeue_state
from tests.support import ROOT, attempts, cli, job_id_of, mini_profile, poll_cluster, run_dir_of, submit, summary
from trainer.config import flat

ARGS = ["steps=160", "log.every=5", "checkpoint.every=40", "log.image_every=0"]


def preempt_then_release(run_dir: Path, past: int) -> int:
    """Once the run trained past step `past`: jobs.top's requeue (the ranks save where they are, as on a
    preemption), then the requeued job cancelled before it runs again, to be resumed on another layout. The
    step it saved at."""
    poll_cluster(f"step {past}", lambda: (progress_step(run_dir) or 0) > past, timeout=240)
    job, before = job_id_of(run_dir), len(attempts(run_dir))
    assert "it saves and is requeued" in cli("jobs.top", str(run_dir), "--requeue-now").stdout
    stopped = lambda: len(attempts(run_dir)) == before and (attempts(run_dir)[-1].get("stop") or {}).get("reason")  # noqa: E731
    assert poll_cluster("the preemption's save", stopped, timeout=180) == "preempted", attempts(run_dir)
    assert cli("jobs.cancel", str(run_dir)).returncode == 0
    poll_cluster(f"job {job} to leave the queue", lambda: squeue_state(job) == "", timeout=120)
    return int(attempts(run_dir)[-1]["stop"]["step"])


def progress_step(run_dir: Path) -> int | None:
    try:
        return int(json.loads((run_dir / "progress.json").read_text())["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def step_samples(run_dir: Path) -> list[tuple[int, str, int]]:
    lines = (run_dir / "step_samples.jsonl").read_text().splitlines()
    return [(r["step"], r["digest"], r["processes"]) for r in map(json.loads, lines)]


def test_a_run_preempted_and_resumed_on_2x2_1x2_1x1_then_2x2_trains_on_the_same_samples(
    tmp_path: Path, sample_root: Path
) -> None:
    """Issue 54's walk: 2 nodes x 2 tasks preempted past step 40, resumed on 1 node x 2 tasks, preempted again,
    resumed on 1 x 1, preempted, then back on 2 x 2 to the end: each step's samples are the uninterrupted
    4-rank run's, and the weights equal its up to the order of sums (measured: RESULTS)."""
    data = f"data.root={sample_root / 'pix2pix'}"
    trainer = yaml.safe_load((ROOT / "cluster_profiles" / "mini.yaml").read_text())["trainer"]
    reference = ranks.train(
        tmp_path / "reference", *[f"{k}={v}" for k, v in flat(trainer).items()], data, *ARGS, world=4
    ).run_dir
    profile = str(mini_profile(tmp_path))
    first = submit("--profile", profile, "--nodes", "2", "--gpus-per-node", "2", data, *ARGS)
    assert first.returncode == 0, first.stderr
    run_dir = run_dir_of(first)
    layouts, stops = [("1", "2"), ("1", "1"), ("2", "2")], [preempt_then_release(run_dir, 40)]
    for n, (nodes, gpus) in enumerate(layouts):
        last = n == len(layouts) - 1
        args = ["--profile", profile, "--resume", str(run_dir), "--nodes", nodes, "--gpus-per-node", gpus]
        resumed = submit(*args, *(["--wait"] if last else []))
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        if not last:
            poll_cluster("the resumed attempt", lambda k=n: len(attempts(run_dir)) == k + 2, timeout=180)
            stops.append(preempt_then_release(run_dir, stops[-1] + 30))
    assert [a["resumed_step"] for a in attempts(run_dir)] == [0, *stops]
    got, want = step_samples(run_dir), step_samples(reference)
    assert [(s, d) for s, d, _ in got] == [(s, d) for s, d, _ in want]
    spans = zip([0, *stops], [*stops, 160], [4, 2, 1, 4], strict=True)
    assert [n for *_, n in got] == [p for a, b, p in spans for _ in range(b - a)]
    ours, theirs = (
        torch.load(r / "checkpoints" / "step_00000160.pt", weights_only=False)["model"] for r in (run_dir, reference)
    )
    gap = max(float((ours[k].float() - theirs[k].float()).abs().max()) for k in theirs)
    print(f"largest weight gap to the uninterrupted 4-rank run: {gap:.3g}")
    # Sums in another order (4 micro-batches a step on 1 x 1), which AdamW turns into up to lr (0.002) a step
    # for a weight whose gradient is near zero: measured 3.0e-4 at step 160 (RESULTS). Other samples: ~8%.
    assert gap < 1e-3, gap
    assert summary(run_dir)["final_step"] == 160

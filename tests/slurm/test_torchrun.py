"""torchrun inside a Slurm task (the user's own sbatch script): CPUs shared, and the Slurm job still requeues."""

import json
import subprocess
import sys
from pathlib import Path

from tests.slurm.cluster import release_when_requeued, squeue_state
from tests.support import ROOT, poll_cluster
from trainer.run.rundir import RunDir


def test_torchrun_in_a_slurm_task_shares_cpus_saves_on_the_signal_and_resumes(
    tmp_path: Path, sample_root: Path, slurm_cluster: None
) -> None:
    run_dir, out = tmp_path / "run", tmp_path / "out.txt"
    # torchrun's agent dies of the signal's default action unless it ignores it; its workers still catch it
    # (Python keeps an ignored signal ignored only until a handler is installed, and the trainer installs one).
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"#SBATCH -N1 --ntasks-per-node=1 --cpus-per-task=4 -p normal -o {out} --signal=USR2@30 --time=10\n"
        f"export PYTHONPATH={ROOT}\n"
        f'srun bash -c \'trap "" USR2; exec {sys.executable} -m torch.distributed.run --nproc-per-node 2 -m trainer '
        f"steps=50 log.every=5 log.image_every=0 checkpoint.every=1000 run_dir={run_dir} "
        f"data.root={sample_root / 'pix2pix'}'\n"
    )
    job_id = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, check=True)
    job_id = job_id.stdout.strip()
    progress = run_dir / "progress.json"
    poll_cluster("the first steps", lambda: progress.exists() and json.loads(progress.read_text())["step"] >= 10)
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
    release_when_requeued(job_id)
    poll_cluster("the run to finish", lambda: RunDir(run_dir).finished() or squeue_state(job_id) == "", timeout=180)

    dist_lines = [line for line in out.read_text().splitlines() if line.startswith("dist: ")]
    assert dist_lines and all("source=torchrun" in line and "threads=2" in line for line in dist_lines), dist_lines
    attempts = json.loads((run_dir / "attempts.json").read_text())
    # The stop was told apart through the Slurm job (time left), and the job requeued itself.
    assert attempts[0]["stop"]["reason"] == "preempted" and len(attempts) == 2
    assert attempts[1]["slurm_restart_count"] == 1
    assert attempts[1]["resumed_step"] == attempts[0]["stop"]["step"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final_step"] == 50 and summary["steps_recomputed"] == 0

"""jobs.top on a local job as a user runs it: the table while it trains, and what its keys do (the flags)."""

import json
import re
import subprocess
import sys
from pathlib import Path

from jobs.ops import live as top_live
from tests.messages import Golden, refused
from tests.support import cli, job_id_of, poll, run_dir_of, submit


def test_top_shows_each_rank_and_its_keys_save_dump_and_requeue(
    golden: Golden, local_profile: Path, sample_root: Path
) -> None:
    """A 2-rank local job: --once prints a row per rank; --save-now writes a checkpoint between the run's own
    (every 1000 steps) and training goes on; --dump-stacks puts every rank's stacks in the run folder (py-spy); --requeue-now
    saves and starts a second attempt from that step. Nothing is written for jobs.top until it is opened."""
    args = ["steps=5000", "checkpoint.every=1000", "log.every=5", f"data.root={sample_root / 'pix2pix'}"]
    result = submit("--profile", str(local_profile), *args)
    assert result.returncode == 0, result.stderr
    run_dir = run_dir_of(result.stdout)
    progress = run_dir / "progress.json"
    try:
        poll("training", lambda: progress.exists() and json.loads(progress.read_text() or "{}")["step"] >= 10, 120)
        assert not (run_dir / "live.json").exists()
        shown = cli("jobs.top", str(run_dir), "--once")
        assert shown.returncode == 0, shown.stderr
        head, _, *rows = shown.stdout.splitlines()
        assert head.split()[:6] == ["job", f"{job_id_of(run_dir)}:", "RUNNING", "attempt", "1", "elapsed"], head
        assert [r.split()[0] for r in rows] == ["0", "1"], shown.stdout  # a row per rank from the first call
        states = lambda: [r.split()[2] for r in cli("jobs.top", str(run_dir), "--once").stdout.splitlines()[2:]]  # noqa: E731
        poll("both rows training", lambda: states() == ["training", "training"], 30)  # as of each rank's beat

        assert cli("jobs.top", str(run_dir), "--save-now").returncode == 0
        poll("the checkpoint asked for", lambda: list((run_dir / "checkpoints").glob("step_*.pt")), 60)
        log0 = lambda: run_dir / "logs" / f"{json.loads((run_dir / 'job.json').read_text())['job_id']}_0_log.out"  # noqa: E731
        poll("the log's line", lambda: "as jobs.top asked" in log0().read_text(), 30)

        assert cli("jobs.top", str(run_dir), "--dump-stacks").returncode == 0
        (folder,) = (run_dir / "stacks").iterdir()
        assert sorted(p.name for p in folder.iterdir()) == ["rank_0.txt", "rank_1.txt"]
        # py-spy's stacks (it is in the dev extra, beside this python): each rank in train()
        assert all("train (trainer/train.py" in (folder / f"rank_{r}.txt").read_text() for r in (0, 1))
        record = run_dir / "provenance" / "ranks" / "rank_1.json"  # the run folder's: a pid in it is data
        bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            record.write_text(json.dumps(json.loads(record.read_text()) | {"pid": bystander.pid}))
            dumped = cli("jobs.top", str(run_dir), "--dump-stacks").stdout
            assert "ranks 0 by py-spy in " in dumped and "; ranks 1 not dumped (" in dumped, dumped
        finally:
            bystander.kill()
            bystander.wait()

        assert cli("jobs.top", str(run_dir), "--requeue-now").returncode == 0
        again = cli("jobs.top", str(run_dir), "--requeue-now")  # at once: refused (it killed both ranks once)
        sent = re.search(r"\d\d:\d\d:\d\d", again.stderr)  # when the signal went: the golden line's <at>
        refused(again, golden, f"job {job_id_of(run_dir)} ", job=job_id_of(run_dir), at=sent.group() if sent else "")
        attempts = lambda: json.loads((run_dir / "attempts.json").read_text())  # noqa: E731
        poll("the second attempt", lambda: len(attempts()) == 2, 120)
        first, second = attempts()
        assert second["resumed_step"] == first["stop"]["step"] > 0
    finally:
        cli("jobs.cancel", str(run_dir))
    # not running: refused in one line
    refused(cli("jobs.top", str(run_dir), "--save-now"), golden, f"job {job_id_of(run_dir)} ", job=job_id_of(run_dir))


class Keys:
    def __init__(self, keys: list[str]) -> None:
        self.keys = keys

    def read(self, timeout: float) -> str:
        return self.keys.pop(0) if self.keys else "q"


def test_the_keys_act_and_cancel_asks_first() -> None:
    done: list[str] = []
    keys = Keys(["s", "d", "c", "n", "r", "c", "", "", "y"])  # "": no key within the wait
    notes = list(top_live.acting(lambda what: done.append(what) or f"did {what}", keys, 0.0))  # type: ignore[arg-type, func-returns-value]
    assert done == ["save", "dump", "requeue", "cancel"]
    ask = "cancel the job? y to confirm, any other key not to"
    assert notes == ["did save", "did dump", ask, "not cancelled", "did requeue", ask, ask, ask, "did cancel"]

"""jobs.list over a folder of runs some of which are damaged: one row each, the others intact, nothing run."""

import json
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def listing(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobs.list", "--root", str(root)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def remote_record(folder: Path, ssh_options: list[str]) -> None:
    folder.mkdir()
    login = {"login": "alice@cluster", "remote_root": "/scratch/runs", "ssh_options": ssh_options, "python": "python3"}
    record = {"login": login, "run_dir": f"/scratch/runs/{folder.name}", "job_id": "7", "profile": "site"}
    (folder / "remote.json").write_text(json.dumps(record | {"cwd": f"/scratch/runs/{folder.name}/code"}))


def finished_run(folder: Path) -> None:
    """A local run's records as a finished one leaves them (no job needed: its controller is long gone)."""
    (folder / "logs").mkdir(parents=True)
    record = {"job_id": "4194000", "executor": "local", "log": str(folder / "logs" / "4194000_0_log.out")}
    (folder / "job.json").write_text(json.dumps(record))
    (folder / "summary.json").write_text(json.dumps({"final_step": 48, "val_metrics": {"l1": 0.25}}))


def test_one_damaged_run_is_one_row_and_hides_no_other(tmp_path: Path) -> None:
    """A damaged job.json, summary.json, progress.json or remote.json, a remote.json whose ssh options would run
    a command here, a name with a newline: each is one row (the damaged ones say which file), the intact run
    keeps its state and step, and no ProxyCommand a record names is run."""
    root = tmp_path / "runs"
    root.mkdir()
    for name in ("good", "bad-job", "bad-summary", "bad-progress", "new\nline"):
        finished_run(root / name)
    (root / "bad-job" / "job.json").write_text("{not json")
    (root / "bad-summary" / "summary.json").write_text("[1, 2]")
    (root / "bad-progress" / "summary.json").unlink()
    (root / "bad-progress" / "progress.json").write_text('{"step": 3, "val": "x"}')
    remote_record(root / "bad-remote", [])
    (root / "bad-remote" / "remote.json").write_text('{"login": 1}')
    touched = tmp_path / "proxy-ran"
    remote_record(root / "hostile", ["-o", f"ProxyCommand=touch {touched}"])

    result = listing(root)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 + 7, result.stdout  # the header, a row per run: the newline shown as \n
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["good"].split()[3:5] == ["COMPLETED", "48"]
    assert rows["new\\nline"].split()[3:5] == ["COMPLETED", "48"]
    assert "damaged" in rows["bad-job"] and "job.json is not valid JSON" in rows["bad-job"]
    assert "damaged" in rows["bad-summary"] and "summary.json is not a valid summary.json" in rows["bad-summary"]
    assert "(progress.json unreadable)" in rows["bad-progress"]
    assert "damaged" in rows["bad-remote"] and "remote.json is damaged" in rows["bad-remote"]
    assert "damaged" in rows["hostile"] and "-o ProxyCommand is not passed on" in rows["hostile"]
    assert not touched.exists()


def test_two_runs_with_one_job_id_keep_their_own_states(tmp_path: Path) -> None:
    """A local job's id is its controller's PID, which the machine gives again: a run killed and a later run
    that finished under the same id are listed by their own records (FAILED, COMPLETED), as jobs.status says."""
    root = tmp_path / "runs"
    for name in ("killed", "finished"):
        finished_run(root / name)
    (root / "killed" / "summary.json").unlink()
    (root / "killed" / "logs" / "4194000_exit_codes.json").write_text(json.dumps({"codes": [-9, 0]}))
    (root / "finished" / "logs" / "4194000_exit_codes.json").write_text(json.dumps({"codes": [0, 0]}))
    rows = {line.split()[0]: line.split()[2:4] for line in listing(root).stdout.splitlines()[1:]}
    assert rows == {"killed": ["4194000", "FAILED"], "finished": ["4194000", "COMPLETED"]}


def test_a_login_nodes_runs_are_listed_by_the_newest_runs_code(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """One jobs.list on the login node answers for all its runs, in a run's code snapshot: the newest job's (an
    older snapshot's code may not read a newer run's files), else the next where that one is gone."""
    from jobs.ops import listing as listing_module
    from jobs.remote.runs import RemoteRun
    from jobs.remote.ssh import Login
    from trainer.errors import UserError

    login = Login("alice@cluster", "/scratch/runs")
    found = [(n, RemoteRun(login, f"/scratch/runs/{n}", job, "site", f"/scratch/runs/{n}/code")) for n, job in
             (("a", "98"), ("b", "1203"), ("c", "990"))]  # fmt: skip
    tried: list[str] = []

    class Connection:
        def __init__(self, login: Login) -> None:
            pass

        def call(self, verb: str, cwd: str, *args: str, timeout: float) -> str:
            tried.append(cwd)
            if cwd.endswith("/b/code"):
                raise UserError(f"{cwd} does not exist on the cluster")
            return json.dumps([{"state": "RUNNING"}] * 3)

    monkeypatch.setattr(listing_module, "Connection", Connection)
    rows = listing_module.remote_rows(found)
    assert tried == ["/scratch/runs/b/code", "/scratch/runs/c/code"] and len(rows) == 3

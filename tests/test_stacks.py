"""jobs.top's stack dump, a node's ranks at once (trainer.supervise.stacks): py-spy from outside where it can read the
rank, else the signal and faulthandler's dump in the rank's log, each rank's file saying which."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import poll
from trainer.supervise import stacks

# A rank as the trainer sets one up: faulthandler on the dump signal, writing to its stderr (its log).
RANK = """
import faulthandler, signal, sys, time
faulthandler.register(signal.SIGURG, all_threads=True, chain=False)
def training_step():
    print("ready", flush=True)  # inside: a dump from now on shows this frame
    time.sleep(120)
training_step()
"""
# This test process stands in for the local job's controller: the ranks are its children, their environment
# names it as submitit's does.
JOB = stacks.Job(str(os.getpid()), local=True)
JOB_ENV = {**os.environ, "SUBMITIT_LOCAL_JOB_ID": JOB.id}


@pytest.fixture
def rank(tmp_path: Path):  # type: ignore[no-untyped-def]
    log = (tmp_path / "rank_0.err").open("w")
    proc = subprocess.Popen([sys.executable, "-c", RANK], stdout=subprocess.PIPE, stderr=log, text=True, env=JOB_ENV)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    records = tmp_path / "run" / "provenance" / "ranks"
    records.mkdir(parents=True)
    (records / "rank_0.json").write_text(json.dumps({"rank": 0, "host": "vm", "pid": proc.pid}))
    (records / "rank_1.json").write_text(json.dumps({"rank": 1, "host": "other", "pid": proc.pid}))
    yield proc
    proc.kill()
    proc.wait()
    log.close()


@pytest.mark.skipif(stacks.py_spy() is None, reason="py-spy is not installed (pip install '.[stacks]')")
def test_py_spy_reads_a_rank_from_outside_into_the_run_folder(tmp_path: Path, rank: subprocess.Popen) -> None:
    how = stacks.dump_node(tmp_path / "run", "t1", "vm", JOB)  # this node's ranks only: rank 1 is on another
    assert how == {"0": "py-spy"}
    text = (tmp_path / "run" / "stacks" / "t1" / "rank_0.txt").read_text()
    assert f"Process {rank.pid}" in text and "training_step" in text
    assert "most recent call first" not in (tmp_path / "rank_0.err").read_text()  # the rank was not signalled


def test_without_py_spy_the_rank_dumps_its_own_stacks_into_its_log(tmp_path: Path, rank: subprocess.Popen) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    record = {"rank": 0, "pid": rank.pid}
    assert stacks.dump_rank(record, folder, None, JOB) == "faulthandler"
    assert "not installed" in (folder / "rank_0.txt").read_text()
    poll("faulthandler's dump", lambda: "training_step" in (tmp_path / "rank_0.err").read_text(), timeout=30)


def test_a_py_spy_that_may_not_trace_the_rank_falls_back_and_says_why(tmp_path: Path, rank: subprocess.Popen) -> None:
    refusing = tmp_path / "py-spy"  # as py-spy answers where ptrace is refused
    refusing.write_text(
        "#!/bin/sh\necho 'Error: Permission Denied: Try running again with elevated permissions' >&2\nexit 1\n"
    )
    refusing.chmod(0o755)
    folder = tmp_path / "out"
    folder.mkdir()
    assert stacks.dump_rank({"rank": 0, "pid": rank.pid}, folder, str(refusing), JOB) == "faulthandler"
    assert "py-spy: Error: Permission Denied" in (folder / "rank_0.txt").read_text()
    poll("faulthandler's dump", lambda: "training_step" in (tmp_path / "rank_0.err").read_text(), timeout=30)


def test_a_rank_that_ended_is_said_to_have_ended(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert stacks.dump_rank({"rank": 3, "pid": gone.pid}, tmp_path, None, JOB) == "ended"
    assert "had ended" in (tmp_path / "rank_3.txt").read_text()


def test_only_the_latest_attempts_records_with_real_pids_are_read(tmp_path: Path) -> None:
    """A resume with fewer ranks leaves older records; a pid of 0 or -1 would signal a whole process group."""
    folder = tmp_path / "provenance" / "ranks"
    folder.mkdir(parents=True)
    records = [
        {"rank": 0, "pid": 1234, "job_id": "7", "restart": 1, "time": 20.0, "host": "n1"},
        {"rank": 1, "pid": 1235, "job_id": "7", "restart": 1, "time": 20.5, "host": "n1"},
        {"rank": 2, "pid": 999, "job_id": "7", "restart": 0, "time": 10.0, "host": "n1"},  # the earlier attempt's
        {"rank": 3, "pid": -1, "job_id": "7", "restart": 1, "time": 20.5, "host": "n1"},
        {"rank": 4, "pid": True, "job_id": "7", "restart": 1, "time": 20.5, "host": "n1"},
    ]
    for record in records:
        (folder / f"rank_{record['rank']}.json").write_text(json.dumps(record))
    assert [r["rank"] for r in stacks.ranks_of(tmp_path, None)] == [0, 1]


def test_a_rank_that_may_be_neither_traced_nor_signalled_is_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(pid: int, signum: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(stacks.os, "kill", refuse)
    monkeypatch.setattr(stacks, "job_process", lambda pid, record, job: "")  # as if 4321 were the job's
    assert stacks.dump_rank({"rank": 5, "pid": 4321}, tmp_path, None, JOB) == "refused"
    assert "the dump signal was refused too" in (tmp_path / "rank_5.txt").read_text()


def test_a_nodes_ranks_are_read_at_once(
    tmp_path: Path, rank: subprocess.Popen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight ranks py-spy cannot read must not take eight times its timeout: a node's ranks are read together.
    The fake py-spy answers only once every rank's py-spy has started; one after another, each times out."""
    seen = tmp_path / "seen"
    seen.mkdir()
    waiting = tmp_path / "py-spy"
    waiting.write_text(
        f"#!/bin/sh\ntouch {seen}/$3\nfor i in $(seq 100); do\n"
        f'  [ "$(ls {seen} | wc -l)" -ge 3 ] && {{ echo "Thread 1: training_step"; exit 0; }}\n'
        "  sleep 0.1\ndone\nexit 1\n"
    )
    waiting.chmod(0o755)
    records = tmp_path / "run" / "provenance" / "ranks"
    others = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=JOB_ENV) for _ in range(2)]
    try:
        for r, proc in enumerate(others, start=1):
            (records / f"rank_{r}.json").write_text(json.dumps({"rank": r, "host": "vm", "pid": proc.pid}))
        monkeypatch.setattr(stacks, "py_spy", lambda: str(waiting))
        monkeypatch.setattr(stacks, "PY_SPY_S", 8)
        assert stacks.dump_node(tmp_path / "run", "t2", "vm", JOB) == {"0": "py-spy", "1": "py-spy", "2": "py-spy"}
    finally:
        for proc in others:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("bystander", ["another job's", "not below the controller", "started after the record"])
def test_a_record_naming_a_process_not_the_jobs_is_neither_traced_nor_signalled(
    tmp_path: Path, bystander: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rank records are the run folder's (data): a pid in them that is not this job's rank, whoever's it
    is, is refused, its rank's file saying why; only /proc decides, never the record."""
    log = (tmp_path / "bystander.err").open("w")
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # The job's id as its environment says, but a controller it does not descend from (a sibling's pid).
    env, job = {**os.environ, "SUBMITIT_LOCAL_JOB_ID": "1"}, JOB
    if bystander == "not below the controller":
        env, job = {**os.environ, "SUBMITIT_LOCAL_JOB_ID": str(sibling.pid)}, stacks.Job(str(sibling.pid), True)
    written = time.time() - (60 if bystander == "started after the record" else 0)
    env = JOB_ENV if bystander == "started after the record" else env
    proc = subprocess.Popen([sys.executable, "-c", RANK], stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        records = tmp_path / "run" / "provenance" / "ranks"
        records.mkdir(parents=True)
        (records / "rank_0.json").write_text(json.dumps({"rank": 0, "host": "vm", "pid": proc.pid, "time": written}))
        acted: list[object] = []
        with monkeypatch.context() as patched:  # os.kill and subprocess.run themselves: only while it dumps
            patched.setattr(stacks, "py_spy", lambda: "py-spy")
            patched.setattr(stacks.subprocess, "run", lambda *args, **kwargs: acted.append(args))
            patched.setattr(stacks.os, "kill", lambda *args: acted.append(args))
            assert stacks.dump_node(tmp_path / "run", "t3", None, job) == {"0": "not the job's"}
        said = (tmp_path / "run" / "stacks" / "t3" / "rank_0.txt").read_text()
        assert said.startswith(f"pid {proc.pid} of rank 0's record is not job {job.id}'s: "), said
        assert acted == []  # neither traced nor signalled
    finally:
        for process in (proc, sibling):
            process.kill()
            process.wait()
        log.close()

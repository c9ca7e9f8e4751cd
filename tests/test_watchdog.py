"""The watchdog's pure parts: which rank a hang is blamed on, the budgets, and their settings."""

import json
from pathlib import Path

import pytest

from tests.messages import Golden, raises
from tests.support import poll
from trainer.config import HangConfig, build_config
from trainer.supervise.watchdog import Beat, Watchdog, culprit


def beat(rank: int, step: int, section: str = "step", since: float = 100.0, written: float = 120.0) -> Beat:
    return Beat(rank, f"node{rank}", step, section, since, written)


def test_a_rank_whose_heartbeat_stopped_is_blamed_first() -> None:
    beats = [beat(0, 40, since=90), beat(1, 40, written=100.0), beat(2, 41)]
    stuck, why = culprit(beats, now=121.0, stale_s=11.0)  # type: ignore[misc]
    assert stuck.rank == 1 and why.startswith("its heartbeat stopped 21 s ago at step 40, in the step")


def test_else_the_rank_behind_and_among_equals_the_one_waiting_on_its_own_loader() -> None:
    assert culprit([beat(0, 41), beat(1, 40), beat(2, 41)], now=121.0, stale_s=11.0)[0].rank == 1  # type: ignore[index]
    waiting = [beat(0, 40, since=95.0), beat(1, 40, "data", since=99.0), beat(2, 40, since=96.0)]
    stuck, why = culprit(waiting, now=121.0, stale_s=11.0)  # type: ignore[misc]
    assert stuck.rank == 1 and why == "no progress for 22 s at step 40, waiting for its batch from the loader"
    assert culprit([], now=1.0, stale_s=1.0) is None


def test_budgets_follow_the_longest_interval_seen_with_a_floor_or_one_setting() -> None:
    dog = Watchdog(HangConfig(factor=5, floor_s=30, first_s=600), run_dir=None, rank=0, host="h")  # type: ignore[arg-type]
    assert dog.budget("data") == 600  # never seen: the first-time budget
    dog.longest["data"] = 2.0
    assert dog.budget("data") == 30  # 2 s x 5 is below the floor
    dog.longest["data"] = 10.0
    assert dog.budget("data") == 50
    dog.longest["step"] = 10.0
    assert dog.budget("step") == 60  # waiting on peers: two heartbeats longer, so a stuck rank finds itself first
    assert Watchdog(HangConfig(timeout_s=20), None, 0, "h").budget("startup") == 20  # type: ignore[arg-type]
    # Joining the group is start-up: hang.first_s holds it, unless torch's own timeout (dist.timeout_s) ends first.
    dog.rendezvous_s = 305.0
    assert dog.budget("rendezvous") == 305 and HangConfig().first_s > 305
    dog.settings = HangConfig(first_s=60)
    assert dog.budget("rendezvous") == 60


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("hang.timeout_s=5", "hang.timeout_s"),
        ("hang.beat_s=0.5", "hang.beat_s"),
        ("hang.factor=1", "hang.factor"),
        ("hang.floor_s=-1", "hang.floor_s"),
        ("hang.first_s=nan", "hang.first_s"),
    ],
)
def test_bad_budgets_are_one_line(golden: Golden, override: str, named: str) -> None:
    with raises(golden, named):
        build_config([override])


def test_when_all_wait_on_each_other_the_first_to_stop_is_named_and_the_doubt_said() -> None:
    stuck, why = culprit([beat(0, 40, since=97.0), beat(1, 40, since=95.0)], now=121.0, stale_s=11.0)  # type: ignore[misc]
    assert stuck.rank == 1 and why.endswith("(no rank stands out: ranks 0, 1 all stopped at that step)")


def test_a_hang_dumps_the_recorder_before_the_record_and_a_failing_dump_does_not_stop_it(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """What the watchdog does on a hang, short of exiting: stacks, the on_hang dump (NCCL's flight recorder in a
    run; any callable here), the record naming the rank."""
    dog = Watchdog(HangConfig(), tmp_path, rank=1, host="node7", world_size=2)
    dog.on_hang = lambda: str(tmp_path / "nccl_trace" / "rank_1")
    dog._hung("data", 30.0, 12)
    err = capfd.readouterr().err
    assert f"hang: this rank's NCCL flight recorder is in {tmp_path / 'nccl_trace' / 'rank_1'}" in err
    assert (tmp_path / "error.txt").read_text().startswith("rank 1 on node7: hung: no progress for 30 s at step 12")

    def broken() -> str:
        raise RuntimeError("NCCL is not initialised")

    dog.on_hang = broken
    dog._hung("data", 30.0, 12)
    assert "warning: could not dump the NCCL flight recorder: NCCL is not initialised" in capfd.readouterr().err


def test_a_stopped_rank_is_named_at_the_step_its_peers_wait_in_not_its_last_heartbeats() -> None:
    """Heartbeats are seconds apart: rank 1's last said step 28; ranks 0 and 2 wait for it in step 40."""
    stuck, why = culprit([beat(0, 40), beat(1, 28, written=100.0), beat(2, 41)], now=121.0, stale_s=11.0)  # type: ignore[misc]
    assert stuck.rank == 1 and "at step 40, in the step" in why
    # Its last beat was still starting up: in step 19 it is in the step, not starting up.
    stuck, why = culprit([beat(0, 19), beat(1, -1, "startup", written=100.0)], now=121.0, stale_s=11.0)  # type: ignore[misc]
    assert "at step 19, in the step" in why and "starting up" not in why


def test_while_the_group_forms_a_frozen_or_absent_rank_is_named_not_rank_0() -> None:
    from trainer.supervise.watchdog import absent

    start = [beat(0, -1, "startup", written=120.0), beat(1, -1, "startup", written=60.0), beat(2, -1, "startup")]
    stuck, why = absent(start, 3, now=121.0, stale_s=11.0)  # type: ignore[misc]
    assert stuck.rank == 1 and why.startswith("its heartbeat stopped 61 s ago")
    stuck, why = absent([start[0], start[2]], 4, now=121.0, stale_s=11.0)  # type: ignore[misc]
    assert stuck.rank == 1 and why.startswith("wrote no heartbeat")
    assert absent([start[0], beat(1, -1, "startup")], 2, now=121.0, stale_s=11.0) is None


def test_a_join_that_failed_at_once_blames_no_absent_rank_one_that_timed_out_does(tmp_path: Path) -> None:
    """Rank 1 wrote no heartbeat yet (a slow start): rank 0's join failing at once on its own cause (a network
    interface gloo cannot find) is that cause, not rank 1's hang; a join that ran out dist.timeout_s names rank 1."""
    import time

    from trainer.supervise.watchdog import FileBoard

    dog = Watchdog(HangConfig(), tmp_path, rank=0, host="node0", world_size=2)
    FileBoard(tmp_path, 0).put(Beat(0, "node0", -1, "rendezvous", time.time(), time.time()))
    dog.enter("rendezvous")
    dog.blame(RuntimeError("Unable to find address for: nosuch0: Connection refused"), timeout_s=300)
    assert not (tmp_path / "error.txt").exists()
    dog.current = ("rendezvous", time.monotonic() - 300, time.time() - 300, 0)
    dog.blame(RuntimeError("Timed out after 300 seconds"), timeout_s=300)
    assert (tmp_path / "error.txt").read_text().startswith("rank 1: hung: it kept the process group from forming")


class FakeStore:
    """A dict with the TCPStore calls StoreBoard makes; `gone` raises as a store that does not answer."""

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}
        self.gone = False

    def set(self, key: str, value: str) -> None:
        self.keys[key] = value.encode()

    def check(self, keys: list[str]) -> bool:
        if self.gone:
            raise RuntimeError("Socket Timeout")
        return all(k in self.keys for k in keys)

    def multi_get(self, keys: list[str]) -> list[bytes]:
        return [self.keys[k] for k in keys]

    def delete_key(self, key: str) -> bool:
        return self.keys.pop(key, None) is not None


def test_once_the_group_formed_heartbeats_go_to_the_store_and_no_file_is_left(tmp_path: Path) -> None:
    from trainer.run.rundir import RunDir
    from trainer.supervise.watchdog import StoreBoard

    dog = Watchdog(HangConfig(), tmp_path, 1, "node2", world_size=2).start()
    store = FakeStore()
    dog.use_store(store, "node1")
    dog._beat(beat(1, 7))
    assert [b.step for b in StoreBoard(store, 0, 2).read()] == [7]
    # The beat thread may be inside a file beat begun before the store took over: it removes that file itself.
    poll("rank 1's heartbeat file gone", lambda: not RunDir(tmp_path).heartbeat(1).exists(), timeout=10)
    dog.stop()
    assert not RunDir(tmp_path).heartbeats.exists()
    assert StoreBoard(store, 0, 2).read() == []  # a rank that left is not read as one that froze


def test_a_collective_timeout_names_the_stopped_rank_it_waited_for_not_itself(tmp_path: Path) -> None:
    """dist.timeout_s shorter than the hang budget: torch's timeout comes first on rank 0. Rank 1's heartbeat
    stopped: rank 0 records rank 1's hang before its own timeout, so error.txt names rank 1. A peer that is
    still beating, or an error of rank 0's own, blames no one."""
    import time

    from trainer.run import failures
    from trainer.supervise.watchdog import StoreBoard

    store = FakeStore()
    dog = Watchdog(HangConfig(beat_s=2), tmp_path, rank=0, host="node1", world_size=2)
    dog.board = StoreBoard(store, 0, 2)
    dog.enter("step", 40)
    now = time.time()
    StoreBoard(store, 0, 2).put(Beat(0, "node1", 40, "step", now - 30, now - 1))
    StoreBoard(store, 1, 2).put(Beat(1, "node2", 40, "step", now - 1, now - 1))  # beating: not stopped
    dog.blame(RuntimeError("[gloo] Timed out waiting 30000ms for recv operation"), timeout_s=30)
    assert not (tmp_path / "error.txt").exists()
    StoreBoard(store, 1, 2).put(Beat(1, "node2", 38, "step", now - 40, now - 35))
    dog.blame(ValueError("a bug of rank 0's own"), timeout_s=30)
    assert not (tmp_path / "error.txt").exists()
    dog.blame(RuntimeError("[gloo] Timed out waiting 30000ms for recv operation"), timeout_s=30)
    failures.record(tmp_path, failures.describe(RuntimeError("Timed out waiting 30000ms"), 0, "node1", time.time()))
    line = (tmp_path / "error.txt").read_text()
    assert line.startswith("rank 1 on node2: hung: its heartbeat stopped 35 s ago at step 40"), line
    assert "seen by rank 0 when torch timed out (RuntimeError, dist.timeout_s)" in line, line


def test_rank_0s_node_local_beat_is_written_at_once_when_its_budget_tightens(tmp_path: Path) -> None:
    """The supervisor names a whole job frozen by the budget in rank 0's last node-local beat. Written only
    every beat_s, a freeze 2 s into training left the join's budget there, and the words for a group that did
    not form (a rehearsal's frozen fault was named after 325 s so). A tighter budget, or the join's end, is
    written at once; a step's sections, whose budgets do not tighten, write nothing."""
    beat = tmp_path / "beat.json"
    # Not started: no heartbeat thread, so every write seen here is enter()'s own.
    dog = Watchdog(HangConfig(), tmp_path, rank=0, host="h", world_size=2, local_beat=beat, rendezvous_s=305.0)

    def section() -> tuple[str, float]:
        written = json.loads(beat.read_text())
        return written["section"], written["budget"]

    dog.enter("rendezvous")
    assert section() == ("rendezvous", 305.0)
    dog.enter("startup")
    assert section() == ("startup", dog.settings.first_s)
    dog.enter("data", 0)
    dog.enter("step")
    assert section()[0] == "startup"  # the first step has start-up's budget: nothing tighter to say
    dog.enter("data", 1)
    assert section() == ("data", dog.budget("data")) and dog.budget("data") < dog.settings.first_s
    with dog.section("checkpoint"):
        pass  # a first checkpoint's budget is wider, the step's after it no tighter than the beat's
    assert section()[0] == "data"
    beat.unlink()
    for step in range(2, 5):
        dog.enter("data", step)
        dog.enter("step")
    assert not beat.exists(), "a step's own sections wrote the beat: a file write every step"
    # Every budget one (hang.timeout_s): the join's beat is still written as it begins, then start-up's.
    fixed = Watchdog(HangConfig(timeout_s=60), tmp_path, rank=0, host="h", local_beat=beat, rendezvous_s=305.0)
    fixed.enter("startup")
    fixed.beat_now()  # the heartbeat thread's first beat: start-up's, with the same budget as the join's
    fixed.enter("rendezvous")
    assert section() == ("rendezvous", 60.0)
    fixed.enter("startup")
    assert section() == ("startup", 60.0)

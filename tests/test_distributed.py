"""The DDP settings reach DDP, and change how gradients travel, not what they are."""

import dataclasses
import subprocess
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.messages import Golden, raises
from trainer.config import DistConfig
from trainer.distributed import CommTimer, covered, wrap
from trainer.supervise.launcher import DistEnv

TWO_RANKS = DistEnv("torchrun", 0, 0, 2, 2, 0, 1, "127.0.0.1", 29500, None, 1)
ONE_RANK = DistEnv("single", 0, 0, 1, 1, 0, 1, "127.0.0.1", 29500, None, 1)


@pytest.fixture
def group(tmp_path: Path):
    # A one-process gloo group is enough for DDP to build its reducer with our settings.
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_wrap_passes_the_bucket_settings_to_ddp(group: None) -> None:
    settings = DistConfig(bucket_cap_mb=1.5, gradient_as_bucket_view=True, static_graph=True)
    ddp = wrap(torch.nn.Linear(4, 4), TWO_RANKS, torch.device("cpu"), settings)
    assert ddp.bucket_bytes_cap == int(1.5 * 1024 * 1024)
    assert ddp.gradient_as_bucket_view is True
    assert ddp.static_graph is True
    defaults = wrap(torch.nn.Linear(4, 4), TWO_RANKS, torch.device("cpu"), DistConfig())
    assert (defaults.bucket_bytes_cap, defaults.gradient_as_bucket_view, defaults.static_graph) == (
        25 * 1024 * 1024,
        False,
        False,
    )


def test_one_process_gets_the_bare_model() -> None:
    model = torch.nn.Linear(4, 4)
    assert wrap(model, ONE_RANK, torch.device("cpu"), DistConfig()) is model


def test_nccl_diagnostics_are_set_where_the_user_has_not_by_torchs_current_names(tmp_path: Path) -> None:
    from trainer.distributed import nccl_diagnostics

    set_here = nccl_diagnostics({"TORCH_NCCL_TRACE_BUFFER_SIZE": "50"}, tmp_path)  # the deprecated name, the user's
    assert "TORCH_FR_BUFFER_SIZE" not in set_here and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in set_here
    assert set_here["TORCH_FR_DUMP_TEMP_FILE"] == str(tmp_path / "nccl_trace" / "rank_")
    assert set_here["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1" and "TORCH_NCCL_DEBUG_INFO_TEMP_FILE" not in set_here
    assert nccl_diagnostics({}, tmp_path)["TORCH_FR_BUFFER_SIZE"] == "2000"


def test_a_torch_without_the_flight_recorders_private_call_gets_a_warning_not_a_crash(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch._C._distributed_c10d as c10d

    from trainer.distributed import flight_recorder_dump

    for name in ("_dump_fr_trace", "_dump_nccl_trace"):
        monkeypatch.delattr(c10d, name, raising=False)
    assert flight_recorder_dump() is None
    assert capsys.readouterr().out.count("\n") == 1


def test_overlapping_all_reduces_count_once() -> None:
    assert covered([]) == 0.0
    assert covered([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == 4.0  # 0-3 and 5-6
    assert covered([(4.0, 5.0), (0.0, 10.0)]) == 10.0  # one inside another, in any order


def test_the_comm_timer_measures_a_gloo_all_reduce_through_ddp(group: None) -> None:
    """The host path (gloo): DDP's hook launches and completes each bucket; take() returns their time once."""
    timer = CommTimer(torch.device("cpu"))
    ddp = wrap(torch.nn.Linear(64, 64), TWO_RANKS, torch.device("cpu"), DistConfig(), timer)
    ddp(torch.randn(8, 64)).sum().backward()
    first = timer.take()
    assert first > 0.0 and timer.take() == 0.0 and timer._in_flight == 0


def test_each_rank_gets_its_own_gpus_or_a_refusal_never_a_shared_one() -> None:
    from trainer.distributed import device_indices
    from trainer.errors import UserError

    assert [device_indices(r, 1, 8) for r in (0, 7)] == [[0], [7]]
    assert device_indices(3, 2, 8) == [6, 7]
    assert device_indices(5, 2, 2) == [0, 1]  # Slurm showed the task its own two (--gpus-per-task)
    for local_rank, k, count in ((4, 1, 4), (2, 2, 4), (1, 2, 3)):
        with pytest.raises(UserError, match=rf"local rank {local_rank} would drive GPU.*shows {count} GPU"):
            device_indices(local_rank, k, count)


def test_a_local_shape_beyond_the_machine_is_refused(golden: Golden) -> None:
    from jobs.ops.prepare import refuse_local_shape

    refuse_local_shape(8, 4, 8, 2)  # 4 tasks of 2 GPUs on 8 GPUs
    refuse_local_shape(2, 2, 0, 2)  # 2 processes on 2 CPUs
    with raises(golden, "--gpus-per-node 4"):
        refuse_local_shape(8, 4, 4, 64)  # 4 tasks of 2 GPUs: the task count alone would fit
    with raises(golden, "--gpus-per-node"):
        refuse_local_shape(3, 3, 0, 2)


class Flag:
    raised = False


def test_a_vote_is_read_the_step_after_it_starts_and_takes_a_save_request_only_then(group: None) -> None:
    """The ranks' stop vote (trainer.distributed.StopVote), started every 5 steps and read at the next step, so no
    step waits for it: a signal at step 7 stops every rank at step 11; a save asked for before step 5 at step 6."""
    from trainer.distributed import StopVote

    vote, flag, asked = StopVote(TWO_RANKS, torch.device("cpu"), every=5), Flag(), []

    def save_asked() -> bool:
        asked.append(step)
        return step == 5

    answers = {}
    for step in range(1, 13):
        flag.raised = step >= 7
        answers[step] = vote.at(step, flag, save_asked)  # type: ignore[arg-type]
    assert asked == [5]  # at step 10 the stop is this rank's vote, which saves anyway: no request taken
    assert {s: a for s, a in answers.items() if a} == {6: "save", 11: "stop"}
    assert vote.drain() == ""  # nothing under way after step 11 (the next vote starts at 15)


def test_one_process_decides_at_the_vote_itself() -> None:
    from trainer.distributed import StopVote

    vote, flag = StopVote(ONE_RANK, torch.device("cpu"), every=5), Flag()
    flag.raised = True
    assert [vote.at(step, flag, lambda: False) for step in (4, 5)] == ["", "stop"]  # type: ignore[arg-type]


def test_rank_0_requeues_the_job_only_once_every_rank_has_the_decision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm's requeue ends every task at once: asked for before the decision's broadcast, a rank still in it
    failed on its lost peer, a traceback at the stop. Rank 0 records the stop, broadcasts, then requeues."""
    from trainer import distributed
    from trainer.supervise import attempts
    from trainer.supervise.signals import JobSettings

    happened: list[str] = []
    monkeypatch.setattr(distributed.dist, "broadcast", lambda tensor, src: happened.append("broadcast"))

    def slurm(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        happened.append(" ".join(cmd[:2]))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(attempts.subprocess, "run", slurm)
    env = dataclasses.replace(TWO_RANKS, source="slurm", slurm_job_id="42", job_id="42")
    record = attempts.Attempts(tmp_path)
    record.start(0, 0)
    assert distributed.decide(env, record, JobSettings(), 10, tmp_path, torch.device("cpu"), 1.0)
    assert happened[-2:] == ["broadcast", "scontrol requeue"], happened

"""The learning-rate schedule: its shape, and a resume that follows the same curve."""

import math

import pytest
import torch

from tests.messages import Golden, case_id, raises
from trainer.config import OptimConfig, build_config
from trainer.schedule import lr_factor


def curve(optim: OptimConfig, total: int) -> list[float]:
    return [lr_factor(s, total, optim) * optim.lr for s in range(total)]


def test_warmup_then_cosine_reaches_min_lr_at_the_last_step() -> None:
    optim = OptimConfig(lr=1.0, warmup_steps=4, schedule="cosine", min_lr=0.1)
    lrs = curve(optim, 20)
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert lrs[4] == 1.0 and math.isclose(lrs[-1], 0.1)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:], strict=False))  # decays, never rises
    assert math.isclose(lrs[4 + (20 - 1 - 4) // 2 + 1], 0.55, rel_tol=0.1)  # half-way: about the middle


def test_linear_decay_and_constant() -> None:
    linear = curve(OptimConfig(lr=1.0, schedule="linear", min_lr=0.0), 11)
    assert [round(v, 6) for v in linear] == [round(1 - i / 10, 6) for i in range(11)]
    assert set(curve(OptimConfig(lr=0.5), 7)) == {0.5}


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["optim.schedule=step"], "optim.schedule"),
        (["optim.min_lr=0.1"], "optim.min_lr"),
    ],
    ids=case_id,
)
def test_bad_schedules_are_refused(golden: Golden, overrides: list[str], named: str) -> None:
    with raises(golden, named):
        build_config(overrides)


def test_a_resumed_scheduler_follows_the_same_curve() -> None:
    """What the trainer does: LambdaLR over lr_factor, its state saved and loaded into a fresh one."""
    optim = OptimConfig(lr=1e-2, warmup_steps=3, schedule="cosine", min_lr=1e-4)

    def make() -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=optim.lr)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, 30, optim))

    opt, sched = make()
    uninterrupted = []
    for _ in range(30):
        uninterrupted.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    opt, sched = make()
    resumed = []
    for _ in range(11):
        resumed.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    saved = (opt.state_dict(), sched.state_dict())
    opt, sched = make()
    opt.load_state_dict(saved[0])
    sched.load_state_dict(saved[1])
    for _ in range(19):
        resumed.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert resumed == uninterrupted

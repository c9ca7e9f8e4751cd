"""Naming a straggler from every rank's (data, compute, communication) seconds per step."""

import pytest

from tests.messages import Golden, raises
from trainer.config import build_config
from trainer.stragglers import Stragglers


def test_a_rank_slow_for_enough_intervals_is_named_once_with_its_host_and_why() -> None:
    watch = Stragglers(["node1", "node1", "node2", "node2"], ratio=1.2, intervals=2)
    slow = [(0.01, 0.10, 0.09), (0.01, 0.10, 0.09), (0.01, 0.10, 0.09), (0.01, 0.18, 0.01)]  # the others wait
    scalars, said = watch.observe(10, slow)
    assert said == [] and scalars["perf/slowest_rank"] == 3 and round(scalars["perf/slowest_ratio"], 2) == 1.73
    assert scalars["perf/step_time_min"] == scalars["perf/step_time_max"] == 0.2  # steps end together: no clue
    [line] = watch.observe(20, slow)[1]
    assert line.startswith("rank 3 on node2 is a straggler: its own work per step (data + compute) was 1.73x")
    assert "for 2 log intervals up to step 20, mostly compute (0.18 s per step against a median of 0.1 s)" in line
    assert watch.observe(30, slow)[1] == []  # named once
    assert watch.named == [{"rank": 3, "host": "node2", "why": "compute", "ratio": 1.727, "step": 20}]


def test_a_slow_spell_shorter_than_the_intervals_names_nobody() -> None:
    watch = Stragglers(["a", "b", "c"], ratio=1.2, intervals=3)
    even, data_bound = [(0.01, 0.1, 0.0)] * 3, [(0.01, 0.1, 0.0), (0.01, 0.1, 0.0), (0.2, 0.1, 0.0)]
    for parts in (data_bound, data_bound, even, data_bound, data_bound):
        assert watch.observe(1, parts)[1] == []
    assert "mostly data" in watch.observe(2, data_bound)[1][0]


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("log.straggler_ratio=1", "log.straggler_ratio"),
        ("log.straggler_intervals=0", "log.straggler_intervals"),
    ],
)
def test_bad_straggler_settings_are_one_line(golden: Golden, override: str, named: str) -> None:
    with raises(golden, named):
        build_config([override])

import pytest

from tests.messages import Golden, raises
from tests.support import CASES, REFUSED
from trainer.errors import UserError
from trainer.supervise.hostlist import expand_hostlist
from trainer.supervise.launcher import resolve


@pytest.mark.parametrize(("hostlist", "hosts"), CASES)
def test_expands_like_scontrol(hostlist: str, hosts: list[str]) -> None:
    assert expand_hostlist(hostlist) == hosts


def test_the_largest_range_slurm_takes_is_taken() -> None:
    assert len(expand_hostlist("n[1-65536]")) == 65536


# Refused here although scontrol prints something: `n]`, the literal `node1-3]`, `node1`, nothing.
STRICTER = [
    ("node[1-3", "unbalanced brackets"),
    ("node1-3]", "unbalanced brackets"),
    ("node[1-]", "bad range"),
    ("a[1-65536]b[1-65536]", "more than 1048576 hosts"),
]


@pytest.mark.parametrize(("bad", "why"), REFUSED + STRICTER)
def test_refuses_what_slurm_refuses_in_one_line(golden: Golden, bad: str, why: str) -> None:
    with raises(golden, "invalid hostlist", why):  # one line (the golden file's), saying why
        expand_hostlist(bad)


def test_a_bad_node_list_names_the_variable_not_an_empty_list() -> None:
    env = {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n[3-1]"}
    with pytest.raises(UserError, match=r"SLURM_JOB_NODELIST: invalid hostlist 'n\[3-1\]': range '3-1' runs"):
        resolve(env)


@pytest.mark.parametrize(
    ("spec", "tasks"), [("7", ["7"]), ("2-5%3", ["2", "3", "4", "5"]), ("[0,4-6]", ["0", "4", "5", "6"]), ("", [])]
)
def test_array_task_lists(spec: str, tasks: list[str]) -> None:
    from jobs.tracking import array_tasks

    assert array_tasks(spec) == tasks

import pytest

from trainer.env.hostlist import expand_hostlist
from trainer.env.launcher import resolve
from trainer.errors import UserError

# Expected values are what `scontrol show hostnames` printed (Slurm 22.05); tests/slurm/test_slurm.py
# compares every case with scontrol itself on the test cluster.
CASES = [
    ("node1", ["node1"]),
    ("a,b,c", ["a", "b", "c"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("n[08-11]", ["n08", "n09", "n10", "n11"]),
    ("n[9-11]", ["n9", "n10", "n11"]),
    ("n[01-2]", ["n01", "n02"]),
    ("node[8-10,07]", ["node8", "node9", "node10", "node07"]),
    ("a[1-2]b[1-2],c", ["a1b1", "a1b2", "a2b1", "a2b2", "c"]),
    ("n[1-2][3-4]", ["n13", "n14", "n23", "n24"]),
    # Three or more groups: the last varies fastest, then the first, then the second...
    ("a[1-2]b[1-2]c[1-2]", ["a1b1c1", "a1b1c2", "a2b1c1", "a2b1c2", "a1b2c1", "a1b2c2", "a2b2c1", "a2b2c2"]),
    ("a[1-2]b[5,3]c[1-2],x", ["a1b5c1", "a1b5c2", "a2b5c1", "a2b5c2", "a1b3c1", "a1b3c2", "a2b3c1", "a2b3c2", "x"]),
    (
        "a[1-2]b[1-2]c[1-2]d[1-2]",
        [f"a{a}b{b}c{c}d{d}" for c in (1, 2) for b in (1, 2) for a in (1, 2) for d in (1, 2)],
    ),
    ("n1 n2", ["n1", "n2"]),  # whitespace separates too
    (" n1\tn2 ", ["n1", "n2"]),
    ("a,,b", ["a", "b"]),
    ("n1,n1", ["n1", "n1"]),  # duplicates are kept
    # Whitespace inside brackets, as scontrol reads it: it counts in the lower bound's width.
    ("n[ 1-2]", ["n01", "n02"]),
    ("1.2.3.[089, 100-102]", ["1.2.3.089", "1.2.3.0100", "1.2.3.0101", "1.2.3.0102"]),
    ("n[1 -2]", ["n01", "n02"]),
    ("n[1- 2]", ["n1", "n2"]),
    ("a[1, 3],b2", ["a1", "a03", "b2"]),
    ("n[1\t-2]", ["n01", "n02"]),
    ("n [1-2]", ["n", "1", "2"]),
]


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
# scontrol says "Invalid hostlist" for each (and exits 0).
REFUSED = [
    ("node[a-b]", "bad range"),
    ("n[]", "bad range"),
    ("n[1,,2]", "bad range"),
    ("n[3-1]", "runs backwards"),
    ("n[1-2³]", "bad range"),  # only ASCII digits
    ("n[1-70000]", "more than 65536 hosts"),
    ("n[0-99999999999]", "more than 65536 hosts"),  # refused before anything is built
    ("n[1-2]x", "text 'x' after the last bracket"),
    ("a[1-2],b[1-2]c", "text 'c' after the last bracket"),
    ("n[1-2 ]", "bad range '1-2 '"),  # no whitespace may end a range
    ("n[1 ]", "bad range '1 '"),
    ("n[1-2,  5 ]", "bad range '  5 '"),
]


@pytest.mark.parametrize(("bad", "why"), REFUSED + STRICTER)
def test_refuses_what_slurm_refuses_in_one_line(bad: str, why: str) -> None:
    with pytest.raises(UserError, match="invalid hostlist") as raised:
        expand_hostlist(bad)
    assert why in str(raised.value) and "\n" not in str(raised.value)


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

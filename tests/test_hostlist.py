import pytest

from trainer.errors import UserError
from trainer.hostlist import expand_hostlist

# Expected values are what `scontrol show hostnames` prints (Slurm 22.05).
CASES = [
    ("node1", ["node1"]),
    ("a,b,c", ["a", "b", "c"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("n[08-11]", ["n08", "n09", "n10", "n11"]),
    ("n[9-11]", ["n9", "n10", "n11"]),
    ("node[8-10,07]", ["node8", "node9", "node10", "node07"]),
    ("a[1-2]b[1-2],c", ["a1b1", "a1b2", "a2b1", "a2b2", "c"]),
]


@pytest.mark.parametrize(("hostlist", "hosts"), CASES)
def test_expands_like_scontrol(hostlist: str, hosts: list[str]) -> None:
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("bad", ["node[1-3", "node1-3]", "node[a-b]", "node[1-]"])
def test_rejects_malformed_hostlists(bad: str) -> None:
    with pytest.raises(UserError, match="invalid hostlist"):
        expand_hostlist(bad)

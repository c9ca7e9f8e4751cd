"""network_interface in a real local run: NCCL's and gloo's interface variables and MASTER_ADDR reach the
ranks; an interface this machine lacks is refused at submit."""

import socket
import sys
from pathlib import Path

from tests.messages import Golden
from tests.support import assert_refused, submit, write_profile
from trainer.supervise.rendezvous import interface_address

SHOW = (
    "import os\nprint('seen', *(os.environ[k] for k in ('GLOO_SOCKET_IFNAME', 'NCCL_SOCKET_IFNAME', 'MASTER_ADDR')))\n"
)


def interface() -> tuple[str, str]:
    """A non-loopback interface of this machine with its address (else lo)."""
    for _, name in socket.if_nameindex():
        if name != "lo" and (address := interface_address(name)):
            return name, address
    return "lo", "127.0.0.1"


def test_the_interface_reaches_gloo_nccl_and_master_addr(tmp_path: Path) -> None:
    name, address = interface()
    profile = write_profile(
        tmp_path, f"executor: local\ngpus_per_node: 2\nnetwork_interface: {name}\nrun_root: {tmp_path / 'runs'}\n"
    )
    (tmp_path / "show.py").write_text(SHOW)
    result = submit("--profile", str(profile), "--wait", "--", sys.executable, "show.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    [run_dir] = [p.parent for p in (tmp_path / "runs").glob("*/job.json")]
    logs = [p.read_text() for p in sorted((run_dir / "logs").glob("*_log.out"))]
    assert sum(f"seen {name} {name} {address}" in log for log in logs) == 2, logs


def test_an_interface_this_machine_lacks_is_refused_at_submit(golden: Golden, tmp_path: Path) -> None:
    profile = write_profile(tmp_path, f"executor: local\nnetwork_interface: nosuch0\nrun_root: {tmp_path / 'runs'}\n")
    result = submit("--profile", str(profile), "--wait", "steps=2")
    assert_refused(
        result,
        golden,
        "network_interface nosuch0",
        tmp_path / "runs",
        interfaces=", ".join(n for _, n in socket.if_nameindex()),
    )

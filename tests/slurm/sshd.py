"""A real OpenSSH server in front of the test cluster: the login node a laptop's submit reaches.

Debian's openssh-server, run without systemd on 127.0.0.1:22022 with a host key and a client key made for the
tests (`/tmp/slurm-ddp-sshd/`), password login off. Its sessions get SLURM_CONF (sshd's SetEnv), so a command
over SSH reaches the cluster as a user's login shell would. `python -m tests.slurm.sshd up|down`.
"""

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.slurm import cluster

HOME = Path("/tmp/slurm-ddp-sshd")
PORT = 22022
KEY = HOME / "client_key"
PID = HOME / "sshd.pid"


def install() -> None:
    if Path("/usr/sbin/sshd").exists():
        return
    quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=quiet, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-q", "openssh-server"], check=True, env=quiet, capture_output=True)


def running() -> bool:
    try:
        os.kill(int(PID.read_text()), 0)
    except (OSError, ValueError):
        return False
    return cluster._port_open(PORT)


def up() -> None:
    cluster.check_platform()
    if running():
        return
    install()
    HOME.mkdir(exist_ok=True)
    for key in (HOME / "host_key", KEY):
        if not key.exists():
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    (HOME / "authorized_keys").write_text((HOME / "client_key.pub").read_text())
    (HOME / "sshd_config").write_text(
        f"Port {PORT}\nListenAddress 127.0.0.1\nHostKey {HOME / 'host_key'}\n"
        f"AuthorizedKeysFile {HOME / 'authorized_keys'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"UsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\nPidFile {PID}\n"
        f"SetEnv SLURM_CONF={cluster.CONF}\nMaxStartups 100\nMaxSessions 100\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    subprocess.run(["/usr/sbin/sshd", "-f", str(HOME / "sshd_config"), "-E", str(HOME / "sshd.log")], check=True)
    cluster.wait_for("sshd", running, timeout=20)


def down() -> None:
    if PID.exists():
        try:
            os.kill(int(PID.read_text()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
        PID.unlink(missing_ok=True)


def ssh_options() -> list[str]:
    """What a profile's ssh_options say to reach this server (the key made for the tests, no known_hosts)."""
    return ["-p", str(PORT), "-i", str(KEY), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR"]  # fmt: skip


def laptop_env(folder: Path) -> dict[str, str]:
    """This environment as a laptop's: no Slurm command on PATH and no SLURM_CONF, so a test cannot pass by
    calling sbatch here. PATH keeps this interpreter's folder and links to what a laptop has (ssh, git)."""
    bin_dir = folder / "laptop-bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("ssh", "git", "sh", "bash", "env", "ls", "cat"):
        if (found := shutil.which(tool)) and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env["PATH"] = f"{Path(sys.executable).parent}:{bin_dir}"
    return env


if __name__ == "__main__":
    {"up": up, "down": down}[sys.argv[1]]()

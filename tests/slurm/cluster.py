"""Two real two-node Slurm test clusters on this one machine: `python -m tests.slurm.cluster up|down|status`.

munge, MariaDB + slurmdbd (accounting), and per cluster a slurmctld and two slurmd daemons (node1, node2: 8
CPUs and 8 fake GPUs each), with a `normal` partition that an `urgent` one preempts (REQUEUE, user signal,
grace time). Two clusters, one accounting database: two xdist workers run Slurm tests side by side (a
preemption preempts its own cluster's jobs only), and each cluster's nodes keep the names node1 and node2.
`use(side)` points this module (and SLURM_CONF, through env()) at one of them; "a" is the default.
Everything lives under one folder per cluster; the only system file touched is /etc/hosts (node names).
"""

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

BASE = Path(os.environ.get("SLURM_DDP_CLUSTER_DIR", "/tmp/slurm-ddp-cluster"))
PROJECT = Path(__file__).resolve().parents[2]
PACKAGES = ["munge", "slurmctld", "slurmd", "slurm-client", "slurmdbd", "mariadb-server"]
ADDRESSES = {"node1": "127.0.0.2", "node2": "127.0.0.3"}
DBD_PORT, DB_PORT = 16819, 16306


# Per cluster: its folder, controller port, slurmd ports, and first job id. The ids are apart, so that a job id
# and a slurmstepd's name belong to one cluster, and the master ports derived from them (10000 + id % 20000,
# trainer.supervise.launcher) do not meet: a's first 10,000 jobs get 10000-19999, b's 20000-29999.
class Side(NamedTuple):
    home: Path
    name: str
    ctld_port: int
    slurmd_ports: tuple[int, int]
    first_job_id: int


SIDES = {
    "a": Side(BASE, "ddptest", 16817, (17001, 17002), 1),
    "b": Side(BASE.with_name(BASE.name + "-b"), "ddptestb", 16827, (17011, 17012), 10_010_000),
}


def use(side: str) -> None:
    """Point this module's functions (and env(), hence SLURM_CONF for the commands they run) at a cluster."""
    global SIDE, HOME, CLUSTER, CTLD_PORT, PORTS, FIRST_JOB_ID, CONF, NO_ACCOUNTING
    SIDE = side
    HOME, CLUSTER, CTLD_PORT, PORTS, FIRST_JOB_ID = SIDES[side]
    CONF = HOME / "etc" / "slurm.conf"
    NO_ACCOUNTING = HOME / "etc" / "slurm-no-accounting.conf"


# The cluster this module's functions act on (use() sets them): a's unless a test says otherwise.
SIDE: str
HOME: Path
CLUSTER: str
CTLD_PORT: int
PORTS: tuple[int, int]
FIRST_JOB_ID: int
CONF: Path
NO_ACCOUNTING: Path
use("a")


@contextlib.contextmanager
def on(side: str) -> Iterator[None]:
    """The block on one cluster, then this module on the one it was."""
    before = SIDE
    use(side)
    try:
        yield
    finally:
        use(before)


class Unavailable(RuntimeError):
    """Slurm cannot run on this machine (not root, not Debian)."""


def env() -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(CONF)}


def _run(*cmd: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, capture_output=True, text=True, env=env(), **kw)  # type: ignore[call-overload]


def _alive(pidfile: Path, program: str) -> bool:
    """Whether the pid file names a running `program`. /tmp outlives the daemons on a machine restored from a
    snapshot, and their old pids belong to other processes by then (a pip, a pytest worker): the name is checked,
    else a stale pid file passes for a running daemon and nothing starts it (seen in CI)."""
    try:
        pid = int(pidfile.read_text().split()[0])
        return Path(f"/proc/{pid}/comm").read_text().strip() == program
    except (OSError, ValueError, IndexError):
        return False


def _last_error(log: Path) -> str:
    """The daemon's last error or fatal line, for the message when it does not come up."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return f"no log at {log}"
    found = [line for line in lines[-200:] if "fatal:" in line or "error:" in line]
    return found[-1] if found else "no error in its log"


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def wait_for(what: str, ready, timeout: float = 60, explain=None) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            detail = f" ({explain()})" if explain else ""
            raise RuntimeError(f"{what} did not come up within {timeout:.0f}s{detail}; see logs in {HOME / 'log'}")
        time.sleep(0.2)


def check_platform() -> None:
    if os.geteuid() != 0:
        raise Unavailable("the Slurm test cluster needs root (it starts munge, MariaDB and Slurm daemons)")
    if not Path("/etc/debian_version").exists():
        raise Unavailable("the Slurm test cluster needs Debian's slurm packages (apt-get)")


def install_packages() -> None:
    if all(shutil.which(b) for b in ("munged", "slurmctld", "slurmd", "slurmdbd", "sbatch", "mariadbd")):
        return
    quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=quiet, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-q", *PACKAGES], check=True, env=quiet, capture_output=True)


def write_configs() -> None:
    host = socket.gethostname()
    for sub in ("etc", "state", "run", "log", "spool/node1", "spool/node2", "gpu", "mysql"):
        (HOME / sub).mkdir(parents=True, exist_ok=True)
    for i in range(8):  # a GPU GRES needs device files, else slurmd drops it
        (HOME / "gpu" / f"fakegpu{i}").touch()
    nodes = "\n".join(
        f"NodeName={name} NodeHostname={host} NodeAddr={addr} Port={port} CPUs=8 RealMemory=16000 Gres=gpu:8 State=UNKNOWN"
        for (name, addr), port in zip(ADDRESSES.items(), PORTS, strict=True)
    )
    # Cluster a refuses a job beyond its partition at sbatch (ALL); b keeps Slurm's default (NO), which queues
    # it to pend for ever, as many sites do: the submitter's own partition check is shown on b.
    enforce = "EnforcePartLimits=ALL\n" if SIDE == "a" else ""
    CONF.write_text(f"""\
ClusterName={CLUSTER}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={CTLD_PORT}
SlurmUser=root
AuthType=auth/munge
StateSaveLocation={HOME}/state
SlurmdSpoolDir={HOME}/spool/%n
SlurmctldPidFile={HOME}/run/slurmctld.pid
SlurmdPidFile={HOME}/run/slurmd-%n.pid
SlurmctldLogFile={HOME}/log/slurmctld.log
SlurmdLogFile={HOME}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MpiDefault=none
KillWait=10
InactiveLimit=0
MinJobAge=600
FirstJobId={FIRST_JOB_ID}
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={DBD_PORT}
AccountingStorageTRES=gres/gpu
{enforce}PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
{nodes}
PartitionName=normal Nodes=node[1-2] Default=YES MaxTime=60 State=UP PriorityTier=1 GraceTime=30 PreemptMode=REQUEUE
PartitionName=urgent Nodes=node[1-2] MaxTime=60 State=UP PriorityTier=10 PreemptMode=OFF
""")
    (HOME / "etc" / "gres.conf").write_text(f"NodeName=node[1-2] Name=gpu File={HOME}/gpu/fakegpu[0-7]\n")
    dbd = HOME / "etc" / "slurmdbd.conf"
    dbd.write_text(f"""\
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={DBD_PORT}
SlurmUser=root
LogFile={HOME}/log/slurmdbd.log
PidFile={HOME}/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={DB_PORT}
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
""")
    dbd.chmod(0o600)


def update_hosts() -> None:
    hosts = Path("/etc/hosts")
    text = hosts.read_text()
    missing = [f"{addr} {name}" for name, addr in ADDRESSES.items() if f"{addr} {name}" not in text]
    if missing:
        hosts.write_text(text.rstrip("\n") + "\n" + "\n".join(missing) + "\n")


def start_munge() -> None:
    if _run("bash", "-c", "munge -n | unmunge", check=False).returncode == 0:
        return
    Path("/run/munge").mkdir(exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    subprocess.run(["runuser", "-u", "munge", "--", "munged", "--force"], check=True)
    (HOME / "run" / "started-munge").touch()  # so that `down` stops munge only if `up` started it
    wait_for("munge", lambda: _run("bash", "-c", "munge -n | unmunge", check=False).returncode == 0)


def start_mariadb() -> None:
    data, sock = BASE / "mysql" / "data", BASE / "mysql" / "mysqld.sock"
    if _port_open(DB_PORT):
        return
    shutil.chown(BASE / "mysql", "mysql", "mysql")
    if not (data / "mysql").exists():
        _run("mariadb-install-db", "--user=mysql", f"--datadir={data}", "--auth-root-authentication-method=socket")
    log = open(BASE / "log" / "mariadb.log", "a")  # noqa: SIM115 - handed to the daemon
    subprocess.Popen(
        [
            "mariadbd",
            "--user=mysql",
            f"--datadir={data}",
            f"--socket={sock}",
            f"--port={DB_PORT}",
            "--bind-address=127.0.0.1",
            f"--pid-file={BASE / 'mysql' / 'mariadb.pid'}",
            "--skip-log-bin",
        ],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    wait_for("MariaDB", lambda: _port_open(DB_PORT))
    sql = "".join(
        f"CREATE USER IF NOT EXISTS 'slurm'@'{h}' IDENTIFIED BY 'slurm'; "
        f"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'{h}'; "
        for h in ("localhost", "127.0.0.1")
    )
    _run("mariadb", f"--socket={sock}", "-u", "root", "-e", sql)


def start_slurmdbd() -> None:
    if not _port_open(DBD_PORT) and not _alive(BASE / "run" / "slurmdbd.pid", "slurmdbd"):
        _run("slurmdbd")  # one for both clusters, with side a's configuration (up() starts that side first)
    wait_for("slurmdbd", lambda: _port_open(DBD_PORT))
    if CLUSTER not in _run("sacctmgr", "-n", "-P", "list", "cluster", "format=cluster", check=False).stdout:
        _run("sacctmgr", "-i", "add", "cluster", CLUSTER)


def start_slurm() -> None:
    # A daemon that listens on its port runs, whatever its pid file says (a second one dies on the port).
    if not _port_open(CTLD_PORT) and not _alive(HOME / "run" / "slurmctld.pid", "slurmctld"):
        _run("slurmctld")
    ctld_log = HOME / "log" / "slurmctld.log"
    ping = lambda: _run("scontrol", "ping", check=False).returncode == 0  # noqa: E731
    wait_for("slurmctld", ping, timeout=120, explain=lambda: _last_error(ctld_log))
    for (name, addr), port in zip(ADDRESSES.items(), PORTS, strict=True):
        if not _port_open(port, addr) and not _alive(HOME / "run" / f"slurmd-{name}.pid", "slurmd"):
            _run("slurmd", "-N", name)
    wait_for("both nodes idle", nodes_idle, timeout=180, explain=node_reasons)


def nodes_idle() -> bool:
    """Both nodes idle; a node that registered as down or drained (a stale saved state) is resumed."""
    out = _run("sinfo", "-h", "-N", "-p", "normal", "-o", "%N %t", check=False).stdout.split()
    nodes = dict(zip(out[::2], out[1::2], strict=True))
    # `*` means not responding yet: resuming such a node fails, so wait for it to register first.
    stuck = [name for name, state in nodes.items() if state in ("down", "drain", "drng")]
    if stuck:
        _run("scontrol", "update", f"nodename={','.join(stuck)}", "state=resume", check=False)
    return list(nodes.values()).count("idle") == 2


def node_reasons() -> str:
    """What sinfo says about each node and why, for the error when the nodes never come up."""
    out = _run("sinfo", "-h", "-N", "-p", "normal", "-o", "%N %T %E", check=False)
    return "; ".join(out.stdout.strip().splitlines()) or f"sinfo failed: {out.stderr.strip()}"


def mini_profile(path: Path, run_root: Path, extra: str = "") -> Path:
    """Write cluster_profiles/mini.yaml (this cluster's nodes and partitions) to `path`, its runs under
    `run_root`, with `extra` YAML lines appended; the tests' and the cluster benchmarks' profile."""
    text = (PROJECT / "cluster_profiles" / "mini.yaml").read_text().replace("run_root: runs", f"run_root: {run_root}")
    path.write_text(text + extra)
    return path


def up_for_benchmark() -> None:
    """Start the cluster (a no-op when it runs) and point this process and its children at it."""
    up()
    os.environ["SLURM_CONF"] = str(CONF)


def up() -> None:
    """Both clusters (a no-op for one that runs), then this module pointed at the one it was. One caller at a
    time: xdist's workers each start their session here at once, and two controllers started together both die
    (the pid file's lock, the port)."""
    check_platform()
    BASE.parent.mkdir(parents=True, exist_ok=True)
    with open(BASE.with_name(BASE.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for side in SIDES:
            with on(side):
                up_one()


def up_one() -> None:
    if status_ok():
        before = CONF.read_text()
        write_configs()
        if CONF.read_text() != before:  # a newer harness: apply its settings to the running cluster
            _run("scontrol", "reconfigure")
        return
    install_packages()
    write_configs()
    update_hosts()
    start_munge()
    start_mariadb()
    start_slurmdbd()
    start_slurm()


def status_ok() -> bool:
    if not CONF.exists() or not shutil.which("sinfo"):
        return False
    states = node_states()
    return len(states) == 2 and all(s in ("idle", "alloc", "mix") for s in states)


def node_states() -> list[str]:
    out = _run("sinfo", "-h", "-N", "-p", "normal", "-o", "%t", check=False)
    return out.stdout.split() if out.returncode == 0 else []


def steps_left(job_id: str) -> bool:
    """Whether a slurmstepd of the job's last attempt still runs (both nodes are on this host). A node marked
    down and resumed still ends its step while the job is pending; a new attempt started then reuses the step
    id, and the old step's end cancels the new one (seen: the restarted job FAILED within a second)."""
    return any(f"[{job_id}." in line for line in own_steps())


# The states of a requeued job that waits to run again: held ones too, as after a relaunch that failed.
WAITING = ("PENDING", "REQUEUE_HOLD", "SPECIAL_EXIT")


def squeue_state(job_id: str) -> str:
    """The job's state as squeue shows it; empty once the job has left the queue."""
    return _run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).stdout.strip()


def write_no_accounting_config() -> Path:
    """The same cluster as a site without accounting runs it: no slurmdbd (sacct fails), and finished jobs
    forgotten by the controller within seconds (MinJobAge=2), as they are minutes later on a busy site."""
    text = CONF.read_text().replace("MinJobAge=600", "MinJobAge=2")
    text = "\n".join(
        line
        for line in text.splitlines()
        # Without slurmdbd slurmctld refuses to track GPUs as a TRES: those lines go too.
        if not line.startswith(("AccountingStorageHost", "AccountingStoragePort", "AccountingStorageTRES"))
    )
    text = text.replace(
        "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageType=accounting_storage/none"
    )
    NO_ACCOUNTING.write_text(text + "\n")
    return NO_ACCOUNTING


def restart_controller(conf: Path) -> None:
    """slurmctld again, with `conf` (the nodes and their jobs carry on: the state is saved; the slurmd daemons
    keep the config they started with, which differs only in accounting)."""
    pidfile = HOME / "run" / "slurmctld.pid"
    _run("scontrol", "shutdown", "slurmctld", check=False)
    stopped = lambda: not _alive(pidfile, "slurmctld") and not _port_open(CTLD_PORT)  # noqa: E731
    wait_for("slurmctld to stop", stopped, timeout=60)
    subprocess.run(["slurmctld", "-f", str(conf)], env={**os.environ, "SLURM_CONF": str(conf)}, check=True)
    ping = {**os.environ, "SLURM_CONF": str(conf)}
    wait_for("slurmctld", lambda: subprocess.run(["scontrol", "ping"], env=ping, capture_output=True).returncode == 0)
    wait_for("both nodes idle", nodes_idle, timeout=120, explain=node_reasons)


def preempt_normal_jobs() -> None:
    """Queue a one-second exclusive job on both nodes in `urgent`: it preempts whatever runs in `normal`."""
    _run("sbatch", "-p", "urgent", "--exclusive", "-N2", "-o", "/dev/null", "--wrap", "sleep 1")


def release_when_requeued(*job_ids: str, seen_pending: bool = False) -> None:
    """A requeued job waits ~120 s before it is eligible; move its start time to now once it is pending.
    Several jobs requeued together are released together: one released alone may run past the wait for the
    nodes to be idle before the next (seen in CI: four jobs preempted at once, the first ran 60 s).
    `seen_pending`: the caller saw them pending already (one may have started on its own since: nothing to do)."""
    if not seen_pending:
        pending = lambda: all(squeue_state(job) in WAITING for job in job_ids)  # noqa: E731
        wait_for("the jobs to be pending again", pending, timeout=90, explain=describe)
    # slurmd compares credential times in whole seconds: a restart within the second of the requeue is
    # killed as "Job credential revoked". Slurm's own 120 s delay avoids that; we wait for the clock instead.
    requeued_at = int(time.time())
    wait_for("the next second", lambda: int(time.time()) > requeued_at + 1, timeout=5)

    def released() -> bool:
        waiting = [job for job in job_ids if squeue_state(job) in WAITING]
        if not waiting:
            return True  # they started or ended meanwhile: nothing is left to release
        if node_states() != ["idle", "idle"] or any(steps_left(job) for job in job_ids):
            return False
        # A relaunch that failed while a node came back leaves the job held ("launch failed requeued held"):
        # an admin's `scontrol release`, then its start time (seen once in CI: held until the test's time-out).
        _run("scontrol", "release", ",".join(waiting), check=False)
        update = ["scontrol", "update", f"jobid={','.join(waiting)}", "StartTime=now"]
        return _run(*update, check=False).returncode == 0

    wait_for("the jobs' release (nodes idle, start time now)", released, timeout=60, explain=describe)


def describe() -> str:
    """The queue, the nodes and the job steps still running on this host: why the cluster is not quiet."""
    queue = _run("squeue", "-h", "-o", "%i %T %r %N", check=False).stdout.strip().replace("\n", ", ")
    steps = ", ".join(own_steps())
    return f"queue: {queue or 'empty'}; nodes: {node_reasons()}; steps: {steps or 'none'}"


def own_steps() -> list[str]:
    """This cluster's slurmstepd processes on this host ("PID slurmstepd: [JOB.STEP]"): those whose slurmd
    read this cluster's slurm.conf (their environment's SLURM_CONF). Another Slurm on the machine (a site's,
    another checkout's), whatever its job ids, is not waited on."""
    lines = _run("pgrep", "-af", "slurmstepd", check=False).stdout.splitlines()
    return [line for line in lines if stepd_conf(line.split(" ", 1)[0]) == str(CONF)]


def stepd_conf(pid: str) -> str:
    """The SLURM_CONF a process was started with; empty if it has none or is gone."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return ""
    return next((e[11:].decode() for e in environ if e.startswith(b"SLURM_CONF=")), "")


def quiet() -> bool:
    """No job in the queue, both nodes idle, no job step ending on this host."""
    queue = _run("squeue", "-h", "-o", "%i", check=False)
    return queue.returncode == 0 and not queue.stdout.strip() and nodes_idle() and not own_steps()


def clear() -> None:
    """Cancel whatever a test left in the queue (a failed test's job, a job still in its teardown) and wait until
    the cluster is quiet: the next test gets both nodes, and no step of this one ends under its job."""
    if not quiet():
        _run("scancel", "--full", "--user", "root", check=False)
        wait_for("the queue to empty and the nodes to go idle", quiet, timeout=90, explain=describe)


def down() -> None:
    """Stop what `up` started, and nothing else: side b's daemons, then side a's and what they share."""
    for side in reversed(SIDES):
        with on(side):
            down_one()


def down_one() -> None:
    run = HOME / "run"
    daemons = [
        (run / "slurmd-node1.pid", "slurmd"),
        (run / "slurmd-node2.pid", "slurmd"),
        (run / "slurmctld.pid", "slurmctld"),
        (run / "slurmdbd.pid", "slurmdbd"),
        (HOME / "mysql" / "mariadb.pid", "mariadbd"),
    ]
    if (run / "started-munge").exists():
        daemons.append((Path("/run/munge/munged.pid"), "munged"))
        (run / "started-munge").unlink()
    for path, program in daemons:
        if _alive(path, program):
            pid = int(path.read_text().split()[0])
            os.kill(pid, 15)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "status"
    try:
        if command == "up":
            up()
            from tests.slurm import sshd  # its login node, for the tests that submit over SSH

            sshd.up()
            print(f"Slurm test clusters up, the login node's sshd on 127.0.0.1:{sshd.PORT}; export SLURM_CONF={CONF}")
        elif command == "down":
            from tests.slurm import sshd

            sshd.down()
            down()
            print("Slurm test cluster down")
        elif command == "status":
            for side in SIDES:
                with on(side):
                    running = status_ok()
                    print(f"cluster {CLUSTER} ({CONF}):", "up" if running else "down")
                    if running:
                        print(_run("sinfo").stdout, end="")
        else:
            print("usage: python -m tests.slurm.cluster up|down|status", file=sys.stderr)
            return 2
    except Unavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

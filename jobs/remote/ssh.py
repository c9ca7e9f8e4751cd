"""One login node, reached with the user's own OpenSSH: their config, agent, ProxyJump and ControlMaster.

Every remote command is the agent (jobs/remote/agent.py) run by the cluster's python, its arguments quoted
with shlex (the login shell parses the line ssh sends it; a run name or an override is never code there).
BatchMode: a password or passphrase prompt fails at once instead of hanging; a site with two-factor login
works through the user's own ControlMaster (one prompt, then every command rides that connection). Where
the user's config sets no ControlMaster, one of ours (a private socket, kept 60 s) serves every command of
one invocation, so a status or a follow pays the handshake once.
"""

import contextlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from trainer.errors import UserError

AGENT = Path(__file__).with_name("agent.py")
CONNECT_TIMEOUT_S = 10
LOGIN = re.compile(r"(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9][A-Za-z0-9._-]*")  # user@host or a Host alias, nothing more
SSH_FAILED = 255  # ssh's own exit code: the connection, not the remote command


@dataclass(frozen=True)
class Login:
    """Where the runs live: the login node, how to reach it, and its interpreter and folder for runs."""

    login: str
    remote_root: str
    ssh_options: list[str] = field(default_factory=list)
    python: str = "python3"

    def __post_init__(self) -> None:
        check_login(self.login)
        check_remote_root(self.remote_root)
        check_ssh_options(self.ssh_options)


def check_login(login: str) -> None:
    if not isinstance(login, str) or not LOGIN.fullmatch(login):
        raise UserError(
            f"login {login!r} is not user@host or a Host alias of your ssh config (letters, digits, . _ - only); "
            "write e.g. login: alice@cluster.example.org"
        )


# ssh_options: what says how to reach the host, nothing that runs a command on this machine (ProxyCommand,
# LocalCommand, KnownHostsCommand, Match exec), forwards anything to the login node (-A, ForwardAgent, -L/-R),
# or loads code (PKCS11Provider). A profile's options are stored with each run and used by every later command
# on it; a Host of your ~/.ssh/config (login: that alias) remains the way to anything else.
SSH_FLAGS = {"-p": "port", "-i": "identity file", "-J": "jump host", "-l": "user", "-F": "config file", "-o": ""}
SSH_KEYS = {
    k.lower()
    for k in (
        "Port", "User", "IdentityFile", "IdentitiesOnly", "ProxyJump", "StrictHostKeyChecking",
        "UserKnownHostsFile", "GlobalKnownHostsFile", "HostKeyAlias", "CheckHostIP", "ConnectTimeout",
        "ConnectionAttempts", "ServerAliveInterval", "ServerAliveCountMax", "TCPKeepAlive", "Compression",
        "AddressFamily", "LogLevel", "BatchMode", "PubkeyAuthentication", "PasswordAuthentication",
        "KbdInteractiveAuthentication", "PreferredAuthentications", "CertificateFile", "IdentityAgent",
        "ControlMaster", "ControlPath", "ControlPersist", "HostKeyAlgorithms", "PubkeyAcceptedAlgorithms",
        "KexAlgorithms", "Ciphers", "MACs", "GSSAPIAuthentication", "UpdateHostKeys", "HashKnownHosts",
    )
}  # fmt: skip


def check_ssh_options(options: object) -> None:
    """Refuse, in one line, an ssh option this tool does not pass on (SSH_FLAGS, and -o with SSH_KEYS)."""
    example = "e.g. ssh_options: [-p, '2222', -i, ~/.ssh/cluster, -o, ServerAliveInterval=30]"
    if not isinstance(options, list) or not all(isinstance(o, str) and o for o in options):
        raise UserError(f"ssh_options: {options!r} must be a list of ssh arguments, {example}")
    words = iter(options)
    for word in words:
        if any(c in word for c in "\n\r\0"):
            raise UserError(f"ssh_options: {word!r} holds a line break; {example}")
        flag, joined = word[:2], word[2:]
        if flag not in SSH_FLAGS or not word.startswith("-"):
            raise UserError(
                f"ssh_options: {word!r} is not passed on (only -p, -i, -J, -l, -F and -o with a named key); "
                f"put it under a Host in ~/.ssh/config and use that Host as login, or {example}"
            )
        value = joined or next(words, "")
        if not value or any(c in value for c in "\n\r\0") or (value.startswith("-") and flag != "-o"):
            raise UserError(f"ssh_options: {flag} needs a value after it; {example}")
        if flag in ("-J", "-l"):
            check_hosts(flag, value)
        if flag == "-F" and not _under_ssh(value):
            raise UserError(
                f"ssh_options: -F {value} must be a file of ~/.ssh (a config file can run commands here); e.g. "
                "-F ~/.ssh/config_cluster, or use a Host of ~/.ssh/config as login"
            )
        if flag == "-o":
            key, _, rest = _key_value(value)
            if key.lower() in ("user", "proxyjump", "hostkeyalias"):
                check_hosts(f"-o {key}", rest)
            if key.lower() == "userknownhostsfile" and not _known_hosts_ok(rest):
                raise UserError(
                    f"ssh_options: -o {key}={rest} would let ssh write host keys there; name /dev/null or a "
                    "known_hosts file of ~/.ssh, e.g. -o UserKnownHostsFile=~/.ssh/known_hosts_cluster"
                )
            if key.lower() not in SSH_KEYS:
                raise UserError(
                    f"ssh_options: -o {key} is not passed on (it can run commands on this machine, forward to "
                    "the login node, or is unknown here); put it under a Host in ~/.ssh/config and use that "
                    "Host as login"
                )


def _key_value(option: str) -> tuple[str, str, str]:
    """`Key=Value` or `Key Value` as ssh's -o takes it: (key, separator, value)."""
    found = re.match(r"\s*([^=\s]+)\s*(=|\s)\s*(.*)$", option)
    return (found.group(1), found.group(2), found.group(3).strip()) if found else (option.strip(), "", "")


def check_hosts(what: str, value: str) -> None:
    """A user, or jump hosts ([user@]host[:port], comma-separated): names, nothing a shell would read."""
    hosts = value.split(",") if what != "-l" and "user" not in what.lower() else [value]
    if not all(re.fullmatch(LOGIN.pattern + r"(?::\d+)?", h) for h in hosts):
        raise UserError(
            f"ssh_options: {what} {value!r} is not a user or [user@]host[:port] (letters, digits, . _ - only); "
            "e.g. -J alice@gateway.example.org"
        )


def _known_hosts_ok(path: str) -> bool:
    """Where ssh may write host keys it learns: nowhere (/dev/null), or a known_hosts file of ~/.ssh (never
    authorized_keys or config, which a line of host key would change the meaning of)."""
    return path == "/dev/null" or (_under_ssh(path) and os.path.basename(path).startswith("known_hosts"))


def _under_ssh(path: str) -> bool:
    """A file inside ~/.ssh, named without `..`."""
    full = os.path.normpath(os.path.expanduser(path))
    return full.startswith(os.path.expanduser("~/.ssh") + os.sep) and ".." not in path.split("/")


def check_remote_root(root: str) -> None:
    """Refuse a remote_root that cannot be an absolute folder on the cluster. A relative one would be taken
    from the folder the login node's submit runs in: its snapshot cache, whose clean-up deletes what is not
    code. `$VARS` and `~` are expanded on the login node (jobs.remote.agent's hello refuses one it leaves)."""
    if not isinstance(root, str) or not root or "\n" in root or "\0" in root:
        raise UserError(f"remote_root {root!r} must be a folder on the cluster, e.g. /scratch/$USER/runs")
    if not root.startswith(("/", "~", "$")):
        raise UserError(
            f"remote_root {root} is relative: the login node would put runs inside its copy of your code; "
            "write an absolute folder, e.g. ~/runs or /scratch/$USER/runs"
        )


def control_options(login: Login) -> list[str]:
    """Our ControlMaster, unless the user's ssh config has one of its own for this host (`ssh -G` reads it)."""
    try:
        seen = subprocess.run(
            ["ssh", "-G", *login.ssh_options, login.login], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        seen = ""
    if re.search(r"^controlmaster (auto|yes|ask|autoask)$", seen, re.M):
        return []
    folder = Path(tempfile.gettempdir()) / f"slurm-ddp-ssh-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    import hashlib  # here, not at the top: profiles import this module, and the dry run needs no OpenSSL

    # Per set of options too: a connection made with one key must not serve a profile that names another.
    options = hashlib.sha256("\0".join(login.ssh_options).encode()).hexdigest()[:8]
    return ["-o", "ControlMaster=auto", "-o", f"ControlPath={folder}/{options}-%C", "-o", "ControlPersist=60"]


def ssh_argv(login: Login, action: str, *args: str, control: Sequence[str] = ()) -> list[str]:
    """The ssh command line that runs the agent's `action` with `args` on the login node (pure)."""
    remote = shlex.join([login.python, "-c", AGENT.read_text(), action, *args])
    options = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}", *control, *login.ssh_options]
    return ["ssh", *options, "--", login.login, remote]


class Connection:
    """The commands of one invocation, over one connection where the user's config allows."""

    def __init__(self, login: Login) -> None:
        self.login = login
        self.control = control_options(login)
        self.sent = 0  # bytes sent to the login node's agent (a snapshot's files)
        self.answered = False  # the login node has answered a command of this invocation: ssh works

    def argv(self, action: str, *args: str) -> list[str]:
        return ssh_argv(self.login, action, *args, control=self.control)

    def call(self, action: str, *args: str, data: bytes = b"", timeout: float = 600) -> bytes:
        """The agent's output; its one-line error, or the connection's, as a UserError."""
        self.sent += len(data)
        try:
            done = subprocess.run(self.argv(action, *args), input=data, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise UserError(f"{self.login.login} did not answer within {timeout:.0f} s; try again") from None
        if done.returncode != 0:
            raise self.failed(action, done.returncode, done.stderr.decode(errors="replace"))
        self.answered = True
        return done.stdout

    @contextlib.contextmanager
    def stream(self, action: str, *args: str) -> Iterator[IO[bytes]]:
        """The agent's output as it comes, for a body that reads it (a tar, never held whole). The body's
        failure that came from the agent's own (its error line, a dropped connection) is reported as that."""
        with (
            tempfile.TemporaryFile() as err,
            subprocess.Popen(self.argv(action, *args), stdout=subprocess.PIPE, stderr=err) as proc,
        ):
            assert proc.stdout is not None
            try:
                yield proc.stdout
                while proc.stdout.read(1 << 16):  # what the body left (a tar's padding), so the agent can end
                    pass
            except UserError:  # the body refused what came: nothing more is read
                proc.kill()
                raise
            except Exception as exc:  # the stream broke off: the agent's reason if it gave one
                try:
                    code = proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = None
                if code:
                    err.seek(0)
                    raise self.failed(action, code, err.read().decode(errors="replace"), quote=False) from None
                raise UserError(f"what {self.login.login} sent was cut short ({exc}); try again") from None
            code = proc.wait()
            if code != 0:
                err.seek(0)
                raise UserError(self.explain(code, err.read().decode(errors="replace")))

    def failed(self, action: str, code: int, stderr: str, quote: bool = True) -> UserError:
        """A command's failure as one line: the connection's drop (with ssh's words, `quote`), else explain's."""
        if not dropped(code, stderr, self.answered):
            return UserError(self.explain(code, stderr))
        said = f" ({' '.join(stderr.split())[-200:] or 'no word from ssh'})" if quote else ""
        return UserError(
            f"the connection to {self.login.login} dropped during {action}{said}; nothing is lost: run the same "
            "command again"
        )

    def explain(self, code: int, stderr: str) -> str:
        """One line for what went wrong: the agent's own error line, else what ssh said, with the fix."""
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        own = [line for line in lines if line.startswith("error: ")]
        if own:
            return own[-1].removeprefix("error: ")
        text = " ".join(lines[-2:]) or f"exit code {code}"
        host = self.login.login
        if code == SSH_FAILED:
            if "Permission denied" in text:
                return f"{host} refused the key: {text}; add your key (ssh-copy-id) or set ssh_options: [-i, KEY]"
            return f"cannot reach {host}: {text}; check login and ssh_options (try: ssh {host} true)"
        if code == 127 or "not found" in text:
            return f"{host} has no {self.login.python}: {text}; set python: in the profile to the cluster's interpreter"
        return f"{host}: {text}"


# What ssh says when a connection that was up goes away (a network gone, the server's end killed).
DROP_WORDS = ("connection closed", "closed by remote host", "connection reset", "broken pipe", "killed by signal")


def dropped(code: int, stderr: str, answered: bool) -> bool:
    """Whether a command's end was the connection's: ssh killed by a signal (its own end, a drop's), or ssh's
    exit 255 after the login node had answered, or with words of a connection that went away."""
    if code < 0:
        return True
    text = stderr.lower()
    return code == SSH_FAILED and (answered or any(word in text for word in DROP_WORDS))


def with_retries(what: str, attempt: Callable[[], int], give_up_s: float = 600.0) -> int:
    """Run `attempt` again while it fails for the connection (exit 255), for up to `give_up_s`: a dropped
    connection is not the job's end (it never depends on the laptop)."""
    deadline = time.monotonic() + give_up_s
    wait = 1.0
    while True:
        code = attempt()
        if code != SSH_FAILED:
            return code
        if time.monotonic() > deadline:
            raise UserError(f"lost the connection while {what} and could not reconnect for {give_up_s:.0f} s")
        print(f"connection lost while {what}; reconnecting in {wait:.0f} s", file=sys.stderr, flush=True)
        time.sleep(wait)
        wait = min(wait * 2, 30.0)

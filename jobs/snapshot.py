"""The code a job runs: a copy taken at submit, so a requeue hours later runs what was submitted.

As submitit's RsyncSnapshot and TorchX's workspace do, the folder you submit from is copied into the run
directory (`code/`), and every task, requeue and --resume runs with that copy as its working folder, so
`python -m`, the pickled trainer and `task=my_pkg.mod:Task` import from it. In a git working tree the copy is
`git ls-files` (tracked and untracked, not ignored: uncommitted changes included); elsewhere a walk that skips
hidden entries, caches and virtual environments. Outputs never travel: a folder holding a CACHEDIR.TAG (every
run root this tool makes has one) and the folders frameworks write (lightning_logs/, wandb/, mlruns/) are left
out. Listing is separate from copying: a refusal (too large) writes nothing.

The tool's own packages (trainer/, jobs/) are copied beside it, into `tool/`, never into your folder's copy:
your `trainer.py` or `jobs.py` stays yours. The tool's processes import from `tool/` first and never from the
working folder (tool_environment); your command's imports find your folder first, as Python's own rule says.
"""

import fnmatch
import importlib.machinery
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from trainer.errors import UserError
from trainer.run.atomic import json_problem, write_text
from trainer.run.prepare import CACHEDIR_SIGNATURE, CACHEDIR_TAG

PACKAGES = ("trainer", "jobs")  # the tool's own code, which every task imports (from tool/, see tool_environment)
# Where frameworks write their outputs inside a project: runs and logs, never code (Lightning, W&B, MLflow).
OUTPUT_DIRS = {"lightning_logs", "wandb", "mlruns"}
# Names a project may also give its code (a package `outputs`), so outputs only where git does not track them:
# TensorBoard's SummaryWriter (runs/), Hydra (outputs/, multirun/).
UNTRACKED_OUTPUT_DIRS = {"runs", "outputs", "multirun"}
SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"} | OUTPUT_DIRS

MAX_FILES = 100_000
# Git-ignored entries nobody misses in code/, left out without a word (and never copied, whatever
# snapshot_include says): caches, virtual environments, build output (an editable install's build/,
# *.egg-info, .pdm-build/). The note leaves out every hidden entry too: an editor's or a tool's.
NOISE_DIRS = SKIP_DIRS | {"venv", "build", ".git", ".venv", ".tox", ".eggs", ".pdm-build"}
NOISE_DIRS |= {".pytest_cache", ".ruff_cache", ".mypy_cache"}
NOISE_SUFFIXES = (".pyc", ".pyo", ".egg-info", ".o")
# Git-ignored files a command may import (a local settings module, an extension built in place): worth
# bringing in with snapshot_include. Everything else git ignores is data, read where it lies.
MODULE_SUFFIXES = (".py", ".so")


@dataclass(frozen=True, eq=False)
class Snapshot:
    """What will be copied: (source, path inside code/) pairs and their size; nothing is written yet."""

    workspace: Path  # the folder submitted from
    files: list[tuple[Path, str]]
    size: int
    git: dict[str, str | bool] = field(default_factory=dict)  # the workspace's commit, branch, dirty
    project_git: dict[str, str | bool] = field(default_factory=dict)  # the project's, when elsewhere
    ignored: list[str] = field(default_factory=list)  # git-ignored entries left out (see ignored_entries)
    tool_files: list[tuple[Path, str]] = field(default_factory=list)  # the tool's packages, copied into tool/
    outputs: list[str] = field(default_factory=list)  # run roots and framework output folders left out


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):  # no git on this machine
        return None
    return done.stdout if done.returncode == 0 else None


def git_files(folder: Path) -> list[str] | None:
    """Files under `folder` git would commit (tracked, and untracked not ignored); None outside a work tree."""
    out = _git(folder, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return None if out is None else sorted({p for p in out.split("\0") if p})


def included_files(folder: Path, excluded: list[Path], include: list[str]) -> list[str]:
    """The git-ignored files under `folder` that snapshot_include patterns copy all the same (git lists only
    what the patterns may match; outputs, caches, environments and `excluded` folders never)."""
    if not include:
        return []
    out = _git(folder, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--", *include) or ""
    cache: dict = {}
    names = (n for n in out.split("\0") if n and any(fnmatch.fnmatch(n, p) for p in include))
    return sorted(n for n in names if not _never_copied(folder, n, excluded, cache))


def ignored_entries(folder: Path, excluded: list[Path], included: list[str]) -> list[str]:
    """What `folder`'s .gitignore keeps out of the snapshot that is worth a note: a folder git ignores whole is
    one entry (`data/`: git does not walk it, so a million files there cost what one does), other files one
    each. Hidden entries, caches, build output, environments, outputs, `excluded` folders and what `included`
    (files) brings in are left out."""
    out = _git(folder, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory") or ""
    entries = [n for n in out.split("\0") if n]
    folders = {n for n in entries if n.endswith("/")}  # git may list a folder and its files too: the folder
    brought = {*included, *(n[: i + 1] for n in included for i, c in enumerate(n) if c == "/")}  # and folders
    cache: dict = {}
    return [
        name
        for name in entries
        if not _lies_in(name, folders)
        and name not in brought
        and not any(part.startswith(".") for part in name.split("/"))
        and not _never_copied(folder, name, excluded, cache)
    ]


def _lies_in(name: str, folders: set[str]) -> bool:
    parts = name.rstrip("/").split("/")[:-1]
    return any("/".join(parts[:depth]) + "/" in folders for depth in range(1, len(parts) + 1))


def _never_copied(folder: Path, name: str, excluded: list[Path], cache: dict) -> bool:
    """`name` (a file, or a folder ending in /) is a cache, build output, a virtual environment, an output or
    lies in an `excluded` folder: neither copied nor advised in."""
    parts = name.rstrip("/").split("/")
    if any(p in NOISE_DIRS or p.endswith(NOISE_SUFFIXES) for p in parts):
        return True
    if ("venv", parts[0]) not in cache:
        cache["venv", parts[0]] = (folder / parts[0] / "pyvenv.cfg").exists()
    path = folder / name
    if cache["venv", parts[0]] or any(e == path or e in path.parents for e in excluded):
        return True
    return output_folder(folder, name, cache, untracked=True) is not None  # runs, framework logs


def ignored_note(workspace: Path, ignored: list[str]) -> str:
    """What the git-ignored entries left out of code/ mean for the command, a line for each kind; "" when
    none were. A module it may import is brought in with snapshot_include; data is read where it lies, by
    an absolute path (a copy in every run would cost the data's size at each submit)."""
    modules = [n for n in ignored if n.endswith(MODULE_SUFFIXES) or _is_package(workspace / n)]
    data = [n for n in ignored if not (n.endswith(MODULE_SUFFIXES) or _is_package(workspace / n))]
    lines = []
    if modules:
        patterns = [n + "*" if n.endswith("/") else n for n in modules]
        add = (
            f"add snapshot_include: {patterns!r}"
            if len(patterns) <= 3
            else f"add them to snapshot_include, e.g. {patterns[:3]!r}"
        )
        lines.append(
            f"note: git-ignored {_some(modules)} {_is(modules)} not in the code snapshot the tasks run in; if the "
            f"command imports {_it(modules)}, {add} to the profile"
        )
    if data:
        lines.append(
            f"note: git-ignored {_some(data)} {_is(data)} not in the code snapshot the tasks run in (a copy of "
            f"{workspace}); a script reading {_it(data)} by a relative path will not find {_it(data)}: read "
            f"{_it(data)} by an absolute path, e.g. {workspace / data[0]}"
        )
    return "\n".join(lines)


def _is_package(path: Path) -> bool:
    return (path / "__init__.py").is_file()


def _some(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _is(names: list[str]) -> str:
    return "is" if len(names) == 1 else "are"


def _it(names: list[str]) -> str:
    return "it" if len(names) == 1 else "them"


def git_state(folder: Path) -> dict[str, str | bool]:
    """Commit, branch and whether the tree differs from it (untracked files count: they are copied too)."""
    commit = _git(folder, "rev-parse", "HEAD")
    if commit is None:
        return {}
    status = _git(folder, "status", "--porcelain") or ""
    branch = (_git(folder, "rev-parse", "--abbrev-ref", "HEAD") or "").strip()
    root = (_git(folder, "rev-parse", "--show-toplevel") or "").strip()
    return {"commit": commit.strip(), "branch": branch, "dirty": bool(status.strip()), "root": root}


def git_diff(folder: Path) -> str:
    """The uncommitted changes to tracked files, and the names of untracked ones."""
    diff = _git(folder, "diff", "HEAD", "--binary", "--", ".") or ""
    untracked = _git(folder, "ls-files", "--others", "--exclude-standard") or ""
    if untracked.strip():
        diff += "".join(f"# untracked: {name}\n" for name in untracked.splitlines())
    return diff


def is_output_dir(folder: Path, untracked: bool = False) -> bool:
    """A folder that holds outputs, not code: a tagged run root, or one a framework writes (`untracked`: the
    file asked about is one git does not track, so UNTRACKED_OUTPUT_DIRS count too)."""
    if folder.name in OUTPUT_DIRS or (untracked and folder.name in UNTRACKED_OUTPUT_DIRS):
        return True
    try:
        with (folder / CACHEDIR_TAG).open("rb") as f:
            return f.read(len(CACHEDIR_SIGNATURE)) == CACHEDIR_SIGNATURE.encode()
    except OSError:
        return False


def output_folder(
    workspace: Path, name: str, cache: dict[tuple[str, bool], bool], untracked: bool = False
) -> str | None:
    """The folder (relative to `workspace`) of outputs that `name` lies in, if it lies in one."""
    parts = name.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        key = "/".join(parts[:depth])
        if (key, untracked) not in cache:
            cache[key, untracked] = is_output_dir(workspace / key, untracked)
        if cache[key, untracked]:
            return key
    return None


def left_out(name: str, patterns: list[str], is_dir: bool = False) -> bool:
    """`name` (a path inside the folder) matches a snapshot_exclude pattern, or lies under one that names a folder."""
    names = [name, name + "/"] if is_dir else [name]
    return any(fnmatch.fnmatch(n, p) or fnmatch.fnmatch(n, p.rstrip("/") + "/*") for p in patterns for n in names)


def walk_files(folder: Path, excluded: list[Path], patterns: list[str], limit: int) -> list[str]:
    """Files under a folder that is not a git tree: no hidden entries, caches, virtual environments; pruned
    as it goes (a large excluded folder is never walked)."""
    out: list[str] = []
    size = 0
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and d not in SKIP_DIRS
            and not (here / d / "pyvenv.cfg").exists()
            and not is_output_dir(here / d)
            and (here / d) not in excluded
            and not left_out(str((here / d).relative_to(folder)), patterns, is_dir=True)
        )
        for name in sorted(files):
            if name.startswith(".") or name.endswith((".pyc", ".pyo")):
                continue
            out.append(str((here / name).relative_to(folder)))
            size += _size(here / name)
            if size > limit or len(out) > MAX_FILES:  # stop early: a home folder must not take minutes
                return out
    return out


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # a dangling link, a file deleted meanwhile: skipped
        return 0


def package_files(package: Path) -> list[str]:
    """The project's package as `name/...` paths: its .py files."""
    return sorted(str(p.relative_to(package.parent)) for p in package.rglob("*.py") if "__pycache__" not in p.parts)


def plan_snapshot(
    workspace: Path, excluded: list[Path], patterns: list[str], limit_mb: float, include: list[str] | None = None
) -> Snapshot:
    """List what the snapshot of `workspace` holds, or refuse in one line when it is over `limit_mb`.
    `include`: glob patterns naming git-ignored files to copy all the same."""
    limit = int(limit_mb * 1024 * 1024)
    listed = git_files(workspace)
    names = listed if listed is not None else walk_files(workspace, excluded, patterns, limit)
    ignored: list[str] = []
    tracked: set[str] = set()
    if listed is not None:
        tracked = set((_git(workspace, "ls-files", "-z", "--cached") or "").split("\0"))
        included = included_files(workspace, excluded, include or [])
        names = sorted({*names, *included})
        ignored = ignored_entries(workspace, excluded, included)
    files, cache, outputs = [], {}, set()
    for name in names:
        path = workspace / name
        if any(path == e or e in path.parents for e in excluded):
            continue
        if left_out(name, patterns):
            continue
        untracked = listed is not None and name not in tracked  # a folder git does not know: no one's code
        if (output := output_folder(workspace, name, cache, untracked)) is not None:
            outputs.add(output + "/")
            continue
        if path.is_file():  # a tracked file deleted in the work tree, a submodule's folder: nothing to copy
            files.append((path, name))
    tool_root = installed_tool_root()
    project_git = git_state(tool_root) if tool_root != workspace.resolve() else {}
    sizes = [(_size(source), name) for source, name in files]
    size = sum(s for s, _ in sizes)
    if size > limit or len(files) > MAX_FILES:
        raise UserError(too_large(workspace, sizes, limit_mb, listed is not None))
    git = git_state(workspace) if listed is not None else {}
    return Snapshot(workspace, files, size, git, project_git, ignored, tool_files(), sorted(outputs))


def tool_files() -> list[tuple[Path, str]]:
    """This tool's own packages, as copied into a run's tool/: (source, name) pairs."""
    root = installed_tool_root()
    return [(root / n, n) for package in PACKAGES for n in package_files(root / package)]


def refresh_tool(code_dir: Path, aside: Path) -> bool:
    """A plain --resume runs your code as the run's snapshot holds it, and this version of the tool: the job
    this submitter queues calls the tool by its own module paths and settings, which a run's tool/ from another
    version may lack (its tasks failed to start). A tool/ that differs is moved to `aside`/tool and this
    version's copied in its place; True when it was."""
    tool, files = tool_dir(code_dir), tool_files()
    if not tool.is_dir() or tool.is_symlink():  # no tool of its own (the installed one runs), or not ours to move
        return False
    have = {p.relative_to(tool).as_posix() for p in tool.rglob("*.py") if "__pycache__" not in p.parts}
    if have == {name for _, name in files} and all(
        (tool / name).read_bytes() == source.read_bytes() for source, name in files
    ):
        return False
    aside.mkdir(parents=True)
    tool.rename(aside / tool.name)
    _copy(files, tool)
    return True


def too_large(workspace: Path, sizes: list[tuple[int, str]], limit_mb: float, in_git: bool) -> str:
    """The refusal, naming the top-level entry that holds the most."""
    by_top: dict[str, int] = {}
    for size, name in sizes:
        top = name.split("/", 1)[0] + ("/" if "/" in name else "")
        by_top[top] = by_top.get(top, 0) + size
    top, biggest = max(by_top.items(), key=lambda kv: kv[1])
    total = sum(s for s, _ in sizes)
    how = f"add {top} to .gitignore" if in_git else f"move {top} out of the folder"
    return (
        f"the code snapshot of {workspace} holds {total / 2**20:.0f} MiB in {len(sizes)} files (limit "
        f"{limit_mb:g} MiB), {biggest / 2**20:.0f} MiB of it in {top}; {how} or to snapshot_exclude in the profile, "
        "raise snapshot_limit_mb, or submit from the folder holding just your code"
    )


def tool_dir(code_dir: Path) -> Path:
    """Where the tool's own packages lie beside a code snapshot."""
    return code_dir.parent / "tool"


def copy(snapshot: Snapshot, destination: Path) -> None:
    """Copy the listed files into `destination` (a new folder), and the tool's packages beside it (tool/).
    Copies, not links: an edit of the working tree must not reach a job that is already queued. The names
    copied are kept beside it (manifest): what else appears in that folder later, the run wrote."""
    _copy(snapshot.files, destination)
    _copy(snapshot.tool_files, tool_dir(destination))
    write_text(manifest(destination), json.dumps(sorted(name for _, name in snapshot.files)) + "\n")


def manifest(code_dir: Path) -> Path:
    """The list of the files a code snapshot was made of (provenance/code_files.json beside code/)."""
    return code_dir.parent / "provenance" / "code_files.json"


def copied_names(code_dir: Path) -> tuple[set[str] | None, str]:
    """The names a snapshot was made of, or None and why they are not known (a snapshot of an older version
    kept no list; a damaged list)."""
    path = manifest(code_dir)
    try:
        names, problem = json_problem(path, lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v))
    except FileNotFoundError:
        return None, f"{path} is missing (a snapshot of an older version keeps no list of its files)"
    except OSError as exc:
        return None, f"{path} cannot be read ({exc.strerror or exc})"
    return (set(names), "") if not problem else (None, f"{path} is {problem}")


def importable(path: Path) -> bool:
    """Whether Python could import `path` from the folder it lies in: a module (source, bytecode, extension,
    as this interpreter names them) or a package."""
    return path.name.endswith(tuple(importlib.machinery.all_suffixes())) or _is_package(path)


def _copy(files: list[tuple[Path, str]], destination: Path) -> None:
    destination.mkdir()
    made: set[Path] = set()
    for source, name in files:
        target = destination / name
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        shutil.copy(source, target)  # the content and the mode bits


def installed_tool_root() -> Path:
    """The folder this tool's packages are imported from now (a checkout, or site-packages)."""
    return Path(__file__).resolve().parents[1]


def tool_environment(tool: Path | None) -> dict[str, str]:
    """What every process of the tool runs with, on every node: imports from `tool` (the run's tool/, or the
    installed tool when there is no snapshot) before anything else, and never from the working folder (it is
    the code snapshot, which may hold a trainer.py or jobs.py of yours). PYTHONSAFEPATH (Python 3.11) keeps
    the working folder off sys.path; trainer.supervise.script takes it out again for your command."""
    env = {"PYTHONSAFEPATH": "1"}
    if tool is None:
        tool = installed_tool_root()
        if tool.name in ("site-packages", "dist-packages"):  # installed: found as it is, stdlib first
            return env
    return env | {"PYTHONPATH": str(tool)}

"""What each task of `python -m jobs.check` finds on its node (the submitter's side: jobs/check.py).

Every task writes `preflight/rank_N.json` in the check's folder: its node, whether it can write the run root
and sees the code snapshot, the versions it imports, its GPUs and CUDA_VISIBLE_DEVICES, their model, the NVIDIA
driver and the CUDA and NCCL versions torch was built with, where rank 0 listens, and one all-reduce across all
tasks with the job's backend (NCCL on GPUs, else gloo), timed. A fact it cannot establish is recorded with the
error, never raised past the record: the table must say what failed.
"""

import contextlib
import json
import os
import re
import socket
import sys
import time
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

from trainer.run.atomic import write_text
from trainer.supervise.launcher import resolve

SIZE_MB = 32  # the all-reduce's payload: big enough to measure a bandwidth, small for a check


def version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def writable(folder: Path, rank: int) -> str:
    """ "" when this node can create and remove a file in `folder`, else why not."""
    probe = folder / f".preflight-write-{rank}-{os.getpid()}"
    try:
        probe.write_text("ok")
        probe.unlink()
        return ""
    except OSError as exc:
        return exc.strerror or str(exc)


def driver_version(text: str) -> str:
    """The NVIDIA driver's version from /proc/driver/nvidia/version: the first dotted number of its NVRM line."""
    found = re.search(r"^NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s", text + " ", re.MULTILINE)
    return found.group(1) if found else ""


def gpu_stack() -> dict[str, Any]:
    """The GPU models this task sees, the NVIDIA driver, and the CUDA and NCCL versions torch was built with
    (what a site's first NCCL failures come down to)."""
    import torch

    count = torch.cuda.device_count()
    driver = ""
    with contextlib.suppress(OSError):  # the kernel module's line, "NVRM version: NVIDIA UNIX x86_64 Kernel Module
        # 550.54.15 ..." or (open modules, seen on an H100) "... Open Kernel Module for x86_64  580.159.04 ..."
        driver = driver_version(Path("/proc/driver/nvidia/version").read_text())
    nccl = ""
    with contextlib.suppress(Exception):  # a build without NCCL (CPU, ROCm without RCCL) has none
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    return {
        "gpu_models": sorted({torch.cuda.get_device_name(i) for i in range(count)}),
        "driver": driver,
        "cuda": torch.version.cuda or "",
        "nccl": nccl,
    }


def all_reduce(env: Any, gpus: int) -> dict[str, Any]:
    """One all-reduce of SIZE_MB across every task, the job's backend; its time and bus bandwidth."""
    import torch
    import torch.distributed as dist

    from trainer.distributed import pick_devices, process_group

    device = pick_devices(env)[0] if gpus else torch.device("cpu")
    with process_group(env, 120, device, one_too=True):
        tensor = torch.ones(SIZE_MB * 2**20 // 4, device=device)
        dist.all_reduce(tensor)  # a first one: connections and buffers are set up
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        tensor.fill_(1.0)
        start = time.perf_counter()
        dist.all_reduce(tensor)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
        n = env.world_size
        correct = bool(tensor[0].item() == n)
        busbw = 2 * (n - 1) / n * SIZE_MB / 1024 / seconds  # GB/s, as nccl-tests count it (0 for one task)
        return {"backend": dist.get_backend(), "seconds": seconds, "busbw_gb_s": busbw, "correct": correct}


def run(folder: str, code_dir: str, expected: dict[str, str]) -> None:
    """One task's facts into folder/preflight/rank_N.json."""
    env = resolve(os.environ)
    facts: dict[str, Any] = {"rank": env.rank, "node": env.node_name, "local_rank": env.local_rank}
    out = Path(folder) / "preflight" / f"rank_{env.rank}.json"
    facts["run_root_error"] = writable(Path(folder), env.rank)
    # The snapshot as the job's tasks would see it: your code in code/, the tool's packages beside it in tool/.
    seen = (
        code_dir
        and Path(code_dir).is_dir()
        and Path(code_dir).parent.joinpath("tool", "trainer", "__init__.py").is_file()
    )
    facts["code_seen"] = bool(seen) if code_dir else True
    facts["cwd"] = os.getcwd()
    facts["python"] = sys.executable
    facts["versions"] = {name: version(name) for name in expected}
    facts["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    facts["master"] = f"{env.master_addr}:{env.master_port}"
    try:
        facts["master_ip"] = socket.gethostbyname(env.master_addr)
    except OSError as exc:
        facts["master_ip"] = f"unresolved: {exc}"
    try:
        import torch

        facts["gpus"] = torch.cuda.device_count()
        facts["all_reduce"] = all_reduce(env, facts["gpus"])
    except Exception as exc:
        facts["all_reduce"] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
        traceback.print_exc()
    try:  # after the all-reduce: a CUDA that fails here must not keep this rank from the collective
        facts["gpu_stack"] = gpu_stack()
    except Exception as exc:
        facts["gpu_stack"] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    try:
        write_text(out, json.dumps(facts, indent=2) + "\n")
    except Exception as exc:  # the run root itself is not writable here: the log still says it
        print(f"preflight: could not write {out}: {exc}", flush=True)
    print("preflight:", json.dumps(facts), flush=True)

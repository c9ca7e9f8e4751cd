"""The preflight check's reading (python -m jobs.check): what each task reported (trainer/entry/preflight.py) made
into rows, one per node and check, each failed one saying how to fix it."""

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.tracking import start_failure

PACKAGES = ("torch", "submitit", "slurm-ddp")


@dataclass(frozen=True)
class Row:
    node: str
    check: str
    ok: bool
    detail: str


def missing_module(log: str) -> str:
    found = re.findall(r"No module named '([\w.]+)'", log)
    return found[-1] if found else ""


def rows(facts: list[dict[str, Any]], tasks: int, gpus_each: int, expected: dict[str, str], logs: str) -> list[Row]:
    """The table's rows from what each task reported (pure)."""
    out: list[Row] = []
    seen = {f["rank"] for f in facts}
    if len(seen) < tasks:
        missing = sorted(set(range(tasks)) - seen)
        module = missing_module(logs)
        why = (
            f"the interpreter cannot import {module}: install the project's dependencies there, or set python: "
            "in the profile to one that has them"
            if module
            else start_failure(logs) or "see the task logs in the check's logs/ folder"
        )
        out.append(Row("-", "tasks reported", False, f"{len(seen)} of {tasks} (ranks {missing} did not); {why}"))
    for node in sorted({f["node"] for f in facts}):
        mine = [f for f in facts if f["node"] == node]
        errors = sorted({f["run_root_error"] for f in mine if f["run_root_error"]})
        out.append(
            Row(node, "run root writable", not errors, errors[0] + "; make run_root a folder every node can write"
                if errors else "yes")
        )  # fmt: skip
        unseen = [f["rank"] for f in mine if not f["code_seen"]]
        out.append(Row(node, "code snapshot seen", not unseen, f"not by ranks {unseen}: put run_root on a "
                       "filesystem every node mounts" if unseen else "yes"))  # fmt: skip
        versions = mine[0]["versions"]
        wrong = [f"{k} {versions.get(k) or 'missing'} (here {v})" for k, v in expected.items() if versions.get(k) != v]
        out.append(Row(node, f"{mine[0]['python']} imports", not wrong, "; ".join(wrong) + ": install the same "
                       "versions there" if wrong else ", ".join(f"{k} {v}" for k, v in versions.items())))  # fmt: skip
        counts = sorted({f.get("gpus", 0) for f in mine})
        visible = sorted({f["cuda_visible_devices"] or "-" for f in mine})
        short = gpus_each and min(counts) < gpus_each
        gpu_text = f"each task sees {'/'.join(map(str, counts))} (CUDA_VISIBLE_DEVICES {', '.join(visible)})"
        fix = f"; the profile wants {gpus_each} per task: check gpus_per_node and the partition's GPUs"
        out.append(Row(node, "GPUs", not short, gpu_text + (fix if short else "")))
        out.append(Row(node, "GPU stack", True, stack_text([f.get("gpu_stack") or {} for f in mine])))
        reduce = [f["all_reduce"] for f in mine]
        bad = [r.get("error") or "wrong sum" for r in reduce if r.get("error") or not r.get("correct")]
        if bad:
            detail = f"{bad[0]}; check that the nodes reach rank 0 at {mine[0]['master']} (firewall, interface)"
        else:
            slowest = min(r["busbw_gb_s"] for r in reduce)
            detail = f"{reduce[0]['backend']}, {slowest:.2f} GB/s bus bandwidth (32 MB, slowest rank)"
            if len(facts) == 1:
                detail = f"{reduce[0]['backend']}, one task: the group formed and summed (no peer to measure)"
        out.append(Row(node, "all-reduce", not bad, detail))
        out.append(Row(node, "rank 0 listens", True, f"{mine[0]['master']} ({mine[0]['master_ip']})"))
    return out


def stack_text(stacks: list[dict[str, Any]]) -> str:
    """A node's GPU models, driver, CUDA and NCCL, each as its tasks report them ("-" for none; values that
    differ between the node's tasks are all shown, joined by /)."""

    def field(name: str) -> str:
        values = sorted({", ".join(s[name]) if isinstance(s.get(name), list) else s.get(name) or "" for s in stacks})
        return "/".join(v or "-" for v in values) or "-"

    errors = sorted({s["error"] for s in stacks if s.get("error")})
    if errors or not all(stacks):
        return f"not reported ({errors[0]})" if errors else "not reported"
    models = field("gpu_models")
    versions = f"driver {field('driver')}; CUDA {field('cuda')} (torch's); NCCL {field('nccl')}"
    return f"{'no GPU' if models == '-' else models}; {versions}"


def reported(folder: Path, logs: str) -> list[dict[str, Any]]:
    """Each task's facts: its file, or the same line in its log when it could not write the file (a run root
    that node cannot write)."""
    facts = {}
    for line in re.findall(r"^preflight: (\{.*\})$", logs, re.M):
        record = json.loads(line)
        facts[record["rank"]] = record
    for path in (folder / "preflight").glob("rank_*.json"):
        record = json.loads(path.read_text())
        facts[record["rank"]] = record
    return [facts[rank] for rank in sorted(facts)]

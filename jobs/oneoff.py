"""One-off settings from the command line, the things a profile file was needed for: `--dependency`, `--after
RUN_DIR`, `--env KEY=VALUE`, `--mail TYPES`. Pure functions onto the profile; the profile's own checks then
hold for them (a variable name, a newline in a value) as for its fields."""

import re

from jobs.profiles import Profile
from trainer.errors import UserError

# sbatch's --dependency: after/afterany/afterok/afternotok/aftercorr:ID[:ID...] (IDs may carry _N and +MINUTES),
# items joined by , (all) or ? (any), or singleton.
DEPENDENCY_ITEM = (
    r"(?:singleton|(?:after|afterany|afterok|afternotok|aftercorr|afterburstbuffer)(?::\d+(?:_\d+)?(?:\+\d+)?)+)"
)
DEPENDENCY = re.compile(rf"{DEPENDENCY_ITEM}(?:[,?]{DEPENDENCY_ITEM})*", re.ASCII)
MAIL_TYPES = {"NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT", "TIME_LIMIT"}
MAIL_TYPES |= {"TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS"}


def dependency(spec: str | None, after_jobs: list[str]) -> str:
    """The sbatch dependency of --dependency and --after's jobs (afterok: start once they finished well)."""
    parts = []
    if spec is not None and not spec.strip():
        raise UserError(
            "--dependency is empty (a variable that held no job id?): the job would start at once; give e.g. "
            "afterok:12345, or drop the flag"
        )
    if spec:
        if not DEPENDENCY.fullmatch(spec):
            raise UserError(
                f"--dependency {spec!r} is not sbatch's form; write e.g. afterok:12345 or afterany:12345:12346"
            )
        parts.append(spec)
    if after_jobs:
        parts.append("afterok:" + ":".join(after_jobs))
    return ",".join(parts)


def dependency_jobs(spec: str) -> list[tuple[str, str]]:
    """(kind, job id) for each job a dependency in sbatch's form names: afterok:1:2_3+5 gives
    [("afterok", "1"), ("afterok", "2_3")]; singleton names none."""
    out = []
    for item in re.split(r"[,?]", spec):
        kind, *ids = item.split(":")
        out += [(kind, job.split("+")[0]) for job in ids]
    return out


ENDED_BADLY = {"FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def refuse_unsatisfiable(pairs: list[tuple[str, str]], states: dict[str, str], names: dict[str, str]) -> None:
    """Refuse a dependency Slurm would drop (a job it does not know: the job would start at once) or never
    satisfy (afterok on a job that ended badly: it would pend for ever). `states`: job id (array tasks as
    ID_N) -> Slurm's state; `names`: job id -> the run it came from (--after), for the message."""
    for kind, job in pairs:
        seen = [state for key, state in states.items() if key == job or key.startswith(f"{job}_")]
        what = f"--after {names[job]} (job {job})" if job in names else f"--dependency {kind}:{job}"
        if not seen:
            raise UserError(
                f"{what}: Slurm knows no job {job}, and would drop the dependency and start at once; check the "
                "id with squeue or sacct"
            )
        bad = sorted(set(seen) & ENDED_BADLY)
        if kind == "afterok" and bad:
            fix = f"resume it first (python -m jobs.submit --resume {names[job]})" if job in names else "rerun it"
            raise UserError(
                f"{what}: the job ended {bad[0]}, so this one would pend for ever; {fix}, then submit this "
                f"with --after on the new run, or use --dependency afterany:{job}"
            )
        if kind == "afternotok" and seen and all(state == "COMPLETED" for state in seen):
            raise UserError(f"{what}: the job COMPLETED, so this one would pend for ever; drop the dependency")


def minutes(limit: str) -> float | None:
    """Slurm's time limit in minutes (its forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S); None for UNLIMITED or
    what it cannot read."""
    days, dash, rest = limit.partition("-")
    if not dash:
        days, rest = "0", limit
    parts = rest.split(":")
    if not days.isdigit() or not all(p.isdigit() for p in parts) or len(parts) > 3:
        return None
    n = [int(p) for p in parts]
    if dash:  # D-H, D-H:M, D-H:M:S
        h, m, sec = (n + [0, 0])[:3]
    else:  # M, M:S, H:M:S
        h, m, sec = (0, n[0], 0) if len(n) == 1 else (0, n[0], n[1]) if len(n) == 2 else (n[0], n[1], n[2])
    return int(days) * 1440 + h * 60 + m + sec / 60


def refuse_beyond_partition(partition: dict[str, str], nodes: int, spare: int, timeout_min: int) -> None:
    """Refuse what would pend for ever in this partition (`scontrol show partition -o`'s record): more
    nodes than it has or allows, more time than its MaxTime (pure)."""
    name, want = partition.get("PartitionName", "?"), nodes + spare
    spares = f" + spare_nodes {spare}" if spare else ""
    counts = [int(v) for k in ("TotalNodes", "MaxNodes") if (v := partition.get(k, "")).isdigit()]
    if counts and want > min(counts):
        most = min(counts)
        raise UserError(
            f"--nodes {nodes}{spares} asks for {want} nodes, but partition {name} has or allows {most}: the job "
            f"would pend for ever; ask for at most --nodes {max(1, most - spare)}"
            + (", or fewer spare_nodes" if spare else "")
        )
    limit = minutes(partition.get("MaxTime", "UNLIMITED"))
    if limit is not None and timeout_min > limit:
        raise UserError(
            f"--time {timeout_min} is more than partition {name} allows ({partition['MaxTime']}): the job would "
            f"pend for ever; ask for at most --time {int(limit)}"
        )


def env_items(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UserError(f"--env {item!r} is not KEY=VALUE; write e.g. --env NCCL_DEBUG=INFO")
        out[key] = value
    return out


def mail_type(types: str, profile: Profile) -> str:
    names = [t.strip().upper() for t in types.split(",") if t.strip()]
    unknown = [n for n in names if n not in MAIL_TYPES]
    if not names or unknown:
        raise UserError(f"--mail {types!r}: {', '.join(unknown) or 'no type'} is not a mail type; write e.g. END,FAIL")
    if not profile.slurm.mail_user:
        raise UserError(f"--mail needs an address: add mail_user: you@example.org to profile {profile.name}")
    return ",".join(names)


def apply(profile: Profile, spec: str | None, after_jobs: list[str], env: list[str], mail: str | None) -> Profile:
    """The profile with the one-off settings; Slurm's alone refused for the local and debug executors."""
    given = (("--dependency", spec is not None), ("--after", bool(after_jobs)), ("--mail", mail is not None))
    slurm_only = [flag for flag, named in given if named]
    if slurm_only and profile.executor != "slurm":
        raise UserError(
            f"{slurm_only[0]} is a Slurm option; profile {profile.name} runs with the {profile.executor} executor, "
            "which starts at once: use a Slurm profile, or drop it"
        )
    sbatch = dict(profile.slurm.sbatch_args)
    if depends := dependency(spec, after_jobs):
        sbatch["dependency"] = depends
    if mail is not None:
        sbatch |= {"mail-type": mail_type(mail, profile), "mail-user": profile.slurm.mail_user}
    if not (sbatch != profile.slurm.sbatch_args or env):
        return profile
    return profile.with_overrides(sbatch_args=sbatch, env={**profile.environment.env, **env_items(env)})

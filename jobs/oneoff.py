"""One-off settings from the command line, the things a profile file was needed for: `--dependency`, `--after
RUN_DIR`, `--env KEY=VALUE`, `--mail TYPES`. Pure functions onto the profile; the profile's own checks then
hold for them (a variable name, a newline in a value) as for its fields."""

import dataclasses
import re

from jobs.profiles import Profile
from trainer.errors import UserError

# sbatch's --dependency: after/afterany/afterok/afternotok/aftercorr:ID[:ID...] (IDs may carry _N and +MINUTES),
# items joined by , (all) or ? (any), or singleton.
DEPENDENCY = re.compile(
    r"(?:singleton|(?:after|afterany|afterok|afternotok|aftercorr|afterburstbuffer)(?::\d+(?:_\d+)?(?:\+\d+)?)+)"
    r"(?:[,?](?:singleton|(?:after|afterany|afterok|afternotok|aftercorr|afterburstbuffer)(?::\d+(?:_\d+)?(?:\+\d+)?)+))*",
    re.ASCII,
)
MAIL_TYPES = {"NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT", "TIME_LIMIT"}
MAIL_TYPES |= {"TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS"}


def dependency(spec: str | None, after_jobs: list[str]) -> str:
    """The sbatch dependency of --dependency and --after's jobs (afterok: start once they finished well)."""
    parts = []
    if spec:
        if not DEPENDENCY.fullmatch(spec):
            raise UserError(
                f"--dependency {spec!r} is not sbatch's form; write e.g. afterok:12345 or afterany:12345:12346"
            )
        parts.append(spec)
    if after_jobs:
        parts.append("afterok:" + ":".join(after_jobs))
    return ",".join(parts)


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
    if not profile.mail_user:
        raise UserError(f"--mail needs an address: add mail_user: you@example.org to profile {profile.name}")
    return ",".join(names)


def apply(profile: Profile, spec: str | None, after_jobs: list[str], env: list[str], mail: str | None) -> Profile:
    """The profile with the one-off settings; Slurm's alone refused for the local and debug executors."""
    slurm_only = [flag for flag, given in (("--dependency", spec), ("--after", after_jobs), ("--mail", mail)) if given]
    if slurm_only and profile.executor != "slurm":
        raise UserError(
            f"{slurm_only[0]} is a Slurm option; profile {profile.name} runs with the {profile.executor} executor, "
            "which starts at once: use a Slurm profile, or drop it"
        )
    sbatch = dict(profile.sbatch_args)
    if depends := dependency(spec, after_jobs):
        sbatch["dependency"] = depends
    if mail:
        sbatch |= {"mail-type": mail_type(mail, profile), "mail-user": profile.mail_user}
    if not (sbatch != profile.sbatch_args or env):
        return profile
    return dataclasses.replace(profile, sbatch_args=sbatch, env={**profile.env, **env_items(env)})

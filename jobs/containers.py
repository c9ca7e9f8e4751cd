"""Running the tasks in a container, the two ways Slurm sites do it (pure functions of the profile):

- pyxis/enroot (`container_runtime: pyxis`): srun itself starts each task in the image, with
  `--container-image`, `--container-mounts` and `--container-workdir` (NVIDIA's SPANK plugin);
- Apptainer/Singularity (`container_runtime: apptainer`): each task's command is `apptainer exec [--nv]
  --bind ... IMAGE python ...` (`--nv`, the host's GPU driver, on GPU partitions).

Either way the run root (and so the run's code snapshot under it) is mounted at the same path, with the
profile's `container_mounts`, and the tasks run the container's Python (`python:`, default python3).
"""

import os

from jobs.profiles import Profile

RUNTIMES = ("pyxis", "apptainer")


def mounts(profile: Profile) -> list[str]:
    """`src:dst` pairs: the run root at its own path, then the profile's (a bare path: at the same path)."""
    root = os.path.abspath(os.path.expanduser(os.path.expandvars(profile.run_root)))  # as jobs.submit resolves it
    return [f"{root}:{root}", *(m if ":" in m else f"{m}:{m}" for m in profile.container_mounts)]


def python(profile: Profile, default: str) -> str:
    """The interpreter the tasks run: the container's, unless the profile names one."""
    return profile.python or ("python3" if profile.container_image else default)


def srun_args(profile: Profile, workdir: str | None) -> list[str]:
    """pyxis's srun options; none for Apptainer (it wraps the command instead) or without a container."""
    if not profile.container_image or profile.container_runtime != "pyxis":
        return []
    args = [f"--container-image={profile.container_image}", f"--container-mounts={','.join(mounts(profile))}"]
    return [*args, f"--container-workdir={workdir}"] if workdir else args


def command_prefix(profile: Profile) -> list[str]:
    """The words before the task's python under Apptainer: `apptainer exec [--nv] --bind ... IMAGE`."""
    if not profile.container_image or profile.container_runtime != "apptainer":
        return []
    gpu = ["--nv"] if profile.request_gpus else []
    return [profile.apptainer_command, "exec", *gpu, "--bind", ",".join(mounts(profile)), profile.container_image]
